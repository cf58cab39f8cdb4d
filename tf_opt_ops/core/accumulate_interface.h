// The interface of ops ResourceSparseAccumulateRows and
// ResourceSparseTakeWindowGradient (Keras 3's gradient accumulation on a
// sparse gradient's rows), stated once: their input positions and resource
// variables, in the order the shape functions check them and the OpKernels
// read them. TensorFlow-free, as the other interfaces.
#ifndef TF_OPT_OPS_CORE_ACCUMULATE_INTERFACE_H_
#define TF_OPT_OPS_CORE_ACCUMULATE_INTERFACE_H_

namespace tf_opt_ops {
namespace accumulate {

// The inputs of both ops, by position; kSteps is the window op's only.
enum Input : int {
  kAccumulator = 0,
  kRowIds,
  kRowCount,
  kIndices,
  kValues,
  kSteps,
};

// The resource variables, named as errors name them, in the order the
// OpKernels look them up: the accumulator first (the table the others are
// checked against), then the window's row ids (one id per row of the
// accumulator) and their count (a scalar).
constexpr int kNumVariables = 3;
constexpr int kVariables[kNumVariables] = {kAccumulator, kRowIds, kRowCount};
constexpr const char* kVariableNames[kNumVariables] = {"accumulator", "row_ids", "row_count"};
constexpr int kRowIdsSlot = 1;    // row_ids' place in kVariables
constexpr int kRowCountSlot = 2;  // row_count's place in kVariables

}  // namespace accumulate
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_ACCUMULATE_INTERFACE_H_
