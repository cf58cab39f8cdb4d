// Sparse lazy Adam: the device-templated functor the OpKernel calls.
#ifndef TF_OPT_OPS_KERNELS_LAZY_ADAM_KERNELS_H_
#define TF_OPT_OPS_KERNELS_LAZY_ADAM_KERNELS_H_

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace functor {

// Validates `indices` against var's rows, sums duplicate rows of `grad` (each
// value scaled by `grad_scale` first: a Scaled op, which has CPU kernels
// only), and updates var, m, v on the touched rows, the
// slots of type S kept as `layout` says. Returns an error before any write.
// `indices` is non-empty and every other input was validated by the caller.
template <typename Device, typename T, typename S, typename Tindex>
struct SparseApplyLazyAdam {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& indices,
                          const tensorflow::Tensor& grad, tensorflow::Tensor* var,
                          tensorflow::Tensor* m, tensorflow::Tensor* v,
                          const AdamStep<ComputeT<T>>& step, const AdamStateLayout& layout,
                          const GradScale<ComputeT<T>>& grad_scale);
};

}  // namespace functor
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_KERNELS_LAZY_ADAM_KERNELS_H_
