// The CPU updates of the fused ops on raw buffers: validation of the indices,
// duplicate grouping and summing, and the row loops of cpu_row_loops.h over
// optimizer_math.h. The OpKernels (*_kernels.cc) call them with the locked
// variables' buffers and TensorFlow's intra-op pool; the XLA custom calls
// (xla_cpu_targets.cc) with XLA's buffers and pool. One implementation, so
// results are bit-identical with and without XLA (as gpu_launchers.h is the
// one GPU implementation). Why: see docs/design.md, "XLA".
#ifndef TF_OPT_OPS_CORE_CPU_KERNELS_H_
#define TF_OPT_OPS_CORE_CPU_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tf_opt_ops/core/cpu_pool.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace cpu {

// The gradient of a sparse update: `num_indices` (> 0) indices into a
// variable of `num_rows` rows of `row_size` elements each, and one gradient
// row of `row_size` per index, row-major.
template <typename T, typename Tindex>
struct SparseGrad {
  const Tindex* indices;
  int64_t num_indices;
  const T* grad;
  int64_t num_rows;
  int64_t row_size;
};

// Lazy Adam (ops ResourceSparseApplyLazyAdam and ...V2) on the rows of var,
// m, v that the indices name, duplicates summed in input order, the slots of
// type S kept as `layout` says (v one value per row when row-wise). Fails
// with IndexOutOfRange, before any write, when an index is outside
// [0, num_rows).
template <typename T, typename S, typename Tindex>
absl::Status SparseApplyLazyAdam(const CpuPool& pool, const SparseGrad<T, Tindex>& grad, T* var,
                                 S* m, S* v, const AdamStep<ComputeT<T>>& step,
                                 const AdamStateLayout& layout);

// Dense Clippy Adagrad (ops ResourceApplyClippyAdagrad and ...V2) over
// `size` elements, the accumulator of type A; returns the scale.
template <typename T, typename A>
ComputeT<T> ApplyClippyAdagrad(const CpuPool& pool, int64_t size, const T* grad, T* var, A* accum,
                               const ClippyStep<ComputeT<T>>& step);

// Sparse Clippy Adagrad (op ResourceSparseApplyClippyAdagrad): the index
// check of SparseApplyLazyAdam, then both passes over the distinct rows;
// writes the scale to `*scale`.
template <typename T, typename A, typename Tindex>
absl::Status SparseApplyClippyAdagrad(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,
                                      T* var, A* accum, const ClippyStep<ComputeT<T>>& step,
                                      ComputeT<T>* scale);

// Row-wise Adagrad (op ResourceSparseApplyRowwiseAdagrad): the index check
// of SparseApplyLazyAdam, then one update per distinct row, `accum` holding
// one value of the compute type per row of var.
template <typename T, typename Tindex>
absl::Status SparseApplyRowwiseAdagrad(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,
                                       T* var, ComputeT<T>* accum,
                                       const RowwiseAdagradStep<ComputeT<T>>& step);

}  // namespace cpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CPU_KERNELS_H_
