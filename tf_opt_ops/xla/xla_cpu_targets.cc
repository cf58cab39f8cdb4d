// The XLA custom call targets on the CPU ("Host"): the operands as
// xla_targets.h lays them out, run through the very CPU updates the
// OpKernels run (cpu_kernels.h), on the thread pool XLA runs the call with.
// Why: see docs/design.md, "XLA".
#define EIGEN_USE_THREADS  // before any Eigen header: the updates run on a thread pool

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "tf_opt_ops/core/clippy_adagrad_interface.h"
#include "tf_opt_ops/core/cpu_kernels.h"
#include "tf_opt_ops/core/lazy_adam_interface.h"
#include "tf_opt_ops/core/rowwise_adagrad_interface.h"
#include "tf_opt_ops/platform/huge_pages.h"
#include "tf_opt_ops/xla/xla_targets.h"
#if TF_OPT_OPS_XLA_FFI  // else nothing: see xla_targets.h
#include "tf_opt_ops/xla/xla_ffi.h"
#include "tf_opt_ops/xla/xla_target_util.h"

namespace tf_opt_ops {
namespace xla_targets {
namespace {

// Calls f(T{}) for the variable type of `dtype`.
template <typename F>
absl::Status ForVariableType(const char* target, XLA_FFI_DataType dtype, F&& f) {
  switch (dtype) {
    case XLA_FFI_DataType_F16:
      return f(Eigen::half{});
    case XLA_FFI_DataType_BF16:
      return f(Eigen::bfloat16{});
    case XLA_FFI_DataType_F32:
      return f(float{});
    case XLA_FFI_DataType_F64:
      return f(double{});
    default:
      return Mismatch(target, absl::StrCat("a variable of XLA type ", dtype));
  }
}

// Calls f(Tindex{}) for the index type of `dtype`.
template <typename F>
absl::Status ForIndexType(const char* target, XLA_FFI_DataType dtype, F&& f) {
  switch (dtype) {
    case XLA_FFI_DataType_S32:
      return f(int32_t{});
    case XLA_FFI_DataType_S64:
      return f(int64_t{});
    default:
      return Mismatch(target, absl::StrCat("indices of XLA type ", dtype));
  }
}

// The result `k` holds operand k's values: XLA aliases the two (the XLA
// kernel asks it to), so this copies nothing; were they apart, the update
// would still be right, on a copy.
template <typename T>
T* InPlace(const Call& call, int k) {
  const Buffer operand = call.arg(k);
  const Buffer result = call.ret(k);
  if (operand.data != result.data) {
    std::memcpy(result.data, operand.data, operand.num_elements() * sizeof(T));
  }
  return static_cast<T*>(result.data);
}

// A table a sparse update scatters into gets huge pages, as in the OpKernels
// (huge_pages.h). XLA updates the variable's own buffer, which stays where
// it is from step to step, so the buffer's address identifies the variable.
template <typename T>
T* InPlaceSparse(const Call& call, int k) {
  T* data = InPlace<T>(call, k);
  AdviseHugePages(data, data, call.ret(k).num_elements() * static_cast<int64_t>(sizeof(T)));
  return data;
}

template <typename T, typename Tindex>
cpu::SparseGrad<T, Tindex> SparseGradOf(const Buffer& var, const Buffer& grad,
                                        const Buffer& indices) {
  const int64_t num_rows = var.dim(0);
  return cpu::SparseGrad<T, Tindex>{static_cast<const Tindex*>(indices.data),
                                    indices.num_elements(), static_cast<const T*>(grad.data),
                                    num_rows, num_rows > 0 ? var.num_elements() / num_rows : 0};
}

// Calls f(S{}) for the slot type of `dtype`, a type the ops allow for
// slots of a table of type T: float64 for float64 tables (only), any other
// variable type for the others.
template <typename T, typename F>
absl::Status ForSlotType(const char* target, XLA_FFI_DataType dtype, F&& f) {
  return ForVariableType(target, dtype, [&](auto s) {
    using S = decltype(s);
    if constexpr (std::is_same_v<T, double> != std::is_same_v<S, double>) {
      return Mismatch(target, absl::StrCat("a table and its slots of XLA types ",
                                           std::is_same_v<T, double> ? "F64 and " : "", dtype));
    } else {
      return f(s);
    }
  });
}

// Both lazy Adam targets; kLight reads the slots' type and the layout operand.
template <bool kLight>
absl::Status SparseLazyAdam(const Call& call) {
  using Operand = LazyAdamOperand;
  const char* target = kLight ? kSparseLazyAdamV2 : kSparseLazyAdam;
  if (absl::Status arity = CheckCall(call, target, kLight ? Operand::kLayout + 1 : Operand::kLayout,
                                     lazy_adam::kNumVariables, /*aliased=*/0);
      !arity.ok()) {
    return arity;
  }
  const Buffer var = call.arg(Operand::kVar), grad = call.arg(Operand::kGrad),
               indices = call.arg(Operand::kIndices);
  const AdamStateLayout layout =
      kLight ? LayoutFromValues(static_cast<const int64_t*>(call.arg(Operand::kLayout).data))
             : AdamStateLayout();
  return ForVariableType(target, var.dtype, [&](auto t) {
    using T = decltype(t);
    using C = ComputeT<T>;
    const AdamStep<C> step = lazy_adam::Hyperparameters<C>::FromValues(
                                 static_cast<const C*>(call.arg(Operand::kHyper).data))
                                 .Step();
    return ForSlotType<T>(target, kLight ? call.arg(Operand::kM).dtype : var.dtype, [&](auto s) {
      using S = decltype(s);
      return ForIndexType(target, indices.dtype, [&](auto i) {
        using Tindex = decltype(i);
        T* var_data = InPlaceSparse<T>(call, Operand::kVar);
        S* m_data = InPlaceSparse<S>(call, Operand::kM);
        S* v_data = InPlaceSparse<S>(call, Operand::kV);
        const xla_ffi::FfiCpuPool pool(call);
        return cpu::SparseApplyLazyAdam<T, S, Tindex>(pool,
                                                      SparseGradOf<T, Tindex>(var, grad, indices),
                                                      var_data, m_data, v_data, step, layout);
      });
    });
  });
}

// Both Clippy targets: the accumulator of the table's type, or with the
// layout operand (V2 ops) of its own.
template <bool kSparse>
absl::Status ClippyAdagrad(const Call& call) {
  using Operand = ClippyOperand;
  const ClippyCall<kSparse> clippy(call, /*aliased=*/0);
  if (!clippy.status.ok()) return clippy.status;
  const char* target = clippy.target;
  const int hyper_index = clippy.hyper;
  const bool light = clippy.light;
  const Buffer var = call.arg(Operand::kVar), grad = call.arg(Operand::kGrad);
  return ForVariableType(target, var.dtype, [&](auto t) {
    using T = decltype(t);
    using C = ComputeT<T>;
    ClippyStep<C> step =
        clippy_adagrad::StepFromValues(static_cast<const C*>(call.arg(hyper_index).data));
    if (light) {
      const AdamStateLayout layout =
          LayoutFromValues(static_cast<const int64_t*>(call.arg(hyper_index + 1).data));
      step.stochastic_rounding = layout.stochastic_rounding;
      step.noise_key = ClippyNoiseKey(layout.seed, layout.step);
    }
    return ForSlotType<T>(target, call.arg(Operand::kAccum).dtype, [&](auto a) {
      using A = decltype(a);
      const xla_ffi::FfiCpuPool pool(call);
      C* scale = static_cast<C*>(call.ret(Operand::kScaleResult).data);
      if constexpr (kSparse) {
        const Buffer indices = call.arg(Operand::kIndices);
        return ForIndexType(target, indices.dtype, [&](auto i) {
          using Tindex = decltype(i);
          T* var_data = InPlaceSparse<T>(call, Operand::kVar);
          A* accum_data = InPlaceSparse<A>(call, Operand::kAccum);
          return cpu::SparseApplyClippyAdagrad<T, A, Tindex>(
              pool, SparseGradOf<T, Tindex>(var, grad, indices), var_data, accum_data, step, scale);
        });
      } else {
        T* var_data = InPlace<T>(call, Operand::kVar);
        A* accum_data = InPlace<A>(call, Operand::kAccum);
        *scale = cpu::ApplyClippyAdagrad<T, A>(
            pool, var.num_elements(), static_cast<const T*>(grad.data), var_data, accum_data, step);
        return absl::OkStatus();
      }
    });
  });
}

// The row-wise Adagrad target: the accumulator of the compute type, one
// value per row of var.
absl::Status SparseRowwiseAdagrad(const Call& call) {
  using Operand = RowwiseAdagradOperand;
  const char* target = kSparseRowwiseAdagrad;
  if (absl::Status arity = CheckCall(call, target, Operand::kLayout + 1,
                                     rowwise_adagrad::kNumVariables, /*aliased=*/0);
      !arity.ok()) {
    return arity;
  }
  const Buffer var = call.arg(Operand::kVar), grad = call.arg(Operand::kGrad),
               indices = call.arg(Operand::kIndices);
  return ForVariableType(target, var.dtype, [&](auto t) {
    using T = decltype(t);
    using C = ComputeT<T>;
    return ForVariableType(target, call.arg(Operand::kAccum).dtype, [&](auto a) {
      if constexpr (!std::is_same_v<decltype(a), C>) {
        return Mismatch(target,
                        absl::StrCat("an accumulator of XLA type ", call.arg(Operand::kAccum).dtype,
                                     " (it is of the compute type, F32 or F64)"));
      } else {
        RowwiseAdagradStep<C> step =
            rowwise_adagrad::StepFromValues(static_cast<const C*>(call.arg(Operand::kHyper).data));
        const AdamStateLayout layout =
            LayoutFromValues(static_cast<const int64_t*>(call.arg(Operand::kLayout).data));
        step.stochastic_rounding = layout.stochastic_rounding;
        step.seed = layout.seed;
        return ForIndexType(target, indices.dtype, [&](auto i) {
          using Tindex = decltype(i);
          T* var_data = InPlaceSparse<T>(call, Operand::kVar);
          C* accum_data = InPlaceSparse<C>(call, Operand::kAccum);
          const xla_ffi::FfiCpuPool pool(call);
          return cpu::SparseApplyRowwiseAdagrad<T, Tindex>(
              pool, SparseGradOf<T, Tindex>(var, grad, indices), var_data, accum_data, step);
        });
      }
    });
  });
}

}  // namespace

std::string RegisterCpuTargets(const XLA_FFI_Api* api) {
  return RegisterTargets<SparseLazyAdam<false>, SparseLazyAdam<true>, ClippyAdagrad<false>,
                         ClippyAdagrad<true>, SparseRowwiseAdagrad>(api, "Host");
}

}  // namespace xla_targets
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_FFI
