// The interface of ops ResourceSparseApplyLazyAdam and
// ResourceSparseApplyLazyAdamV2, stated once: their input positions, their
// scalar hyperparameters and their optional weight decay, in the order the
// shape function checks them, the OpKernel reads them, and the XLA kernel
// passes them to its custom call (the `hyper` operand, xla_targets.h), which
// unpacks them with FromValues. TensorFlow-free, so the XLA targets read it
// as the TensorFlow layers do.
#ifndef TF_OPT_OPS_CORE_LAZY_ADAM_INTERFACE_H_
#define TF_OPT_OPS_CORE_LAZY_ADAM_INTERFACE_H_

#include "tf_opt_ops/core/errors.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace lazy_adam {

// The inputs, by position. The V2 op adds kStep after the others; both end
// with the optional weight decay (WeightDecayInput).
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

// The optional decoupled weight decay: a list input of Tscalar, the last
// input of either op, of length attr Nweight_decay (0: no decay, the default,
// which every graph written before the input existed gets; 1: the scalar
// weight decay). Old graphs keep loading because the input is a list whose
// length attr has a default.
constexpr const char* kWeightDecayName = "weight_decay";
constexpr const char* kWeightDecayCountAttr = "Nweight_decay";
constexpr int kMaxWeightDecayCount = 1;
constexpr int WeightDecayInput(bool v2) { return v2 ? kStep + 1 : kStep; }

inline absl::Status CheckWeightDecayCount(int64_t count) {
  if (count >= 0 && count <= kMaxWeightDecayCount) return absl::OkStatus();
  return InvalidArgument(kWeightDecayCountAttr, " = ", count, ": ", kWeightDecayName,
                         " takes at most ", kMaxWeightDecayCount,
                         " value (the decay of the touched rows); pass one scalar, or none for no "
                         "decay");
}

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
