// The interface of ops ResourceSparseApplyLazyAdam and
// ResourceSparseApplyLazyAdamV2, stated once: their input positions and their
// scalar hyperparameters, in the order the shape function checks them, the
// OpKernel reads them, and the XLA kernel passes them to its custom call
// (the `hyper` operand, xla_targets.h), which unpacks them with FromValues.
// TensorFlow-free, so the XLA targets read it as the TensorFlow layers do.
#ifndef TF_OPT_OPS_CORE_LAZY_ADAM_INTERFACE_H_
#define TF_OPT_OPS_CORE_LAZY_ADAM_INTERFACE_H_

#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace lazy_adam {

// The inputs, by position. The V2 op adds kStep after the others.
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

// The hyperparameters' values, of the compute type C, in the order of
// kHyperparameterNames.
template <typename C>
struct Hyperparameters {
  C values[kNumHyperparameters];

  C& operator[](int input) { return values[input - kFirstHyperparameter]; }
  C operator[](int input) const { return values[input - kFirstHyperparameter]; }

  static Hyperparameters FromValues(const C* values) {
    Hyperparameters h;
    for (int k = 0; k < kNumHyperparameters; ++k) h.values[k] = values[k];
    return h;
  }

  AdamStep<C> Step() const {
    const Hyperparameters& h = *this;
    return MakeAdamStep<C>(h[kLr], h[kBeta1], h[kBeta2], h[kEpsilon], h[kBeta1Power],
                           h[kBeta2Power]);
  }
};

}  // namespace lazy_adam
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_LAZY_ADAM_INTERFACE_H_
