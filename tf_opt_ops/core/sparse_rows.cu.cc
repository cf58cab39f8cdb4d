// Index validation and duplicate grouping for the sparse GPU kernels: every
// index is checked before anything is written, then (index, position) pairs
// are radix-sorted with CUB so each distinct row is one run of positions.
// The only file that instantiates CUB, which is most of the CUDA compile time.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include "tf_opt_ops/core/gpu_kernel_util.cu.h"
#include "tf_opt_ops/core/gpu_launchers.h"

namespace tf_opt_ops {
namespace gpu {
namespace {

// Writes the sort's inputs, keys[i] = indices[i] widened to uint64 and
// positions[i] = i, and lowers *first_bad to the smallest position whose index
// is outside [0, num_rows) (keys of bad indices are never sorted).
template <typename S>
__global__ void __launch_bounds__(kThreadsPerBlock)
    CheckIndicesKernel(const S* indices, int64_t count, int64_t num_rows,
                       unsigned long long* first_bad, uint64_t* keys, int64_t* positions) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const int64_t index = static_cast<int64_t>(indices[i]);
    keys[i] = static_cast<uint64_t>(index);
    positions[i] = i;
    if (index < 0 || index >= num_rows) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// Bits the sort must look at: indices are in [0, num_rows).
int SortBits(int64_t num_rows) {
  int bits = 1;
  while (bits < 63 && ((num_rows - 1) >> bits) > 0) ++bits;
  return bits;
}

struct Layout {
  unsigned long long* first_bad;
  uint64_t* keys_in;
  uint64_t* keys_out;
  int64_t* positions_in;
  int64_t* positions_out;
  double* partials;
  void* cub_temp;
  size_t cub_bytes;
  size_t total;
};

int MakeLayout(const SparseRows& rows, void* scratch, Layout* layout) {
  const int64_t n = rows.num_indices;
  size_t cub_bytes = 0;
  const cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, cub_bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), n, 0,
      SortBits(rows.num_rows));
  if (err != cudaSuccess) return static_cast<int>(err);
  ScratchCarver carver(scratch);
  layout->first_bad = carver.Take<unsigned long long>(1);
  layout->keys_in = carver.Take<uint64_t>(n);
  layout->keys_out = carver.Take<uint64_t>(n);
  layout->positions_in = carver.Take<int64_t>(n);
  layout->positions_out = carver.Take<int64_t>(n);
  layout->partials = carver.Take<double>(kMaxBlocks);
  layout->cub_temp = carver.Take<char>(cub_bytes);
  layout->cub_bytes = cub_bytes;
  layout->total = carver.size();
  return 0;
}

}  // namespace

int SparseScratchBytes(DType dtype, const SparseRows& rows, void* stream, size_t* bytes) {
  (void)dtype;   // partials are double for every type
  (void)stream;  // CUB sizes its storage for the current device: the stream's (gpu_launchers.h)
  *bytes = 0;
  Layout layout;
  const int err = MakeLayout(rows, nullptr, &layout);
  *bytes = layout.total;
  return err;
}

int PrepareSortedRows(const SparseRows& rows, void* scratch, size_t scratch_bytes,
                      cudaStream_t stream, IndexError* index_error, SortedRows* sorted) {
  index_error->position = -1;
  index_error->index = 0;
  Layout layout;
  int err = MakeLayout(rows, scratch, &layout);
  if (err != 0) return err;
  if (scratch_bytes < layout.total) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t n = rows.num_indices;

  // 1. Check every index; the host learns the first bad position before any
  //    kernel writes a variable (TensorFlow's GPU kernels skip bad rows
  //    silently; we fail the op, as the CPU kernel does).
  err = cudaMemsetAsync(layout.first_bad, 0xff, sizeof(unsigned long long), stream);
  if (err != 0) return err;
  err = DispatchIndex(rows.index_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    CheckIndicesKernel<S><<<BlocksFor(n, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(
        static_cast<const S*>(rows.indices), n, rows.num_rows, layout.first_bad, layout.keys_in,
        layout.positions_in);
    return static_cast<int>(cudaGetLastError());
  });
  if (err != 0) return err;
  unsigned long long first_bad = 0;
  err = cudaMemcpyAsync(&first_bad, layout.first_bad, sizeof(first_bad), cudaMemcpyDeviceToHost,
                        stream);
  if (err != 0) return err;
  err = cudaStreamSynchronize(stream);
  if (err != 0) return err;
  if (first_bad != ~0ull) {
    uint64_t bad_key = 0;  // the index widened by the check kernel
    err = cudaMemcpyAsync(&bad_key, layout.keys_in + first_bad, sizeof(bad_key),
                          cudaMemcpyDeviceToHost, stream);
    if (err == 0) err = cudaStreamSynchronize(stream);
    index_error->position = static_cast<int64_t>(first_bad);
    index_error->index = static_cast<int64_t>(bad_key);
    return err;
  }

  // 2. Sort (index, position) pairs on the bits num_rows needs. The radix
  //    sort is stable, so each run of one index lists its positions in input
  //    order and duplicates are summed in the order the CPU sums them.
  size_t cub_bytes = layout.cub_bytes;
  err = cub::DeviceRadixSort::SortPairs(layout.cub_temp, cub_bytes, layout.keys_in, layout.keys_out,
                                        layout.positions_in, layout.positions_out, n, 0,
                                        SortBits(rows.num_rows), stream);
  if (err != 0) return err;
  sorted->keys = layout.keys_out;
  sorted->positions = layout.positions_out;
  sorted->count = n;
  sorted->row_size = rows.row_size;
  sorted->partials = layout.partials;
  return static_cast<int>(cudaGetLastError());
}

const char* ErrorString(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace gpu
}  // namespace tf_opt_ops
