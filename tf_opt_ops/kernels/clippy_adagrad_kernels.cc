// Clippy Adagrad: OpKernels (validation, locking), the CPU functors, and the
// GPU functors calling the launchers of clippy_adagrad_kernels.cu.cc.
#define EIGEN_USE_THREADS  // before any Eigen header: kernels run on the CPU thread pool
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // Eigen::GpuDevice, for the op's stream
#endif

#include "tf_opt_ops/kernels/clippy_adagrad_kernels.h"

#include <type_traits>

#include "tensorflow/core/framework/register_types.h"  // TF_CALL_FLOAT_TYPES
#include "tf_opt_ops/core/cpu_kernels.h"
#include "tf_opt_ops/kernels/gpu_glue.h"
#include "tf_opt_ops/kernels/kernel_registration.h"
#include "tf_opt_ops/kernels/op_inputs.h"

namespace tf_opt_ops {
namespace functor {

// The CPU updates themselves are cpu_kernels.h's, which the XLA custom calls
// run too.
template <typename T, typename A>
struct ApplyClippyAdagrad<CPUDevice, T, A> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& grad, Tensor* var, Tensor* accum,
                          const ClippyStep<ComputeT<T>>& step, Tensor* scale) {
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    scale->scalar<ComputeT<T>>()() =
        cpu::ApplyClippyAdagrad<T, A>(pool, var->NumElements(), grad.flat<T>().data(),
                                      var->flat<T>().data(), accum->flat<A>().data(), step);
    return absl::OkStatus();
  }
};

template <typename T, typename A, typename Tindex>
struct SparseApplyClippyAdagrad<CPUDevice, T, A, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* accum, const ClippyStep<ComputeT<T>>& step,
                          Tensor* scale) {
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    return cpu::SparseApplyClippyAdagrad<T, A, Tindex>(
        pool, CpuSparseGrad<T, Tindex>(indices, grad, *var), var->flat<T>().data(),
        accum->flat<A>().data(), step, scale->scalar<ComputeT<T>>().data());
  }
};

#if GOOGLE_CUDA
// The scale is reduced and applied on the device: `scale` (the op's output,
// device memory) carries it from pass 1 to pass 2, no host round trip.
template <typename T, typename A>
struct ApplyClippyAdagrad<GPUDevice, T, A> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& grad, Tensor* var, Tensor* accum,
                          const ClippyStep<ComputeT<T>>& step, Tensor* scale) {
    const size_t bytes = gpu::DenseScratchBytes(GpuDType<T>());
    Tensor scratch;
    TF_RETURN_IF_ERROR(AllocateGpuScratch(ctx, bytes, &scratch));
    return GpuStatus(
        gpu::ApplyClippyAdagrad(GpuDType<T>(), GpuDType<A>(), var->NumElements(), grad.data(),
                                var->data(), accum->data(), CastStep<double>(step), scale->data(),
                                scratch.data(), bytes, GpuStream(ctx)),
        "ApplyClippyAdagrad");
  }
};

// Index check first (one stream synchronization, before any write), then
// both passes over the distinct rows on the device.
template <typename T, typename A, typename Tindex>
struct SparseApplyClippyAdagrad<GPUDevice, T, A, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* accum, const ClippyStep<ComputeT<T>>& step,
                          Tensor* scale) {
    const gpu::SparseRows rows = MakeSparseRows<Tindex>(indices, *var);
    return LaunchSparse<T>(ctx, rows, "SparseApplyClippyAdagrad",
                           [&](void* scratch, size_t bytes, void* stream, gpu::IndexError* bad) {
                             return gpu::SparseApplyClippyAdagrad(
                                 GpuDType<T>(), GpuDType<A>(), rows, grad.data(), var->data(),
                                 accum->data(), CastStep<double>(step), scale->data(), scratch,
                                 bytes, stream, bad);
                           });
  }
};
#endif  // GOOGLE_CUDA

}  // namespace functor

