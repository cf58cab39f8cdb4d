// Sparse lazy Adam: OpKernel (validation, locking), the CPU functor, and the
// GPU functor calling the launcher of lazy_adam_kernels.cu.cc; and the
// CPU-only OpKernels of lazy Adam with its moving average, with a gradient
// accumulation window, and with both.
#define EIGEN_USE_THREADS  // before any Eigen header: kernels run on the CPU thread pool
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // Eigen::GpuDevice, for the op's stream
#endif

#include "tf_opt_ops/kernels/lazy_adam_kernels.h"

#include <type_traits>
#include <utility>

#include "tf_opt_ops/core/cpu_kernels.h"
#include "tf_opt_ops/core/lazy_adam_averaged_interface.h"
#include "tf_opt_ops/core/lazy_adam_interface.h"
#include "tf_opt_ops/core/lazy_adam_window_averaged_interface.h"
#include "tf_opt_ops/core/lazy_adam_window_interface.h"
#include "tf_opt_ops/kernels/gpu_glue.h"
#include "tf_opt_ops/kernels/kernel_registration.h"
#include "tf_opt_ops/kernels/op_inputs.h"

namespace tf_opt_ops {
namespace functor {

// The CPU update itself is cpu::SparseApplyLazyAdam (cpu_kernels.h), which
// the XLA custom call runs too.
template <typename T, typename S, typename Tindex>
struct SparseApplyLazyAdam<CPUDevice, T, S, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& grad,
                          Tensor* var, Tensor* m, Tensor* v, const AdamStep<ComputeT<T>>& step,
                          const AdamStateLayout& layout, const GradScale<ComputeT<T>>& grad_scale) {
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    return cpu::SparseApplyLazyAdam<T, S, Tindex>(
        pool, CpuSparseGrad<T, Tindex>(indices, grad, *var, grad_scale), var->flat<T>().data(),
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
                          const AdamStateLayout& layout, const GradScale<ComputeT<T>>&) {
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

namespace {

// The lazy Adam ops' scalar inputs: the hyperparameters, and the weight decay
// when weight_decay_input is not -1 (a W op).
template <typename C>
absl::Status ReadHyperparameters(OpKernelContext* ctx, int weight_decay_input,
                                 lazy_adam::Hyperparameters<C>* hyper) {
  using namespace lazy_adam;  // NOLINT: the input names
  for (int k = 0; k < kNumHyperparameters; ++k) {
    TF_RETURN_IF_ERROR(
        ReadScalar(ctx, kFirstHyperparameter + k, kHyperparameterNames[k], &hyper->values[k]));
  }
  if (weight_decay_input != -1) {
    C weight_decay;
    TF_RETURN_IF_ERROR(ReadScalar(ctx, weight_decay_input, kWeightDecayName, &weight_decay));
    hyper->SetWeightDecay(weight_decay);
  }
  return absl::OkStatus();
}

}  // namespace

// Ops ResourceSparseApplyLazyAdam (kLight false: slots of the table's type
// T, S == T) and ResourceSparseApplyLazyAdamV2 (kLight: slots of type S =
// Tslot, the layout from the attrs, the step from input kStep).
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
    OP_REQUIRES_OK(ctx, GetGradScaleInputs(ctx, &grad_scale_inputs_));
    decays_ = lazy_adam::HasWeightDecay(ctx->num_inputs() - grad_scale_inputs_.count, kLight);
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace lazy_adam;  // NOLINT: the input names
    LockedVariables<Device, T> vars;
    const tensorflow::DataType t = tensorflow::DataTypeToEnum<T>::v();
    const tensorflow::DataType s = tensorflow::DataTypeToEnum<S>::v();
    OP_REQUIRES_OK(ctx, vars.Acquire(ctx, use_locking_, /*sparse=*/true, {kVar, kM, kV},
                                     {kVariableNames, kVariableNames + kNumVariables}, {t, s, s},
                                     layout_.rowwise_second_moment ? kV : -1));
    Hyperparameters<C> hyper;
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, decays_ ? WeightDecayInput(kLight) : -1, &hyper));
    AdamStateLayout layout = layout_;
    if (kLight) OP_REQUIRES_OK(ctx, ReadScalar<int64_t>(ctx, kStep, "step", &layout.step));
    GradScale<C> grad_scale;
    OP_REQUIRES_OK(ctx, ReadGradScale<T>(ctx, grad_scale_inputs_, &grad_scale));
    const Tensor& grad = ctx->input(kGrad);
    const Tensor& indices = ctx->input(kIndices);
    OP_REQUIRES_OK(ctx,
                   ValidateSparseGrad(vars.tensor(kVar)->shape(), grad.shape(), indices.shape()));
    if (indices.NumElements() == 0) return;
    OP_REQUIRES_OK(ctx, functor::SparseApplyLazyAdam<Device, T, S, Tindex>()(
                            ctx, indices, grad, vars.tensor(kVar), vars.tensor(kM), vars.tensor(kV),
                            hyper.Step(), layout, grad_scale));
  }

 private:
  bool use_locking_;
  bool decays_;  // a W op: the weight decay is its last input but a Scaled op's grad_scale
  GradScaleInputs grad_scale_inputs_;
  AdamStateLayout layout_;
};

