// The interface of ops ResourceSparseApplyLazyAdamAveraged and its W op
// (with weight decay), stated once: lazy Adam's inputs (lazy_adam_interface.h)
// followed by the moving average's, in the order the shape function checks
// them and the OpKernel reads them. TensorFlow-free, as the other interfaces.
#ifndef TF_OPT_OPS_CORE_LAZY_ADAM_AVERAGED_INTERFACE_H_
#define TF_OPT_OPS_CORE_LAZY_ADAM_AVERAGED_INTERFACE_H_

#include "tf_opt_ops/core/lazy_adam_interface.h"

namespace tf_opt_ops {
namespace lazy_adam_averaged {

// The inputs after lazy Adam's (kVar .. kIndices), by position; the W op
// adds kWeightDecay, then their Scaled ops their grad_scale inputs
// (grad_scale_interface.h).
enum Input : int {
  kAverage = lazy_adam::kIndices + 1,
  kSynced,
  kCount,
  kEmaMomentum,
  kWeightDecay,
};

// The resource variables, in the order the OpKernel acquires them (the table
// first, the others checked against it), named as errors name them; synced
// (one int32 per row) is the row slot.
constexpr int kNumVariables = 5;
constexpr int kVariableInputs[kNumVariables] = {lazy_adam::kVar, lazy_adam::kM, lazy_adam::kV,
                                                kAverage, kSynced};
constexpr const char* kVariableNames[kNumVariables] = {"var", "m", "v", "average", "synced"};
constexpr int kSyncedSlot = 4;  // synced's place in kVariableInputs

// Whether an op with `num_inputs` inputs (its grad_scale inputs not counted) is the W op.
constexpr bool HasWeightDecay(int num_inputs) { return num_inputs > kWeightDecay; }

}  // namespace lazy_adam_averaged
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_LAZY_ADAM_AVERAGED_INTERFACE_H_
