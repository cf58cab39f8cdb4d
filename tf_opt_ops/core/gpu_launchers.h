// The CUDA kernels of the fused optimizers behind a plain C++ interface:
// device pointers, sizes, a stream, scratch memory. No TensorFlow, Eigen or
// CUDA headers, so
//   - the .cu.cc files that implement it compile for CUDA quickly (TensorFlow's
//     headers would make each .cu.cc slow to compile for every GPU
//     architecture);
//   - the OpKernels (.cc, compiled by the host compiler) call it with
//     ctx->eigen_gpu_device().stream() and ctx->allocate_temp scratch;
//   - gpu_check/ drives the very same entry points from NumPy through ctypes
//     on GPU machines that have no TensorFlow.
//
// Every launcher returns a cudaError_t as int (0 = success; ErrorString()
// names it). Launches are asynchronous on `stream`, except the sparse ones,
// which wait for the index check (see SparseApplyLazyAdam). The stream must
// belong to the device current on the calling thread: TensorFlow makes the
// op's device current before it runs a GPU kernel (its own kernels launch
// through the same CUDA runtime, the process's libcudart.so.12, see
// cuda_runtime_stub.cc).
//
// Half types: kHalf is IEEE binary16 (Eigen::half, __half), kBfloat16 is
// bfloat16 (Eigen::bfloat16, __nv_bfloat16): same bits on both sides. They
// compute in float32; double computes in double.
#ifndef TF_OPT_OPS_CORE_GPU_LAUNCHERS_H_
#define TF_OPT_OPS_CORE_GPU_LAUNCHERS_H_

#include <cstddef>
#include <cstdint>

#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace gpu {

enum class DType : int { kHalf = 0, kBfloat16 = 1, kFloat = 2, kDouble = 3 };
enum class IndexType : int { kInt32 = 0, kInt64 = 1 };

// The rows a sparse update touches: `indices` (device, `num_indices` of
// `index_type`) into a variable of `num_rows` rows of `row_size` elements;
// the gradient has one row of `row_size` per index.
struct SparseRows {
  const void* indices;
  IndexType index_type;
  int64_t num_indices;  // > 0
  int64_t num_rows;
  int64_t row_size;
};

// Set by the sparse launchers: the first position whose index is negative or
// >= num_rows (position -1 when every index is valid), and that index.
struct IndexError {
  int64_t position;
  int64_t index;
};

// Hyperparameters are passed as AdamStep<double>/ClippyStep<double> holding
// values already computed in the compute type (float for every type but
// double; MakeAdamStep<float> for lazy Adam), so the conversion back inside
// the launcher is exact and GPU and CPU use the very same values.

// Scratch memory (device, 256-byte aligned) the sparse launchers need for
// `rows` on the device of `stream` (the current one). Writes the size; returns
// a cudaError_t (CUB's size query reads the device's architecture).
int SparseScratchBytes(DType dtype, const SparseRows& rows, void* stream, size_t* bytes);

// Scratch memory the dense Clippy launcher needs.
size_t DenseScratchBytes(DType dtype);

// Sparse lazy Adam (the ResourceSparseApplyLazyAdam op's update rule; see
// docs/design.md, "GPU boundary"): checks every index, and returns with
// `index_error` set and nothing written when one is out of range (the check
// result is copied to the host and the stream synchronized, so the caller can
// fail the op before any write); then sorts (index, position) pairs with CUB
// and updates each distinct row once, from the sum of its gradient rows in
// input order, with LazyAdamElement.
int SparseApplyLazyAdam(DType dtype, DType slot_dtype, const SparseRows& rows, const void* grad,
                        void* var, void* m, void* v, const AdamStep<double>& step,
                        const AdamStateLayout& layout, void* scratch, size_t scratch_bytes,
                        void* stream, IndexError* index_error);

// Dense Clippy Adagrad over `size` elements: a min-reduction of
// ClippyRatioElement into `scale` (device memory, float, or double for
// kDouble), then ClippyApplyElement with that scale. No host round trip.
int ApplyClippyAdagrad(DType dtype, DType accum_dtype, int64_t size, const void* grad, void* var,
                       void* accum, const ClippyStep<double>& step, void* scale, void* scratch,
                       size_t scratch_bytes, void* stream);

// Sparse Clippy Adagrad: the index check of SparseApplyLazyAdam, then the two
// passes of the dense launcher over the distinct touched rows (duplicates
// summed), the scale reduced on the device.
int SparseApplyClippyAdagrad(DType dtype, DType accum_dtype, const SparseRows& rows,
                             const void* grad, void* var, void* accum,
                             const ClippyStep<double>& step, void* scale, void* scratch,
                             size_t scratch_bytes, void* stream, IndexError* index_error);

// Sparse row-wise Adagrad (op ResourceSparseApplyRowwiseAdagrad): the index
// check of SparseApplyLazyAdam, then one warp per distinct row (duplicates
// summed in input order) with the row math of optimizer_math.h; `accum`
// holds one value per row of the compute type (float, double for kDouble).
int SparseApplyRowwiseAdagrad(DType dtype, const SparseRows& rows, const void* grad, void* var,
                              void* accum, const RowwiseAdagradStep<double>& step, void* scratch,
                              size_t scratch_bytes, void* stream, IndexError* index_error);
// The lazy moving average (the ResourceSparseApplyLazyMovingAverage op's
// update rule): the index check of SparseApplyLazyAdam, then each distinct
// row's average (type `dtype`, as var) brought up to date once, and its
// synced count (int32) set.
int SparseApplyLazyMovingAverage(DType dtype, const SparseRows& rows, const void* var,
                                 void* average, int32_t* synced,
                                 const MovingAverageStep<double>& step, void* scratch,
                                 size_t scratch_bytes, void* stream, IndexError* index_error);

// Writes 1 into `scale` (device; float, or double for kDouble): the scale of
// a step that touched nothing.
int SetScaleToOne(DType dtype, void* scale, void* stream);

// cudaGetErrorString of the process's CUDA runtime (or of the stub's own
// errors when there is none, cuda_runtime_stub.cc).
const char* ErrorString(int error);

}  // namespace gpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_GPU_LAUNCHERS_H_
