// Sparse lazy Adam: OpKernel (validation, locking), the CPU functor, and the
// GPU functor calling the launcher of lazy_adam_kernels.cu.cc.
#define EIGEN_USE_THREADS  // before any Eigen header: kernels run on the CPU thread pool
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // Eigen::GpuDevice, for the op's stream
#endif

#include "tf_opt_ops/kernels/lazy_adam_kernels.h"

#include "tensorflow/core/framework/register_types.h"  // TF_CALL_FLOAT_TYPES
#include "tf_opt_ops/core/cpu_kernels.h"
#include "tf_opt_ops/kernels/gpu_glue.h"
#include "tf_opt_ops/kernels/kernel_registration.h"
#include "tf_opt_ops/kernels/op_inputs.h"

// Calls m(T, S, Tindex) for every (table, slot, index) type of op
// ResourceSparseApplyLazyAdamV2: tables and slots of half, bfloat16, float.
#define TF_OPT_OPS_CALL_LIGHT_TYPES_TS(m, T, S) m(T, S, int32_t) m(T, S, int64_t)
#define TF_OPT_OPS_CALL_LIGHT_TYPES_T(m, T)         \
  TF_OPT_OPS_CALL_LIGHT_TYPES_TS(m, T, Eigen::half) \
  TF_OPT_OPS_CALL_LIGHT_TYPES_TS(m, T, Eigen::bfloat16) TF_OPT_OPS_CALL_LIGHT_TYPES_TS(m, T, float)
#define TF_OPT_OPS_CALL_LIGHT_TYPES(m)          \
  TF_OPT_OPS_CALL_LIGHT_TYPES_T(m, Eigen::half) \
  TF_OPT_OPS_CALL_LIGHT_TYPES_T(m, Eigen::bfloat16) TF_OPT_OPS_CALL_LIGHT_TYPES_T(m, float)

namespace tf_opt_ops {
namespace functor {

// The CPU update itself is cpu::SparseApplyLazyAdam (cpu_kernels.h), which
// the XLA custom call runs too.
template <typename T, typename S, typename Tindex>
struct SparseApplyLazyAdam<CPUDevice, T, S, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* m, Tensor* v, const AdamStep<ComputeT<T>>& step,
                          const AdamStateLayout& layout) {
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    return cpu::SparseApplyLazyAdam<T, S, Tindex>(
        pool, CpuSparseGrad<T, Tindex>(indices, grad, *var), var->flat<T>().data(),
        m->flat<S>().data(), v->flat<S>().data(), step, layout);
  }
};

#if GOOGLE_CUDA
// Index check, duplicate grouping and the update all run on the op's stream;
// the launcher synchronizes once, after the index check, so a bad index fails
// the op here before any variable is written.
template <typename T, typename S, typename Tindex>
struct SparseApplyLazyAdam<GPUDevice, T, S, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* m, Tensor* v, const AdamStep<ComputeT<T>>& step,
                          const AdamStateLayout& layout) {
    const gpu::SparseRows rows = MakeSparseRows<Tindex>(indices, *var);
    return LaunchSparse<T>(ctx, rows, "SparseApplyLazyAdam",
                           [&](void* scratch, size_t bytes, void* stream, gpu::IndexError* bad) {
                             return gpu::SparseApplyLazyAdam(GpuDType<T>(), GpuDType<S>(), rows,
                                                             grad.data(), var->data(), m->data(),
                                                             v->data(), CastStep<double>(step),
                                                             layout, scratch, bytes, stream, bad);
                           });
  }
};
#endif  // GOOGLE_CUDA

}  // namespace functor

// Ops ResourceSparseApplyLazyAdam (kLight false: slots of the table's type
// T, S == T) and ResourceSparseApplyLazyAdamV2 (kLight: slots of type S =
// Tslot, the layout from the attrs, the step from input 11).
template <typename Device, typename T, typename S, typename Tindex, bool kLight>
class SparseApplyLazyAdamOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyLazyAdamOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
    if (kLight) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("rowwise_second_moment", &layout_.rowwise_second_moment));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("stochastic_rounding", &layout_.stochastic_rounding));
      int64_t seed = 0;
      OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed));
      layout_.seed = static_cast<uint64_t>(seed);
    }
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    LockedVariables<Device, T> vars;
    const tensorflow::DataType t = tensorflow::DataTypeToEnum<T>::v();
    const tensorflow::DataType s = tensorflow::DataTypeToEnum<S>::v();
    OP_REQUIRES_OK(ctx,
                   vars.Acquire(ctx, use_locking_, /*sparse=*/true, {0, 1, 2}, {"var", "m", "v"},
                                {t, s, s}, layout_.rowwise_second_moment ? 2 : -1));
    C beta1_power, beta2_power, lr, beta1, beta2, epsilon;
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 3, "beta1_power", &beta1_power));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 4, "beta2_power", &beta2_power));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 5, "lr", &lr));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 6, "beta1", &beta1));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 7, "beta2", &beta2));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 8, "epsilon", &epsilon));
    AdamStateLayout layout = layout_;
    if (kLight) OP_REQUIRES_OK(ctx, ReadScalar<int64_t>(ctx, 11, "step", &layout.step));
    const Tensor& grad = ctx->input(9);
    const Tensor& indices = ctx->input(10);
    OP_REQUIRES_OK(ctx, ValidateSparseGrad(vars.tensor(0)->shape(), grad.shape(), indices.shape()));
    if (indices.NumElements() == 0) return;
    const AdamStep<C> step = MakeAdamStep<C>(lr, beta1, beta2, epsilon, beta1_power, beta2_power);
    OP_REQUIRES_OK(
        ctx, functor::SparseApplyLazyAdam<Device, T, S, Tindex>()(
                 ctx, indices, grad, vars.tensor(0), vars.tensor(1), vars.tensor(2), step, layout));
  }

 private:
  bool use_locking_;
  AdamStateLayout layout_;
};

