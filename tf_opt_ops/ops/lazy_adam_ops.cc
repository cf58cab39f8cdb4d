// Op registration: sparse lazy Adam on resource variables.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/core/lazy_adam_interface.h"
#include "tf_opt_ops/ops/shape_fns.h"

namespace tf_opt_ops {

// The inputs both lazy Adam ops have, in the order of lazy_adam::Input (V2
// adds its step after them).
#define TF_OPT_OPS_LAZY_ADAM_INPUTS  \
  Input("var: resource")             \
      .Input("m: resource")          \
      .Input("v: resource")          \
      .Input("beta1_power: Tscalar") \
      .Input("beta2_power: Tscalar") \
      .Input("lr: Tscalar")          \
      .Input("beta1: Tscalar")       \
      .Input("beta2: Tscalar")       \
      .Input("epsilon: Tscalar")     \
      .Input("grad: T")              \
      .Input("indices: Tindices")

// The optional weight decay (lazy_adam::WeightDecayInput): a list of 0 or 1
// scalars, last, so that graphs without it (Nweight_decay defaults to 0)
// load unchanged.
#define TF_OPT_OPS_LAZY_ADAM_WEIGHT_DECAY \
  Input("weight_decay: Nweight_decay * Tscalar").Attr("Nweight_decay: int >= 0 = 0")

// The weight decay list holds at most one value, a scalar.
static absl::Status CheckWeightDecayInput(InferenceContext* c, bool v2) {
  int count = 0;
  TF_RETURN_IF_ERROR(c->GetAttr(lazy_adam::kWeightDecayCountAttr, &count));
  TF_RETURN_IF_ERROR(lazy_adam::CheckWeightDecayCount(count));
  return CheckScalarInputs(c, lazy_adam::WeightDecayInput(v2), count);
}

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdam")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS
    .Attr("T: {half, bfloat16, float, double}")
    // float64 for float64 variables, float32 for every other T: bfloat16
    // cannot hold beta2 = 0.999 (it rounds to 1.0).
    .Attr("Tscalar: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("use_locking: bool = false")
    .TF_OPT_OPS_LAZY_ADAM_WEIGHT_DECAY
    .SetShapeFn([](InferenceContext* c) {
      using namespace lazy_adam;  // NOLINT: the input names
      ShapeHandle var;
      TF_RETURN_IF_ERROR(MergeVariables(c, {kVar, kM, kV}, &var));
      TF_RETURN_IF_ERROR(CheckScalarInputs(c, kFirstHyperparameter, kNumHyperparameters));
      TF_RETURN_IF_ERROR(CheckWeightDecayInput(c, /*v2=*/false));
      return CheckSparseGrad(c, var, kGrad, kIndices);
    })
    .Doc(R"doc(
Lazy Adam on the rows of var, m and v named by indices; other rows untouched.

This documentation is the statement of the update rule; the kernels
(optimizer_math.h) and the Python wrappers follow it. Rows not named by
indices are neither read nor written, so their moments do not decay (what
makes the update "lazy"). The gradient rows of duplicate indices are summed
first, in input order. Then, for each distinct row i, with g the summed
gradient row:

    var[i] = var[i] - var[i] * weight_decay * lr    (only with weight_decay)
    lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
    m[i] = beta1 * m[i] + (1 - beta1) * g
    v[i] = beta2 * v[i] + (1 - beta2) * g * g
    var[i] = var[i] - lr_t * m[i] / (sqrt(v[i]) + epsilon)

The optional weight_decay (a list of one scalar, or empty: no decay) is
Keras' decoupled weight decay on the touched rows only, once per distinct
row however often indices names it, before the Adam update, which reads the
decayed row. It is computed as Keras computes it on a variable: weight_decay
and lr rounded to T, and each of its operations (the two products, left to
right, and the difference) rounded to T, so a float16 or bfloat16 table gets
the bits of that arithmetic in its own type.

Otherwise float16 and bfloat16 tables compute in float32 and round only when
storing; float32 computes in float32 and float64 in float64. The slots m and v have the
table's dtype, so a half-precision table keeps half-precision slots, and v,
which holds (1 - beta2) * g * g, underflows to zero in float16 for small
gradients (the step of that element is then lr_t * m[i] / epsilon).

Every input is validated before anything is written: a bad one (an index
outside [0, var.shape[0]), a slot or gradient of another dtype or shape, a
non-scalar hyperparameter, an uninitialized variable) fails the op with
InvalidArgumentError and leaves var, m and v unchanged.

var: the table, a resource variable of dtype T, at least 1-D: indices name its rows.
m: the first-moment slot: a resource variable of var's dtype and shape.
v: the second-moment slot: a resource variable of var's dtype and shape.
beta1_power: beta1 to the power t, for the 1-based step t.
beta2_power: beta2 to the power t, for the 1-based step t.
lr: the learning rate (the wrappers default to 0.001).
beta1: the decay of m (the wrappers default to 0.9).
beta2: the decay of v (the wrappers default to 0.999).
epsilon: added to sqrt(v) (the wrappers default to 1e-7).
grad: the gradient rows, of shape [len(indices)] + var.shape[1:].
indices: the rows of var the gradient rows belong to, a vector; duplicates allowed.
weight_decay: empty (no decay) or one scalar: the decoupled weight decay of the touched rows.
T: the dtype of var, m, v and grad.
Tscalar: the dtype of the hyperparameters: float64 for float64 T, else float32.
use_locking: hold the variables' locks for the whole update.
Nweight_decay: the length of weight_decay, 0 or 1.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamV2")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.Input("step: int64")
    .Attr("T: {half, bfloat16, float}")
    .Attr("Tslot: {half, bfloat16, float}")
    .Attr("Tscalar: {float}")
    .Attr("Tindices: {int32, int64}")
    .Attr("use_locking: bool = false")
    .Attr("rowwise_second_moment: bool = false")
    .Attr("stochastic_rounding: bool = false")
    .Attr("seed: int = 0")
    .TF_OPT_OPS_LAZY_ADAM_WEIGHT_DECAY
    .SetShapeFn([](InferenceContext* c) {
      bool rowwise = false;
      TF_RETURN_IF_ERROR(c->GetAttr("rowwise_second_moment", &rowwise));
      using namespace lazy_adam;  // NOLINT: the input names
      ShapeHandle var;
      TF_RETURN_IF_ERROR(MergeVariables(
          c,
          rowwise ? std::initializer_list<int>{kVar, kM} : std::initializer_list<int>{kVar, kM, kV},
          &var));
      TF_RETURN_IF_ERROR(CheckScalarInputs(c, kFirstHyperparameter, kNumHyperparameters));
      TF_RETURN_IF_ERROR(CheckScalarInputs(c, kStep, 1));
      TF_RETURN_IF_ERROR(CheckWeightDecayInput(c, /*v2=*/true));
      if (rowwise && c->RankKnown(var) && c->Rank(var) >= 1) {
        ShapeHandle v;
        TF_RETURN_IF_ERROR(c->Merge(VariableShape(c, kV), c->Vector(c->Dim(var, 0)), &v));
      }
      return CheckSparseGrad(c, var, kGrad, kIndices);
    })
    .Doc(R"doc(
Lazy Adam with light slots: m and v of their own dtype, v optionally per row.

The update of ResourceSparseApplyLazyAdam (its doc states it, the optional
weight_decay included), with the state kept in less memory; every value is computed in float32 and only
rounded when stored:

- m and v have dtype Tslot, which may differ from the table's T: bfloat16 or
  float16 slots halve the state of a float32 table; float32 slots keep v of
  a float16/bfloat16 table from underflowing.
- With rowwise_second_moment, v holds one value per row of var (shape
  [var.shape[0]]) and, for each distinct touched row i with n elements,

      v[i] = beta2 * v[i] + (1 - beta2) * mean_j(g[j] * g[j])
      var[i] = var[i] - lr_t * m[i] / (sqrt(v[i]) + epsilon)

  where the mean is summed in one fixed order on every device: lane l of 32
  sums g[j]^2 for j = l, l + 32, ... in turn, then lanes l and l ^ o are
  added for o = 16, 8, 4, 2, 1, and lane 0's sum is divided by n.
- With stochastic_rounding, 16-bit slots are rounded stochastically: each
  value to one of its two neighbours in Tslot, the one of larger magnitude
  with probability proportional to its distance from the other. The noise
  is a counter-based hash of (seed, step, row, column, slot), so a rerun
  rounds the same, on every device. Values a 16-bit type cannot hold
  finitely round to nearest. Without it, slots round to nearest even.

Inputs are validated as in ResourceSparseApplyLazyAdam, before any write; a
slot of another dtype than Tslot, or a row-wise v of another shape than
[var.shape[0]], fails the op with InvalidArgumentError.

var: the table, a resource variable of dtype T, at least 1-D: indices name its rows.
m: the first-moment slot: a resource variable of dtype Tslot and var's shape.
v: the second-moment slot: dtype Tslot, var's shape, or [var.shape[0]] when row-wise.
beta1_power: beta1 to the power t, for the 1-based step t.
beta2_power: beta2 to the power t, for the 1-based step t.
lr: the learning rate.
beta1: the decay of m.
beta2: the decay of v.
epsilon: added to sqrt(v).
grad: the gradient rows, of shape [len(indices)] + var.shape[1:].
indices: the rows of var the gradient rows belong to, a vector; duplicates allowed.
step: the 1-based step t, which keys the rounding noise with seed.
weight_decay: empty (no decay) or one scalar: the decoupled weight decay of the touched rows.
T: the dtype of var and grad.
Tslot: the dtype of m and v.
Tscalar: the dtype of the hyperparameters (float32).
use_locking: hold the variables' locks for the whole update.
rowwise_second_moment: v holds one value per row of var.
stochastic_rounding: round 16-bit slots stochastically (else to nearest even).
seed: keys the rounding noise, with step, row and column.
Nweight_decay: the length of weight_decay, 0 or 1.
)doc");

}  // namespace tf_opt_ops
