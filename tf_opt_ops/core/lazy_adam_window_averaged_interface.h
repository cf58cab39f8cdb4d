// The interface of ops ResourceSparseApplyLazyAdamWindowAveraged and its W op
// (with weight decay), stated once: the averaged op's inputs
// (lazy_adam_averaged_interface.h: lazy Adam's, then the moving average's, at
// their positions there), grad and indices the window's last micro-step,
// followed by the window's (accumulate_interface.h), in the order the shape
// function checks them and the OpKernel reads them. TensorFlow-free, as the
// other interfaces.
#ifndef TF_OPT_OPS_CORE_LAZY_ADAM_WINDOW_AVERAGED_INTERFACE_H_
#define TF_OPT_OPS_CORE_LAZY_ADAM_WINDOW_AVERAGED_INTERFACE_H_

#include "tf_opt_ops/core/lazy_adam_averaged_interface.h"

namespace tf_opt_ops {
namespace lazy_adam_window_averaged {

// The inputs after the averaged op's (kVar .. kEmaMomentum), by position; the
// W op adds kWeightDecay last.
enum Input : int {
  kAccumulator = lazy_adam_averaged::kEmaMomentum + 1,
  kRowIds,
  kRowCount,
  kSteps,
  kWeightDecay,
};

// The resource variables, in the order the OpKernel acquires them: the
// averaged op's (synced at its place there, lazy_adam_averaged::kSyncedSlot),
// then the window's three, as the window op's last.
constexpr int kNumVariables = 8;
constexpr int kVariableInputs[kNumVariables] = {lazy_adam::kVar,
                                                lazy_adam::kM,
                                                lazy_adam::kV,
                                                lazy_adam_averaged::kAverage,
                                                lazy_adam_averaged::kSynced,
                                                kAccumulator,
                                                kRowIds,
                                                kRowCount};
constexpr const char* kVariableNames[kNumVariables] = {
    "var", "m", "v", "average", "synced", "accumulator", "row_ids", "row_count"};

// Whether an op with `num_inputs` inputs is the W op.
constexpr bool HasWeightDecay(int num_inputs) { return num_inputs > kWeightDecay; }

}  // namespace lazy_adam_window_averaged
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_LAZY_ADAM_WINDOW_AVERAGED_INTERFACE_H_
