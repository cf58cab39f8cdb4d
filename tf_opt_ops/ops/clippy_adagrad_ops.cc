// Op registrations: Clippy Adagrad (dense and sparse) on resource variables.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/core/clippy_adagrad_averaged_interface.h"
#include "tf_opt_ops/core/clippy_adagrad_interface.h"
#include "tf_opt_ops/core/clippy_adagrad_window_interface.h"
#include "tf_opt_ops/ops/shape_fns.h"

namespace tf_opt_ops {

// The inputs, attributes and output both Clippy ops have, the inputs in the
// order of clippy_adagrad::Input (the sparse op adds its indices and their
// dtype after them).
#define TF_OPT_OPS_CLIPPY_SIGNATURE                          \
  Input("var: resource")                                     \
      .Input("accum: resource")                              \
      .Input("lr: Tscalar")                                  \
      .Input("epsilon: Tscalar")                             \
      .Input("variable_relative_threshold: Tscalar")         \
      .Input("accumulator_relative_threshold: Tscalar")      \
      .Input("absolute_threshold: Tscalar")                  \
      .Input("grad: T")                                      \
      .Attr("T: {half, bfloat16, float, double}")            \
      .Attr("Tscalar: {float, double}")                      \
      .Attr("use_locking: bool = false")                     \
      .Attr("clip_accumulator_update: bool = false")         \
      .Attr("use_standard_accumulator_update: bool = false") \
      .Output("scale: Tscalar")

// The documentation of the hyperparameter inputs, which the ops share, and of
// the attributes of the V2 ops.
#define TF_OPT_OPS_CLIPPY_HYPERPARAMETER_DOCS                  \
  "lr: the learning rate.\n"                                   \
  "epsilon: added to accum under the square root.\n"           \
  "variable_relative_threshold: the bound's share of |var|.\n" \
  "accumulator_relative_threshold: the bound's share of p.\n"  \
  "absolute_threshold: the bound's constant.\n"
#define TF_OPT_OPS_CLIPPY_V2_ATTR_DOCS                                                       \
  "use_locking: hold the variables' locks for the whole update.\n"                           \
  "clip_accumulator_update: accumulate the clipped gradient, (g * scale)^2.\n"               \
  "use_standard_accumulator_update: accumulate g * g before the step, as Adagrad does.\n"    \
  "stochastic_rounding: round a 16-bit accumulator stochastically (else to nearest even).\n" \
  "seed: keys the rounding noise, with step and the element.\n"

// The shape function of the six ops: var and accum of one shape, scalar
// hyperparameters (and step, and a W op's weight decay), the gradient of
// var's shape or, sparse, of its rows; the scale a scalar.
template <bool kSparse, bool kLight, bool kDecays = false>
absl::Status ClippyShape(InferenceContext* c) {
  using namespace clippy_adagrad;  // NOLINT: the input names
  ShapeHandle var;
  TF_RETURN_IF_ERROR(MergeVariables(c, {kVar, kAccum}, &var));
  TF_RETURN_IF_ERROR(CheckScalarInputs(c, kFirstHyperparameter, kNumHyperparameters));
  if (kLight) TF_RETURN_IF_ERROR(CheckScalarInputs(c, StepInput(kSparse), 1));
  if (kDecays) TF_RETURN_IF_ERROR(CheckScalarInputs(c, WeightDecayInput(kLight), 1));
  if (kSparse) {
    TF_RETURN_IF_ERROR(CheckSparseGrad(c, var, kGrad, kIndices));
  } else {
    ShapeHandle unused;
    TF_RETURN_IF_ERROR(c->Merge(var, c->input(kGrad), &unused));
  }
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

REGISTER_OP("TfOptOps>ResourceApplyClippyAdagrad")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.SetShapeFn(ClippyShape</*kSparse=*/false, /*kLight=*/false>)
    .Doc(R"doc(
Clippy Adagrad with a dense gradient; returns the clipping scale in [0, 1].

This documentation is the statement of the update rule of both Clippy ops
(this one and ResourceSparseApplyClippyAdagrad); the kernels
(optimizer_math.h) and the Python wrappers follow it. It is the Adagrad step
of TensorFlow Recommenders' ClippyAdagrad, scaled down as a whole, one scale
per variable, so that no element moves by more than its bound max_d.
Elementwise, with g the gradient:

    if use_standard_accumulator_update: accum = accum + g * g
    p = 1 / sqrt(accum + epsilon)
    delta = lr * g * p
    max_d = variable_relative_threshold * |var|
            + accumulator_relative_threshold * p + absolute_threshold
    scale = min(1, min over the elements with delta != 0 of max_d / |delta|)
    if not use_standard_accumulator_update:
      accum = accum + (g * scale)^2 if clip_accumulator_update
              else accum + g * g
    var = var - delta * scale

A NaN ratio makes the scale NaN, as tf.reduce_min does. Both flags default to
false and at most one may be true. var may have any rank, 0-D included.

float16 and bfloat16 tables compute in float32 and round only when storing
(the standard accumulator update stores accum before it is read again);
float32 computes in float32 and float64 in float64. accum has the table's
dtype, so a half-precision table keeps a half-precision accumulator.

Every input is validated before anything is written: a bad one (an
accumulator or gradient of another dtype or shape, a non-scalar
hyperparameter, an uninitialized variable) fails the op with
InvalidArgumentError and leaves var and accum unchanged.

var: the variable, a resource variable of dtype T, of any rank.
accum: the accumulator: a resource variable of var's dtype and shape.
lr: the learning rate (the wrappers default to 0.001).
epsilon: added to accum under the square root (the wrappers default to 1e-7).
variable_relative_threshold: the bound's share of |var| (the wrappers default to 0.1).
accumulator_relative_threshold: the bound's share of p (the wrappers default to 0.0).
absolute_threshold: the bound's constant (the wrappers default to 1e-7).
grad: the gradient, of var's shape.
T: the dtype of var, accum and grad.
Tscalar: the dtype of the hyperparameters and of scale: float64 for float64 T, else float32.
use_locking: hold the variables' locks for the whole update.
clip_accumulator_update: accumulate the clipped gradient, (g * scale)^2.
use_standard_accumulator_update: accumulate g * g before the step, as Adagrad does.
scale: the clipping scale applied to the whole update, in [0, 1] (or NaN).
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagrad")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices")
    .Attr("Tindices: {int32, int64}")
    .SetShapeFn(ClippyShape</*kSparse=*/true, /*kLight=*/false>)
    .Doc(R"doc(
Clippy Adagrad on the rows of var and accum named by indices; returns the scale.

The update rule of ResourceApplyClippyAdagrad (see its documentation), on
the touched rows only: the gradient rows of duplicate indices are summed
first, in input order; then both passes run over the distinct rows, and the
scale is the minimum over those rows alone. Rows not named by indices are
neither read nor written. An empty indices vector changes nothing and
returns a scale of 1.

float16 and bfloat16 tables compute in float32 and round only when storing;
accum has the table's dtype.

Every input is validated before anything is written: a bad one (an index
outside [0, var.shape[0]), an accumulator or gradient of another dtype or
shape, a non-scalar hyperparameter, an uninitialized variable) fails the op
with InvalidArgumentError and leaves var and accum unchanged.

var: the table, a resource variable of dtype T, at least 1-D: indices name its rows.
accum: the accumulator: a resource variable of var's dtype and shape.
)doc" TF_OPT_OPS_CLIPPY_HYPERPARAMETER_DOCS
         R"doc(grad: the gradient rows, of shape [len(indices)] + var.shape[1:].
indices: the rows of var the gradient rows belong to, a vector; duplicates allowed.
T: the dtype of var, accum and grad.
Tscalar: the dtype of the hyperparameters and of scale: float64 for float64 T, else float32.
Tindices: the dtype of indices.
use_locking: hold the variables' locks for the whole update.
clip_accumulator_update: accumulate the clipped gradient, (g * scale)^2.
use_standard_accumulator_update: accumulate g * g before the step, as Adagrad does.
scale: the clipping scale applied to the touched rows, in [0, 1] (or NaN).
)doc");

// The V2 ops: the accumulator of its own dtype (Taccum), rounded stochastically
// or to nearest; the table of a 16-bit or float32 type.
#define TF_OPT_OPS_CLIPPY_V2_ATTRS               \
  Attr("Taccum: {half, bfloat16, float}")        \
      .Attr("stochastic_rounding: bool = false") \
      .Attr("seed: int = 0")

REGISTER_OP("TfOptOps>ResourceApplyClippyAdagradV2")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("step: int64")
    .TF_OPT_OPS_CLIPPY_V2_ATTRS.SetShapeFn(ClippyShape</*kSparse=*/false, /*kLight=*/true>)
    .Doc(R"doc(
Clippy Adagrad with a dense gradient and an accumulator of its own dtype.

The update of ResourceApplyClippyAdagrad (its doc states it), every value
computed in float32, with accum of dtype Taccum: a float16 or bfloat16
accumulator halves a float32 table's state, a float32 one keeps a 16-bit
table's accumulator from losing small increments. With stochastic_rounding,
a 16-bit accumulator is rounded stochastically when stored (as the slots of
ResourceSparseApplyLazyAdamV2), the noise of element e of the flattened
accumulator a counter-based hash of (seed, step, e); otherwise to nearest
even. Only the storage of accum changes: the clipping math reads the stored
accumulator, as with a table-typed one.

var: the variable, a resource variable of dtype T (half, bfloat16 or float), of any rank.
accum: the accumulator: a resource variable of dtype Taccum and var's shape.
)doc" TF_OPT_OPS_CLIPPY_HYPERPARAMETER_DOCS R"doc(grad: the gradient, of var's shape.
step: the 1-based step t, which keys the rounding noise with seed.
T: the dtype of var and grad (half, bfloat16 or float).
Tscalar: the dtype of the hyperparameters and of scale (float32).
Taccum: the dtype of accum.
)doc" TF_OPT_OPS_CLIPPY_V2_ATTR_DOCS
         R"doc(scale: the clipping scale applied to the whole update, in [0, 1] (or NaN).
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradV2")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices")
    .Input("step: int64")
    .Attr("Tindices: {int32, int64}")
    .TF_OPT_OPS_CLIPPY_V2_ATTRS.SetShapeFn(ClippyShape</*kSparse=*/true, /*kLight=*/true>)
    .Doc(R"doc(
Sparse Clippy Adagrad with an accumulator of its own dtype; returns the scale.

The update of ResourceSparseApplyClippyAdagrad on the touched rows, with
accum of dtype Taccum and its rounding as in ResourceApplyClippyAdagradV2
(element e of the flattened accumulator rounds as in the dense op).

var: the table, a resource variable of dtype T (half, bfloat16 or float), at least 1-D.
accum: the accumulator: a resource variable of dtype Taccum and var's shape.
)doc" TF_OPT_OPS_CLIPPY_HYPERPARAMETER_DOCS
         R"doc(grad: the gradient rows, of shape [len(indices)] + var.shape[1:].
