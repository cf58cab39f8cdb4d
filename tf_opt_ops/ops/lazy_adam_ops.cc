// Op registration: sparse lazy Adam on resource variables.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/core/lazy_adam_averaged_interface.h"
#include "tf_opt_ops/core/lazy_adam_interface.h"
#include "tf_opt_ops/core/lazy_adam_window_averaged_interface.h"
#include "tf_opt_ops/core/lazy_adam_window_interface.h"
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

// The shape function of both ops without and (decays) with the weight decay
// input, which the W ops add last.
static absl::Status LazyAdamShape(InferenceContext* c, bool decays) {
  using namespace lazy_adam;  // NOLINT: the input names
  ShapeHandle var;
  TF_RETURN_IF_ERROR(MergeVariables(c, {kVar, kM, kV}, &var));
  TF_RETURN_IF_ERROR(CheckScalarInputs(c, kFirstHyperparameter, kNumHyperparameters));
  if (decays) TF_RETURN_IF_ERROR(CheckScalarInputs(c, WeightDecayInput(/*v2=*/false), 1));
  return CheckSparseGrad(c, var, kGrad, kIndices);
}

static absl::Status LazyAdamV2Shape(InferenceContext* c, bool decays) {
  bool rowwise = false;
  TF_RETURN_IF_ERROR(c->GetAttr("rowwise_second_moment", &rowwise));
  using namespace lazy_adam;  // NOLINT: the input names
  ShapeHandle var;
  TF_RETURN_IF_ERROR(MergeVariables(
      c, rowwise ? std::initializer_list<int>{kVar, kM} : std::initializer_list<int>{kVar, kM, kV},
      &var));
  TF_RETURN_IF_ERROR(CheckScalarInputs(c, kFirstHyperparameter, kNumHyperparameters));
  TF_RETURN_IF_ERROR(CheckScalarInputs(c, kStep, 1));
  if (decays) TF_RETURN_IF_ERROR(CheckScalarInputs(c, WeightDecayInput(/*v2=*/true), 1));
  if (rowwise && c->RankKnown(var) && c->Rank(var) >= 1) {
    ShapeHandle v;
    TF_RETURN_IF_ERROR(c->Merge(VariableShape(c, kV), c->Vector(c->Dim(var, 0)), &v));
  }
  return CheckSparseGrad(c, var, kGrad, kIndices);
}

// The attrs of ResourceSparseApplyLazyAdam and its W op. Tscalar: float64 for
// float64 variables, float32 for every other T (bfloat16 cannot hold
// beta2 = 0.999: it rounds to 1.0).
#define TF_OPT_OPS_LAZY_ADAM_ATTRS           \
  Attr("T: {half, bfloat16, float, double}") \
      .Attr("Tscalar: {float, double}")      \
      .Attr("Tindices: {int32, int64}")      \
      .Attr("use_locking: bool = false")

// The attrs of ResourceSparseApplyLazyAdamV2 and its W op.
#define TF_OPT_OPS_LAZY_ADAM_V2_ATTRS              \
  Attr("T: {half, bfloat16, float}")               \
      .Attr("Tslot: {half, bfloat16, float}")      \
      .Attr("Tscalar: {float}")                    \
      .Attr("Tindices: {int32, int64}")            \
      .Attr("use_locking: bool = false")           \
      .Attr("rowwise_second_moment: bool = false") \
      .Attr("stochastic_rounding: bool = false")   \
      .Attr("seed: int = 0")

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdam")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamShape(c, /*decays=*/false); })
    .Doc(R"doc(
Lazy Adam on the rows of var, m and v named by indices; other rows untouched.

This documentation is the statement of the update rule; the kernels
(optimizer_math.h) and the Python wrappers follow it. Rows not named by
indices are neither read nor written, so their moments do not decay (what
makes the update "lazy"). The gradient rows of duplicate indices are summed
first, in input order. Then, for each distinct row i, with g the summed
gradient row:

    lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
    m[i] = beta1 * m[i] + (1 - beta1) * g
    v[i] = beta2 * v[i] + (1 - beta2) * g * g
    var[i] = var[i] - lr_t * m[i] / (sqrt(v[i]) + epsilon)

float16 and bfloat16 tables compute in float32 and round only when storing;
float32 computes in float32 and float64 in float64. The slots m and v have the
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
T: the dtype of var, m, v and grad.
Tscalar: the dtype of the hyperparameters: float64 for float64 T, else float32.
use_locking: hold the variables' locks for the whole update.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamV2")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.Input("step: int64")
    .TF_OPT_OPS_LAZY_ADAM_V2_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamV2Shape(c, /*decays=*/false); })
    .Doc(R"doc(
Lazy Adam with light slots: m and v of their own dtype, v optionally per row.

The update of ResourceSparseApplyLazyAdam (its doc states it), with the
state kept in less memory; every value is computed in float32 and only
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
T: the dtype of var and grad.
Tslot: the dtype of m and v.
Tscalar: the dtype of the hyperparameters (float32).
use_locking: hold the variables' locks for the whole update.
rowwise_second_moment: v holds one value per row of var.
stochastic_rounding: round 16-bit slots stochastically (else to nearest even).
seed: keys the rounding noise, with step, row and column.
)doc");

