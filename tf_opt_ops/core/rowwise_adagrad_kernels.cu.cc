// Sparse row-wise Adagrad on the GPU: one warp per distinct row, the
// per-row math of optimizer_math.h.
#include <cuda_runtime.h>

#include <type_traits>

#include "tf_opt_ops/core/gpu_kernel_util.cu.h"
#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace gpu {
namespace {

// One warp per distinct row (blockDim.x == kMeanLanes), whose lanes sum the
// row's h^2 in the order of RowMeanSquare (optimizer_math.h): lane l over
// j = l, l + 32, ..., then the butterfly of __shfl_xor_sync; so the
// accumulator equals the CPU's bit for bit, and so does a 16-bit table's
// stochastic rounding (keyed by it). No two warps write one row.
template <bool kL2, bool kStochastic, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    RowwiseAdagradKernel(SortedRows rows, const T* __restrict__ grad, T* __restrict__ var,
                         ComputeT<T>* __restrict__ accum, RowwiseAdagradStep<ComputeT<T>> step) {
  using C = ComputeT<T>;
  const int64_t dim = rows.row_size;
  ForEachDistinctRow(rows, [&](int64_t row, int64_t begin, int64_t end) {
    const int64_t offset = row * dim;  // 64-bit: tables past 2^31 elements
    C lane = C(0);
    for (int64_t j = threadIdx.x; j < dim; j += kMeanLanes) {
      C h = SummedGrad<C>(rows, grad, begin, end, j);
      if (kL2) h = h + step.weight_decay * Load<C>(var[offset + j]);
      lane += h * h;
    }
    for (int o = kMeanLanes / 2; o > 0; o /= 2) lane = lane + __shfl_xor_sync(0xffffffffu, lane, o);
    const C mean_square = lane / static_cast<C>(dim);
    // Every lane holds the same sum; lane 0 stores the accumulator, all compute the step.
    C a = accum[row];
    const C multiplier = RowwiseAdagradMultiplier<C>(&a, mean_square, step);
    const C correction = RowwiseAdagradCorrection<C>(multiplier, step);
    const uint32_t key =
        kStochastic ? RowwiseAdagradNoiseKey(step.seed, static_cast<float>(a), row) : 0u;
    __syncwarp();
    if (threadIdx.x == 0) accum[row] = a;
    for (int64_t j = threadIdx.x; j < dim; j += kMeanLanes) {
      const C g = SummedGrad<C>(rows, grad, begin, end, j);
      RowwiseAdagradElement<kStochastic, T, C>(var + offset + j, g, multiplier, correction, key, j);
    }
  });
}

template <bool kL2, bool kStochastic, typename T>
void LaunchRowwiseAdagradKernel(const SortedRows& sorted, const void* grad, void* var, void* accum,
                                const RowwiseAdagradStep<double>& step, cudaStream_t s) {
  using C = ComputeT<T>;
  const dim3 block(kMeanLanes, kThreadsPerBlock / kMeanLanes);
  const dim3 grid(BlocksFor(sorted.count, kThreadsPerBlock / kMeanLanes));
  RowwiseAdagradKernel<kL2, kStochastic, T>
      <<<grid, block, 0, s>>>(sorted, static_cast<const T*>(grad), static_cast<T*>(var),
                              static_cast<C*>(accum), CastStep<C>(step));
}

// Stochastic rounding only where the table is 16-bit (a float32/float64 table
// holds its compute values exactly).
template <bool kL2, typename T>
void LaunchRowwiseAdagradRounding(const SortedRows& sorted, const void* grad, void* var,
                                  void* accum, const RowwiseAdagradStep<double>& step,
                                  cudaStream_t s) {
  if constexpr (HalfKindOf<T>::value != HalfKind::kNone) {
    if (step.stochastic_rounding) {
      LaunchRowwiseAdagradKernel<kL2, true, T>(sorted, grad, var, accum, step, s);
      return;
    }
  }
  LaunchRowwiseAdagradKernel<kL2, false, T>(sorted, grad, var, accum, step, s);
}

template <typename T>
int LaunchRowwiseAdagrad(const SortedRows& sorted, const void* grad, void* var, void* accum,
                         const RowwiseAdagradStep<double>& step, cudaStream_t s) {
  if (step.mode == RowwiseWeightDecay::kL2) {
    LaunchRowwiseAdagradRounding<true, T>(sorted, grad, var, accum, step, s);
  } else {
    LaunchRowwiseAdagradRounding<false, T>(sorted, grad, var, accum, step, s);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int SparseApplyRowwiseAdagrad(DType dtype, const SparseRows& rows, const void* grad, void* var,
                              void* accum, const RowwiseAdagradStep<double>& step, void* scratch,
                              size_t scratch_bytes, void* stream, IndexError* index_error) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  SortedRows sorted;
  const int err = PrepareSortedRows(rows, scratch, scratch_bytes, s, index_error, &sorted);
  if (err != 0 || index_error->position >= 0 || rows.row_size == 0) return err;
  return DispatchDType(dtype, [&](auto type_tag) {
    using T = typename decltype(type_tag)::type;
    return LaunchRowwiseAdagrad<T>(sorted, grad, var, accum, step, s);
  });
}

}  // namespace gpu
}  // namespace tf_opt_ops
