// Clippy Adagrad: OpKernels (validation, locking), the CPU functors, and the
// GPU functors calling the launchers of clippy_adagrad_kernels.cu.cc.
#define EIGEN_USE_THREADS  // before any Eigen header: kernels run on the CPU thread pool
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // Eigen::GpuDevice, for the op's stream
#endif

#include "tf_opt_ops/kernels/clippy_adagrad_kernels.h"

#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/register_types.h"  // TF_CALL_FLOAT_TYPES
#include "tf_opt_ops/core/clippy_adagrad_averaged_interface.h"
#include "tf_opt_ops/core/clippy_adagrad_interface.h"
#include "tf_opt_ops/core/clippy_adagrad_window_interface.h"
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
                          const GradScale<ComputeT<T>>& grad_scale, Tensor* scale) {
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    return cpu::SparseApplyClippyAdagrad<T, A, Tindex>(
        pool, CpuSparseGrad<T, Tindex>(indices, grad, *var, grad_scale), var->flat<T>().data(),
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
                          const GradScale<ComputeT<T>>&, Tensor* scale) {
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

namespace {

// The step of the hyperparameter inputs and the accumulator-update attrs.
template <typename C>
absl::Status ReadClippyStep(OpKernelContext* ctx, bool clip_accumulator_update,
                            bool use_standard_accumulator_update, ClippyStep<C>* step) {
  using namespace clippy_adagrad;  // NOLINT: the input names
  C hyper[kNumHyperparameters];
  for (int k = 0; k < kNumHyperparameters; ++k) {
    TF_RETURN_IF_ERROR(
        ReadScalar(ctx, kFirstHyperparameter + k, kHyperparameterNames[k], &hyper[k]));
  }
  *step = MakeStep(hyper, clip_accumulator_update, use_standard_accumulator_update);
  return absl::OkStatus();
}

// `step` with the weight decay of a W op, its input `input`.
template <typename C>
absl::Status ReadWeightDecay(OpKernelContext* ctx, int input, ClippyStep<C>* step) {
  C weight_decay;
  TF_RETURN_IF_ERROR(ReadScalar(ctx, input, clippy_adagrad::kWeightDecayName, &weight_decay));
  *step = clippy_adagrad::WithWeightDecay(*step, weight_decay);
  return absl::OkStatus();
}

}  // namespace

// One OpKernel for the dense and the sparse op, and their V2 (kLight: the
// accumulator of type A = Taccum, its rounding from the attrs and the step
// input): they differ in the gradient inputs only. The sparse kernels also
// run the W ops, told apart by their weight decay input.
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
    OP_REQUIRES_OK(ctx, GetGradScaleInputs(ctx, &grad_scale_inputs_));
    decays_ = kSparse &&
              clippy_adagrad::HasWeightDecay(ctx->num_inputs() - grad_scale_inputs_.count, kLight);
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace clippy_adagrad;  // NOLINT: the input names
    LockedVariables<Device, T> vars;
    OP_REQUIRES_OK(
        ctx, vars.Acquire(ctx, use_locking_, /*sparse=*/kSparse, {kVar, kAccum},
                          {kVariableNames, kVariableNames + kNumVariables},
                          {tensorflow::DataTypeToEnum<T>::v(), tensorflow::DataTypeToEnum<A>::v()},
                          /*row_slot=*/-1));
    ClippyStep<C> step{};
    OP_REQUIRES_OK(ctx, ReadClippyStep(ctx, clip_accumulator_update_,
                                       use_standard_accumulator_update_, &step));
    if (kLight) {
      int64_t t = 0;
      OP_REQUIRES_OK(ctx, ReadScalar<int64_t>(ctx, StepInput(kSparse), "step", &t));
      step.stochastic_rounding = stochastic_rounding_;
      step.noise_key = ClippyNoiseKey(static_cast<uint64_t>(seed_), t);
    }
    if (decays_) OP_REQUIRES_OK(ctx, ReadWeightDecay(ctx, WeightDecayInput(kLight), &step));
    const Tensor& grad = ctx->input(kGrad);
    Tensor* var = vars.tensor(kVar);
    Tensor* accum = vars.tensor(kAccum);
    Tensor* scale = nullptr;
    if constexpr (kSparse) {
      const Tensor& indices = ctx->input(kIndices);
      OP_REQUIRES_OK(ctx, ValidateSparseGrad(var->shape(), grad.shape(), indices.shape()));
      GradScale<C> grad_scale;
      OP_REQUIRES_OK(ctx, ReadGradScale<T>(ctx, grad_scale_inputs_, &grad_scale));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &scale));
      if (indices.NumElements() == 0) {  // nothing touched: nothing clipped
        OP_REQUIRES_OK(ctx, SetScaleToOne(ctx, scale));
        return;
      }
      OP_REQUIRES_OK(ctx, functor::SparseApplyClippyAdagrad<Device, T, A, Tindex>()(
                              ctx, indices, grad, var, accum, step, grad_scale, scale));
    } else {
      OP_REQUIRES_OK(ctx, ValidateDenseGrad(var->shape(), grad.shape()));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &scale));
      OP_REQUIRES_OK(
          ctx, functor::ApplyClippyAdagrad<Device, T, A>()(ctx, grad, var, accum, step, scale));
    }
  }

 private:
  static absl::Status SetScaleToOne(OpKernelContext* ctx, Tensor* scale);

  bool use_locking_;
  bool clip_accumulator_update_;
  bool use_standard_accumulator_update_;
  bool stochastic_rounding_ = false;
  int64_t seed_ = 0;
  bool decays_ = false;  // a W op: the weight decay is its last input but a Scaled op's grad_scale
  GradScaleInputs grad_scale_inputs_;
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

