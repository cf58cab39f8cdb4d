// Sparse lazy Adam on the GPU: one thread group per distinct row, threads
// along the row (coalesced), the per-element math of optimizer_math.h.
#include <cuda_runtime.h>

#include <type_traits>

#include "tf_opt_ops/core/gpu_kernel_util.cu.h"
#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace gpu {
namespace {

// Each distinct row is updated by exactly one thread group, from the sum of
// its gradient rows: no two threads write one element, so no atomics and no
// race between duplicates (and a row is decayed once, whatever its count). Slots of type S, rounded
// as `layout` says.
template <bool kStochastic, typename T, typename S>
__global__ void __launch_bounds__(kThreadsPerBlock)
    LazyAdamRowsKernel(SortedRows rows, const T* __restrict__ grad, T* __restrict__ var,
                       S* __restrict__ m, S* __restrict__ v, AdamStep<ComputeT<T>> step,
                       AdamStateLayout layout) {
  using C = ComputeT<T>;
  const int64_t dim = rows.row_size;
  ForEachDistinctRow(rows, [&](int64_t row, int64_t begin, int64_t end) {
    const int64_t offset = row * dim;  // 64-bit: tables past 2^31 elements
    const RowNoise noise = kStochastic ? RowNoiseOf(layout, row) : RowNoise{0, 0};
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const C g = SummedGrad<C>(rows, grad, begin, end, j);
      WithDecay(step, [&](auto decay) {
        LazyAdamElement<kStochastic, T, S, C, decltype(decay)::value>(
            var + offset + j, m + offset + j, v + offset + j, g, step, noise, j);
      });
    }
  });
}

// Row-wise v: one warp per distinct row (blockDim.x == kMeanLanes), whose
// lanes sum the row's g^2 in the order of RowMeanSquare (optimizer_math.h):
// lane l over j = l, l + 32, ..., then the butterfly of __shfl_xor_sync.
template <bool kStochastic, typename T, typename S>
__global__ void __launch_bounds__(kThreadsPerBlock)
    LazyAdamRowwiseKernel(SortedRows rows, const T* __restrict__ grad, T* __restrict__ var,
                          S* __restrict__ m, S* __restrict__ v, AdamStep<ComputeT<T>> step,
                          AdamStateLayout layout) {
  using C = ComputeT<T>;
  const int64_t dim = rows.row_size;
  ForEachDistinctRow(rows, [&](int64_t row, int64_t begin, int64_t end) {
    const int64_t offset = row * dim;
    const RowNoise noise = kStochastic ? RowNoiseOf(layout, row) : RowNoise{0, 0};
    C lane = C(0);
    for (int64_t j = threadIdx.x; j < dim; j += kMeanLanes) {
      const C g = SummedGrad<C>(rows, grad, begin, end, j);
      lane += g * g;
    }
    for (int o = kMeanLanes / 2; o > 0; o /= 2) lane = lane + __shfl_xor_sync(0xffffffffu, lane, o);
    const C mean_square = lane / static_cast<C>(dim);
    // Every lane holds the same sum; lane 0 stores v, all compute the denominator.
    const C v_t = step.beta2 * Load<C>(v[row]) + step.one_minus_beta2 * mean_square;
    const C denominator = Sqrt<C>(v_t) + step.epsilon;
    __syncwarp();
    if (threadIdx.x == 0) v[row] = StoreSlot<kStochastic, S>(v_t, noise.v, 0);
    for (int64_t j = threadIdx.x; j < dim; j += kMeanLanes) {
      const C g = SummedGrad<C>(rows, grad, begin, end, j);
      WithDecay(step, [&](auto decay) {
        LazyAdamRowwiseElement<kStochastic, T, S, C, decltype(decay)::value>(
            var + offset + j, m + offset + j, g, denominator, step, noise, j);
      });
    }
  });
}

template <bool kStochastic, typename T, typename S>
int LaunchLazyAdam(const SortedRows& sorted, const void* grad, void* var, void* m, void* v,
                   const AdamStep<double>& step, const AdamStateLayout& layout, cudaStream_t s) {
  using C = ComputeT<T>;
  if (layout.rowwise_second_moment) {
    const dim3 block(kMeanLanes, kThreadsPerBlock / kMeanLanes);
    const dim3 grid(BlocksFor(sorted.count, kThreadsPerBlock / kMeanLanes));
    LazyAdamRowwiseKernel<kStochastic, T, S>
        <<<grid, block, 0, s>>>(sorted, static_cast<const T*>(grad), static_cast<T*>(var),
                                static_cast<S*>(m), static_cast<S*>(v), CastStep<C>(step), layout);
  } else {
    const RowLaunch launch = MakeRowLaunch(sorted.count, sorted.row_size);
    LazyAdamRowsKernel<kStochastic, T, S><<<launch.grid, launch.block, 0, s>>>(
        sorted, static_cast<const T*>(grad), static_cast<T*>(var), static_cast<S*>(m),
        static_cast<S*>(v), CastStep<C>(step), layout);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int SparseApplyLazyAdam(DType dtype, DType slot_dtype, const SparseRows& rows, const void* grad,
                        void* var, void* m, void* v, const AdamStep<double>& step,
                        const AdamStateLayout& layout, void* scratch, size_t scratch_bytes,
                        void* stream, IndexError* index_error) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  SortedRows sorted;
  const int err = PrepareSortedRows(rows, scratch, scratch_bytes, s, index_error, &sorted);
  if (err != 0 || index_error->position >= 0 || rows.row_size == 0) return err;
  return DispatchDType(dtype, [&](auto type_tag) {
    using T = typename decltype(type_tag)::type;
    if constexpr (std::is_same_v<T, double>) {  // float64 tables keep float64 slots
      if (slot_dtype != dtype || layout.rowwise_second_moment) {
        return static_cast<int>(cudaErrorInvalidValue);
      }
      return LaunchLazyAdam<false, T, T>(sorted, grad, var, m, v, step, layout, s);
    } else {
      return DispatchDType(slot_dtype, [&](auto slot_tag) {
        using S = typename decltype(slot_tag)::type;
        if constexpr (std::is_same_v<S, double>) {
          return static_cast<int>(cudaErrorInvalidValue);
        } else if constexpr (HalfKindOf<S>::value != HalfKind::kNone) {
          return layout.stochastic_rounding
                     ? LaunchLazyAdam<true, T, S>(sorted, grad, var, m, v, step, layout, s)
                     : LaunchLazyAdam<false, T, S>(sorted, grad, var, m, v, step, layout, s);
        } else {
          return LaunchLazyAdam<false, T, S>(sorted, grad, var, m, v, step, layout, s);
        }
      });
    }
  });
}

}  // namespace gpu
}  // namespace tf_opt_ops
