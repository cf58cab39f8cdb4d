// The interface of op ResourceSparseApplyLazyMovingAverage, stated once: its
// input positions, its resource variables and its host scalars, in the order
// the shape function checks them and the OpKernel reads them.
// TensorFlow-free, as the other interfaces.
#ifndef TF_OPT_OPS_CORE_MOVING_AVERAGE_INTERFACE_H_
#define TF_OPT_OPS_CORE_MOVING_AVERAGE_INTERFACE_H_

#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace moving_average {

// The inputs, by position.
enum Input : int {
  kAverage = 0,
  kSynced,
  kVar,
  kIndices,
  kCount,
  kEmaMomentum,
};

// The resource variables (kAverage, kSynced, kVar), named as errors name
// them, in the order the OpKernel locks them: the average first (the table
// the others are checked against), synced (one int32 per row) last.
constexpr int kNumVariables = 3;
constexpr int kLockOrder[kNumVariables] = {kAverage, kVar, kSynced};
constexpr const char* kVariableNames[kNumVariables] = {"average", "var", "synced"};
constexpr int kSyncedSlot = 2;  // synced's place in kLockOrder

// The scalar inputs kCount and kEmaMomentum, read on the host.
constexpr int kFirstScalar = kCount;
constexpr int kNumScalars = kEmaMomentum - kCount + 1;
constexpr const char* kScalarNames[kNumScalars] = {"count", "ema_momentum"};

}  // namespace moving_average
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_MOVING_AVERAGE_INTERFACE_H_
