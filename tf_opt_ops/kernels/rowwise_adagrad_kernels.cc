// Sparse row-wise Adagrad: OpKernel (validation, locking), the CPU functor,
// and the GPU functor calling the launcher of rowwise_adagrad_kernels.cu.cc.
#define EIGEN_USE_THREADS  // before any Eigen header: kernels run on the CPU thread pool
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // Eigen::GpuDevice, for the op's stream
#endif

#include "tf_opt_ops/kernels/rowwise_adagrad_kernels.h"

#include <string>

#include "tf_opt_ops/core/cpu_kernels.h"
#include "tf_opt_ops/core/rowwise_adagrad_interface.h"
#include "tf_opt_ops/kernels/gpu_glue.h"
#include "tf_opt_ops/kernels/kernel_registration.h"
#include "tf_opt_ops/kernels/op_inputs.h"

namespace tf_opt_ops {
namespace functor {

// The CPU update itself is cpu::SparseApplyRowwiseAdagrad (cpu_kernels.h),
// which the XLA custom call runs too.
template <typename T, typename Tindex>
struct SparseApplyRowwiseAdagrad<CPUDevice, T, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* accum, const RowwiseAdagradStep<ComputeT<T>>& step) {
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    return cpu::SparseApplyRowwiseAdagrad<T, Tindex>(
        pool, CpuSparseGrad<T, Tindex>(indices, grad, *var), var->flat<T>().data(),
        accum->flat<ComputeT<T>>().data(), step);
  }
};

#if GOOGLE_CUDA
// Index check, duplicate grouping and the update all run on the op's stream;
// the launcher synchronizes once, after the index check, so a bad index fails
// the op here before any variable is written.
template <typename T, typename Tindex>
struct SparseApplyRowwiseAdagrad<GPUDevice, T, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* accum, const RowwiseAdagradStep<ComputeT<T>>& step) {
    const gpu::SparseRows rows = MakeSparseRows<Tindex>(indices, *var);
    return LaunchSparse<T>(ctx, rows, "SparseApplyRowwiseAdagrad",
                           [&](void* scratch, size_t bytes, void* stream, gpu::IndexError* bad) {
                             return gpu::SparseApplyRowwiseAdagrad(
                                 GpuDType<T>(), rows, grad.data(), var->data(), accum->data(),
                                 CastStep<double>(step), scratch, bytes, stream, bad);
                           });
  }
};
#endif  // GOOGLE_CUDA

}  // namespace functor

namespace {

// accum: one value per row of var (the optimizer's own accumulator, not a
// LazyAdam option), so the shape error says how to make one.
absl::Status CheckAccumShape(const char* name, const TensorShape& shape, const char* var_name,
                             const TensorShape& var_shape) {
  if (IsRowSlotShape(shape, var_shape)) return absl::OkStatus();
  return InvalidArgument(name, " holds one value per row of ", var_name,
                         " (row-wise Adagrad's accumulator), so its shape must be [",
                         var_shape.dims() >= 1 ? var_shape.dim_size(0) : 0, "]: ", name, " ",
                         shape.DebugString(), " vs ", var_name, " ", var_shape.DebugString(),
                         ": create ", name, " with shape [", var_name, ".shape[0]].");
}

constexpr VariableErrors kErrors{OptimizerDtypeMismatch, CheckAccumShape};

}  // namespace

// Op ResourceSparseApplyRowwiseAdagrad: accum of the compute type, one value
// per row of var.
template <typename Device, typename T, typename Tindex>
class SparseApplyRowwiseAdagradOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyRowwiseAdagradOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
    int64_t seed;
    OP_REQUIRES_OK(ctx, ReadRowwiseAdagradAttrs(ctx, &mode_, &stochastic_rounding_, &seed));
    seed_ = static_cast<uint64_t>(seed);
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace rowwise_adagrad;  // NOLINT: the input names
    LockedVariables<Device, T> vars;
    OP_REQUIRES_OK(
        ctx, vars.Acquire(ctx, use_locking_, /*sparse=*/true, {kVar, kAccum},
                          {kVariableNames, kVariableNames + kNumVariables},
                          {tensorflow::DataTypeToEnum<T>::v(), tensorflow::DataTypeToEnum<C>::v()},
                          /*row_slot=*/kAccum, kErrors));
    C hyper[kNumHyperparameters];
    for (int k = 0; k < kNumHyperparameters; ++k) {
      OP_REQUIRES_OK(ctx,
                     ReadScalar(ctx, kFirstHyperparameter + k, kHyperparameterNames[k], &hyper[k]));
    }
    const Tensor& grad = ctx->input(kGrad);
    const Tensor& indices = ctx->input(kIndices);
    OP_REQUIRES_OK(ctx,
                   ValidateSparseGrad(vars.tensor(kVar)->shape(), grad.shape(), indices.shape()));
    if (indices.NumElements() == 0) return;
    OP_REQUIRES_OK(ctx, functor::SparseApplyRowwiseAdagrad<Device, T, Tindex>()(
                            ctx, indices, grad, vars.tensor(kVar), vars.tensor(kAccum),
                            MakeStep(hyper, mode_, stochastic_rounding_, seed_)));
  }

 private:
  bool use_locking_;
  RowwiseWeightDecay mode_;
  bool stochastic_rounding_;
  uint64_t seed_;
};

TF_OPT_OPS_REGISTER_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyRowwiseAdagrad",
                                    rowwise_adagrad::kHyperparameterNames,
                                    SparseApplyRowwiseAdagradOp)

}  // namespace tf_opt_ops
