// Op registration: sparse lazy Adam on resource variables.
#include "tensorflow/core/framework/op.h"
#include "tf_opt_ops/shape_fns.h"

namespace tf_opt_ops {

REGISTER_OP("TfOptOps>ResourceSparseApplyLazyAdam")
    .Input("var: resource")
    .Input("m: resource")
    .Input("v: resource")
    .Input("beta1_power: Tscalar")
    .Input("beta2_power: Tscalar")
    .Input("lr: Tscalar")
    .Input("beta1: Tscalar")
    .Input("beta2: Tscalar")
    .Input("epsilon: Tscalar")
    .Input("grad: T")
    .Input("indices: Tindices")
    .Attr("T: {half, bfloat16, float, double}")
    // float64 for float64 variables, float32 for every other T: bfloat16
    // cannot hold beta2 = 0.999 (it rounds to 1.0).
    .Attr("Tscalar: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("use_locking: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle var;
      TF_RETURN_IF_ERROR(MergeVariablesAndScalars(c, {0, 1, 2}, {3, 4, 5, 6, 7, 8}, &var));
      return CheckSparseGrad(c, var, /*grad_input=*/9, /*indices_input=*/10);
    })
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

}  // namespace tf_opt_ops