// One OpKernel for the dense and the sparse op, and their V2 (kLight: the
// accumulator of type A = Taccum, its rounding from the attrs and the step
// input): they differ in the gradient inputs only.
template <typename Device, typename T, typename A, typename Tindex, bool kSparse, bool kLight>
class ClippyAdagradOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit ClippyAdagradOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
    OP_REQUIRES_OK(ctx, GetClippyAccumulatorUpdateAttrs(ctx, &clip_accumulator_update_,
                                                        &use_standard_accumulator_update_));
    if (kLight) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("stochastic_rounding", &stochastic_rounding_));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed_));
    }
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    LockedVariables<Device, T> vars;
    OP_REQUIRES_OK(
        ctx, vars.Acquire(ctx, use_locking_, /*sparse=*/kSparse, {0, 1}, {"var", "accum"},
                          {tensorflow::DataTypeToEnum<T>::v(), tensorflow::DataTypeToEnum<A>::v()},
                          /*row_slot=*/-1));
    ClippyStep<C> step;
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 2, "lr", &step.lr));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 3, "epsilon", &step.epsilon));
    OP_REQUIRES_OK(
        ctx, ReadScalar(ctx, 4, "variable_relative_threshold", &step.variable_relative_threshold));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 5, "accumulator_relative_threshold",
                                   &step.accumulator_relative_threshold));
    OP_REQUIRES_OK(ctx, ReadScalar(ctx, 6, "absolute_threshold", &step.absolute_threshold));
    step.clip_accumulator_update = clip_accumulator_update_;
    step.use_standard_accumulator_update = use_standard_accumulator_update_;
    if (kLight) {
      int64_t t = 0;
      OP_REQUIRES_OK(ctx, ReadScalar<int64_t>(ctx, kSparse ? 9 : 8, "step", &t));
      step.stochastic_rounding = stochastic_rounding_;
      step.noise_key = ClippyNoiseKey(static_cast<uint64_t>(seed_), t);
    }
    const Tensor& grad = ctx->input(7);
    Tensor* scale = nullptr;
    if constexpr (kSparse) {
      const Tensor& indices = ctx->input(8);
      OP_REQUIRES_OK(ctx,
                     ValidateSparseGrad(vars.tensor(0)->shape(), grad.shape(), indices.shape()));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &scale));
      if (indices.NumElements() == 0) {  // nothing touched: nothing clipped
        OP_REQUIRES_OK(ctx, SetScaleToOne(ctx, scale));
        return;
      }
      OP_REQUIRES_OK(ctx, functor::SparseApplyClippyAdagrad<Device, T, A, Tindex>()(
                              ctx, indices, grad, vars.tensor(0), vars.tensor(1), step, scale));
    } else {
      OP_REQUIRES_OK(ctx, ValidateDenseGrad(vars.tensor(0)->shape(), grad.shape()));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &scale));
      OP_REQUIRES_OK(ctx, functor::ApplyClippyAdagrad<Device, T, A>()(ctx, grad, vars.tensor(0),
                                                                      vars.tensor(1), step, scale));
    }
  }

 private:
  static absl::Status SetScaleToOne(OpKernelContext* ctx, Tensor* scale);

  bool use_locking_;
  bool clip_accumulator_update_;
  bool use_standard_accumulator_update_;
  bool stochastic_rounding_ = false;
  int64_t seed_ = 0;
};

template <typename Device, typename T, typename A, typename Tindex, bool kSparse, bool kLight>
absl::Status ClippyAdagradOp<Device, T, A, Tindex, kSparse, kLight>::SetScaleToOne(
    OpKernelContext* ctx, Tensor* scale) {
#if GOOGLE_CUDA
  if constexpr (std::is_same_v<Device, GPUDevice>) {  // scale is in device memory
    return GpuStatus(gpu::SetScaleToOne(GpuDType<T>(), scale->data(), GpuStream(ctx)),
                     "SetScaleToOne");
  }
#endif
  scale->scalar<C>()() = C(1);  // host memory
  return absl::OkStatus();
}

#define TF_OPT_OPS_REGISTER_CPU(T)                                                     \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceApplyClippyAdagrad")               \
                                 .Device(tensorflow::DEVICE_CPU)                       \
                                 .TypeConstraint<T>("T"),                              \
                             ClippyAdagradOp<CPUDevice, T, T, int32_t, false, false>); \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseApplyClippyAdagrad")         \
                                 .Device(tensorflow::DEVICE_CPU)                       \
                                 .TypeConstraint<T>("T")                               \
                                 .TypeConstraint<int32_t>("Tindices"),                 \
                             ClippyAdagradOp<CPUDevice, T, T, int32_t, true, false>);  \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseApplyClippyAdagrad")         \
                                 .Device(tensorflow::DEVICE_CPU)                       \
                                 .TypeConstraint<T>("T")                               \
                                 .TypeConstraint<int64_t>("Tindices"),                 \
                             ClippyAdagradOp<CPUDevice, T, T, int64_t, true, false>);
// half, bfloat16, float and double: the variable types of the op.
TF_CALL_FLOAT_TYPES(TF_OPT_OPS_REGISTER_CPU);
#undef TF_OPT_OPS_REGISTER_CPU

