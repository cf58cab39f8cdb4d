// Index validation and duplicate grouping for the sparse GPU kernels: every
// index is checked before anything is written, then (index, position) pairs
// are radix-sorted with CUB so each distinct row is one run of positions.
// The only file that instantiates CUB, which is most of the nvcc time.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include "tf_opt_ops/gpu_kernel_util.cu.h"
#include "tf_opt_ops/gpu_launchers.h"

namespace tf_opt_ops {
namespace gpu {
namespace {

// Writes positions[i] = i (the sort's values) and lowers *first_bad to the
// smallest position whose index is outside [0, num_rows). `K` is the unsigned
// type of the index width; the comparison is on the signed value.
template <typename K>
__global__ void __launch_bounds__(kThreadsPerBlock)
    CheckIndicesKernel(const K* indices, int64_t count, int64_t num_rows,
                       unsigned long long* first_bad, int64_t* positions) {
  using S = typename std::make_signed<K>::type;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    positions[i] = i;
    const int64_t index = static_cast<int64_t>(static_cast<S>(indices[i]));
    if (index < 0 || index >= num_rows) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// Bits the sort must look at: indices are in [0, num_rows).
int SortBits(int64_t num_rows, int key_bits) {
  int bits = 1;
  while (bits < key_bits && ((num_rows - 1) >> bits) > 0) ++bits;
  return bits;
}

template <typename K>
int CubSortBytes(int64_t count, int end_bit, size_t* bytes) {
  return static_cast<int>(cub::DeviceRadixSort::SortPairs(
      nullptr, *bytes, static_cast<const K*>(nullptr), static_cast<K*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), count, 0, end_bit));
}

struct Layout {
  unsigned long long* first_bad;
  int64_t* positions_in;
  int64_t* positions_out;
  void* keys_out;
  double* partials;
  void* cub_temp;
  size_t cub_bytes;
  size_t total;
};

template <typename K>
int MakeLayout(const SparseRows& rows, void* scratch, Layout* layout) {
  const int end_bit = SortBits(rows.num_rows, 8 * sizeof(K));
  size_t cub_bytes = 0;
  const int err = CubSortBytes<K>(rows.num_indices, end_bit, &cub_bytes);
  if (err != 0) return err;
  ScratchCarver carver(scratch);
  layout->first_bad = carver.Take<unsigned long long>(1);
  layout->positions_in = carver.Take<int64_t>(rows.num_indices);
  layout->positions_out = carver.Take<int64_t>(rows.num_indices);
  layout->keys_out = carver.Take<K>(rows.num_indices);
  layout->partials = carver.Take<double>(kMaxBlocks);
  layout->cub_temp = carver.Take<char>(cub_bytes);
  layout->cub_bytes = cub_bytes;
  layout->total = carver.size();
  return 0;
}

}  // namespace

int SparseScratchBytes(DType dtype, const SparseRows& rows, size_t* bytes) {
  (void)dtype;  // partials are double for every type
  return DispatchIndex(rows.index_type, [&](auto tag) {
    using K = typename decltype(tag)::type;
    Layout layout;
    const int err = MakeLayout<K>(rows, nullptr, &layout);
    *bytes = layout.total;
    return err;
  });
}

template <typename K>
int PrepareSortedRows(const SparseRows& rows, void* scratch, size_t scratch_bytes,
                      cudaStream_t stream, IndexError* index_error, SortedRows<K>* sorted) {
  index_error->position = -1;
  index_error->index = 0;
  Layout layout;
  int err = MakeLayout<K>(rows, scratch, &layout);
  if (err != 0) return err;
  if (scratch_bytes < layout.total) return static_cast<int>(cudaErrorInvalidValue);
  const K* indices = static_cast<const K*>(rows.indices);
  const int64_t n = rows.num_indices;

  // 1. Check every index; the host learns the first bad position before any
  //    kernel writes a variable (TensorFlow's GPU kernels skip bad rows
  //    silently; we fail the op, as the CPU kernel does).
  err = cudaMemsetAsync(layout.first_bad, 0xff, sizeof(unsigned long long), stream);
  if (err != 0) return err;
  CheckIndicesKernel<K><<<BlocksFor(n, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(
      indices, n, rows.num_rows, layout.first_bad, layout.positions_in);
  err = cudaGetLastError();
  if (err != 0) return err;
  unsigned long long first_bad = 0;
  err = cudaMemcpyAsync(&first_bad, layout.first_bad, sizeof(first_bad), cudaMemcpyDeviceToHost,
                        stream);
  if (err != 0) return err;
  err = cudaStreamSynchronize(stream);
  if (err != 0) return err;
  if (first_bad != ~0ull) {
    using S = typename std::make_signed<K>::type;
    K bad_key = 0;
    err = cudaMemcpyAsync(&bad_key, indices + first_bad, sizeof(K), cudaMemcpyDeviceToHost,
                          stream);
    if (err == 0) err = cudaStreamSynchronize(stream);
    index_error->position = static_cast<int64_t>(first_bad);
    index_error->index = static_cast<int64_t>(static_cast<S>(bad_key));
    return err;
  }

  // 2. Sort (index, position) pairs on the bits num_rows needs. The radix
  //    sort is stable, so each run of one index lists its positions in input
  //    order and duplicates are summed in the order the CPU sums them.
  K* keys_out = static_cast<K*>(layout.keys_out);
  size_t cub_bytes = layout.cub_bytes;
  err = cub::DeviceRadixSort::SortPairs(layout.cub_temp, cub_bytes, indices, keys_out,
                                        layout.positions_in, layout.positions_out, n, 0,
                                        SortBits(rows.num_rows, 8 * sizeof(K)), stream);
  if (err != 0) return err;
  sorted->keys = keys_out;
  sorted->positions = layout.positions_out;
  sorted->count = n;
  sorted->row_size = rows.row_size;
  sorted->partials = layout.partials;
  return static_cast<int>(cudaGetLastError());
}

template int PrepareSortedRows<uint32_t>(const SparseRows&, void*, size_t, cudaStream_t,
                                         IndexError*, SortedRows<uint32_t>*);
template int PrepareSortedRows<uint64_t>(const SparseRows&, void*, size_t, cudaStream_t,
                                         IndexError*, SortedRows<uint64_t>*);

const char* ErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace gpu
}  // namespace tf_opt_ops
