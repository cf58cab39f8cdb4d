// The interface of ops ResourceSparseApplyLazyAdam and
// ResourceSparseApplyLazyAdamV2, and of their W ops (with weight decay),
// stated once: their input positions, their scalar hyperparameters and the
// weight decay, in the order the
// shape function checks them, the OpKernel reads them, and the XLA kernel
// passes them to its custom call (the `hyper` operand, xla_targets.h), which
// unpacks them with FromValues. TensorFlow-free, so the XLA targets read it
// as the TensorFlow layers do.
#ifndef TF_OPT_OPS_CORE_LAZY_ADAM_INTERFACE_H_
#define TF_OPT_OPS_CORE_LAZY_ADAM_INTERFACE_H_

#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace lazy_adam {

// The inputs, by position. The V2 op adds kStep after the others; the W ops
// add the weight decay after those (WeightDecayInput); their Scaled ops
// then take their grad_scale inputs (grad_scale_interface.h).
enum Input : int {
  kVar = 0,
  kM,
  kV,
  kBeta1Power,
  kBeta2Power,
  kLr,
  kBeta1,
  kBeta2,
  kEpsilon,
  kGrad,
  kIndices,
  kStep,
};

// The resource variables (kVar, kM, kV), named as errors name them.
constexpr int kNumVariables = 3;
constexpr const char* kVariableNames[kNumVariables] = {"var", "m", "v"};

// The scalar hyperparameters: the inputs kBeta1Power.. kEpsilon, in order.
constexpr int kFirstHyperparameter = kBeta1Power;
constexpr int kNumHyperparameters = kEpsilon - kBeta1Power + 1;
constexpr const char* kHyperparameterNames[kNumHyperparameters] = {
    "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"};

// The W ops (ResourceSparseApplyLazyAdamW, ...WV2) take the weight decay, a
// scalar of Tscalar, after every input of the op they extend.
constexpr const char* kWeightDecayName = "weight_decay";
constexpr int WeightDecayInput(bool v2) { return v2 ? kStep + 1 : kStep; }

// Whether an op with `num_inputs` inputs (its grad_scale inputs not counted) is a W op.
constexpr bool HasWeightDecay(int num_inputs, bool v2) { return num_inputs > WeightDecayInput(v2); }

// The hyperparameters' values, of the compute type C: those of
// kHyperparameterNames in order, then the weight decay and whether it
// applies (1) or not (0) — kNumHyperValues in all, the `hyper` operand of
// the XLA targets.
constexpr int kWeightDecayValue = kNumHyperparameters;
constexpr int kDecaysValue = kNumHyperparameters + 1;
constexpr int kNumHyperValues = kNumHyperparameters + 2;

template <typename C>
struct Hyperparameters {
  C values[kNumHyperValues] = {};

  C& operator[](int input) { return values[input - kFirstHyperparameter]; }
  C operator[](int input) const { return values[input - kFirstHyperparameter]; }

  void SetWeightDecay(C weight_decay) {
    values[kWeightDecayValue] = weight_decay;
    values[kDecaysValue] = C(1);
  }

  static Hyperparameters FromValues(const C* values) {
    Hyperparameters h;
    for (int k = 0; k < kNumHyperValues; ++k) h.values[k] = values[k];
    return h;
  }

  AdamStep<C> Step() const {
    const Hyperparameters& h = *this;
    const AdamStep<C> step =
        MakeAdamStep<C>(h[kLr], h[kBeta1], h[kBeta2], h[kEpsilon], h[kBeta1Power], h[kBeta2Power]);
    if (values[kDecaysValue] == C(0)) return step;
    return WithWeightDecay<C>(step, values[kWeightDecayValue], h[kLr]);
  }
};

}  // namespace lazy_adam
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_LAZY_ADAM_INTERFACE_H_