// Ops ResourceSparseApplyClippyAdagradAveraged and its W op: the sparse Clippy
// Adagrad of ClippyAdagradOp (the accumulator of the table's type) with the
// moving average's catch-up in its update pass
// (cpu::SparseApplyClippyAdagradAveraged). CPU only: on GPUs and in XLA the
// optimizers run the moving-average op, then Clippy.
template <typename T, typename Tindex>
class SparseApplyClippyAdagradAveragedOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyClippyAdagradAveragedOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
    OP_REQUIRES_OK(ctx, GetClippyAccumulatorUpdateAttrs(ctx, &clip_accumulator_update_,
                                                        &use_standard_accumulator_update_));
    OP_REQUIRES_OK(ctx, GetGradScaleInputs(ctx, &grad_scale_inputs_));
    decays_ = clippy_adagrad_averaged::HasWeightDecay(ctx->num_inputs() - grad_scale_inputs_.count);
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace clippy_adagrad;           // NOLINT: the input names
    using namespace clippy_adagrad_averaged;  // NOLINT: the input names
    LockedVariables<CPUDevice, T> vars;
    OP_REQUIRES_OK(
        ctx, AcquireAveragedVariables<kSyncedSlot>(ctx, use_locking_, kVariableInputs,
                                                   clippy_adagrad_averaged::kVariableNames,
                                                   clippy_adagrad_averaged::kNumVariables, &vars));
    ClippyStep<C> step{};
    OP_REQUIRES_OK(ctx, ReadClippyStep(ctx, clip_accumulator_update_,
                                       use_standard_accumulator_update_, &step));
    if (decays_) OP_REQUIRES_OK(ctx, ReadWeightDecay(ctx, kWeightDecay, &step));
    cpu::LazyAverage<T> lazy{};
    OP_REQUIRES_OK(ctx, ReadLazyAverage(ctx, kCount, vars.tensor(kAverageSlot),
                                        vars.tensor(kSyncedSlot), &lazy));
    Tensor* var = vars.tensor(kVar);
    Tensor* accum = vars.tensor(kAccum);
    const Tensor& grad = ctx->input(kGrad);
    const Tensor& indices = ctx->input(kIndices);
    OP_REQUIRES_OK(ctx, ValidateSparseGrad(var->shape(), grad.shape(), indices.shape()));
    GradScale<C> grad_scale;
    OP_REQUIRES_OK(ctx, ReadGradScale<T>(ctx, grad_scale_inputs_, &grad_scale));
    Tensor* scale = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &scale));
    if (indices.NumElements() == 0) {  // nothing touched: nothing clipped, as the two ops
      scale->scalar<C>()() = C(1);
      return;
    }
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    OP_REQUIRES_OK(ctx, cpu::SparseApplyClippyAdagradAveraged<T, Tindex>(
                            pool, CpuSparseGrad<T, Tindex>(indices, grad, *var, grad_scale),
                            var->flat<T>().data(), accum->flat<T>().data(), step, lazy,
                            scale->scalar<C>().data()));
  }

 private:
  bool use_locking_;
  bool clip_accumulator_update_;
  bool use_standard_accumulator_update_;
  bool decays_;  // the W op: the weight decay is its last input but a Scaled op's grad_scale
  GradScaleInputs grad_scale_inputs_;
};

TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyClippyAdagradAveraged",
                                        SparseApplyClippyAdagradAveragedOp)
TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyClippyAdagradWAveraged",
                                        SparseApplyClippyAdagradAveragedOp)
TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyClippyAdagradAveragedScaled",
                                        SparseApplyClippyAdagradAveragedOp)
TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyClippyAdagradWAveragedScaled",
                                        SparseApplyClippyAdagradAveragedOp)