// Ops ResourceSparseApplyLazyAdamAveraged and its W op (and their Scaled ops): the lazy Adam of
// SparseApplyLazyAdamOp (slots of the table's type) with the moving average's
// catch-up in the same pass (cpu::SparseApplyLazyAdamAveraged). CPU only: on
// GPUs and in XLA the optimizers run the moving-average op, then lazy Adam.
template <typename T, typename Tindex>
class SparseApplyLazyAdamAveragedOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyLazyAdamAveragedOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
    OP_REQUIRES_OK(ctx, GetGradScaleInputs(ctx, &grad_scale_inputs_));
    decays_ = lazy_adam_averaged::HasWeightDecay(ctx->num_inputs() - grad_scale_inputs_.count);
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace lazy_adam;           // NOLINT: the input names
    using namespace lazy_adam_averaged;  // NOLINT: the input names
    LockedVariables<CPUDevice, T> vars;
    OP_REQUIRES_OK(ctx, AcquireAveragedVariables<kSyncedSlot>(
                            ctx, use_locking_, kVariableInputs, lazy_adam_averaged::kVariableNames,
                            lazy_adam_averaged::kNumVariables, &vars));
    Hyperparameters<C> hyper;
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, decays_ ? kWeightDecay : -1, &hyper));
    cpu::LazyAverage<T> lazy{};
    OP_REQUIRES_OK(ctx,
                   ReadLazyAverage(ctx, kCount, vars.tensor(3), vars.tensor(kSyncedSlot), &lazy));
    GradScale<C> grad_scale;
    OP_REQUIRES_OK(ctx, ReadGradScale<T>(ctx, grad_scale_inputs_, &grad_scale));
    Tensor* var = vars.tensor(0);
    Tensor* m = vars.tensor(1);
    Tensor* v = vars.tensor(2);
    const Tensor& grad = ctx->input(kGrad);
    const Tensor& indices = ctx->input(kIndices);
    OP_REQUIRES_OK(ctx, ValidateSparseGrad(var->shape(), grad.shape(), indices.shape()));
    if (indices.NumElements() == 0) return;
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    OP_REQUIRES_OK(ctx, cpu::SparseApplyLazyAdamAveraged<T, Tindex>(
                            pool, CpuSparseGrad<T, Tindex>(indices, grad, *var, grad_scale),
                            var->flat<T>().data(), m->flat<T>().data(), v->flat<T>().data(),
                            hyper.Step(), lazy));
  }

 private:
  bool use_locking_;
  bool decays_;  // the W op: the weight decay is its last input but a Scaled op's grad_scale
  GradScaleInputs grad_scale_inputs_;
};

