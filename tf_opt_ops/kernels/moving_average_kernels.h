// Lazy moving average: the device-templated functor the OpKernel calls.
#ifndef TF_OPT_OPS_KERNELS_MOVING_AVERAGE_KERNELS_H_
#define TF_OPT_OPS_KERNELS_MOVING_AVERAGE_KERNELS_H_

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace functor {

// Validates `indices` (non-empty) against average's rows before any write,
// then brings each distinct row up to date once (the
// ResourceSparseApplyLazyMovingAverage doc). The other inputs were validated
// by the caller.
template <typename Device, typename T, typename Tindex>
struct SparseApplyLazyMovingAverage {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& indices,
                          const tensorflow::Tensor& var, tensorflow::Tensor* average,
                          tensorflow::Tensor* synced, const MovingAverageStep<ComputeT<T>>& step);
};

}  // namespace functor
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_KERNELS_MOVING_AVERAGE_KERNELS_H_