// The V2 ops: tables and accumulators of half, bfloat16 and float.
#define TF_OPT_OPS_REGISTER_LIGHT(device, Device, T, A)                                  \
  TF_OPT_OPS_REGISTER_KERNEL(                                                            \
      TF_OPT_OPS_CLIPPY_KERNEL(device, "TfOptOps>ResourceApplyClippyAdagradV2", T)       \
          .TypeConstraint<A>("Taccum"),                                                  \
      ClippyAdagradOp<Device, T, A, int32_t, false, true>);                              \
  TF_OPT_OPS_REGISTER_KERNEL(                                                            \
      TF_OPT_OPS_CLIPPY_KERNEL(device, "TfOptOps>ResourceSparseApplyClippyAdagradV2", T) \
          .TypeConstraint<A>("Taccum")                                                   \
          .TypeConstraint<int32_t>("Tindices"),                                          \
      ClippyAdagradOp<Device, T, A, int32_t, true, true>);                               \
  TF_OPT_OPS_REGISTER_KERNEL(                                                            \
      TF_OPT_OPS_CLIPPY_KERNEL(device, "TfOptOps>ResourceSparseApplyClippyAdagradV2", T) \
          .TypeConstraint<A>("Taccum")                                                   \
          .TypeConstraint<int64_t>("Tindices"),                                          \
      ClippyAdagradOp<Device, T, A, int64_t, true, true>);
#define TF_OPT_OPS_REGISTER_LIGHT_T(device, Device, T)          \
  TF_OPT_OPS_REGISTER_LIGHT(device, Device, T, Eigen::half)     \
  TF_OPT_OPS_REGISTER_LIGHT(device, Device, T, Eigen::bfloat16) \
  TF_OPT_OPS_REGISTER_LIGHT(device, Device, T, float)
#define TF_OPT_OPS_REGISTER_LIGHT_ALL(device, Device)          \
  TF_OPT_OPS_REGISTER_LIGHT_T(device, Device, Eigen::half)     \
  TF_OPT_OPS_REGISTER_LIGHT_T(device, Device, Eigen::bfloat16) \
  TF_OPT_OPS_REGISTER_LIGHT_T(device, Device, float)
#define TF_OPT_OPS_CLIPPY_KERNEL(device, name, T) Name(name).Device(device).TypeConstraint<T>("T")
TF_OPT_OPS_REGISTER_LIGHT_ALL(tensorflow::DEVICE_CPU, CPUDevice)
#undef TF_OPT_OPS_CLIPPY_KERNEL

#if GOOGLE_CUDA
// The hyperparameters are read on the host (HostMemory); var, accum, grad,
// indices and the scale output stay on the device.
#define TF_OPT_OPS_CLIPPY_GPU(name, T)              \
  Name(name)                                        \
      .Device(tensorflow::DEVICE_GPU)               \
      .HostMemory("lr")                             \
      .HostMemory("epsilon")                        \
      .HostMemory("variable_relative_threshold")    \
      .HostMemory("accumulator_relative_threshold") \
      .HostMemory("absolute_threshold")             \
      .TypeConstraint<T>("T")
#define TF_OPT_OPS_REGISTER_GPU(T)                                                                 \
  TF_OPT_OPS_REGISTER_KERNEL(TF_OPT_OPS_CLIPPY_GPU("TfOptOps>ResourceApplyClippyAdagrad", T),      \
                             ClippyAdagradOp<GPUDevice, T, T, int32_t, false, false>);             \
  TF_OPT_OPS_REGISTER_KERNEL(TF_OPT_OPS_CLIPPY_GPU("TfOptOps>ResourceSparseApplyClippyAdagrad", T) \
                                 .TypeConstraint<int32_t>("Tindices"),                             \
                             ClippyAdagradOp<GPUDevice, T, T, int32_t, true, false>);              \
  TF_OPT_OPS_REGISTER_KERNEL(TF_OPT_OPS_CLIPPY_GPU("TfOptOps>ResourceSparseApplyClippyAdagrad", T) \
                                 .TypeConstraint<int64_t>("Tindices"),                             \
                             ClippyAdagradOp<GPUDevice, T, T, int64_t, true, false>);
// half, bfloat16, float and double: the variable types of the op.
TF_CALL_FLOAT_TYPES(TF_OPT_OPS_REGISTER_GPU);
#undef TF_OPT_OPS_REGISTER_GPU
#define TF_OPT_OPS_CLIPPY_KERNEL(device, name, T) TF_OPT_OPS_CLIPPY_GPU(name, T).HostMemory("step")
TF_OPT_OPS_REGISTER_LIGHT_ALL(tensorflow::DEVICE_GPU, GPUDevice)
#undef TF_OPT_OPS_CLIPPY_KERNEL
#undef TF_OPT_OPS_CLIPPY_GPU
#endif  // GOOGLE_CUDA
#undef TF_OPT_OPS_REGISTER_LIGHT_ALL
#undef TF_OPT_OPS_REGISTER_LIGHT_T
#undef TF_OPT_OPS_REGISTER_LIGHT

}  // namespace tf_opt_ops
