// Op registration: row-wise Adagrad (sparse) on resource variables.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/core/rowwise_adagrad_interface.h"
#include "tf_opt_ops/ops/shape_fns.h"

namespace tf_opt_ops {

// var at least 1-D, accum a vector of var's rows, scalar hyperparameters,
// the gradient rows of var's row shape, one per index.
absl::Status RowwiseAdagradShape(InferenceContext* c) {
  using namespace rowwise_adagrad;  // NOLINT: the input names
  ShapeHandle var = VariableShape(c, kVar);
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(var, 1, &var));
  ShapeHandle accum = VariableShape(c, kAccum);
  TF_RETURN_IF_ERROR(c->WithRank(accum, 1, &accum));
  DimensionHandle unused_dim;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(var, 0), c->Dim(accum, 0), &unused_dim));
  TF_RETURN_IF_ERROR(CheckScalarInputs(c, kFirstHyperparameter, kNumHyperparameters));
  return CheckSparseGrad(c, var, kGrad, kIndices);
}

REGISTER_OP("TfOptOps>ResourceSparseApplyRowwiseAdagrad")
    .Input("var: resource")
    .Input("accum: resource")
    .Input("lr: Tscalar")
    .Input("epsilon: Tscalar")
    .Input("weight_decay: Tscalar")
    .Input("grad: T")
    .Input("indices: Tindices")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tscalar: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("weight_decay_mode: {'none', 'l2', 'decoupled'} = 'none'")
    .Attr("use_locking: bool = false")
    .Attr("stochastic_rounding: bool = false")
    .Attr("seed: int = 0")
    .SetShapeFn(RowwiseAdagradShape)
    .Doc(R"doc(
Row-wise Adagrad on the rows of var named by indices, one accumulator value per row.

This documentation is the statement of the update rule; the kernels
(optimizer_math.h) and the Python wrappers follow it. It is FBGEMM's
EXACT_ROWWISE_ADAGRAD, in FBGEMM's order of operations
(docs/rowwise_adagrad.md). The gradient rows of duplicate indices are summed
first, in input order; then, once per distinct row r, with g its summed
gradient row and w the row of var (D elements):

    h = g + weight_decay * w          if weight_decay_mode == "l2", else g
    accum[r] = accum[r] + mean_j(h_j^2)
    multiplier = lr / (sqrt(accum[r]) + epsilon)
    correction = 1 - multiplier * weight_decay   ("l2")
                 1 - lr * weight_decay           ("decoupled")
                 1                               ("none")
    w = correction * w - g * multiplier

Epsilon is added outside the square root, and the step size reads the new
accumulator. The decay of "l2" enters the mean and goes through the adaptive
step; that of "decoupled" scales the old weight by the learning rate alone.
Rows not named by indices are neither read nor written (the decay included).
An empty indices vector changes nothing.

The mean adds the squares in 32 lanes (j mod 32), reduced pairwise (the same
order on every device); FBGEMM's paths each use another order, so an
accumulator may differ from FBGEMM's in its last bits.

float16 and bfloat16 tables compute in float32 and round only when storing:
to nearest even, or with stochastic_rounding stochastically (to the
neighbour of larger magnitude with probability the distance from the
smaller one over the gap, so a stored row is unbiased and updates below
half a 16-bit ulp still move it on average). The 32 random bits of element
j of row r are a counter-based hash of seed, the bits of accum[r] after the
update, r, j and the bits of the unrounded float32 value: there is no step
input, and a row's accumulator grows at every step that gives it a gradient, so
each step draws fresh bits; a rerun, the CPU and the GPU store the same
bits. float32 computes in float32 and float64 in float64 (stochastic_rounding
changes nothing for them). accum is of the compute type: float32, or
float64 for a float64 table.

FBGEMM's CUDA kernels round fp16 and bf16 tables the same way by default
(its stochastic_rounding, which TorchRec users run; its CPU path rounds to
nearest whatever the flag): the distribution is the same, the bits are not,
as FBGEMM draws them from a Philox stream seeded by PyTorch's generator per
call.

Every input is validated before anything is written: a bad one (an index
outside [0, var.shape[0]), an accumulator of another dtype or of a shape
other than [var.shape[0]], a gradient of another shape, a non-scalar
hyperparameter, an uninitialized variable) fails the op with
InvalidArgumentError and leaves var and accum unchanged.

var: the table, a resource variable of dtype T, at least 1-D: indices name its rows.
accum: the accumulator: a resource variable of shape [var.shape[0]], float32 (float64 for float64 T).
lr: the learning rate (the wrappers default to 0.01, FBGEMM's).
epsilon: added to sqrt(accum) (the wrappers default to 1e-8, FBGEMM's).
weight_decay: the decay's factor (0 disables it whatever the mode).
grad: the gradient rows, of shape [len(indices)] + var.shape[1:].
indices: the rows of var the gradient rows belong to, a vector; duplicates allowed.
T: the dtype of var and grad.
Tscalar: the dtype of the hyperparameters: float64 for float64 T, else float32.
Tindices: the dtype of indices.
weight_decay_mode: "none", "l2" or "decoupled" (FBGEMM's WeightDecayMode 0, 1, 2).
use_locking: hold the variables' locks for the whole update.
stochastic_rounding: round a float16 or bfloat16 table stochastically when storing (else to nearest even).
seed: keys the rounding noise, with the row's accumulator, the row and the element.
)doc");

}  // namespace tf_opt_ops