// The W ops: the same updates with Keras' decoupled weight decay of the
// touched rows fused into the row pass. Ops of their own, not an optional
// input of the ops above, so that graphs and generated Python wrappers of
// those ops stay as they are.
REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamW")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.Input("weight_decay: Tscalar")
    .TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamShape(c, /*decays=*/true); })
    .Doc(R"doc(
ResourceSparseApplyLazyAdam with decoupled weight decay of the touched rows.

For each distinct row i that indices names (once, however often it is
named), before the update of ResourceSparseApplyLazyAdam (its doc states
it), which then reads the decayed row:

    var[i] = var[i] - var[i] * weight_decay * lr

This is Keras' decoupled weight decay of a variable, restricted to the rows
the step updates; rows not named keep their values. It is computed as Keras
computes it: weight_decay and lr rounded to T, and each operation (the two
products, left to right, then the difference) rounded to T, so a float16 or
bfloat16 table gets the bits of that arithmetic in its own type. Inputs are
validated as in ResourceSparseApplyLazyAdam; weight_decay must be a scalar.

weight_decay: the decay, a scalar of Tscalar; the other inputs and attrs are
ResourceSparseApplyLazyAdam's.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWV2")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.Input("step: int64")
    .Input("weight_decay: Tscalar")
    .TF_OPT_OPS_LAZY_ADAM_V2_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamV2Shape(c, /*decays=*/true); })
    .Doc(R"doc(
ResourceSparseApplyLazyAdamV2 with decoupled weight decay of the touched rows.

The decay of ResourceSparseApplyLazyAdamW (its doc states it), then the
light-slot update of ResourceSparseApplyLazyAdamV2.

weight_decay: the decay, a scalar of Tscalar (float32); the other inputs and
attrs are ResourceSparseApplyLazyAdamV2's.
)doc");

// The Scaled ops: the ops above with the scale of their gradient values
// (Keras' clipnorm and global_clipnorm) and clip range (clipvalue) as their last inputs
// (grad_scale_interface.h), applied where the kernel reads each value instead
// of in a tensor of scaled values before the op. Ops of their own, as the W
// ops, so that graphs and generated Python wrappers of the ops above stay as
// they are.
REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamScaled")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.TF_OPT_OPS_GRAD_SCALE_INPUT.TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, LazyAdamShape(c, /*decays=*/false));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyLazyAdam"));

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWScaled")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.Input("weight_decay: Tscalar")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, LazyAdamShape(c, /*decays=*/true));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyLazyAdamW"));

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamV2Scaled")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.Input("step: int64")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.TF_OPT_OPS_LAZY_ADAM_V2_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, LazyAdamV2Shape(c, /*decays=*/false));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyLazyAdamV2"));

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWV2Scaled")
    .TF_OPT_OPS_LAZY_ADAM_INPUTS.Input("step: int64")
    .Input("weight_decay: Tscalar")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.TF_OPT_OPS_LAZY_ADAM_V2_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, LazyAdamV2Shape(c, /*decays=*/true));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyLazyAdamWV2"));

// The ops of lazy Adam with the table's moving average kept in the same
// pass: lazy Adam's inputs, then the moving average's (the W op adds the
// weight decay last).
#define TF_OPT_OPS_LAZY_ADAM_AVERAGED_INPUTS             \
  TF_OPT_OPS_LAZY_ADAM_INPUTS.Input("average: resource") \
      .Input("synced: resource")                         \
      .Input("count: int32")                             \
      .Input("ema_momentum: Tscalar")

// Lazy Adam's inputs, then the moving average's (average, synced, count,
// ema_momentum), as the averaged ops and the window averaged ops have them.
static absl::Status LazyAdamAndAverageShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(LazyAdamShape(c, /*decays=*/false));
  return CheckAverageInputs(c, lazy_adam_averaged::kAverage);
}

