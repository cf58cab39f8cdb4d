// Op registration: the lazy moving average (EMA) of a table's rows.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/core/moving_average_interface.h"
#include "tf_opt_ops/ops/shape_fns.h"

namespace tf_opt_ops {

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyMovingAverage")
    .Input("average: resource")
    .Input("synced: resource")
    .Input("var: resource")
    .Input("previous: T")
    .Input("indices: Tindices")
    .Input("count: int32")
    .Input("ema_momentum: Tscalar")
    .Input("momentum: Tscalar")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tscalar: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("use_locking: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      using namespace moving_average;  // NOLINT: the input names
      ShapeHandle table;
      TF_RETURN_IF_ERROR(MergeVariables(c, {kAverage, kVar}, &table));
      TF_RETURN_IF_ERROR(CheckScalarInputs(c, kFirstScalar, kNumScalars));
      ShapeHandle synced;
      TF_RETURN_IF_ERROR(c->WithRankAtMost(VariableShape(c, kSynced), 1, &synced));
      return CheckSparseGrad(c, table, kPrevious, kIndices);
    })
    .Doc(R"doc(
The moving average of the rows of var named by indices, kept lazily.

This documentation is the statement of the update rule; the kernels
(optimizer_math.h) and the Python optimizers' EMA (tf_opt_ops/_core.py)
follow it. A stock optimizer's EMA moves every row's average each step,
average = m * average + (1 - m) * var. A row that no step changes moves
toward a constant, so its average after k such steps has a closed form, and
the lazy average is kept as of each row's last change: synced[i] holds the
count of EMA steps applied when row i's average was last brought up to date,
and this op brings the rows a step changes up to date and moves them. Run it
after the step's update of var, with previous the rows of var before it (one
per index, duplicates alike). For each distinct row i of indices, p its
first position:

    k = count - synced[i]
    caught = previous[p] + ema_momentum^k * (average[i] - previous[p])
    average[i] = momentum * caught + (1 - momentum) * var[i]
    synced[i] = count + 1

count is the number of EMA steps applied before this one, ema_momentum the
momentum of the steps row i missed, momentum this step's (a stock Keras 3
optimizer's first step has momentum 0). Rows not named by indices are
neither read nor written.

Each operation computes in float32 (float64 for float64 tables) and is
rounded to T, as the same TensorFlow ops in dtype T round, k included;
ema_momentum^k is computed in float64. ema_momentum and momentum are
rounded to T first.

Every input is validated before anything is written: a bad one (an index
outside [0, average.shape[0]), a variable of another dtype or shape, synced
not int32 of shape [average.shape[0]], previous not of shape
[len(indices)] + average.shape[1:], a non-scalar count or momentum, an
uninitialized variable) fails the op with InvalidArgumentError and leaves
average and synced unchanged.

average: the average of var, a resource variable of dtype T, at least 1-D: indices name its rows.
synced: a resource variable of dtype int32 and shape [average.shape[0]].
var: the averaged table, after this step's update: a resource variable of average's dtype and shape.
previous: the rows of var named by indices as they were before this step's update, of shape [len(indices)] + average.shape[1:].
indices: the rows this step changed, a vector; duplicates allowed (each row is moved once).
count: the number of EMA steps applied before this one.
ema_momentum: the momentum of the steps a row missed.
momentum: this step's momentum.
T: the dtype of average, var and previous.
Tscalar: the dtype of ema_momentum and momentum: float64 for float64 T, else float32.
Tindices: the dtype of indices.
use_locking: hold the variables' locks for the whole update.
)doc");

}  // namespace tf_opt_ops
