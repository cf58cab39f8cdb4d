// The entry points of cpu_kernels.h in cpu:: itself: each runs the same entry
// point of the level ActiveCpuIsa() chose (cpu_isa.h). Compiled at the floor.
#define EIGEN_USE_THREADS  // before any Eigen header: the loops run on a thread pool

#include "tf_opt_ops/core/cpu_isa.h"
#include "tf_opt_ops/core/cpu_kernels.h"

namespace tf_opt_ops {
namespace cpu {

template <typename T, typename S, typename Tindex>
absl::Status SparseApplyLazyAdam(const CpuPool& pool, const SparseGrad<T, Tindex>& grad, T* var,
                                 S* m, S* v, const AdamStep<ComputeT<T>>& step,
                                 const AdamStateLayout& layout) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyLazyAdam<T, S, Tindex>(pool, grad, var, m, v, step, layout);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyLazyAdam<T, S, Tindex>(pool, grad, var, m, v, step, layout);
    case CpuIsa::kAvx:
      break;
  }
  return avx::SparseApplyLazyAdam<T, S, Tindex>(pool, grad, var, m, v, step, layout);
}

template <typename T, typename A>
ComputeT<T> ApplyClippyAdagrad(const CpuPool& pool, int64_t size, const T* grad, T* var, A* accum,
                               const ClippyStep<ComputeT<T>>& step) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::ApplyClippyAdagrad<T, A>(pool, size, grad, var, accum, step);
    case CpuIsa::kAvx2:
      return avx2::ApplyClippyAdagrad<T, A>(pool, size, grad, var, accum, step);
    case CpuIsa::kAvx:
      break;
  }
  return avx::ApplyClippyAdagrad<T, A>(pool, size, grad, var, accum, step);
}

template <typename T, typename A, typename Tindex>
absl::Status SparseApplyClippyAdagrad(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,
                                      T* var, A* accum, const ClippyStep<ComputeT<T>>& step,
                                      ComputeT<T>* scale) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyClippyAdagrad<T, A, Tindex>(pool, grad, var, accum, step, scale);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyClippyAdagrad<T, A, Tindex>(pool, grad, var, accum, step, scale);
    case CpuIsa::kAvx:
      break;
  }
  return avx::SparseApplyClippyAdagrad<T, A, Tindex>(pool, grad, var, accum, step, scale);
}

template <typename T, typename Tindex>
absl::Status SparseApplyRowwiseAdagrad(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,
                                       T* var, ComputeT<T>* accum,
                                       const RowwiseAdagradStep<ComputeT<T>>& step) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyRowwiseAdagrad<T, Tindex>(pool, grad, var, accum, step);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyRowwiseAdagrad<T, Tindex>(pool, grad, var, accum, step);
    case CpuIsa::kAvx:
      break;
  }
  return avx::SparseApplyRowwiseAdagrad<T, Tindex>(pool, grad, var, accum, step);
}

template <typename T, typename Tindex>
absl::Status SparseApplyLazyAdamAveraged(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,
                                         T* var, T* m, T* v, const AdamStep<ComputeT<T>>& step,
                                         const LazyAverage<T>& average) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyLazyAdamAveraged<T, Tindex>(pool, grad, var, m, v, step, average);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyLazyAdamAveraged<T, Tindex>(pool, grad, var, m, v, step, average);
    case CpuIsa::kAvx:
      break;
  }
  return avx::SparseApplyLazyAdamAveraged<T, Tindex>(pool, grad, var, m, v, step, average);
}

template <typename T, typename Tindex>
absl::Status SparseApplyClippyAdagradAveraged(const CpuPool& pool,
                                              const SparseGrad<T, Tindex>& grad, T* var, T* accum,
                                              const ClippyStep<ComputeT<T>>& step,
                                              const LazyAverage<T>& average, ComputeT<T>* scale) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyClippyAdagradAveraged<T, Tindex>(pool, grad, var, accum, step,
                                                                 average, scale);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyClippyAdagradAveraged<T, Tindex>(pool, grad, var, accum, step,
                                                               average, scale);
    case CpuIsa::kAvx:
      break;
  }
  return avx::SparseApplyClippyAdagradAveraged<T, Tindex>(pool, grad, var, accum, step, average,
                                                          scale);
}

template <typename T, typename Tindex>
absl::Status SparseApplyLazyMovingAverage(const CpuPool& pool,
                                          const MovingAverageRows<Tindex>& rows, const T* var,
                                          T* average, int32_t* synced,
                                          const MovingAverageStep<ComputeT<T>>& step) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyLazyMovingAverage<T, Tindex>(pool, rows, var, average, synced,
                                                             step);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyLazyMovingAverage<T, Tindex>(pool, rows, var, average, synced, step);
    case CpuIsa::kAvx:
      break;
  }
  return avx::SparseApplyLazyMovingAverage<T, Tindex>(pool, rows, var, average, synced, step);
}

template <typename T, typename Tindex>
void SparseApplyLazyAdamWindow(const CpuPool& pool, WindowGradient<T, Tindex>& window, T steps,
                               T* var, T* m, T* v, const AdamStep<ComputeT<T>>& step) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyLazyAdamWindow<T, Tindex>(pool, window, steps, var, m, v, step);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyLazyAdamWindow<T, Tindex>(pool, window, steps, var, m, v, step);
    case CpuIsa::kAvx:
      break;
  }
  avx::SparseApplyLazyAdamWindow<T, Tindex>(pool, window, steps, var, m, v, step);
}

template <typename T, typename Tindex>
void SparseApplyLazyAdamWindowAveraged(const CpuPool& pool, WindowGradient<T, Tindex>& window,
                                       T steps, T* var, T* m, T* v,
                                       const AdamStep<ComputeT<T>>& step,
                                       const LazyAverage<T>& average) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyLazyAdamWindowAveraged<T, Tindex>(pool, window, steps, var, m, v,
                                                                  step, average);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyLazyAdamWindowAveraged<T, Tindex>(pool, window, steps, var, m, v,
                                                                step, average);
    case CpuIsa::kAvx:
      break;
  }
  avx::SparseApplyLazyAdamWindowAveraged<T, Tindex>(pool, window, steps, var, m, v, step, average);
}

template <typename T, typename Tindex>
ComputeT<T> SparseApplyClippyAdagradWindow(const CpuPool& pool, WindowGradient<T, Tindex>& window,
                                           T steps, T* var, T* accum,
                                           const ClippyStep<ComputeT<T>>& step, T* average) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return avx512::SparseApplyClippyAdagradWindow<T, Tindex>(pool, window, steps, var, accum,
                                                               step, average);
    case CpuIsa::kAvx2:
      return avx2::SparseApplyClippyAdagradWindow<T, Tindex>(pool, window, steps, var, accum, step,
                                                             average);
    case CpuIsa::kAvx:
      break;
  }
  return avx::SparseApplyClippyAdagradWindow<T, Tindex>(pool, window, steps, var, accum, step,
                                                        average);
}

TF_OPT_OPS_CPU_KERNEL_TYPES(TF_OPT_OPS_CPU_KERNELS_INSTANTIATE)
TF_OPT_OPS_CPU_TABLE_TYPES(TF_OPT_OPS_CPU_TABLE_INSTANTIATE)

}  // namespace cpu
}  // namespace tf_opt_ops
