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
#include "tf_opt_ops/core/cpu_kernels.h"
#include "tf_opt_ops/platform/huge_pages.h"
#include "tf_opt_ops/xla/xla_targets.h"
#if TF_OPT_OPS_XLA_FFI  // else nothing: see xla_targets.h
#include "tf_opt_ops/xla/xla_ffi.h"

namespace tf_opt_ops {
namespace xla_targets {
namespace {

using xla_ffi::Buffer;
using xla_ffi::Call;

// A call whose operands are not what the XLA kernel emits: a bug, not a bad
// input (the XLA kernel checked every input at compile time).
absl::Status Mismatch(const char* target, const std::string& what) {
  return absl::InternalError(absl::StrCat("tf_opt_ops: custom call ", target, " got ", what,
                                          ", not what its XLA kernel emits; please report this "
                                          "as a tf_opt_ops bug."));
}

absl::Status CheckArity(const Call& call, const char* target, int64_t args, int64_t rets) {
  if (call.num_args() == args && call.num_rets() == rets) return absl::OkStatus();
  return Mismatch(target, absl::StrCat(call.num_args(), " operands and ", call.num_rets(),
                                       " results (expected ", args, " and ", rets, ")"));
}

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

template <typename C>
ClippyStep<C> ClippyStepOf(const C* h) {
  return ClippyStep<C>{h[0], h[1], h[2], h[3], h[4], h[5] != C(0), h[6] != C(0)};
}

// The rounding the `layout` operand of a V2 call asks for (xla_targets.h).
struct Layout {
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t flags = 0;
};
Layout LayoutOf(const Buffer& operand) {
  const int64_t* values = static_cast<const int64_t*>(operand.data);
  return Layout{static_cast<uint64_t>(values[0]), values[1], values[2]};
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
  const char* target = kLight ? kSparseLazyAdamV2 : kSparseLazyAdam;
  if (absl::Status arity = CheckArity(call, target, kLight ? 7 : 6, 3); !arity.ok()) return arity;
  const Buffer var = call.arg(0), grad = call.arg(3), indices = call.arg(4);
  AdamStateLayout layout;
  if (kLight) {
    const Layout given = LayoutOf(call.arg(6));
    layout.seed = given.seed;
    layout.step = given.step;
    layout.rowwise_second_moment = (given.flags & kLayoutRowwise) != 0;
    layout.stochastic_rounding = (given.flags & kLayoutStochastic) != 0;
  }
  return ForVariableType(target, var.dtype, [&](auto t) {
    using T = decltype(t);
    using C = ComputeT<T>;
    const C* h = static_cast<const C*>(call.arg(5).data);
    const AdamStep<C> step = MakeAdamStep<C>(h[2], h[3], h[4], h[5], h[0], h[1]);
    return ForSlotType<T>(target, kLight ? call.arg(1).dtype : var.dtype, [&](auto s) {
      using S = decltype(s);
      return ForIndexType(target, indices.dtype, [&](auto i) {
        using Tindex = decltype(i);
        T* var_data = InPlaceSparse<T>(call, 0);
        S* m_data = InPlaceSparse<S>(call, 1);
        S* v_data = InPlaceSparse<S>(call, 2);
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
  const char* target = kSparse ? kSparseClippyAdagrad : kClippyAdagrad;
  const int hyper_index = kSparse ? 4 : 3;
  const bool light = call.num_args() == hyper_index + 2;
  if (absl::Status arity = CheckArity(call, target, light ? hyper_index + 2 : hyper_index + 1, 3);
      !arity.ok()) {
    return arity;
  }
  const Buffer var = call.arg(0), grad = call.arg(2);
  return ForVariableType(target, var.dtype, [&](auto t) {
    using T = decltype(t);
    using C = ComputeT<T>;
    ClippyStep<C> step = ClippyStepOf(static_cast<const C*>(call.arg(hyper_index).data));
    if (light) {
      const Layout layout = LayoutOf(call.arg(hyper_index + 1));
      step.stochastic_rounding = (layout.flags & kLayoutStochastic) != 0;
      step.noise_key = ClippyNoiseKey(layout.seed, layout.step);
    }
    return ForSlotType<T>(target, call.arg(1).dtype, [&](auto a) {
      using A = decltype(a);
      const xla_ffi::FfiCpuPool pool(call);
      C* scale = static_cast<C*>(call.ret(2).data);
      if constexpr (kSparse) {
        const Buffer indices = call.arg(3);
        return ForIndexType(target, indices.dtype, [&](auto i) {
          using Tindex = decltype(i);
          T* var_data = InPlaceSparse<T>(call, 0);
          A* accum_data = InPlaceSparse<A>(call, 1);
          return cpu::SparseApplyClippyAdagrad<T, A, Tindex>(
              pool, SparseGradOf<T, Tindex>(var, grad, indices), var_data, accum_data, step, scale);
        });
      } else {
        T* var_data = InPlace<T>(call, 0);
        A* accum_data = InPlace<A>(call, 1);
        *scale = cpu::ApplyClippyAdagrad<T, A>(
            pool, var.num_elements(), static_cast<const T*>(grad.data), var_data, accum_data, step);
        return absl::OkStatus();
      }
    });
  });
}

// The FFI handlers: XLA_FFI_Handler functions over the bodies above.
template <absl::Status (*kBody)(const Call&)>
XLA_FFI_Error* Handler(XLA_FFI_CallFrame* frame) {
  if (xla_ffi::AnswerMetadataQuery(frame)) return nullptr;
  const Call call(frame);
  if (!call.executing()) return nullptr;
  return call.Fail(kBody(call));
}

}  // namespace

std::string RegisterCpuTargets(const XLA_FFI_Api* api) {
  for (const auto& [name, handler] :
       {std::pair<const char*, XLA_FFI_Handler*>{kSparseLazyAdam, Handler<SparseLazyAdam<false>>},
        {kSparseLazyAdamV2, Handler<SparseLazyAdam<true>>},
        {kClippyAdagrad, Handler<ClippyAdagrad<false>>},
        {kSparseClippyAdagrad, Handler<ClippyAdagrad<true>>}}) {
    const std::string error = xla_ffi::RegisterHandler(api, name, "Host", handler);
    if (!error.empty()) return error;
  }
  return "";
}

}  // namespace xla_targets
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_FFI
