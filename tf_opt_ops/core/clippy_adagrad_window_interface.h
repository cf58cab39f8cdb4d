// The interface of ops ResourceSparseApplyClippyAdagradWindow and its W op
// (with weight decay), stated once: sparse Clippy Adagrad's inputs
// (clippy_adagrad_interface.h), its grad and indices the window's last
// micro-step, followed by the window's (accumulate_interface.h), in the order
// the shape function checks them and the OpKernel reads them. TensorFlow-free,
// as the other interfaces.
#ifndef TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_WINDOW_INTERFACE_H_
#define TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_WINDOW_INTERFACE_H_

#include "tf_opt_ops/core/clippy_adagrad_interface.h"

namespace tf_opt_ops {
namespace clippy_adagrad_window {

// The inputs after sparse Clippy's (kVar .. kIndices), by position; the W op
// adds kWeightDecay last.
enum Input : int {
  kAccumulator = clippy_adagrad::kIndices + 1,
  kRowIds,
  kRowCount,
  kSteps,
  kWeightDecay,
};

// The resource variables, in the order the OpKernel acquires them (the table
// first, the others checked against it), named as errors name them; the
// window's three last: row_ids (one id per row) is the row slot, row_count
// the scalar.
constexpr int kNumVariables = 5;
constexpr int kVariableInputs[kNumVariables] = {clippy_adagrad::kVar, clippy_adagrad::kAccum,
                                                kAccumulator, kRowIds, kRowCount};
constexpr const char* kVariableNames[kNumVariables] = {"var", "accum", "accumulator", "row_ids",
                                                       "row_count"};

// Whether an op with `num_inputs` inputs is the W op.
constexpr bool HasWeightDecay(int num_inputs) { return num_inputs > kWeightDecay; }

}  // namespace clippy_adagrad_window
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_WINDOW_INTERFACE_H_