// Ops ResourceSparseApplyClippyAdagradWindow and its W op: the window's
// average (cpu::WindowGradient, as op ResourceSparseTakeWindowGradient takes
// it) and the sparse Clippy Adagrad of ClippyAdagradOp on it, in one op
// (cpu::SparseApplyClippyAdagradWindow). CPU only, the accumulator of the
// table's dtype: elsewhere the optimizers take the window's average, then run
// Clippy.
template <typename T, typename Tindex>
class SparseApplyClippyAdagradWindowOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyClippyAdagradWindowOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
    OP_REQUIRES_OK(ctx, GetClippyAccumulatorUpdateAttrs(ctx, &clip_accumulator_update_,
                                                        &use_standard_accumulator_update_));
    decays_ = clippy_adagrad_window::HasWeightDecay(ctx->num_inputs());
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace clippy_adagrad;         // NOLINT: the input names
    using namespace clippy_adagrad_window;  // NOLINT: the input names
    WindowApplyInputs<T, Tindex> inputs;
    OP_REQUIRES_OK(ctx, inputs.Acquire(ctx, kVariableInputs, clippy_adagrad_window::kVariableNames,
                                       clippy_adagrad_window::kNumVariables));
    ClippyStep<C> step{};
    OP_REQUIRES_OK(ctx, ReadClippyStep(ctx, clip_accumulator_update_,
                                       use_standard_accumulator_update_, &step));
    if (decays_) OP_REQUIRES_OK(ctx, ReadWeightDecay(ctx, kWeightDecay, &step));
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    OP_REQUIRES_OK(ctx, inputs.Group(ctx, pool, kGrad, kIndices, kSteps));
    Tensor* scale = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &scale));
    if (inputs.window().num_rows() == 0) {  // an empty window: nothing clipped, as the two ops
      scale->scalar<C>()() = C(1);
      inputs.window().Applied();
      return;
    }
    std::lock_guard<std::mutex> lock(average_mu_);
    const size_t average_size = inputs.window().num_rows() * inputs.window().row_size();
    if (average_.size() < average_size) average_ = std::vector<T>(average_size);
    scale->scalar<C>()() = cpu::SparseApplyClippyAdagradWindow<T, Tindex>(
        pool, inputs.window(), inputs.steps(), inputs.tensor(kVar)->template flat<T>().data(),
        inputs.tensor(kAccum)->template flat<T>().data(), step, average_.data());
  }

 private:
  bool use_locking_;
  bool clip_accumulator_update_;
  bool use_standard_accumulator_update_;
  bool decays_;  // the W op: the weight decay is its last input
  // The window's average rows, kept across calls at the largest window's size:
  // a buffer this large allocated per call (125 MB at 1,000,000x128) comes as
  // fresh pages, a fault per 4 KB, every call. A call holds average_mu_ for
  // the whole update (after the variables' locks: one order, no deadlock).
  std::mutex average_mu_;
  std::vector<T> average_;
};

TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyClippyAdagradWindow",
                                        SparseApplyClippyAdagradWindowOp)
TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyClippyAdagradWWindow",
                                        SparseApplyClippyAdagradWindowOp)

// The kernels of the ops `dense`, `sparse` and `sparse_w` (the W op) on Device
// (the sparse ones with both index types); `constraints` adds the V2 ops'
// accumulator type.
#define TF_OPT_OPS_CLIPPY_KERNEL(Device, name, kLight, decays, T)                                \
  KernelOn(Name(name), !std::is_same_v<Device, CPUDevice>, clippy_adagrad::kHyperparameterNames, \
           /*step=*/kLight, (decays) ? clippy_adagrad::kWeightDecayName : nullptr)               \
      .TypeConstraint<T>("T")
#define TF_OPT_OPS_REGISTER_SPARSE(Device, sparse, kLight, decays, T, A, constraints)    \
  TF_OPT_OPS_REGISTER_KERNEL(TF_OPT_OPS_CLIPPY_KERNEL(Device, sparse, kLight, decays, T) \
                                 constraints.TypeConstraint<int32_t>("Tindices"),        \
                             ClippyAdagradOp<Device, T, A, int32_t, true, kLight>);      \
  TF_OPT_OPS_REGISTER_KERNEL(TF_OPT_OPS_CLIPPY_KERNEL(Device, sparse, kLight, decays, T) \
                                 constraints.TypeConstraint<int64_t>("Tindices"),        \
                             ClippyAdagradOp<Device, T, A, int64_t, true, kLight>);
#define TF_OPT_OPS_REGISTER_SPARSE_OPS(Device, sparse, sparse_w, kLight, T, A, constraints) \
  TF_OPT_OPS_REGISTER_SPARSE(Device, sparse, kLight, false, T, A, constraints)              \
  TF_OPT_OPS_REGISTER_SPARSE(Device, sparse_w, kLight, true, T, A, constraints)
