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
#include "tf_opt_ops/core/cpu_accumulate.h"
#include "tf_opt_ops/core/cpu_pool.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace cpu {

// The gradient of a sparse update: `num_indices` (> 0) indices into a
// variable of `num_rows` rows of `row_size` elements each, and one gradient
// row of `row_size` per index, row-major, each value read scaled by `scale`
// (ScaledGradValue) before duplicates are summed.
template <typename T, typename Tindex>
struct SparseGrad {
  const Tindex* indices;
  int64_t num_indices;
  const T* grad;
  int64_t num_rows;
  int64_t row_size;
  GradScale<ComputeT<T>> scale = {};
};

// The rows of a lazy moving-average step: `num_indices` (> 0) indices into
// tables of `num_rows` rows of `row_size` elements each.
template <typename Tindex>
struct MovingAverageRows {
  const Tindex* indices;
  int64_t num_indices;
  int64_t num_rows;
  int64_t row_size;
};

// A table's lazily kept moving average (op ResourceSparseApplyLazyAdamAveraged):
// the average, of the table's shape and type, each row's count of EMA steps
// when its average was last brought up to date, and the step.
template <typename T>
struct LazyAverage {
  T* average;
  int32_t* synced;
  MovingAverageStep<ComputeT<T>> step;
};

