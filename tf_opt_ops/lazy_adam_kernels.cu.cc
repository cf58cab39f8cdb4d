// Sparse lazy Adam on the GPU: one thread group per distinct row, threads
// along the row (coalesced), the per-element math of optimizer_math.h.
#include <cuda_runtime.h>

#include "tf_opt_ops/gpu_kernel_util.cu.h"
#include "tf_opt_ops/gpu_launchers.h"
#include "tf_opt_ops/optimizer_math.h"

namespace tf_opt_ops {
namespace gpu {
namespace {

// Each distinct row is updated by exactly one thread group, from the sum of
// its gradient rows: no two threads write one element, so no atomics and no
// race between duplicates.
template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    LazyAdamRowsKernel(SortedRows rows, const T* __restrict__ grad, T* __restrict__ var,
                       T* __restrict__ m, T* __restrict__ v, AdamStep<ComputeT<T>> step) {
  using C = ComputeT<T>;
  const int64_t dim = rows.row_size;
  ForEachDistinctRow(rows, [&](int64_t row, int64_t begin, int64_t end) {
    const int64_t offset = row * dim;  // 64-bit: tables past 2^31 elements
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const C g = SummedGrad<C>(rows, grad, begin, end, j);
      LazyAdamElement<T, C>(var + offset + j, m + offset + j, v + offset + j, g, step);
    }
  });
}

}  // namespace

int SparseApplyLazyAdam(DType dtype, const SparseRows& rows, const void* grad, void* var, void* m,
                        void* v, const AdamStep<double>& step, void* scratch, size_t scratch_bytes,
                        void* stream, IndexError* index_error) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  SortedRows sorted;
  const int err = PrepareSortedRows(rows, scratch, scratch_bytes, s, index_error, &sorted);
  if (err != 0 || index_error->position >= 0 || rows.row_size == 0) return err;
  return DispatchDType(dtype, [&](auto type_tag) {
    using T = typename decltype(type_tag)::type;
    const RowLaunch launch = MakeRowLaunch(sorted.count, sorted.row_size);
    LazyAdamRowsKernel<T><<<launch.grid, launch.block, 0, s>>>(
        sorted, static_cast<const T*>(grad), static_cast<T*>(var), static_cast<T*>(m),
        static_cast<T*>(v), CastStep<ComputeT<T>>(step));
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace gpu
}  // namespace tf_opt_ops
