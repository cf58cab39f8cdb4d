// Shape functions shared by the op registrations: reject at graph
// construction what can be rejected there (as TensorFlow's training ops do).
#ifndef TF_OPT_OPS_OPS_SHAPE_FNS_H_
#define TF_OPT_OPS_OPS_SHAPE_FNS_H_

#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_opt_ops/core/grad_scale_interface.h"

namespace tf_opt_ops {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// The shape of the variable behind a resource handle input, or unknown when
// the handle carries no shape (never the handle's own scalar shape).
inline ShapeHandle VariableShape(InferenceContext* c, int input) {
  const auto* handle_data = c->input_handle_shapes_and_types(input);
  if (handle_data != nullptr && !handle_data->empty()) {
    return (*handle_data)[0].shape;
  }
  return c->UnknownShape();
}

// Merges the shapes of the variable and its slots at `vars` (any rank: the
// dense op trains 0-D variables too) into `var`.
inline absl::Status MergeVariables(InferenceContext* c, std::initializer_list<int> vars,
                                   ShapeHandle* var) {
  *var = c->UnknownShape();
  for (int i : vars) {
    TF_RETURN_IF_ERROR(c->Merge(*var, VariableShape(c, i), var));
  }
  return absl::OkStatus();
}

// Checks that the `count` inputs from `first` on are scalars.
inline absl::Status CheckScalarInputs(InferenceContext* c, int first, int count) {
  ShapeHandle unused;
  for (int i = first; i < first + count; ++i) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
  }
  return absl::OkStatus();
}

// The grad_scale inputs (grad_scale_interface.h), after every other input of
// a Scaled op, and their number.
#define TF_OPT_OPS_GRAD_SCALE_INPUT        \
  Input("grad_scale: num_grad_scales * T") \
      .Attr("num_grad_scales: int >= 1")   \
      .Attr("clip_grad_values: bool = false")

// The documentation of a Scaled op: `op` (a string literal, the op it extends)
// with the scale of its gradient values.
#define TF_OPT_OPS_SCALED_DOC(op)                                                                \
  op " with its gradient values scaled where it reads them.\n\n"                                 \
     "Each gradient value g is read as g * grad_scale[0], or with two scale inputs as\n"         \
     "(g * grad_scale[0]) / grad_scale[1], each operation rounded to T, then with\n"             \
     "clip_grad_values clipped to [grad_scale[-2], grad_scale[-1]] as tf.clip_by_value clips,\n" \
     "before duplicate rows are summed: the results of " op                                      \
     " fed those values, bit\n"                                                                  \
     "for bit (Keras' global_clipnorm, clipnorm and clipvalue), without a tensor of them.\n"     \
     "CPU only.\n\n"                                                                             \
     "grad_scale: scalars of T: a factor, or a factor and a divisor, of the gradient values\n"   \
     "(or neither, with clip_grad_values), then with clip_grad_values the least and the\n"       \
     "greatest value.\n"                                                                         \
     "num_grad_scales: the number of grad_scale inputs: 1 or 2, or 2 to 4 with\n"                \
     "clip_grad_values.\n"                                                                       \
     "clip_grad_values: whether the last two grad_scale inputs clip each scaled value.\n"        \
     "The other inputs, attrs and outputs are " op "'s.\n"

// `status`, the shape function's of the op a Scaled op extends; then the
// grad_scale inputs, at most grad_scale::kMaxCount scalars.
inline absl::Status CheckGradScale(InferenceContext* c, absl::Status status) {
  TF_RETURN_IF_ERROR(status);
  int count = 0;
  bool clips = false;
  TF_RETURN_IF_ERROR(c->GetAttr(grad_scale::kCountAttr, &count));
  TF_RETURN_IF_ERROR(c->GetAttr(grad_scale::kClipsAttr, &clips));
  if (!grad_scale::IsValidCount(count, clips)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_grad_scales = ", count, " with clip_grad_values = ", clips ? "true" : "false",
        ", but ", grad_scale::kCountRule));
  }
  return CheckScalarInputs(c, grad_scale::FirstInput(c->num_inputs(), count), count);
}

// var is at least 1-D (indices name its rows), grad is [N, var.shape[1:]...]
// and indices is [N].
inline absl::Status CheckSparseGrad(InferenceContext* c, ShapeHandle var, int grad_input,
                                    int indices_input) {
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(var, 1, &var));
  ShapeHandle indices;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(indices_input), 1, &indices));
  ShapeHandle grad;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(grad_input), 1, &grad));
  DimensionHandle unused_dim;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(indices, 0), c->Dim(grad, 0), &unused_dim));
  ShapeHandle grad_rows_as_var;
  TF_RETURN_IF_ERROR(c->ReplaceDim(grad, 0, c->UnknownDim(), &grad_rows_as_var));
  ShapeHandle unused;
  return c->Merge(var, grad_rows_as_var, &unused);
}

// The inputs of a gradient accumulation window that a window op appends to
// its optimizer's (accumulate_interface.h): from `accumulator_input` on, the
// accumulator (var's shape, var at input 0), row_ids (a vector), row_count
// (a scalar), steps (a scalar); a W op's weight decay (a scalar) after them.
inline absl::Status CheckWindowInputs(InferenceContext* c, int accumulator_input, bool decays) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(MergeVariables(c, {0, accumulator_input}, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(VariableShape(c, accumulator_input + 1), 1, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(VariableShape(c, accumulator_input + 2), 0, &unused));
  return CheckScalarInputs(c, accumulator_input + 3, decays ? 2 : 1);
}

// The inputs of a lazily kept moving average that an averaged op appends to
// its optimizer's (as op ResourceSparseApplyLazyMovingAverage has them): from
// `average_input` on, the average (var's shape, var at input 0), synced (one
// count per row: a vector), count and ema_momentum (scalars).
inline absl::Status CheckAverageInputs(InferenceContext* c, int average_input) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(MergeVariables(c, {0, average_input}, &unused));
  TF_RETURN_IF_ERROR(c->WithRankAtMost(VariableShape(c, average_input + 1), 1, &unused));
  return CheckScalarInputs(c, average_input + 2, 2);
}

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_OPS_SHAPE_FNS_H_
