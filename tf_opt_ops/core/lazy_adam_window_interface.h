// The interface of ops ResourceSparseApplyLazyAdamWindow and its W op (with
// weight decay), stated once: lazy Adam's inputs (lazy_adam_interface.h), its
// grad and indices the window's last micro-step, followed by the window's
// (accumulate_interface.h), in the order the shape function checks them and
// the OpKernel reads them. TensorFlow-free, as the other interfaces.
#ifndef TF_OPT_OPS_CORE_LAZY_ADAM_WINDOW_INTERFACE_H_
#define TF_OPT_OPS_CORE_LAZY_ADAM_WINDOW_INTERFACE_H_

#include "tf_opt_ops/core/lazy_adam_interface.h"

namespace tf_opt_ops {
namespace lazy_adam_window {

// The inputs after lazy Adam's (kVar .. kIndices), by position; the W op
// adds kWeightDecay last.
enum Input : int {
  kAccumulator = lazy_adam::kIndices + 1,
  kRowIds,
  kRowCount,
  kSteps,
  kWeightDecay,
};

// The resource variables, in the order the OpKernel acquires them (the table
// first, the others checked against it), named as errors name them; the
// window's three last: row_ids (one id per row) is the row slot, row_count
// the scalar.
constexpr int kNumVariables = 6;
constexpr int kVariableInputs[kNumVariables] = {lazy_adam::kVar, lazy_adam::kM, lazy_adam::kV,
                                                kAccumulator,    kRowIds,       kRowCount};
constexpr const char* kVariableNames[kNumVariables] = {"var",         "m",       "v",
                                                       "accumulator", "row_ids", "row_count"};

// Whether an op with `num_inputs` inputs is the W op.
constexpr bool HasWeightDecay(int num_inputs) { return num_inputs > kWeightDecay; }

}  // namespace lazy_adam_window
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_LAZY_ADAM_WINDOW_INTERFACE_H_