#define TF_OPT_OPS_REGISTER_AVERAGED(Op, T, Tindex)                   \
  TF_OPT_OPS_REGISTER_KERNEL(Name(Op)                                 \
                                 .Device(tensorflow::DEVICE_CPU)      \
                                 .TypeConstraint<T>("T")              \
                                 .TypeConstraint<Tindex>("Tindices"), \
                             SparseApplyLazyAdamAveragedOp<T, Tindex>);
#define TF_OPT_OPS_REGISTER_AVERAGED_INDEX(T, Tindex)                                           \
  TF_OPT_OPS_REGISTER_AVERAGED("TfOptOps>ResourceSparseApplyLazyAdamAveraged", T, Tindex)       \
  TF_OPT_OPS_REGISTER_AVERAGED("TfOptOps>ResourceSparseApplyLazyAdamWAveraged", T, Tindex)      \
  TF_OPT_OPS_REGISTER_AVERAGED("TfOptOps>ResourceSparseApplyLazyAdamAveragedScaled", T, Tindex) \
  TF_OPT_OPS_REGISTER_AVERAGED("TfOptOps>ResourceSparseApplyLazyAdamWAveragedScaled", T, Tindex)
#define TF_OPT_OPS_REGISTER_AVERAGED_T(T)        \
  TF_OPT_OPS_REGISTER_AVERAGED_INDEX(T, int32_t) \
  TF_OPT_OPS_REGISTER_AVERAGED_INDEX(T, int64_t)
TF_OPT_OPS_REGISTER_AVERAGED_T(Eigen::half)
TF_OPT_OPS_REGISTER_AVERAGED_T(Eigen::bfloat16)
TF_OPT_OPS_REGISTER_AVERAGED_T(float)
TF_OPT_OPS_REGISTER_AVERAGED_T(double)
#undef TF_OPT_OPS_REGISTER_AVERAGED_T
#undef TF_OPT_OPS_REGISTER_AVERAGED_INDEX
#undef TF_OPT_OPS_REGISTER_AVERAGED

// Ops ResourceSparseApplyLazyAdamWindow and its W op: the window's average
// (cpu::WindowGradient, as op ResourceSparseTakeWindowGradient takes it) and
// the lazy Adam of SparseApplyLazyAdamOp on it, in one pass
// (cpu::SparseApplyLazyAdamWindow). CPU only: on GPUs and in XLA the
// optimizers take the window's average, then run lazy Adam.
template <typename T, typename Tindex>
class SparseApplyLazyAdamWindowOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyLazyAdamWindowOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
    decays_ = lazy_adam_window::HasWeightDecay(ctx->num_inputs());
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace lazy_adam;         // NOLINT: the input names
    using namespace lazy_adam_window;  // NOLINT: the input names
    WindowApplyInputs<T, Tindex> inputs;
    OP_REQUIRES_OK(ctx, inputs.Acquire(ctx, kVariableInputs, lazy_adam_window::kVariableNames,
                                       lazy_adam_window::kNumVariables));
    Hyperparameters<C> hyper;
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, decays_ ? kWeightDecay : -1, &hyper));
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    OP_REQUIRES_OK(ctx, inputs.Group(ctx, pool, kGrad, kIndices, kSteps));
    cpu::SparseApplyLazyAdamWindow<T, Tindex>(
        pool, inputs.window(), inputs.steps(), inputs.tensor(0)->template flat<T>().data(),
        inputs.tensor(1)->template flat<T>().data(), inputs.tensor(2)->template flat<T>().data(),
        hyper.Step());
  }

 private:
  bool use_locking_;
  bool decays_;  // the W op: the weight decay is its last input
};

TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyLazyAdamWindow",
                                        SparseApplyLazyAdamWindowOp)
TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyLazyAdamWWindow",
                                        SparseApplyLazyAdamWindowOp)

