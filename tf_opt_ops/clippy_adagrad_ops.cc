// Op registrations: Clippy Adagrad (dense and sparse) on resource variables.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/shape_fns.h"

namespace tf_opt_ops {

// The inputs, attributes and output both Clippy ops have, in their order
// (the sparse op adds its indices and their dtype after them).
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

REGISTER_OP("TfOptOps>ResourceApplyClippyAdagrad")
    .TF_OPT_OPS_CLIPPY_SIGNATURE
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle var;
      TF_RETURN_IF_ERROR(MergeVariablesAndScalars(c, {0, 1}, {2, 3, 4, 5, 6}, &var));
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->Merge(var, c->input(7), &unused));
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
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
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle var;
      TF_RETURN_IF_ERROR(MergeVariablesAndScalars(c, {0, 1}, {2, 3, 4, 5, 6}, &var));
      TF_RETURN_IF_ERROR(CheckSparseGrad(c, var, /*grad_input=*/7, /*indices_input=*/8));
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
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
lr: the learning rate.
epsilon: added to accum under the square root.
variable_relative_threshold: the bound's share of |var|.
accumulator_relative_threshold: the bound's share of p.
absolute_threshold: the bound's constant.
grad: the gradient rows, of shape [len(indices)] + var.shape[1:].
indices: the rows of var the gradient rows belong to, a vector; duplicates allowed.
T: the dtype of var, accum and grad.
Tscalar: the dtype of the hyperparameters and of scale: float64 for float64 T, else float32.
Tindices: the dtype of indices.
use_locking: hold the variables' locks for the whole update.
clip_accumulator_update: accumulate the clipped gradient, (g * scale)^2.
use_standard_accumulator_update: accumulate g * g before the step, as Adagrad does.
scale: the clipping scale applied to the touched rows, in [0, 1] (or NaN).
)doc");

#undef TF_OPT_OPS_CLIPPY_SIGNATURE

}  // namespace tf_opt_ops