indices: the rows of var the gradient rows belong to, a vector; duplicates allowed.
step: the 1-based step t, which keys the rounding noise with seed.
T: the dtype of var and grad (half, bfloat16 or float).
Tscalar: the dtype of the hyperparameters and of scale (float32).
Tindices: the dtype of indices.
Taccum: the dtype of accum.
)doc" TF_OPT_OPS_CLIPPY_V2_ATTR_DOCS
         R"doc(scale: the clipping scale applied to the touched rows, in [0, 1] (or NaN).
)doc");

// The W ops: the sparse updates with Keras' decoupled weight decay of the
// touched rows fused into the row passes. Ops of their own, not an optional
// input of the ops above, so that graphs and generated Python wrappers of
// those ops stay as they are.
REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradW")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices")
    .Input("weight_decay: Tscalar")
    .Attr("Tindices: {int32, int64}")
    .SetShapeFn(ClippyShape</*kSparse=*/true, /*kLight=*/false, /*kDecays=*/true>)
    .Doc(R"doc(
ResourceSparseApplyClippyAdagrad with decoupled weight decay of the touched rows.

For each distinct row i that indices names (once, however often it is
named), before the update of ResourceSparseApplyClippyAdagrad (its doc
states it), which then reads the decayed row in both passes (|var| in the
bound max_d, so the scale is that of the decayed rows, and the update):

    var[i] = var[i] - var[i] * weight_decay * lr

This is Keras' decoupled weight decay of a variable, restricted to the rows
the step updates; rows not named keep their values. It is computed as Keras
computes it: weight_decay and lr rounded to T, and each operation (the two
products, left to right, then the difference) rounded to T, as in
ResourceSparseApplyLazyAdamW. The result is that of decaying the rows first
and then running ResourceSparseApplyClippyAdagrad, bit for bit, with var
written once. Inputs are validated as in ResourceSparseApplyClippyAdagrad;
weight_decay must be a scalar.

weight_decay: the decay, a scalar of Tscalar; the other inputs, attrs and the
output are ResourceSparseApplyClippyAdagrad's.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradWV2")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices")
    .Input("step: int64")
    .Input("weight_decay: Tscalar")
    .Attr("Tindices: {int32, int64}")
    .TF_OPT_OPS_CLIPPY_V2_ATTRS
    .SetShapeFn(ClippyShape</*kSparse=*/true, /*kLight=*/true, /*kDecays=*/true>)
    .Doc(R"doc(
ResourceSparseApplyClippyAdagradV2 with decoupled weight decay of the touched rows.

The decay of ResourceSparseApplyClippyAdagradW (its doc states it), with the
accumulator of ResourceSparseApplyClippyAdagradV2.

weight_decay: the decay, a scalar of Tscalar (float32); the other inputs,
attrs and the output are ResourceSparseApplyClippyAdagradV2's.
)doc");

// The Scaled ops: the sparse ops above with the scale of their gradient values
// (Keras' clipnorm and global_clipnorm) and clip range (clipvalue) as their last inputs
// (grad_scale_interface.h), read scaled in both passes. Ops of their own, as
// the W ops.
REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradScaled")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.Attr("Tindices: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, ClippyShape</*kSparse=*/true, /*kLight=*/false>(c));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyClippyAdagrad"));

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradV2Scaled")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices")
    .Input("step: int64")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.Attr("Tindices: {int32, int64}")
    .TF_OPT_OPS_CLIPPY_V2_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, ClippyShape</*kSparse=*/true, /*kLight=*/true>(c));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyClippyAdagradV2"));

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradWScaled")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices")
    .Input("weight_decay: Tscalar")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.Attr("Tindices: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c,
                            ClippyShape</*kSparse=*/true, /*kLight=*/false, /*kDecays=*/true>(c));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyClippyAdagradW"));

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradWV2Scaled")
    .TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices")
    .Input("step: int64")
    .Input("weight_decay: Tscalar")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.Attr("Tindices: {int32, int64}")
    .TF_OPT_OPS_CLIPPY_V2_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, ClippyShape</*kSparse=*/true, /*kLight=*/true, /*kDecays=*/true>(c));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyClippyAdagradWV2"));

