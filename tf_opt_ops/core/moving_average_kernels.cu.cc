// The lazy moving average on the GPU: one thread group per distinct row,
// threads along the row (coalesced), the per-element math of
// optimizer_math.h.
#include <cuda_runtime.h>

#include "tf_opt_ops/core/gpu_kernel_util.cu.h"
#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace gpu {
namespace {

// Each distinct row's average is brought up to date by exactly one thread
// group. synced is only read here; SetSyncedKernel writes it after, so no
// thread reads a count another thread of its row has already replaced.
template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    MovingAverageRowsKernel(SortedRows rows, const T* __restrict__ var, T* __restrict__ average,
                            const int32_t* __restrict__ synced,
                            MovingAverageStep<ComputeT<T>> step) {
  using C = ComputeT<T>;
  const int64_t dim = rows.row_size;
  ForEachDistinctRow(rows, [&](int64_t row, int64_t, int64_t) {
    const int64_t offset = row * dim;  // 64-bit: tables past 2^31 elements
    const C decay = MovingAverageDecay<T, C>(step, synced[row]);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      MovingAverageElement<T, C>(average + offset + j, var[offset + j], decay);
    }
  });
}

// synced[i] = stamp for every sorted index i (duplicates write the same value).
__global__ void __launch_bounds__(kThreadsPerBlock)
    SetSyncedKernel(const uint64_t* __restrict__ keys, int64_t count, int32_t* synced,
                    int32_t stamp) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    synced[keys[i]] = stamp;
  }
}

}  // namespace

int SparseApplyLazyMovingAverage(DType dtype, const SparseRows& rows, const void* var,
                                 void* average, int32_t* synced,
                                 const MovingAverageStep<double>& step, void* scratch,
                                 size_t scratch_bytes, void* stream, IndexError* index_error) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  SortedRows sorted;
  int err = PrepareSortedRows(rows, scratch, scratch_bytes, s, index_error, &sorted);
  if (err != 0 || index_error->position >= 0) return err;
  if (rows.row_size > 0) {
    err = DispatchDType(dtype, [&](auto type_tag) {
      using T = typename decltype(type_tag)::type;
      using C = ComputeT<T>;
      const RowLaunch launch = MakeRowLaunch(sorted.count, sorted.row_size);
      MovingAverageRowsKernel<T><<<launch.grid, launch.block, 0, s>>>(
          sorted, static_cast<const T*>(var), static_cast<T*>(average), synced, CastStep<C>(step));
      return static_cast<int>(cudaGetLastError());
    });
    if (err != 0) return err;
  }
  SetSyncedKernel<<<BlocksFor(sorted.count, kThreadsPerBlock), kThreadsPerBlock, 0, s>>>(
      sorted.keys, sorted.count, synced, step.count);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace gpu
}  // namespace tf_opt_ops
