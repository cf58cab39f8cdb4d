// The interface of the Clippy Adagrad ops (ResourceApplyClippyAdagrad,
// ResourceSparseApplyClippyAdagrad and their V2), stated once: their input
// positions and their scalar hyperparameters, in the order the shape
// functions check them, the OpKernel reads them, and the XLA kernel passes
// them to its custom call (the `hyper` operand, xla_targets.h: the inputs,
// then the two accumulator-update flags as 0 or 1), which unpacks them with
// StepFromValues. TensorFlow-free, so the XLA targets read it as the
// TensorFlow layers do.
#ifndef TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_INTERFACE_H_
#define TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_INTERFACE_H_

#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace clippy_adagrad {

// The inputs, by position. The sparse ops add kIndices after the gradient;
// the V2 ops add their step after that (StepInput).
enum Input : int {
  kVar = 0,
  kAccum,
  kLr,
  kEpsilon,
  kVariableRelativeThreshold,
  kAccumulatorRelativeThreshold,
  kAbsoluteThreshold,
  kGrad,
  kIndices,
};

constexpr int StepInput(bool sparse) { return sparse ? kIndices + 1 : kIndices; }

// The resource variables (kVar, kAccum), named as errors name them.
constexpr int kNumVariables = 2;
constexpr const char* kVariableNames[kNumVariables] = {"var", "accum"};

// The scalar hyperparameter inputs kLr.. kAbsoluteThreshold, in order.
constexpr int kFirstHyperparameter = kLr;
constexpr int kNumHyperparameters = kAbsoluteThreshold - kLr + 1;
constexpr const char* kHyperparameterNames[kNumHyperparameters] = {
    "lr", "epsilon", "variable_relative_threshold", "accumulator_relative_threshold",
    "absolute_threshold"};

// The values of the XLA `hyper` operand: the hyperparameters, then
// clip_accumulator_update and use_standard_accumulator_update as 0 or 1.
constexpr int kNumHyperValues = kNumHyperparameters + 2;

// The step from the hyperparameters (in the order of kHyperparameterNames)
// and the two accumulator-update flags.
template <typename C>
ClippyStep<C> MakeStep(const C* hyperparameters, bool clip_accumulator_update,
                       bool use_standard_accumulator_update) {
  const auto input = [hyperparameters](Input k) {
    return hyperparameters[k - kFirstHyperparameter];
  };
  return ClippyStep<C>{input(kLr),
                       input(kEpsilon),
                       input(kVariableRelativeThreshold),
                       input(kAccumulatorRelativeThreshold),
                       input(kAbsoluteThreshold),
                       clip_accumulator_update,
                       use_standard_accumulator_update};
}

// The step from the kNumHyperValues values of the XLA `hyper` operand.
template <typename C>
ClippyStep<C> StepFromValues(const C* values) {
  return MakeStep(values, values[kNumHyperparameters] != C(0),
                  values[kNumHyperparameters + 1] != C(0));
}

}  // namespace clippy_adagrad
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_INTERFACE_H_
