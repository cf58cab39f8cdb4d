// Device-side helpers shared by the .cu.cc files (CUDA compiler only; no TensorFlow).
#ifndef TF_OPT_OPS_CORE_GPU_KERNEL_UTIL_CU_H_
#define TF_OPT_OPS_CORE_GPU_KERNEL_UTIL_CU_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace gpu {

constexpr int kThreadsPerBlock = 256;
// Grid-stride loops keep at most this many blocks: enough to fill every
// current GPU with resident blocks, and a bound on the per-block partial
// results of the Clippy min-reduction.
constexpr int kMaxBlocks = 4096;

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<S>()) with S the CUDA storage type of `dtype`. This and
// DispatchIndex share their shape on purpose: one plain switch per enum
// reads at a glance, where a generic enum-to-type table would take more code
// than the two switches.
template <typename F>
int DispatchDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kHalf:
      return f(TypeTag<__half>());
    case DType::kBfloat16:
      return f(TypeTag<__nv_bfloat16>());
    case DType::kFloat:
      return f(TypeTag<float>());
    case DType::kDouble:
      return f(TypeTag<double>());
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

// Calls f(TypeTag<S>()) with S the signed index type.
template <typename F>
int DispatchIndex(IndexType type, F&& f) {
  switch (type) {
    case IndexType::kInt32:
      return f(TypeTag<int32_t>());
    case IndexType::kInt64:
      return f(TypeTag<int64_t>());
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

// Threads per row for rows of `row_size` elements: consecutive threads take
// consecutive elements (coalesced), a power of two up to 128, so a block of
// 256 threads covers 256 / threads_per_row rows.
inline int ThreadsPerRow(int64_t row_size) {
  int t = 1;
  while (t < row_size && t < 128) t <<= 1;
  return t;
}

inline int BlocksFor(int64_t items, int64_t items_per_block) {
  const int64_t blocks = (items + items_per_block - 1) / items_per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// Carves 256-byte aligned pieces out of one scratch buffer (with base ==
// nullptr it only adds up the size).
class ScratchCarver {
 public:
  explicit ScratchCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* Take(size_t count) {
    const size_t offset = size_;
    size_ += (count * sizeof(T) + 255) / 256 * 256;
    return base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset);
  }
  size_t size() const { return size_; }

 private:
  char* base_;
  size_t size_ = 0;
};

// Partial minimum ratios of the Clippy reduction: one per block, stored as
// double so one buffer serves float and double.
constexpr size_t kPartialBytes = kMaxBlocks * sizeof(double);

// NanMin over the block (blockDim.x * blockDim.y == kThreadsPerBlock);
// thread 0 gets the result.
template <typename C>
__device__ C BlockNanMin(C x) {
  __shared__ C warp_min[kThreadsPerBlock / 32];
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int offset = 16; offset > 0; offset >>= 1) {
    x = NanMin<C>(x, __shfl_down_sync(0xffffffffu, x, offset));
  }
  if ((tid & 31) == 0) warp_min[tid >> 5] = x;
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < kThreadsPerBlock / 32; ++w) x = NanMin<C>(x, warp_min[w]);
  }
  return x;
}

// Reduces `count` partial minima to scale = ClippyScale(min). One block.
template <typename C>
__global__ void __launch_bounds__(kThreadsPerBlock)
    FinalScaleKernel(const double* partials, int count, C* scale) {
  C x = C(1);
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    x = NanMin<C>(x, static_cast<C>(partials[i]));
  }
  x = BlockNanMin<C>(x);
  if (threadIdx.x == 0) *scale = ClippyScale<C>(x);
}

// Rows of a sparse update after PrepareSortedRows: `keys` are the indices
// (validated, so non-negative) widened to uint64 and sorted, `positions` their
// positions in the input, stably sorted, so each distinct row is a run of
// equal keys whose positions are in input order. One key type for int32 and
// int64 indices halves what the CUDA compiler compiles; the sort only looks at the bits
// num_rows needs, so the wider key costs no extra pass. Device pointers into
// the scratch buffer.
struct SortedRows {
  const uint64_t* keys;
  const int64_t* positions;
  int64_t count;
  int64_t row_size;
  double* partials;  // kMaxBlocks entries, for the Clippy reduction
};

// Validates and sorts (sparse_rows.cu.cc). Returns a cudaError_t; sets
// `index_error` (position -1 when all indices are valid; nothing sorted
// otherwise). Synchronizes `stream` once, to read the check's result.
int PrepareSortedRows(const SparseRows& rows, void* scratch, size_t scratch_bytes,
                      cudaStream_t stream, IndexError* index_error, SortedRows* sorted);

// The thread layout every sparse kernel uses: blockDim (threads_per_row,
// rows_per_block), grid-stride over the sorted positions.
struct RowLaunch {
  dim3 grid;
  dim3 block;
};

inline RowLaunch MakeRowLaunch(int64_t count, int64_t row_size) {
  const int tpr = ThreadsPerRow(row_size);
  const int rows_per_block = kThreadsPerBlock / tpr;
  return RowLaunch{dim3(BlocksFor(count, rows_per_block)), dim3(tpr, rows_per_block)};
}

// Visits each distinct row once: f(row, begin, end) with [begin, end) the run
// of sorted positions naming `row`. The thread group of a run is the row of
// threads (threadIdx.y); a position that is not the first of its run is
// skipped (no work, so duplicates cost only their gradient reads).
template <typename F>
__device__ __forceinline__ void ForEachDistinctRow(const SortedRows& s, F&& f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; i < s.count;
       i += stride) {
    const uint64_t key = s.keys[i];
    if (i > 0 && s.keys[i - 1] == key) continue;
    int64_t end = i + 1;
    while (end < s.count && s.keys[end] == key) ++end;
    f(static_cast<int64_t>(key), i, end);
  }
}

// The gradient of element j of a distinct row: its rows summed in input
// order, in the compute type (as the CPU kernels sum them, so the sums are
// bitwise the CPU's). A popular row may repeat thousands of times in a batch:
// the loads of 8 duplicates are issued before they are added (in order), so
// the run costs one memory latency per 8 rows rather than per row.
template <typename C, typename T>
__device__ __forceinline__ C SummedGrad(const SortedRows& s, const T* grad, int64_t begin,
                                        int64_t end, int64_t j) {
  constexpr int kUnroll = 8;
  const int64_t dim = s.row_size;
  C g = Load<C>(grad[s.positions[begin] * dim + j]);
  int64_t k = begin + 1;
  for (; k + kUnroll <= end; k += kUnroll) {
    C x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = Load<C>(grad[s.positions[k + u] * dim + j]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) g += x[u];
  }
  for (; k < end; ++k) g += Load<C>(grad[s.positions[k] * dim + j]);
  return g;
}

}  // namespace gpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_GPU_KERNEL_UTIL_CU_H_
