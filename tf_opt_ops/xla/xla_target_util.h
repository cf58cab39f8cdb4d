// What the CPU and the GPU custom call targets (xla_cpu_targets.cc,
// xla_gpu_targets.cc) share: the error of a call that is not what its XLA
// kernel emits, the check of a call's arity and aliasing, and the FFI
// handler and registration of a target body.
#ifndef TF_OPT_OPS_XLA_XLA_TARGET_UTIL_H_
#define TF_OPT_OPS_XLA_XLA_TARGET_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tf_opt_ops/xla/xla_ffi.h"
#include "tf_opt_ops/xla/xla_targets.h"

namespace tf_opt_ops {
namespace xla_targets {

using xla_ffi::Buffer;
using xla_ffi::Call;

// A call whose operands are not what the XLA kernel emits: a bug, not a bad
// input (the XLA kernel checked every input at compile time).
inline absl::Status Mismatch(const char* target, const std::string& what) {
  return absl::InternalError(absl::StrCat("tf_opt_ops: custom call ", target, " got ", what,
                                          ", not what its XLA kernel emits; please report this "
                                          "as a tf_opt_ops bug."));
}

// `args` operands and `rets` results, the first `aliased` results in the
// buffers of the operands of their position (an empty one has no buffer to
// share: a table of no rows).
inline absl::Status CheckCall(const Call& call, const char* target, int64_t args, int64_t rets,
                              int aliased) {
  if (call.num_args() != args || call.num_rets() != rets) {
    return Mismatch(target, absl::StrCat(call.num_args(), " operands and ", call.num_rets(),
                                         " results (expected ", args, " and ", rets, ")"));
  }
  for (int k = 0; k < aliased; ++k) {
    if (call.arg(k).num_elements() > 0 && call.arg(k).data != call.ret(k).data) {
      return Mismatch(target, absl::StrCat("result ", k, " apart from operand ", k,
                                           " (they must alias: the update is in place)"));
    }
  }
  return absl::OkStatus();
}

// A Clippy target's call: its target's name, the position of its `hyper`
// operand, whether a `layout` operand follows that (a V2 op), and the check
// of its arity, the first `aliased` results aliased.
template <bool kSparse>
struct ClippyCall {
  ClippyCall(const Call& call, int aliased)
      : light(call.num_args() == hyper + 2),
        status(CheckCall(call, target, hyper + (light ? 2 : 1), ClippyOperand::kScaleResult + 1,
                         aliased)) {}

  const char* const target = kSparse ? kSparseClippyAdagrad : kClippyAdagrad;
  const int hyper = ClippyOperand::Hyper(kSparse);
  const bool light;
  const absl::Status status;
};

// The XLA_FFI_Handler of a target body.
template <absl::Status (*kBody)(const Call&)>
XLA_FFI_Error* Handler(XLA_FFI_CallFrame* frame) {
  if (xla_ffi::AnswerMetadataQuery(frame)) return nullptr;
  const Call call(frame);
  if (!call.executing()) return nullptr;
  return call.Fail(kBody(call));
}

// Registers the handlers of the five targets on `platform`. Returns "" or
// what failed.
template <absl::Status (*kSparseLazyAdamBody)(const Call&),
          absl::Status (*kSparseLazyAdamV2Body)(const Call&),
          absl::Status (*kClippyAdagradBody)(const Call&),
          absl::Status (*kSparseClippyAdagradBody)(const Call&),
          absl::Status (*kSparseRowwiseAdagradBody)(const Call&)>
std::string RegisterTargets(const XLA_FFI_Api* api, const char* platform) {
  for (const auto& [name, handler] :
       {std::pair<const char*, XLA_FFI_Handler*>{kSparseLazyAdam, Handler<kSparseLazyAdamBody>},
        {kSparseLazyAdamV2, Handler<kSparseLazyAdamV2Body>},
        {kClippyAdagrad, Handler<kClippyAdagradBody>},
        {kSparseClippyAdagrad, Handler<kSparseClippyAdagradBody>},
        {kSparseRowwiseAdagrad, Handler<kSparseRowwiseAdagradBody>}}) {
    const std::string error = xla_ffi::RegisterHandler(api, name, platform, handler);
    if (!error.empty()) return error;
  }
  return "";
}

}  // namespace xla_targets
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_XLA_TARGET_UTIL_H_