namespace {

// The window averaged ops' variables: synced int32 (the averaged ops' words),
// the others as the window ops'.
absl::Status WindowAveragedDtypeMismatch(size_t k, const char* name, tensorflow::DataType got,
                                         tensorflow::DataType want, tensorflow::DataType table) {
  return static_cast<int>(k) == lazy_adam_averaged::kSyncedSlot
             ? AveragedDtypeMismatch<lazy_adam_averaged::kSyncedSlot>(k, name, got, want, table)
             : WindowDtypeMismatch(k, name, got, want, table);
}

constexpr VariableErrors kWindowAveragedErrors{WindowAveragedDtypeMismatch, CheckRowSlotShape};

}  // namespace

// Ops ResourceSparseApplyLazyAdamWindowAveraged and its W op: the window op's
// average and lazy Adam with the averaged op's catch-up of each row's moving
// average before its update, in one pass
// (cpu::SparseApplyLazyAdamWindowAveraged). CPU only: on GPUs and in XLA the
// optimizers take the window's average, then keep the average and run lazy
// Adam.
template <typename T, typename Tindex>
class SparseApplyLazyAdamWindowAveragedOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyLazyAdamWindowAveragedOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
    decays_ = lazy_adam_window_averaged::HasWeightDecay(ctx->num_inputs());
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace lazy_adam;                  // NOLINT: the input names
    using namespace lazy_adam_window_averaged;  // NOLINT: the input names
    using lazy_adam_averaged::kSyncedSlot;
    WindowApplyInputs<T, Tindex> inputs;
    OP_REQUIRES_OK(ctx,
                   inputs.Acquire(ctx, kVariableInputs, lazy_adam_window_averaged::kVariableNames,
                                  lazy_adam_window_averaged::kNumVariables, kSyncedSlot,
                                  kWindowAveragedErrors));
    Hyperparameters<C> hyper;
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, decays_ ? kWeightDecay : -1, &hyper));
    cpu::LazyAverage<T> lazy{};
    OP_REQUIRES_OK(ctx, ReadLazyAverage(ctx, lazy_adam_averaged::kCount, inputs.tensor(3),
                                        inputs.tensor(kSyncedSlot), &lazy));
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    OP_REQUIRES_OK(ctx, inputs.Group(ctx, pool, kGrad, kIndices, kSteps));
    cpu::SparseApplyLazyAdamWindowAveraged<T, Tindex>(
        pool, inputs.window(), inputs.steps(), inputs.tensor(0)->template flat<T>().data(),
        inputs.tensor(1)->template flat<T>().data(), inputs.tensor(2)->template flat<T>().data(),
        hyper.Step(), lazy);
  }

 private:
  bool use_locking_;
  bool decays_;  // the W op: the weight decay is its last input
};

TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyLazyAdamWindowAveraged",
                                        SparseApplyLazyAdamWindowAveragedOp)
TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyLazyAdamWWindowAveraged",
                                        SparseApplyLazyAdamWindowAveragedOp)

// The kernels of the four ops on Device, with both index types:
// ResourceSparseApplyLazyAdam and its W op for tables of half, bfloat16, float
// and double (TF_OPT_OPS_REGISTER_T), the V2 op and its W op for tables and
// slots of half, bfloat16 and float (TF_OPT_OPS_REGISTER_LIGHT_T); with
// `Suffix` "Scaled", the kernels of their Scaled ops (the CPU only).
#define TF_OPT_OPS_REGISTER_OP(Op, decays, Device, T, Tindex)                                 \
  TF_OPT_OPS_REGISTER_KERNEL(                                                                 \
      KernelOn(Name(Op), !std::is_same_v<Device, CPUDevice>, lazy_adam::kHyperparameterNames, \
               /*step=*/false, (decays) ? lazy_adam::kWeightDecayName : nullptr)              \
          .TypeConstraint<T>("T")                                                             \
          .TypeConstraint<Tindex>("Tindices"),                                                \
      SparseApplyLazyAdamOp<Device, T, T, Tindex, false>);