// The ops of sparse Clippy with the table's moving average kept in its update
// pass: sparse Clippy's inputs, then the moving average's (the W op adds the
// weight decay last).
#define TF_OPT_OPS_CLIPPY_AVERAGED_INPUTS                \
  TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices") \
      .Input("average: resource")                        \
      .Input("synced: resource")                         \
      .Input("count: int32")                             \
      .Input("ema_momentum: Tscalar")
template <bool kDecays>
absl::Status ClippyAveragedShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(ClippyShape</*kSparse=*/true, /*kLight=*/false>(c));
  TF_RETURN_IF_ERROR(CheckAverageInputs(c, clippy_adagrad_averaged::kAverage));
  if (kDecays) return CheckScalarInputs(c, clippy_adagrad_averaged::kWeightDecay, 1);
  return absl::OkStatus();
}

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradAveraged")
    .TF_OPT_OPS_CLIPPY_AVERAGED_INPUTS.Attr("Tindices: {int32, int64}")
    .SetShapeFn(ClippyAveragedShape</*kDecays=*/false>)
    .Doc(R"doc(
ResourceSparseApplyClippyAdagrad with the table's lazy moving average kept in its update pass.

For each distinct row i that indices names, the average of the row is brought
up to date from the row's value before this step's update, exactly as
ResourceSparseApplyLazyMovingAverage does (its doc states it), and synced[i]
set to count; the rows are updated as ResourceSparseApplyClippyAdagrad updates
them (its doc states it). The catch-up runs in the second pass, just before
the row's update, which reads the row anyway. The results, scale included,
are those of the moving-average op followed by the Clippy op, bit for bit.
CPU only, the accumulator of the table's dtype.

Every input is validated before anything is written: a bad one (an index
outside [0, var.shape[0]), a variable of another dtype or shape, synced not
int32 of shape [var.shape[0]], a non-scalar input) fails the op with
InvalidArgumentError and leaves var, accum, average and synced unchanged.

average: the average of var, a resource variable of var's dtype and shape.
synced: a resource variable of dtype int32 and shape [var.shape[0]]: each
row's count of EMA steps when its average was last brought up to date.
count: the number of EMA steps applied so far.
ema_momentum: the EMA's momentum m, of Tscalar.
The other inputs, attrs and the output are ResourceSparseApplyClippyAdagrad's.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradWAveraged")
    .TF_OPT_OPS_CLIPPY_AVERAGED_INPUTS.Input("weight_decay: Tscalar")
    .Attr("Tindices: {int32, int64}")
    .SetShapeFn(ClippyAveragedShape</*kDecays=*/true>)
    .Doc(R"doc(
ResourceSparseApplyClippyAdagradAveraged with the decoupled weight decay of ResourceSparseApplyClippyAdagradW.

Each touched row's average is brought up to date from the row's value before
its decay and update, then the row is decayed and updated as
ResourceSparseApplyClippyAdagradW does (its doc states it). CPU only.

weight_decay: the decay, a scalar of Tscalar; the other inputs, attrs and the
output are ResourceSparseApplyClippyAdagradAveraged's.
)doc");

// The Scaled ops of the averaged ops (see the Scaled ops above).
REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradAveragedScaled")
    .TF_OPT_OPS_CLIPPY_AVERAGED_INPUTS.TF_OPT_OPS_GRAD_SCALE_INPUT.Attr("Tindices: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, ClippyAveragedShape</*kDecays=*/false>(c));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyClippyAdagradAveraged"));

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradWAveragedScaled")
    .TF_OPT_OPS_CLIPPY_AVERAGED_INPUTS.Input("weight_decay: Tscalar")
    .TF_OPT_OPS_GRAD_SCALE_INPUT.Attr("Tindices: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      return CheckGradScale(c, ClippyAveragedShape</*kDecays=*/true>(c));
    })
    .Doc(TF_OPT_OPS_SCALED_DOC("ResourceSparseApplyClippyAdagradWAveraged"));

