// Op registration: the lazy moving average (EMA) of a table's rows.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/core/moving_average_interface.h"
#include "tf_opt_ops/ops/shape_fns.h"

namespace tf_opt_ops {

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyMovingAverage")
    .Input("average: resource")
    .Input("synced: resource")
    .Input("var: resource")
    .Input("indices: Tindices")
    .Input("count: int32")
    .Input("ema_momentum: Tscalar")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tscalar: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("use_locking: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      using namespace moving_average;  // NOLINT: the input names
      ShapeHandle table;
      TF_RETURN_IF_ERROR(MergeVariables(c, {kAverage, kVar}, &table));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(table, 1, &table));
      TF_RETURN_IF_ERROR(CheckScalarInputs(c, kFirstScalar, kNumScalars));
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRankAtMost(VariableShape(c, kSynced), 1, &unused));
      return c->WithRank(c->input(kIndices), 1, &unused);
    })
    .Doc(R"doc(
Brings the moving average of the rows of var named by indices up to date.

This documentation is the statement of the update rule; the kernels
(optimizer_math.h) and the Python optimizers' EMA (tf_opt_ops/_core.py)
follow it. A stock optimizer's EMA moves every row's average each step,
average = m * average + (1 - m) * var. A row whose value does not change
moves toward a constant, so its average after k such steps has a closed
form, and the lazy average is kept as of each row's last change: synced[i]
holds the count of EMA steps applied when row i's average was last brought up
to date, and var's row i has not changed since. Run this op on the rows a
step is about to update, before the update: for each distinct row i of
indices,

    k = count - synced[i]
    average[i] = var[i] + ema_momentum^k * (average[i] - var[i])
    synced[i] = count

with count the number of EMA steps applied so far. The step's own EMA move
toward the updated row is then one more step the row missed, which the closed
form takes when the row is next brought up to date (by this op, or on every
row before the averages are read). Rows not named by indices are neither read
nor written; each distinct row is brought up to date once.

Each operation computes in float32 (float64 for float64 tables) and is
rounded to T, as the same TensorFlow ops in dtype T round, k included;
ema_momentum is rounded to T first, and ema_momentum^k is computed in
float64.

Every input is validated before anything is written: a bad one (an index
outside [0, average.shape[0]), a variable of another dtype or shape, synced
not int32 of shape [average.shape[0]], a non-scalar count or ema_momentum,
an uninitialized variable) fails the op with InvalidArgumentError and leaves
average and synced unchanged.

average: the average of var, a resource variable of dtype T, at least 1-D: indices name its rows.
synced: a resource variable of dtype int32 and shape [average.shape[0]].
var: the averaged table, before this step's update: a resource variable of average's dtype and shape.
indices: the rows this step is about to change, a vector; duplicates allowed.
count: the number of EMA steps applied so far.
ema_momentum: the EMA's momentum m.
T: the dtype of average and var.
Tscalar: the dtype of ema_momentum: float64 for float64 T, else float32.
Tindices: the dtype of indices.
use_locking: hold the variables' locks for the whole update.
)doc");

}  // namespace tf_opt_ops
