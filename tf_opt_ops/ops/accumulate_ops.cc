// Op registration: Keras 3's gradient accumulation on a sparse gradient's rows.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/core/accumulate_interface.h"
#include "tf_opt_ops/ops/shape_fns.h"

namespace tf_opt_ops {
namespace {

// accumulator is at least 1-D, values [N, accumulator.shape[1:]...], indices
// [N], row_ids [accumulator.shape[0]] and row_count a scalar.
absl::Status CheckAccumulateInputs(InferenceContext* c) {
  using namespace accumulate;  // NOLINT: the input names
  const ShapeHandle accumulator = VariableShape(c, kAccumulator);
  TF_RETURN_IF_ERROR(CheckSparseGrad(c, accumulator, kValues, kIndices));
  ShapeHandle row_ids;
  TF_RETURN_IF_ERROR(c->WithRank(VariableShape(c, kRowIds), 1, &row_ids));
  if (c->RankKnown(accumulator)) {
    DimensionHandle unused;
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(row_ids, 0), c->Dim(accumulator, 0), &unused));
  }
  ShapeHandle unused;
  return c->WithRank(VariableShape(c, kRowCount), 0, &unused);
}

}  // namespace

REGISTER_OP("TfOptOps>ResourceSparseAccumulateRows")
    .Input("accumulator: resource")
    .Input("row_ids: resource")
    .Input("row_count: resource")
    .Input("indices: Tindices")
    .Input("values: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tindices: {int32, int64}")
    .SetShapeFn(CheckAccumulateInputs)
    .Doc(R"doc(
Adds a micro-step's sparse gradient into a gradient accumulator, on its rows.

For each i in order, accumulator[indices[i]] += values[i], each addition
rounded to T (the bits of a scatter-add of values at indices); while the
window holds no rows (row_count is 0, the accumulator is 0 on every row), each
row's first value is written as it is. The indices are then appended to the
window's row ids, row_ids[row_count:row_count + N] = indices and
row_count += N; where they would not fit (more than accumulator.shape[0] ids in
all), row_ids holds the distinct rows of the held ids and the indices instead,
in no particular order, and row_count their number.

Every input is validated before anything is written: an index or held row id
outside [0, accumulator.shape[0]), row_count outside [0, accumulator.shape[0]],
a variable of another dtype or shape, or an uninitialized variable fails the
op with InvalidArgumentError and leaves the variables unchanged.

accumulator: the gradient accumulator, a resource variable of dtype T, at least 1-D.
row_ids: the window's row ids, a resource variable of dtype Tindices and shape [accumulator.shape[0]].
row_count: the number of ids row_ids holds, a scalar resource variable of dtype Tindices.
indices: the micro-step's rows, a vector; duplicates allowed.
values: the micro-step's gradient rows, [N, accumulator.shape[1:]...].
T: the dtype of accumulator and values.
Tindices: the dtype of indices, row_ids and row_count.
)doc");

REGISTER_OP("TfOptOps>ResourceSparseTakeWindowGradient")
    .Input("accumulator: resource")
    .Input("row_ids: resource")
    .Input("row_count: resource")
    .Input("indices: Tindices")
    .Input("values: T")
    .Input("steps: int64")
    .Output("rows: int64")
    .Output("average: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tindices: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      using namespace accumulate;  // NOLINT: the input names
      TF_RETURN_IF_ERROR(CheckAccumulateInputs(c));
      TF_RETURN_IF_ERROR(CheckScalarInputs(c, kSteps, 1));
      const DimensionHandle num_rows = c->UnknownDim();
      c->set_output(0, c->Vector(num_rows));
      ShapeHandle average;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(kValues), 0, num_rows, &average));
      c->set_output(1, average);
      return absl::OkStatus();
    })
    .Doc(R"doc(
The average gradient of an accumulation window, on its rows, and the window cleared.

values at indices is the window's last micro-step. rows are the distinct rows
of the held ids (row_ids[:row_count]) and of indices, in no particular order;
average[u] is, for row r = rows[u], the sum of accumulator[r] where r is held
(a row no micro-step of the window named is 0 there, and is not read) and of
the micro-step's values at r in order, each addition rounded to T, divided by
steps (rounded to T); a held row the micro-step does not name is
accumulator[r] + 0. These are the numbers of ResourceSparseAccumulateRows
followed by accumulator / steps on the window's rows. The held rows of the
accumulator are then zeroed and row_count set to 0.

Every input is validated before anything is written, as
ResourceSparseAccumulateRows' are.

accumulator: the gradient accumulator, a resource variable of dtype T, at least 1-D.
row_ids: the window's row ids, a resource variable of dtype Tindices and shape [accumulator.shape[0]].
row_count: the number of ids row_ids holds, a scalar resource variable of dtype Tindices.
indices: the window's last micro-step's rows, a vector; duplicates allowed.
values: that micro-step's gradient rows, [N, accumulator.shape[1:]...].
steps: the number of micro-steps in a window.
rows: the window's distinct rows, [U].
average: the window's average gradient on those rows, [U, accumulator.shape[1:]...].
T: the dtype of accumulator and values.
Tindices: the dtype of indices, row_ids and row_count.
)doc");

}  // namespace tf_opt_ops