#define TF_OPT_OPS_REGISTER_OPS(Device, dense, sparse, sparse_w, kLight, T, A, constraints) \
  TF_OPT_OPS_REGISTER_KERNEL(TF_OPT_OPS_CLIPPY_KERNEL(Device, dense, kLight, false, T)      \
                                 constraints,                                               \
                             ClippyAdagradOp<Device, T, A, int32_t, false, kLight>);        \
  TF_OPT_OPS_REGISTER_SPARSE_OPS(Device, sparse, sparse_w, kLight, T, A, constraints)
// The ops for variables of half, bfloat16, float and double; the V2 ops for
// tables and accumulators of half, bfloat16 and float; on the CPU, the sparse
// ones' Scaled ops too.
#define TF_OPT_OPS_REGISTER(Device, T)                                   \
  TF_OPT_OPS_REGISTER_OPS(Device, "TfOptOps>ResourceApplyClippyAdagrad", \
                          "TfOptOps>ResourceSparseApplyClippyAdagrad",   \
                          "TfOptOps>ResourceSparseApplyClippyAdagradW", false, T, T, )
#define TF_OPT_OPS_REGISTER_LIGHT(Device, T, A)                                       \
  TF_OPT_OPS_REGISTER_OPS(Device, "TfOptOps>ResourceApplyClippyAdagradV2",            \
                          "TfOptOps>ResourceSparseApplyClippyAdagradV2",              \
                          "TfOptOps>ResourceSparseApplyClippyAdagradWV2", true, T, A, \
                          .TypeConstraint<A>("Taccum"))
#define TF_OPT_OPS_REGISTER_CPU_LIGHT(Device, T, A)                                                \
  TF_OPT_OPS_REGISTER_LIGHT(Device, T, A)                                                          \
  TF_OPT_OPS_REGISTER_SPARSE_OPS(Device, "TfOptOps>ResourceSparseApplyClippyAdagradV2Scaled",      \
                                 "TfOptOps>ResourceSparseApplyClippyAdagradWV2Scaled", true, T, A, \
                                 .TypeConstraint<A>("Taccum"))
#define TF_OPT_OPS_REGISTER_LIGHT_T(Light, Device, T) \
  Light(Device, T, Eigen::half) Light(Device, T, Eigen::bfloat16) Light(Device, T, float)
#define TF_OPT_OPS_REGISTER_DEVICE(Device, Light)             \
  TF_CALL_FLOAT_TYPES(TF_OPT_OPS_REGISTER_##Device)           \
  TF_OPT_OPS_REGISTER_LIGHT_T(Light, Device, Eigen::half)     \
  TF_OPT_OPS_REGISTER_LIGHT_T(Light, Device, Eigen::bfloat16) \
  TF_OPT_OPS_REGISTER_LIGHT_T(Light, Device, float)
#define TF_OPT_OPS_REGISTER_CPUDevice(T)                                                       \
  TF_OPT_OPS_REGISTER(CPUDevice, T)                                                            \
  TF_OPT_OPS_REGISTER_SPARSE_OPS(CPUDevice, "TfOptOps>ResourceSparseApplyClippyAdagradScaled", \
                                 "TfOptOps>ResourceSparseApplyClippyAdagradWScaled", false, T, \
                                 T, )
TF_OPT_OPS_REGISTER_DEVICE(CPUDevice, TF_OPT_OPS_REGISTER_CPU_LIGHT)
#undef TF_OPT_OPS_REGISTER_CPUDevice
#if GOOGLE_CUDA
#define TF_OPT_OPS_REGISTER_GPUDevice(T) TF_OPT_OPS_REGISTER(GPUDevice, T)
TF_OPT_OPS_REGISTER_DEVICE(GPUDevice, TF_OPT_OPS_REGISTER_LIGHT)
#undef TF_OPT_OPS_REGISTER_GPUDevice
#endif  // GOOGLE_CUDA
#undef TF_OPT_OPS_REGISTER_DEVICE
#undef TF_OPT_OPS_REGISTER_LIGHT_T
#undef TF_OPT_OPS_REGISTER_CPU_LIGHT
#undef TF_OPT_OPS_REGISTER_LIGHT
#undef TF_OPT_OPS_REGISTER
#undef TF_OPT_OPS_REGISTER_OPS
#undef TF_OPT_OPS_REGISTER_SPARSE_OPS
#undef TF_OPT_OPS_REGISTER_SPARSE
#undef TF_OPT_OPS_CLIPPY_KERNEL

}  // namespace tf_opt_ops