// The ops of a gradient accumulation window's apply step: sparse Clippy's
// inputs (grad and indices the window's last micro-step), then the window's
// (the W op adds the weight decay last).
#define TF_OPT_OPS_CLIPPY_WINDOW_INPUTS                  \
  TF_OPT_OPS_CLIPPY_SIGNATURE.Input("indices: Tindices") \
      .Input("accumulator: resource")                    \
      .Input("row_ids: resource")                        \
      .Input("row_count: resource")                      \
      .Input("steps: int64")
template <bool kDecays>
absl::Status ClippyWindowShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(ClippyShape</*kSparse=*/true, /*kLight=*/false>(c));
  return CheckWindowInputs(c, clippy_adagrad_window::kAccumulator, kDecays);
}

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradWindow")
    .TF_OPT_OPS_CLIPPY_WINDOW_INPUTS.Attr("Tindices: {int32, int64}")
    .SetShapeFn(ClippyWindowShape</*kDecays=*/false>)
    .Doc(R"doc(
The apply step of a gradient accumulation window: its average, then sparse Clippy Adagrad on it.

grad and indices are the window's last micro-step. For each distinct row i of
the window (row_ids[:row_count] and indices), the row's average gradient is
formed exactly as ResourceSparseTakeWindowGradient forms it (its doc states
it) and row i of accumulator zeroed; the rows of var and accum are then
updated as ResourceSparseApplyClippyAdagrad updates them (its doc states it)
with those averages as the gradient rows, the scale the minimum over the
window's rows. row_count is then set to 0. The results, scale included, are
those of ResourceSparseTakeWindowGradient followed by
ResourceSparseApplyClippyAdagrad, bit for bit, without the average leaving
the op. An empty window changes nothing and returns a scale of 1. CPU only.

Every input is validated before anything is written: a bad one (an index or
held row id outside [0, var.shape[0]), row_count outside [0, var.shape[0]],
steps not positive, a variable of another dtype or shape) fails the op with
InvalidArgumentError and leaves every variable unchanged.

accumulator: the window's sums, a resource variable of var's dtype and shape.
row_ids: a resource variable of dtype Tindices and shape [var.shape[0]]: the
rows the window's earlier micro-steps named, its first row_count entries.
row_count: a scalar resource variable of dtype Tindices.
steps: the number of micro-steps in the window, a positive int64 scalar.
Tindices: the dtype of indices, row_ids and row_count.
The other inputs, attrs and the output are ResourceSparseApplyClippyAdagrad's.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagradWWindow")
    .TF_OPT_OPS_CLIPPY_WINDOW_INPUTS.Input("weight_decay: Tscalar")
    .Attr("Tindices: {int32, int64}")
    .SetShapeFn(ClippyWindowShape</*kDecays=*/true>)
    .Doc(R"doc(
ResourceSparseApplyClippyAdagradWindow with the decoupled weight decay of ResourceSparseApplyClippyAdagradW.

Each row of the window is decayed and updated as
ResourceSparseApplyClippyAdagradW does (its doc states it), with the
window's average as its gradient row. CPU only.

weight_decay: the decay, a scalar of Tscalar; the other inputs, attrs and the
output are ResourceSparseApplyClippyAdagradWindow's.
)doc");

#undef TF_OPT_OPS_CLIPPY_WINDOW_INPUTS
#undef TF_OPT_OPS_CLIPPY_AVERAGED_INPUTS
#undef TF_OPT_OPS_CLIPPY_V2_ATTRS
#undef TF_OPT_OPS_CLIPPY_V2_ATTR_DOCS
#undef TF_OPT_OPS_CLIPPY_HYPERPARAMETER_DOCS
#undef TF_OPT_OPS_CLIPPY_SIGNATURE

}  // namespace tf_opt_ops