#define TF_OPT_OPS_REGISTER_CPU(T, Tindex)                                \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseApplyLazyAdam") \
                                 .Device(tensorflow::DEVICE_CPU)          \
                                 .TypeConstraint<T>("T")                  \
                                 .TypeConstraint<Tindex>("Tindices"),     \
                             SparseApplyLazyAdamOp<CPUDevice, T, T, Tindex, false>);
#define TF_OPT_OPS_REGISTER_CPU_T(T) \
  TF_OPT_OPS_REGISTER_CPU(T, int32_t) TF_OPT_OPS_REGISTER_CPU(T, int64_t)
// half, bfloat16, float and double: the variable types of the op.
TF_CALL_FLOAT_TYPES(TF_OPT_OPS_REGISTER_CPU_T);
#undef TF_OPT_OPS_REGISTER_CPU_T
#undef TF_OPT_OPS_REGISTER_CPU

#define TF_OPT_OPS_REGISTER_LIGHT_CPU(T, S, Tindex)                         \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseApplyLazyAdamV2") \
                                 .Device(tensorflow::DEVICE_CPU)            \
                                 .TypeConstraint<T>("T")                    \
                                 .TypeConstraint<S>("Tslot")                \
                                 .TypeConstraint<Tindex>("Tindices"),       \
                             SparseApplyLazyAdamOp<CPUDevice, T, S, Tindex, true>);
TF_OPT_OPS_CALL_LIGHT_TYPES(TF_OPT_OPS_REGISTER_LIGHT_CPU)
#undef TF_OPT_OPS_REGISTER_LIGHT_CPU

#if GOOGLE_CUDA
// The hyperparameters are read on the host (HostMemory); var, m, v, grad and
// indices stay on the device.
#define TF_OPT_OPS_LAZY_ADAM_HOST_SCALARS \
  HostMemory("beta1_power")               \
      .HostMemory("beta2_power")          \
      .HostMemory("lr")                   \
      .HostMemory("beta1")                \
      .HostMemory("beta2")                \
      .HostMemory("epsilon")
#define TF_OPT_OPS_REGISTER_GPU(T, Tindex)                                                 \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseApplyLazyAdam")                  \
                                 .Device(tensorflow::DEVICE_GPU)                           \
                                 .TF_OPT_OPS_LAZY_ADAM_HOST_SCALARS.TypeConstraint<T>("T") \
                                 .TypeConstraint<Tindex>("Tindices"),                      \
                             SparseApplyLazyAdamOp<GPUDevice, T, T, Tindex, false>);
#define TF_OPT_OPS_REGISTER_GPU_T(T) \
  TF_OPT_OPS_REGISTER_GPU(T, int32_t) TF_OPT_OPS_REGISTER_GPU(T, int64_t)
// half, bfloat16, float and double: the variable types of the op.
TF_CALL_FLOAT_TYPES(TF_OPT_OPS_REGISTER_GPU_T);
#undef TF_OPT_OPS_REGISTER_GPU_T
#undef TF_OPT_OPS_REGISTER_GPU

#define TF_OPT_OPS_REGISTER_LIGHT_GPU(T, S, Tindex)                                    \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseApplyLazyAdamV2")            \
                                 .Device(tensorflow::DEVICE_GPU)                       \
                                 .TF_OPT_OPS_LAZY_ADAM_HOST_SCALARS.HostMemory("step") \
                                 .TypeConstraint<T>("T")                               \
                                 .TypeConstraint<S>("Tslot")                           \
                                 .TypeConstraint<Tindex>("Tindices"),                  \
                             SparseApplyLazyAdamOp<GPUDevice, T, S, Tindex, true>);
TF_OPT_OPS_CALL_LIGHT_TYPES(TF_OPT_OPS_REGISTER_LIGHT_GPU)
#undef TF_OPT_OPS_REGISTER_LIGHT_GPU
#undef TF_OPT_OPS_LAZY_ADAM_HOST_SCALARS
#endif  // GOOGLE_CUDA

}  // namespace tf_opt_ops
