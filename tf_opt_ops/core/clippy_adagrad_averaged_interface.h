// The interface of ops ResourceSparseApplyClippyAdagradAveraged and its W op
// (with weight decay), stated once: sparse Clippy's inputs
// (clippy_adagrad_interface.h) followed by the moving average's, in the order
// the shape function checks them and the OpKernel reads them.
// TensorFlow-free, as the other interfaces.
#ifndef TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_AVERAGED_INTERFACE_H_
#define TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_AVERAGED_INTERFACE_H_

#include "tf_opt_ops/core/clippy_adagrad_interface.h"

namespace tf_opt_ops {
namespace clippy_adagrad_averaged {

// The inputs after sparse Clippy's (kVar .. kIndices), by position; the W op
// adds kWeightDecay, then their Scaled ops their grad_scale inputs
// (grad_scale_interface.h).
enum Input : int {
  kAverage = clippy_adagrad::kIndices + 1,
  kSynced,
  kCount,
  kEmaMomentum,
  kWeightDecay,
};

// The resource variables, in the order the OpKernel acquires them (the table
// first, the others checked against it), named as errors name them; synced
// (one int32 per row) is the row slot.
constexpr int kNumVariables = 4;
constexpr int kVariableInputs[kNumVariables] = {clippy_adagrad::kVar, clippy_adagrad::kAccum,
                                                kAverage, kSynced};
constexpr const char* kVariableNames[kNumVariables] = {"var", "accum", "average", "synced"};
constexpr int kAverageSlot = 2;  // average's place in kVariableInputs
constexpr int kSyncedSlot = 3;   // synced's place in kVariableInputs

// Whether an op with `num_inputs` inputs (its grad_scale inputs not counted) is the W op.
constexpr bool HasWeightDecay(int num_inputs) { return num_inputs > kWeightDecay; }

}  // namespace clippy_adagrad_averaged
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_AVERAGED_INTERFACE_H_