#define TF_OPT_OPS_REGISTER_LIGHT_OP(Op, decays, Device, T, S, Tindex)                        \
  TF_OPT_OPS_REGISTER_KERNEL(                                                                 \
      KernelOn(Name(Op), !std::is_same_v<Device, CPUDevice>, lazy_adam::kHyperparameterNames, \
               /*step=*/true, (decays) ? lazy_adam::kWeightDecayName : nullptr)               \
          .TypeConstraint<T>("T")                                                             \
          .TypeConstraint<S>("Tslot")                                                         \
          .TypeConstraint<Tindex>("Tindices"),                                                \
      SparseApplyLazyAdamOp<Device, T, S, Tindex, true>);
#define TF_OPT_OPS_REGISTER(Device, T, Tindex, Suffix)                                            \
  TF_OPT_OPS_REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdam" Suffix, false, Device, T, Tindex) \
  TF_OPT_OPS_REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamW" Suffix, true, Device, T, Tindex)
#define TF_OPT_OPS_REGISTER_LIGHT(Device, T, S, Tindex, Suffix)                                   \
  TF_OPT_OPS_REGISTER_LIGHT_OP("TfOptOps>ResourceSparseApplyLazyAdamV2" Suffix, false, Device, T, \
                               S, Tindex)                                                         \
  TF_OPT_OPS_REGISTER_LIGHT_OP("TfOptOps>ResourceSparseApplyLazyAdamWV2" Suffix, true, Device, T, \
                               S, Tindex)
#define TF_OPT_OPS_REGISTER_T(Device, T, Suffix) \
  TF_OPT_OPS_REGISTER(Device, T, int32_t, Suffix) TF_OPT_OPS_REGISTER(Device, T, int64_t, Suffix)
#define TF_OPT_OPS_REGISTER_LIGHT_TS(Device, T, S, Suffix) \
  TF_OPT_OPS_REGISTER_LIGHT(Device, T, S, int32_t, Suffix) \
  TF_OPT_OPS_REGISTER_LIGHT(Device, T, S, int64_t, Suffix)
#define TF_OPT_OPS_REGISTER_LIGHT_T(Device, T, Suffix)             \
  TF_OPT_OPS_REGISTER_LIGHT_TS(Device, T, Eigen::half, Suffix)     \
  TF_OPT_OPS_REGISTER_LIGHT_TS(Device, T, Eigen::bfloat16, Suffix) \
  TF_OPT_OPS_REGISTER_LIGHT_TS(Device, T, float, Suffix)
#define TF_OPT_OPS_REGISTER_DEVICE(Device, Suffix)             \
  TF_OPT_OPS_REGISTER_T(Device, Eigen::half, Suffix)           \
  TF_OPT_OPS_REGISTER_T(Device, Eigen::bfloat16, Suffix)       \
  TF_OPT_OPS_REGISTER_T(Device, float, Suffix)                 \
  TF_OPT_OPS_REGISTER_T(Device, double, Suffix)                \
  TF_OPT_OPS_REGISTER_LIGHT_T(Device, Eigen::half, Suffix)     \
  TF_OPT_OPS_REGISTER_LIGHT_T(Device, Eigen::bfloat16, Suffix) \
  TF_OPT_OPS_REGISTER_LIGHT_T(Device, float, Suffix)
TF_OPT_OPS_REGISTER_DEVICE(CPUDevice, "")
TF_OPT_OPS_REGISTER_DEVICE(CPUDevice, "Scaled")
#if GOOGLE_CUDA
TF_OPT_OPS_REGISTER_DEVICE(GPUDevice, "")
#endif
#undef TF_OPT_OPS_REGISTER_DEVICE
#undef TF_OPT_OPS_REGISTER_LIGHT_T
#undef TF_OPT_OPS_REGISTER_LIGHT_TS
#undef TF_OPT_OPS_REGISTER_T
#undef TF_OPT_OPS_REGISTER_LIGHT
#undef TF_OPT_OPS_REGISTER

}  // namespace tf_opt_ops
