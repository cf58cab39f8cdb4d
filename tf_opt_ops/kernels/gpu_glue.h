// The GPU functors' glue to TensorFlow: they call the TensorFlow-free
// launchers of gpu_launchers.h with the op's stream, scratch from the op's
// allocator, and the storage dtype as gpu::DType. Host compiler only
// (GOOGLE_CUDA builds); the kernels themselves are in the .cu.cc files.
// Why: see docs/design.md, "GPU boundary".
#ifndef TF_OPT_OPS_KERNELS_GPU_GLUE_H_
#define TF_OPT_OPS_KERNELS_GPU_GLUE_H_

#if GOOGLE_CUDA

#include <cstddef>
#include <cstdint>

#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/kernels/op_inputs.h"

namespace tf_opt_ops {

using GPUDevice = Eigen::GpuDevice;

template <typename T>
constexpr gpu::DType GpuDType();
template <>
constexpr gpu::DType GpuDType<Eigen::half>() {
  return gpu::DType::kHalf;
}
template <>
constexpr gpu::DType GpuDType<Eigen::bfloat16>() {
  return gpu::DType::kBfloat16;
}
template <>
constexpr gpu::DType GpuDType<float>() {
  return gpu::DType::kFloat;
}
template <>
constexpr gpu::DType GpuDType<double>() {
  return gpu::DType::kDouble;
}

// Eigen::half/__half and Eigen::bfloat16/__nv_bfloat16 are the same 16 bits.
static_assert(sizeof(Eigen::half) == 2 && sizeof(Eigen::bfloat16) == 2,
              "16-bit types must match CUDA's __half and __nv_bfloat16");

inline void* GpuStream(OpKernelContext* ctx) {
  return static_cast<void*>(ctx->eigen_gpu_device().stream());
}

// A failed CUDA call (e.g. a driver older than the CUDA runtime linked into
// the library) fails the op with the CUDA error named.
inline absl::Status GpuStatus(int error, const char* what) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed on the GPU: ", gpu::ErrorString(error),
                                          " (CUDA error ", error, ")"));
}

inline absl::Status AllocateGpuScratch(OpKernelContext* ctx, size_t bytes, Tensor* scratch) {
  return ctx->allocate_temp(tensorflow::DT_INT8,
                            TensorShape({static_cast<int64_t>(bytes > 0 ? bytes : 1)}), scratch);
}

template <typename Tindex>
gpu::SparseRows MakeSparseRows(const Tensor& indices, const Tensor& var) {
  static_assert(sizeof(Tindex) == 4 || sizeof(Tindex) == 8, "int32 or int64 indices");
  const int64_t num_rows = var.dim_size(0);
  return gpu::SparseRows{
      indices.data(), sizeof(Tindex) == 4 ? gpu::IndexType::kInt32 : gpu::IndexType::kInt64,
      indices.NumElements(), num_rows, num_rows > 0 ? var.NumElements() / num_rows : 0};
}

// Runs a sparse launcher: sizes and allocates its scratch, launches it with
// `launch(scratch, bytes, stream, &bad)`, and turns a bad index it reports
// (found before any write) into the op's error. `what` names the launcher.
template <typename T, typename Launch>
absl::Status LaunchSparse(OpKernelContext* ctx, const gpu::SparseRows& rows, const char* what,
                          Launch launch) {
  size_t bytes = 0;
  TF_RETURN_IF_ERROR(
      GpuStatus(gpu::SparseScratchBytes(GpuDType<T>(), rows, GpuStream(ctx), &bytes), what));
  Tensor scratch;
  TF_RETURN_IF_ERROR(AllocateGpuScratch(ctx, bytes, &scratch));
  gpu::IndexError bad;
  TF_RETURN_IF_ERROR(GpuStatus(launch(scratch.data(), bytes, GpuStream(ctx), &bad), what));
  if (bad.position >= 0) return IndexOutOfRange(bad.position, bad.index, rows.num_rows);
  return absl::OkStatus();
}

}  // namespace tf_opt_ops

#endif  // GOOGLE_CUDA

#endif  // TF_OPT_OPS_KERNELS_GPU_GLUE_H_
