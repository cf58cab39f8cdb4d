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
    // float64 for float64 variables, float32 for every other T: half and
    // bfloat16 cannot hold beta2 = 0.999 (it rounds to 1.0 in bfloat16).
    .Attr("Tscalar: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("use_locking: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle var;
      TF_RETURN_IF_ERROR(MergeVariablesAndScalars(c, {0, 1, 2}, {3, 4, 5, 6, 7, 8}, &var));
      return CheckSparseGrad(c, var, /*grad_input=*/9, /*indices_input=*/10);
    })
    .Doc(R"doc(
Lazy Adam: updates var, m and v only on the rows named by indices.

Duplicate indices are summed first. For each distinct row i:
  lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
  m[i] = beta1 * m[i] + (1 - beta1) * g[i]
  v[i] = beta2 * v[i] + (1 - beta2) * g[i]^2
  var[i] -= lr_t * m[i] / (sqrt(v[i]) + epsilon)
)doc");

}  // namespace tf_opt_ops