// The entry points, declared for each instruction-set level (cpu_isa.h):
// cpu_kernels.cc is compiled once per level into its namespace (cpu::avx,
// cpu::avx2, cpu::avx512), and the entry points of cpu:: itself
// (cpu_dispatch.cc) run the level chosen at load. Callers use cpu::'s.
//
// SparseApplyLazyAdam: lazy Adam (ops ResourceSparseApplyLazyAdam and ...V2)
// on the rows of var, m, v that the indices name, duplicates summed in input
// order, the slots of type S kept as `layout` says (v one value per row when
// row-wise). Fails with IndexOutOfRange, before any write, when an index is
// outside [0, num_rows).
//
// ApplyClippyAdagrad: dense Clippy Adagrad (ops ResourceApplyClippyAdagrad and
// ...V2) over `size` elements, the accumulator of type A; returns the scale.
//
// SparseApplyClippyAdagrad: sparse Clippy Adagrad (op
// ResourceSparseApplyClippyAdagrad): the index check of SparseApplyLazyAdam,
// then both passes over the distinct rows; writes the scale to `*scale`.
//
// SparseApplyRowwiseAdagrad: row-wise Adagrad (op
// ResourceSparseApplyRowwiseAdagrad): the index check of SparseApplyLazyAdam,
// then one update per distinct row, `accum` holding one value of the compute
// type per row of var.
//
// SparseApplyLazyMovingAverage: the lazy moving average (op
// ResourceSparseApplyLazyMovingAverage): brings the average of each distinct
// row the indices name up to date (MovingAverageRow, once per row) and sets
// the row's synced count to step.count. Fails with IndexOutOfRange, before
// any write, when an index is outside [0, num_rows).
//
// SparseApplyLazyAdamAveraged: SparseApplyLazyAdam with slots of the table's
// type (op ResourceSparseApplyLazyAdamAveraged), each distinct row's average
// first brought up to date from the row's value before its update, as
// SparseApplyLazyMovingAverage does, in the same pass.
//
// SparseApplyClippyAdagradAveraged: SparseApplyClippyAdagrad with the
// accumulator of the table's type (op ResourceSparseApplyClippyAdagradAveraged),
// each distinct row's average brought up to date from the row's value before
// its update, as SparseApplyLazyAdamAveraged does, in the update pass.
//
// SparseApplyLazyAdamWindow: the apply step of a gradient accumulation window
// (op ResourceSparseApplyLazyAdamWindow) on a grouped `window`: each distinct
// row's average taken (WindowGradient::TakeRow, which zeroes its accumulator
// row) into a buffer of the thread, then that row updated as
// SparseApplyLazyAdam updates it with the average as its gradient row, in
// one pass; then the window's count zeroed.
//
// SparseApplyLazyAdamWindowAveraged: SparseApplyLazyAdamWindow with the
// table's lazy moving average (op ResourceSparseApplyLazyAdamWindowAveraged):
// each distinct row of the window, once its average is taken, has its moving
// average brought up to date as SparseApplyLazyAdamAveraged does, then is
// updated, in the same pass.
//
// SparseApplyClippyAdagradWindow: the same for sparse Clippy Adagrad (op
// ResourceSparseApplyClippyAdagradWindow), the accumulator of the table's
// type: the first pass takes each distinct row's average into `average` (the
// caller's buffer of [num_rows(), row_size], which the OpKernel keeps across
// calls), then computes its ratio; the second applies the scale with those
// averages as the gradient rows, as SparseApplyClippyAdagrad; then the
// window's count zeroed. Returns the scale.
#define TF_OPT_OPS_CPU_KERNELS_DECLARATIONS                                                        \
  template <typename T, typename S, typename Tindex>                                               \
  absl::Status SparseApplyLazyAdam(const CpuPool& pool, const SparseGrad<T, Tindex>& grad, T* var, \
                                   S* m, S* v, const AdamStep<ComputeT<T>>& step,                  \
                                   const AdamStateLayout& layout);                                 \
  template <typename T, typename A>                                                                \
  ComputeT<T> ApplyClippyAdagrad(const CpuPool& pool, int64_t size, const T* grad, T* var,         \
                                 A* accum, const ClippyStep<ComputeT<T>>& step);                   \
  template <typename T, typename A, typename Tindex>                                               \
  absl::Status SparseApplyClippyAdagrad(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,    \
                                        T* var, A* accum, const ClippyStep<ComputeT<T>>& step,     \
                                        ComputeT<T>* scale);                                       \
  template <typename T, typename Tindex>                                                           \
  absl::Status SparseApplyRowwiseAdagrad(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,   \
                                         T* var, ComputeT<T>* accum,                               \
                                         const RowwiseAdagradStep<ComputeT<T>>& step);             \
  template <typename T, typename Tindex>                                                           \
  absl::Status SparseApplyLazyMovingAverage(                                                       \
      const CpuPool& pool, const MovingAverageRows<Tindex>& rows, const T* var, T* average,        \
      int32_t* synced, const MovingAverageStep<ComputeT<T>>& step);                                \
  template <typename T, typename Tindex>                                                           \
  absl::Status SparseApplyLazyAdamAveraged(const CpuPool& pool, const SparseGrad<T, Tindex>& grad, \
                                           T* var, T* m, T* v, const AdamStep<ComputeT<T>>& step,  \
                                           const LazyAverage<T>& average);                         \
  template <typename T, typename Tindex>                                                           \
  absl::Status SparseApplyClippyAdagradAveraged(                                                   \
      const CpuPool& pool, const SparseGrad<T, Tindex>& grad, T* var, T* accum,                    \
      const ClippyStep<ComputeT<T>>& step, const LazyAverage<T>& average, ComputeT<T>* scale);     \
  template <typename T, typename Tindex>                                                           \
  void SparseApplyLazyAdamWindow(const CpuPool& pool, WindowGradient<T, Tindex>& window, T steps,  \
                                 T* var, T* m, T* v, const AdamStep<ComputeT<T>>& step);           \
  template <typename T, typename Tindex>                                                           \
  void SparseApplyLazyAdamWindowAveraged(                                                          \
      const CpuPool& pool, WindowGradient<T, Tindex>& window, T steps, T* var, T* m, T* v,         \
      const AdamStep<ComputeT<T>>& step, const LazyAverage<T>& average);                           \
  template <typename T, typename Tindex>                                                           \
  ComputeT<T> SparseApplyClippyAdagradWindow(                                                      \
      const CpuPool& pool, WindowGradient<T, Tindex>& window, T steps, T* var, T* accum,           \
      const ClippyStep<ComputeT<T>>& step, T* average);

// Every (variable, slot or accumulator) type pair the entry points are
// instantiated for: each variable type of the ops (half, bfloat16, float,
// double) with itself, and light state (the V2 ops): a 16-bit or float32
// table with slots or an accumulator of another of those types.
#define TF_OPT_OPS_CPU_KERNEL_TYPES(X) \
  X(Eigen::half, Eigen::half)          \
  X(Eigen::bfloat16, Eigen::bfloat16)  \
  X(float, float)                      \
  X(double, double)                    \
  X(Eigen::half, Eigen::bfloat16)      \
  X(Eigen::half, float)                \
  X(Eigen::bfloat16, Eigen::half)      \
  X(Eigen::bfloat16, float)            \
  X(float, Eigen::half)                \
  X(float, Eigen::bfloat16)

