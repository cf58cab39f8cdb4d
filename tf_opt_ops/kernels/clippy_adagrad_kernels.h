// Clippy Adagrad: the device-templated functors the OpKernels call.
#ifndef TF_OPT_OPS_KERNELS_CLIPPY_ADAGRAD_KERNELS_H_
#define TF_OPT_OPS_KERNELS_CLIPPY_ADAGRAD_KERNELS_H_

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace functor {

// Dense: both passes over every element, the accumulator of type A; writes
// the scale (a scalar of ComputeT<T>) into `scale`. Inputs were validated by
// the caller.
template <typename Device, typename T, typename A>
struct ApplyClippyAdagrad {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& grad,
                          tensorflow::Tensor* var, tensorflow::Tensor* accum,
                          const ClippyStep<ComputeT<T>>& step, tensorflow::Tensor* scale);
};

// Sparse: validates `indices` (non-empty) against var's rows before any write,
// sums duplicate rows (each value scaled by `grad_scale` first: a Scaled op, which
// has CPU kernels only), then both passes over
// the touched rows.
template <typename Device, typename T, typename A, typename Tindex>
struct SparseApplyClippyAdagrad {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& indices,
                          const tensorflow::Tensor& grad, tensorflow::Tensor* var,
                          tensorflow::Tensor* accum, const ClippyStep<ComputeT<T>>& step,
                          const GradScale<ComputeT<T>>& grad_scale, tensorflow::Tensor* scale);
};

}  // namespace functor
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_KERNELS_CLIPPY_ADAGRAD_KERNELS_H_
