// Sparse lazy Adam: OpKernel (validation, locking), the CPU functor, and the
// GPU functor calling the launcher of lazy_adam_kernels.cu.cc.
#define EIGEN_USE_THREADS  // before any Eigen header: kernels run on the CPU thread pool
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // Eigen::GpuDevice, for the op's stream
#endif

#include "tf_opt_ops/lazy_adam_kernels.h"

#include "tensorflow/core/framework/register_types.h"  // TF_CALL_FLOAT_TYPES
#include "tf_opt_ops/cpu_kernels.h"
#include "tf_opt_ops/gpu_glue.h"
#include "tf_opt_ops/kernel_registration.h"
#include "tf_opt_ops/op_inputs.h"

namespace tf_opt_ops {
namespace functor {

// The CPU update itself is cpu::SparseApplyLazyAdam (cpu_kernels.h), which
// the XLA custom call runs too.
template <typename T, typename Tindex>
struct SparseApplyLazyAdam<CPUDevice, T, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* m, Tensor* v, const AdamStep<ComputeT<T>>& step) {
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    return cpu::SparseApplyLazyAdam<T, Tindex>(pool, CpuSparseGrad<T, Tindex>(indices, grad, *var),
                                               var->flat<T>().data(), m->flat<T>().data(),
                                               v->flat<T>().data(), step);
  }
};

#if GOOGLE_CUDA
// Index check, duplicate grouping and the update all run on the op's stream;
// the launcher synchronizes once, after the index check, so a bad index fails
// the op here before any variable is written.
template <typename T, typename Tindex>
struct SparseApplyLazyAdam<GPUDevice, T, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* m, Tensor* v, const AdamStep<ComputeT<T>>& step) {
    const gpu::SparseRows rows = MakeSparseRows<Tindex>(indices, *var);
    return LaunchSparse<T>(ctx, rows, "SparseApplyLazyAdam",
                           [&](void* scratch, size_t bytes, void* stream, gpu::IndexError* bad) {
                             return gpu::SparseApplyLazyAdam(
                                 GpuDType<T>(), rows, grad.data(), var->data(), m->data(),
                                 v->data(), CastStep<double>(step), scratch, bytes, stream, bad);
                           });
  }
};
#endif  // GOOGLE_CUDA

}  // namespace functor

template <typename Device, typename T, typename Tindex>
class SparseApplyLazyAdamOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyLazyAdamOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    LockedVariables<Device, T> vars;
    OP_REQUIRES_OK(ctx,
                   vars.Acquire(ctx, use_locking_, /*sparse=*/true, {0, 1, 2}, {"var", "m", "v"}));
    C beta1_power, beta2_power, lr, beta1, beta2, epsilon;
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 3, "beta1_power", &beta1_power));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 4, "beta2_power", &beta2_power));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 5, "lr", &lr));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 6, "beta1", &beta1));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 7, "beta2", &beta2));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 8, "epsilon", &epsilon));
    const Tensor& grad = ctx->input(9);
    const Tensor& indices = ctx->input(10);
    OP_REQUIRES_OK(ctx, ValidateSparseGrad(vars.tensor(0)->shape(), grad.shape(), indices.shape()));
    if (indices.NumElements() == 0) return;
    const AdamStep<C> step = MakeAdamStep<C>(lr, beta1, beta2, epsilon, beta1_power, beta2_power);
    OP_REQUIRES_OK(ctx,
                   functor::SparseApplyLazyAdam<Device, T, Tindex>()(
                       ctx, indices, grad, vars.tensor(0), vars.tensor(1), vars.tensor(2), step));
  }

 private:
  bool use_locking_;
};

#define TF_OPT_OPS_REGISTER_CPU(T, Tindex)                                \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseApplyLazyAdam") \
                                 .Device(tensorflow::DEVICE_CPU)          \
                                 .TypeConstraint<T>("T")                  \
                                 .TypeConstraint<Tindex>("Tindices"),     \
                             SparseApplyLazyAdamOp<CPUDevice, T, Tindex>);
#define TF_OPT_OPS_REGISTER_CPU_T(T) \
  TF_OPT_OPS_REGISTER_CPU(T, int32_t) TF_OPT_OPS_REGISTER_CPU(T, int64_t)
// half, bfloat16, float and double: the variable types of the op.
TF_CALL_FLOAT_TYPES(TF_OPT_OPS_REGISTER_CPU_T);
#undef TF_OPT_OPS_REGISTER_CPU_T
#undef TF_OPT_OPS_REGISTER_CPU

#if GOOGLE_CUDA
// The hyperparameters are read on the host (HostMemory); var, m, v, grad and
// indices stay on the device.
#define TF_OPT_OPS_REGISTER_GPU(T, Tindex)                                \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseApplyLazyAdam") \
                                 .Device(tensorflow::DEVICE_GPU)          \
                                 .HostMemory("beta1_power")               \
                                 .HostMemory("beta2_power")               \
                                 .HostMemory("lr")                        \
                                 .HostMemory("beta1")                     \
                                 .HostMemory("beta2")                     \
                                 .HostMemory("epsilon")                   \
                                 .TypeConstraint<T>("T")                  \
                                 .TypeConstraint<Tindex>("Tindices"),     \
                             SparseApplyLazyAdamOp<GPUDevice, T, Tindex>);
#define TF_OPT_OPS_REGISTER_GPU_T(T) \
  TF_OPT_OPS_REGISTER_GPU(T, int32_t) TF_OPT_OPS_REGISTER_GPU(T, int64_t)
// half, bfloat16, float and double: the variable types of the op.
TF_CALL_FLOAT_TYPES(TF_OPT_OPS_REGISTER_GPU_T);
#undef TF_OPT_OPS_REGISTER_GPU_T
#undef TF_OPT_OPS_REGISTER_GPU
#endif  // GOOGLE_CUDA

}  // namespace tf_opt_ops
