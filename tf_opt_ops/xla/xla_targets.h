// The XLA custom call targets of the fused ops: their names and operands, as
// the XLA kernels (xla_kernels.cc) emit them and the targets
// (xla_cpu_targets.cc, xla_gpu_targets.cc) read them. Why: see
// docs/design.md, "XLA".
//
// Every target updates its variables in place: results 0.. are the variable
// and its slots, each aliased to the operand of the same position
// (output_operand_aliasing), so XLA hands the target the variables' own
// buffers and no step copies a table. The hyperparameters travel as one
// vector of the compute type (float32, float64 for float64 variables), in
// the order of the op's interface header (core/lazy_adam_interface.h,
// core/clippy_adagrad_interface.h, core/rowwise_adagrad_interface.h, which
// also unpack it); the Clippy flags are in it as 0 or 1 and row-wise
// Adagrad's weight decay mode as its number, so that a GPU target reads
// everything it needs from the host with one copy.
//
//   lazy Adam:     (var, m, v, grad, indices, hyper[8]) -> (var, m, v)
//   lazy Adam V2:  (var, m, v, grad, indices, hyper[8], layout[3]) -> (var, m, v)
//     hyper: the op's six scalars, weight_decay, 1 if it applies else 0;
//     slots of their own type (v of shape [rows] when row-wise);
//     layout (int64): seed, step, flags (kLayoutRowwise | kLayoutStochastic)
//   Clippy:        (var, accum, grad, hyper[9][, layout[3]]) -> (var, accum, scale)
//   sparse Clippy: (var, accum, grad, indices, hyper[9][, layout[3]]) -> (var, accum, scale)
//     hyper: the op's five scalars, the two flags, weight_decay, 1 if it
//     applies else 0 (the sparse W ops; 0, 0 otherwise);
//     with the layout (V2 ops): accum of its own type, flags kLayoutStochastic
//   row-wise Adagrad: (var, accum, grad, indices, hyper[4], layout[3]) -> (var, accum)
//     accum of shape [rows], of the compute type; hyper: lr, epsilon,
//     weight_decay, the weight decay mode; layout: seed, 0, flags
//     kLayoutStochastic (a 16-bit table's rounding)
//
// A sparse target's indices are never empty (the XLA kernel emits no call
// for an empty update) and their count is the static size of `indices`.
#ifndef TF_OPT_OPS_XLA_XLA_TARGETS_H_
#define TF_OPT_OPS_XLA_XLA_TARGETS_H_

#include <cstdint>
#include <string>

#include "tf_opt_ops/core/optimizer_math.h"

// XLA's FFI, which the targets are written against, is in TensorFlow's
// headers from 2.17 on; older versions get a library that registers nothing
// and says why (xla_kernels.cc), and the optimizers fall back there.
#if __has_include("xla/ffi/api/c_api.h")
#include "xla/ffi/api/c_api.h"
#define TF_OPT_OPS_XLA_FFI 1
#else
#define TF_OPT_OPS_XLA_FFI 0
#endif

namespace tf_opt_ops {
namespace xla_targets {

constexpr char kSparseLazyAdam[] = "tf_opt_ops_sparse_lazy_adam";
constexpr char kSparseLazyAdamV2[] = "tf_opt_ops_sparse_lazy_adam_v2";
constexpr char kClippyAdagrad[] = "tf_opt_ops_clippy_adagrad";
constexpr char kSparseClippyAdagrad[] = "tf_opt_ops_sparse_clippy_adagrad";
constexpr char kSparseRowwiseAdagrad[] = "tf_opt_ops_sparse_rowwise_adagrad";

// The operands of the lazy Adam targets, by position.
struct LazyAdamOperand {
  enum : int { kVar = 0, kM, kV, kGrad, kIndices, kHyper, kLayout };
};

// The operands of the Clippy targets, by position: the sparse ones add
// kIndices after the gradient. The scale is the result after the variables.
struct ClippyOperand {
  enum : int { kVar = 0, kAccum, kGrad, kIndices };
  static constexpr int Hyper(bool sparse) { return sparse ? kIndices + 1 : kIndices; }
  static constexpr int kScaleResult = 2;
};

// The operands of the row-wise Adagrad target, by position.
struct RowwiseAdagradOperand {
  enum : int { kVar = 0, kAccum, kGrad, kIndices, kHyper, kLayout };
};

// The `layout` operand: seed, step, flags.
constexpr int kLayoutValues = 3;
constexpr int64_t kLayoutRowwise = 1;
constexpr int64_t kLayoutStochastic = 2;

// The slot state a `layout` operand's values ask for.
inline AdamStateLayout LayoutFromValues(const int64_t* values) {
  AdamStateLayout layout;
  layout.seed = static_cast<uint64_t>(values[0]);
  layout.step = values[1];
  layout.rowwise_second_moment = (values[2] & kLayoutRowwise) != 0;
  layout.stochastic_rounding = (values[2] & kLayoutStochastic) != 0;
  return layout;
}

#if TF_OPT_OPS_XLA_FFI
// Registers the targets of one platform with XLA's FFI ("Host": the CPU
// targets; "CUDA": the GPU ones, in a CUDA build). Returns "" or what failed.
std::string RegisterCpuTargets(const XLA_FFI_Api* api);
std::string RegisterGpuTargets(const XLA_FFI_Api* api);
#endif

}  // namespace xla_targets
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_XLA_TARGETS_H_
