// Op registrations: Clippy Adagrad (dense and sparse) on resource variables.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/shape_fns.h"

namespace tf_opt_ops {

#define TF_OPT_OPS_CLIPPY_ATTRS                              \
  Attr("T: {half, bfloat16, float, double}")                 \
      .Attr("Tscalar: {float, double}")                      \
      .Attr("use_locking: bool = false")                     \
      .Attr("clip_accumulator_update: bool = false")         \
      .Attr("use_standard_accumulator_update: bool = false") \
      .Output("scale: Tscalar")

REGISTER_OP("TfOptOps>ResourceApplyClippyAdagrad")
    .Input("var: resource")
    .Input("accum: resource")
    .Input("lr: Tscalar")
    .Input("epsilon: Tscalar")
    .Input("variable_relative_threshold: Tscalar")
    .Input("accumulator_relative_threshold: Tscalar")
    .Input("absolute_threshold: Tscalar")
    .Input("grad: T")
    .TF_OPT_OPS_CLIPPY_ATTRS
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

  if use_standard_accumulator_update: accum += g^2
  p = 1 / sqrt(accum + epsilon); delta = lr * g * p
  max_d = variable_relative_threshold * |var| + accumulator_relative_threshold * p
          + absolute_threshold
  scale = min(1, min over elements with delta != 0 of max_d / |delta|)
  if not use_standard_accumulator_update:
    accum += (g * scale)^2 if clip_accumulator_update else g^2
  var -= delta * scale
)doc");

REGISTER_OP("TfOptOps>ResourceSparseApplyClippyAdagrad")
    .Input("var: resource")
    .Input("accum: resource")
    .Input("lr: Tscalar")
    .Input("epsilon: Tscalar")
    .Input("variable_relative_threshold: Tscalar")
    .Input("accumulator_relative_threshold: Tscalar")
    .Input("absolute_threshold: Tscalar")
    .Input("grad: T")
    .Input("indices: Tindices")
    .TF_OPT_OPS_CLIPPY_ATTRS.Attr("Tindices: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle var;
      TF_RETURN_IF_ERROR(MergeVariablesAndScalars(c, {0, 1}, {2, 3, 4, 5, 6}, &var));
      TF_RETURN_IF_ERROR(CheckSparseGrad(c, var, /*grad_input=*/7, /*indices_input=*/8));
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Clippy Adagrad on the rows named by indices (duplicates summed first); the
scale is the minimum over the touched rows. Returns the scale.
)doc");

#undef TF_OPT_OPS_CLIPPY_ATTRS

}  // namespace tf_opt_ops