static absl::Status LazyAdamAveragedShape(InferenceContext* c, bool decays) {
  TF_RETURN_IF_ERROR(LazyAdamAndAverageShape(c));
  if (decays) return CheckScalarInputs(c, lazy_adam_averaged::kWeightDecay, 1);
  return absl::OkStatus();
}

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamAveraged")
    .TF_OPT_OPS_LAZY_ADAM_AVERAGED_INPUTS.TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamAveragedShape(c, /*decays=*/false); })
    .Doc(R"doc(
ResourceSparseApplyLazyAdam with the table's lazy moving average kept in the same pass.

For each distinct row i that indices names, the average of the row is first
brought up to date from the row's value before this step's update, exactly as
ResourceSparseApplyLazyMovingAverage does (its doc states it), and synced[i]
set to count; then the row is updated as ResourceSparseApplyLazyAdam does
(its doc states it). The results are those of the moving-average op followed
by the lazy Adam op, bit for bit; each touched row is read once. CPU only.

Every input is validated before anything is written: a bad one (an index
outside [0, var.shape[0]), a variable of another dtype or shape, synced not
int32 of shape [var.shape[0]], a non-scalar input) fails the op with
InvalidArgumentError and leaves var, m, v, average and synced unchanged.

average: the average of var, a resource variable of var's dtype and shape.
synced: a resource variable of dtype int32 and shape [var.shape[0]]: each
row's count of EMA steps when its average was last brought up to date.
count: the number of EMA steps applied so far.
ema_momentum: the EMA's momentum m, of Tscalar.
The other inputs and attrs are ResourceSparseApplyLazyAdam's.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWAveraged")
    .TF_OPT_OPS_LAZY_ADAM_AVERAGED_INPUTS.Input("weight_decay: Tscalar")
    .TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamAveragedShape(c, /*decays=*/true); })
    .Doc(R"doc(
ResourceSparseApplyLazyAdamAveraged with the decoupled weight decay of ResourceSparseApplyLazyAdamW.

Each touched row's average is brought up to date from the row's value before
its decay and update, then the row is decayed and updated as
ResourceSparseApplyLazyAdamW does (its doc states it). CPU only.

weight_decay: the decay, a scalar of Tscalar; the other inputs and attrs are
ResourceSparseApplyLazyAdamAveraged's.
)doc");

// The Scaled ops of the averaged ops (see the Scaled ops above).
REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamAveragedScaled")
    .TF_OPT_OPS_LAZY_ADAM_AVERAGED_INPUTS.TF_OPT_OPS_GRAD_SCALE_INPUT.TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, LazyAdamAveragedShape(c, /*decays=*/false));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyLazyAdamAveraged"));

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWAveragedScaled")
    .TF_OPT_OPS_LAZY_ADAM_AVERAGED_INPUTS.Input("weight_decay: Tscalar")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, LazyAdamAveragedShape(c, /*decays=*/true));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyLazyAdamWAveraged"));

// The ops of a gradient accumulation window's apply step: lazy Adam's inputs
// (grad and indices the window's last micro-step), then the window's (the W op
// adds the weight decay last).
#define TF_OPT_OPS_WINDOW_INPUTS    \
  Input("accumulator: resource")    \
      .Input("row_ids: resource")   \
      .Input("row_count: resource") \
      .Input("steps: int64")
#define TF_OPT_OPS_LAZY_ADAM_WINDOW_INPUTS TF_OPT_OPS_LAZY_ADAM_INPUTS.TF_OPT_OPS_WINDOW_INPUTS

static absl::Status LazyAdamWindowShape(InferenceContext* c, bool decays) {
  TF_RETURN_IF_ERROR(LazyAdamShape(c, /*decays=*/false));
  return CheckWindowInputs(c, lazy_adam_window::kAccumulator, decays);
}

