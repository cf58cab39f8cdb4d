// The interface of the Clippy Adagrad ops (ResourceApplyClippyAdagrad,
// ResourceSparseApplyClippyAdagrad and their V2, and the sparse ops' W ops,
// with weight decay), stated once: their input positions and their scalar
// hyperparameters, in the order the shape functions check them, the OpKernel
// reads them, and the XLA kernel passes them to its custom call (the `hyper`
// operand, xla_targets.h: the inputs, then the two accumulator-update flags
// as 0 or 1, then the weight decay and whether it applies), which unpacks
// them with StepFromValues. TensorFlow-free, so the XLA targets read it as the
// TensorFlow layers do.
#ifndef TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_INTERFACE_H_
#define TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_INTERFACE_H_

#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace clippy_adagrad {

// The inputs, by position. The sparse ops add kIndices after the gradient;
// the V2 ops add their step after that (StepInput); the W ops add the weight
// decay after those (WeightDecayInput); the Scaled ops of the sparse ones
// then take their grad_scale inputs (grad_scale_interface.h).
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

// The W ops (ResourceSparseApplyClippyAdagradW, ...WV2) take the weight
// decay, a scalar of Tscalar, after every input of the sparse op they extend.
constexpr const char* kWeightDecayName = "weight_decay";
constexpr int WeightDecayInput(bool v2) { return v2 ? StepInput(true) + 1 : StepInput(true); }

// Whether a sparse op with `num_inputs` inputs is a W op.
constexpr bool HasWeightDecay(int num_inputs, bool v2) { return num_inputs > WeightDecayInput(v2); }

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
// clip_accumulator_update and use_standard_accumulator_update as 0 or 1,
// then the weight decay and whether it applies (1) or not (0).
constexpr int kClipAccumulatorUpdateValue = kNumHyperparameters;
constexpr int kStandardAccumulatorUpdateValue = kNumHyperparameters + 1;
constexpr int kWeightDecayValue = kNumHyperparameters + 2;
constexpr int kDecaysValue = kNumHyperparameters + 3;
constexpr int kNumHyperValues = kNumHyperparameters + 4;

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

// `step` with decoupled weight decay `weight_decay` of its touched rows.
template <typename C>
ClippyStep<C> WithWeightDecay(ClippyStep<C> step, C weight_decay) {
  step.decays = true;
  step.weight_decay = weight_decay;
  return step;
}

// The step from the kNumHyperValues values of the XLA `hyper` operand.
template <typename C>
ClippyStep<C> StepFromValues(const C* values) {
  const ClippyStep<C> step = MakeStep(values, values[kClipAccumulatorUpdateValue] != C(0),
                                      values[kStandardAccumulatorUpdateValue] != C(0));
  if (values[kDecaysValue] == C(0)) return step;
  return WithWeightDecay(step, values[kWeightDecayValue]);
}

}  // namespace clippy_adagrad
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CLIPPY_ADAGRAD_INTERFACE_H_
