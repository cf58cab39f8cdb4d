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
// the order below; the Clippy flags are in it as 0 or 1, so that a GPU target
// reads everything it needs from the host with one copy.
//
//   lazy Adam:     (var, m, v, grad, indices, hyper[6]) -> (var, m, v)
//     hyper: beta1_power, beta2_power, lr, beta1, beta2, epsilon
//   lazy Adam V2:  (var, m, v, grad, indices, hyper[6], layout[3]) -> (var, m, v)
//     slots of their own type (v of shape [rows] when row-wise);
//     layout (int64): seed, step, flags (kLayoutRowwise | kLayoutStochastic)
//   Clippy:        (var, accum, grad, hyper[7][, layout[3]]) -> (var, accum, scale)
//   sparse Clippy: (var, accum, grad, indices, hyper[7][, layout[3]]) -> (var, accum, scale)
//     with the layout (V2 ops): accum of its own type, flags kLayoutStochastic
//     hyper: lr, epsilon, variable_relative_threshold,
//            accumulator_relative_threshold, absolute_threshold,
//            clip_accumulator_update, use_standard_accumulator_update
//
// A sparse target's indices are never empty (the XLA kernel emits no call
// for an empty update) and their count is the static size of `indices`.
#ifndef TF_OPT_OPS_XLA_XLA_TARGETS_H_
#define TF_OPT_OPS_XLA_XLA_TARGETS_H_

#include <cstdint>
#include <string>

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

constexpr int kAdamHyperparameters = 6;
constexpr int kAdamLayoutValues = 3;
constexpr int64_t kLayoutRowwise = 1;
constexpr int64_t kLayoutStochastic = 2;
constexpr int kClippyHyperparameters = 7;

#if TF_OPT_OPS_XLA_FFI
// Registers the targets of one platform with XLA's FFI ("Host": the CPU
// targets; "CUDA": the GPU ones, in a CUDA build). Returns "" or what failed.
std::string RegisterCpuTargets(const XLA_FFI_Api* api);
std::string RegisterGpuTargets(const XLA_FFI_Api* api);
#endif

}  // namespace xla_targets
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_XLA_TARGETS_H_