// The attrs of the window ops: lazy Adam's, Tindices also the dtype of
// row_ids and row_count.
REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWindow")
    .TF_OPT_OPS_LAZY_ADAM_WINDOW_INPUTS.TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamWindowShape(c, /*decays=*/false); })
    .Doc(R"doc(
The apply step of a gradient accumulation window: its average, then lazy Adam on it, in one pass.

grad and indices are the window's last micro-step. For each distinct row i of
the window (row_ids[:row_count] and indices), the row's average gradient is
formed exactly as ResourceSparseTakeWindowGradient forms it (its doc states
it) and row i of accumulator zeroed; row i of var, m and v is then updated as
ResourceSparseApplyLazyAdam updates it (its doc states it) with that average
as its gradient row. row_count is then set to 0. The results are those of
ResourceSparseTakeWindowGradient followed by ResourceSparseApplyLazyAdam, bit
for bit; each row of the window is read once. CPU only.

Every input is validated before anything is written: a bad one (an index or
held row id outside [0, var.shape[0]), row_count outside [0, var.shape[0]],
steps not positive, a variable of another dtype or shape) fails the op with
InvalidArgumentError and leaves every variable unchanged.

accumulator: the window's sums, a resource variable of var's dtype and shape.
row_ids: a resource variable of dtype Tindices and shape [var.shape[0]]: the
rows the window's earlier micro-steps named, its first row_count entries.
row_count: a scalar resource variable of dtype Tindices.
steps: the number of micro-steps in the window, a positive int64 scalar.
The other inputs and attrs are ResourceSparseApplyLazyAdam's.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWWindow")
    .TF_OPT_OPS_LAZY_ADAM_WINDOW_INPUTS.Input("weight_decay: Tscalar")
    .TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamWindowShape(c, /*decays=*/true); })
    .Doc(R"doc(
ResourceSparseApplyLazyAdamWindow with the decoupled weight decay of ResourceSparseApplyLazyAdamW.

Each row of the window is decayed and updated as ResourceSparseApplyLazyAdamW
does (its doc states it), with the window's average as its gradient row. CPU
only.

weight_decay: the decay, a scalar of Tscalar; the other inputs and attrs are
ResourceSparseApplyLazyAdamWindow's.
)doc");

// The ops of a gradient accumulation window's apply step with the table's
// moving average kept: the averaged ops' inputs (grad and indices the window's
// last micro-step), then the window's (the W op adds the weight decay last).
#define TF_OPT_OPS_LAZY_ADAM_WINDOW_AVERAGED_INPUTS \
  TF_OPT_OPS_LAZY_ADAM_AVERAGED_INPUTS.TF_OPT_OPS_WINDOW_INPUTS

static absl::Status LazyAdamWindowAveragedShape(InferenceContext* c, bool decays) {
  TF_RETURN_IF_ERROR(LazyAdamAndAverageShape(c));
  return CheckWindowInputs(c, lazy_adam_window_averaged::kAccumulator, decays);
}

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWindowAveraged")
    .TF_OPT_OPS_LAZY_ADAM_WINDOW_AVERAGED_INPUTS.TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return LazyAdamWindowAveragedShape(c, /*decays=*/false);
    })
    .Doc(R"doc(
A window's apply step with the table's moving average: its average, the average's catch-up, then lazy Adam, in one pass.

grad and indices are the window's last micro-step. For each distinct row i of
the window (row_ids[:row_count] and indices), the row's average gradient is
formed and row i of accumulator zeroed as ResourceSparseApplyLazyAdamWindow
does; the row's moving average is brought up to date from the row's value
before this step's update and synced[i] set to count, as
ResourceSparseApplyLazyAdamAveraged does; then row i of var, m and v is
updated as ResourceSparseApplyLazyAdam updates it with the window's average
as its gradient row. row_count is then set to 0. The results are those of
ResourceSparseTakeWindowGradient followed by
ResourceSparseApplyLazyAdamAveraged (their docs state them), bit for bit;
each row of the window is read once. CPU only.

Every input is validated before anything is written: a bad one (an index or
held row id outside [0, var.shape[0]), row_count outside [0, var.shape[0]],
steps not positive, a variable of another dtype or shape, synced not int32
of shape [var.shape[0]], a non-scalar input) fails the op with
InvalidArgumentError and leaves every variable unchanged.

average, synced, count, ema_momentum: as in ResourceSparseApplyLazyAdamAveraged.
accumulator, row_ids, row_count, steps: as in ResourceSparseApplyLazyAdamWindow.
The other inputs and attrs are ResourceSparseApplyLazyAdam's.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdamWWindowAveraged")
    .TF_OPT_OPS_LAZY_ADAM_WINDOW_AVERAGED_INPUTS.Input("weight_decay: Tscalar")
    .TF_OPT_OPS_LAZY_ADAM_ATTRS
    .SetShapeFn([](InferenceContext* c) { return LazyAdamWindowAveragedShape(c, /*decays=*/true); })
    .Doc(R"doc(
ResourceSparseApplyLazyAdamWindowAveraged with the decoupled weight decay of ResourceSparseApplyLazyAdamW.

Each row of the window has its average brought up to date from its value
before its decay and update, then is decayed and updated as
ResourceSparseApplyLazyAdamW does (its doc states it), with the window's
average as its gradient row. CPU only.

weight_decay: the decay, a scalar of Tscalar; the other inputs and attrs are
ResourceSparseApplyLazyAdamWindowAveraged's.
)doc");

}  // namespace tf_opt_ops
