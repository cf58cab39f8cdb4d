// The interface of op ResourceSparseApplyRowwiseAdagrad, stated once: its
// input positions, its scalar hyperparameters and its weight decay modes, in
// the order the shape function checks them and the OpKernel reads them.
// StepFromValues unpacks them from one array (the hyperparameters, then the
// weight decay mode as a number), the form of the `hyper` operand of the
// op's XLA custom call (xla_targets.h). TensorFlow-free, as the other
// interfaces.
#ifndef TF_OPT_OPS_CORE_ROWWISE_ADAGRAD_INTERFACE_H_
#define TF_OPT_OPS_CORE_ROWWISE_ADAGRAD_INTERFACE_H_

#include <cstring>

#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace rowwise_adagrad {

// The inputs, by position.
enum Input : int {
  kVar = 0,
  kAccum,
  kLr,
  kEpsilon,
  kWeightDecay,
  kGrad,
  kIndices,
};

// The resource variables (kVar, kAccum), named as errors name them; kAccum
// holds one value per row of kVar.
constexpr int kNumVariables = 2;
constexpr const char* kVariableNames[kNumVariables] = {"var", "accum"};

// The scalar hyperparameter inputs kLr.. kWeightDecay, in order.
constexpr int kFirstHyperparameter = kLr;
constexpr int kNumHyperparameters = kWeightDecay - kLr + 1;
constexpr const char* kHyperparameterNames[kNumHyperparameters] = {"lr", "epsilon", "weight_decay"};

// The values StepFromValues takes: the hyperparameters, then the weight
// decay mode (RowwiseWeightDecay) as a number.
constexpr int kNumHyperValues = kNumHyperparameters + 1;

// The attr weight_decay_mode's values, in the order of RowwiseWeightDecay
// (FBGEMM's WeightDecayMode numbers).
constexpr int kNumWeightDecayModes = 3;
constexpr const char* kWeightDecayModeNames[kNumWeightDecayModes] = {"none", "l2", "decoupled"};

// The mode named `name`; false when it names none.
inline bool WeightDecayModeFromName(const char* name, RowwiseWeightDecay* mode) {
  for (int k = 0; k < kNumWeightDecayModes; ++k) {
    if (std::strcmp(name, kWeightDecayModeNames[k]) == 0) {
      *mode = static_cast<RowwiseWeightDecay>(k);
      return true;
    }
  }
  return false;
}

// The step from the hyperparameters (in the order of kHyperparameterNames),
// the mode and the attrs stochastic_rounding and seed.
template <typename C>
RowwiseAdagradStep<C> MakeStep(const C* hyperparameters, RowwiseWeightDecay mode,
                               bool stochastic_rounding = false, uint64_t seed = 0) {
  const auto input = [hyperparameters](Input k) {
    return hyperparameters[k - kFirstHyperparameter];
  };
  return RowwiseAdagradStep<C>{input(kLr), input(kEpsilon),     input(kWeightDecay),
                               mode,       stochastic_rounding, seed};
}

// The step from kNumHyperValues values (an XLA `hyper` operand's layout).
template <typename C>
RowwiseAdagradStep<C> StepFromValues(const C* values) {
  return MakeStep(values,
                  static_cast<RowwiseWeightDecay>(static_cast<int>(values[kNumHyperparameters])));
}

}  // namespace rowwise_adagrad
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_ROWWISE_ADAGRAD_INTERFACE_H_