// The explicit instantiations of the entry points for one type pair, with
// both index types, in the namespace where it is expanded.
#define TF_OPT_OPS_CPU_KERNELS_INSTANTIATE_SPARSE(T, S, Tindex)                               \
  template absl::Status SparseApplyLazyAdam<T, S, Tindex>(                                    \
      const CpuPool&, const SparseGrad<T, Tindex>&, T*, S*, S*, const AdamStep<ComputeT<T>>&, \
      const AdamStateLayout&);                                                                \
  template absl::Status SparseApplyClippyAdagrad<T, S, Tindex>(                               \
      const CpuPool&, const SparseGrad<T, Tindex>&, T*, S*, const ClippyStep<ComputeT<T>>&,   \
      ComputeT<T>*);
#define TF_OPT_OPS_CPU_KERNELS_INSTANTIATE(T, S)                                           \
  template ComputeT<T> ApplyClippyAdagrad<T, S>(const CpuPool&, int64_t, const T*, T*, S*, \
                                                const ClippyStep<ComputeT<T>>&);           \
  TF_OPT_OPS_CPU_KERNELS_INSTANTIATE_SPARSE(T, S, int32_t)                                 \
  TF_OPT_OPS_CPU_KERNELS_INSTANTIATE_SPARSE(T, S, int64_t)

// The table types of the entry points whose state has the table's type or
// the compute type (row-wise Adagrad, the moving average, lazy Adam and Clippy with it), and
// the instantiations of those entry points for one, with both index types.
#define TF_OPT_OPS_CPU_TABLE_TYPES(X) X(Eigen::half) X(Eigen::bfloat16) X(float) X(double)
#define TF_OPT_OPS_CPU_TABLE_INSTANTIATE_INDEX(T, Tindex)                                          \
  template absl::Status SparseApplyRowwiseAdagrad<T, Tindex>(                                      \
      const CpuPool&, const SparseGrad<T, Tindex>&, T*, ComputeT<T>*,                              \
      const RowwiseAdagradStep<ComputeT<T>>&);                                                     \
  template absl::Status SparseApplyLazyMovingAverage<T, Tindex>(                                   \
      const CpuPool&, const MovingAverageRows<Tindex>&, const T*, T*, int32_t*,                    \
      const MovingAverageStep<ComputeT<T>>&);                                                      \
  template absl::Status SparseApplyLazyAdamAveraged<T, Tindex>(                                    \
      const CpuPool&, const SparseGrad<T, Tindex>&, T*, T*, T*, const AdamStep<ComputeT<T>>&,      \
      const LazyAverage<T>&);                                                                      \
  template absl::Status SparseApplyClippyAdagradAveraged<T, Tindex>(                               \
      const CpuPool&, const SparseGrad<T, Tindex>&, T*, T*, const ClippyStep<ComputeT<T>>&,        \
      const LazyAverage<T>&, ComputeT<T>*);                                                        \
  template void SparseApplyLazyAdamWindow<T, Tindex>(const CpuPool&, WindowGradient<T, Tindex>&,   \
                                                     T, T*, T*, T*, const AdamStep<ComputeT<T>>&); \
  template void SparseApplyLazyAdamWindowAveraged<T, Tindex>(                                      \
      const CpuPool&, WindowGradient<T, Tindex>&, T, T*, T*, T*, const AdamStep<ComputeT<T>>&,     \
      const LazyAverage<T>&);                                                                      \
  template ComputeT<T> SparseApplyClippyAdagradWindow<T, Tindex>(                                  \
      const CpuPool&, WindowGradient<T, Tindex>&, T, T*, T*, const ClippyStep<ComputeT<T>>&, T*);
#define TF_OPT_OPS_CPU_TABLE_INSTANTIATE(T)          \
  TF_OPT_OPS_CPU_TABLE_INSTANTIATE_INDEX(T, int32_t) \
  TF_OPT_OPS_CPU_TABLE_INSTANTIATE_INDEX(T, int64_t)

TF_OPT_OPS_CPU_KERNELS_DECLARATIONS
namespace avx {
TF_OPT_OPS_CPU_KERNELS_DECLARATIONS
}  // namespace avx
namespace avx2 {
TF_OPT_OPS_CPU_KERNELS_DECLARATIONS
}  // namespace avx2
namespace avx512 {
TF_OPT_OPS_CPU_KERNELS_DECLARATIONS
}  // namespace avx512

}  // namespace cpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CPU_KERNELS_H_
