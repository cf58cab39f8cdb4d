// Sparse row-wise Adagrad: the device-templated functor the OpKernel calls.
#ifndef TF_OPT_OPS_KERNELS_ROWWISE_ADAGRAD_KERNELS_H_
#define TF_OPT_OPS_KERNELS_ROWWISE_ADAGRAD_KERNELS_H_

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace functor {

// Validates `indices` against var's rows, sums duplicate rows of `grad`, and
// updates var and accum (one value of the compute type per row) on the
// touched rows. Returns an error before any write. `indices` is non-empty
// and every other input was validated by the caller.
template <typename Device, typename T, typename Tindex>
struct SparseApplyRowwiseAdagrad {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& indices,
                          const tensorflow::Tensor& grad, tensorflow::Tensor* var,
                          tensorflow::Tensor* accum, const RowwiseAdagradStep<ComputeT<T>>& step);
};

}  // namespace functor
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_KERNELS_ROWWISE_ADAGRAD_KERNELS_H_
