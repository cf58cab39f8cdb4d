// A C API over the launchers of gpu_launchers.h, for gpu_check.py (ctypes).
// Built with the .so's clang, CUDA toolkit and flags together with its kernels
// and lazy CUDA runtime (Makefile, `make gpu-check`), so the GPU check needs
// no TensorFlow. Hyperparameters
// arrive as the op receives them (float for every type but double) and are
// turned into AdamStep/ClippyStep exactly as the OpKernels do.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "tf_opt_ops/core/clippy_adagrad_interface.h"
#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/core/optimizer_math.h"

#define TFO_API extern "C" __attribute__((visibility("default")))

namespace {

using tf_opt_ops::AdamStep;
using tf_opt_ops::ClippyStep;
using tf_opt_ops::RowwiseAdagradStep;
using tf_opt_ops::RowwiseWeightDecay;
using tf_opt_ops::gpu::DType;
using tf_opt_ops::gpu::IndexError;
using tf_opt_ops::gpu::IndexType;
using tf_opt_ops::gpu::SparseRows;

cudaStream_t g_stream = nullptr;
cudaEvent_t g_start = nullptr;
cudaEvent_t g_stop = nullptr;

// The hyperparameters in the compute type of `dtype` (double for double,
// float for every other type), as the OpKernels read them, then widened to
// double for the launchers by the one conversion the OpKernels use too
// (CastStep, optimizer_math.h). A non-null `weight_decay` makes it the W ops'
// step (lazy_adam::Hyperparameters::Step): decayed by it and by `lr`.
AdamStep<double> LazyAdamStep(DType dtype, double lr, double beta1, double beta2, double epsilon,
                              double beta1_power, double beta2_power, const double* weight_decay) {
  auto in = [&](auto compute_type) {
    using C = decltype(compute_type);
    const AdamStep<C> step = tf_opt_ops::MakeAdamStep<C>(
        static_cast<C>(lr), static_cast<C>(beta1), static_cast<C>(beta2), static_cast<C>(epsilon),
        static_cast<C>(beta1_power), static_cast<C>(beta2_power));
    return tf_opt_ops::CastStep<double>(
        weight_decay == nullptr ? step
                                : tf_opt_ops::WithWeightDecay<C>(
                                      step, static_cast<C>(*weight_decay), static_cast<C>(lr)));
  };
  return dtype == DType::kDouble ? in(double()) : in(float());
}

// The Clippy step, converted as the OpKernels convert it. A non-null
// `weight_decay` makes it the sparse W ops' step (clippy_adagrad::WithWeightDecay,
// as ClippyAdagradOp builds it): each touched row decayed by it and by `lr`.
ClippyStep<double> MakeClippyStep(DType dtype, double lr, double epsilon, double vrt, double art,
                                  double at, int clip_accumulator_update,
                                  int use_standard_accumulator_update, const double* weight_decay) {
  const ClippyStep<double> step{lr,
                                epsilon,
                                vrt,
                                art,
                                at,
                                clip_accumulator_update != 0,
                                use_standard_accumulator_update != 0};
  const ClippyStep<double> given =
      weight_decay == nullptr ? step
                              : tf_opt_ops::clippy_adagrad::WithWeightDecay(step, *weight_decay);
  return dtype == DType::kDouble ? given
                                 : tf_opt_ops::CastStep<double>(tf_opt_ops::CastStep<float>(given));
}

// The hyperparameters in the compute type (as the OpKernel reads them), widened exactly.
RowwiseAdagradStep<double> MakeRowwiseStep(DType dtype, double lr, double epsilon,
                                           double weight_decay, int weight_decay_mode,
                                           int stochastic_rounding, int64_t seed) {
  const RowwiseAdagradStep<double> given{lr,
                                         epsilon,
                                         weight_decay,
                                         static_cast<RowwiseWeightDecay>(weight_decay_mode),
                                         stochastic_rounding != 0,
                                         static_cast<uint64_t>(seed)};
  return dtype == DType::kDouble ? given
                                 : tf_opt_ops::CastStep<double>(tf_opt_ops::CastStep<float>(given));
}

SparseRows MakeSparseRows(const void* indices, int index_type, int64_t num_indices,
                          int64_t num_rows, int64_t row_size) {
  return SparseRows{indices, static_cast<IndexType>(index_type), num_indices, num_rows, row_size};
}

// Runs launch(&bad) and hands its IndexError to the caller through the C
// API's two out-parameters.
template <typename Launch>
int ReportingIndexError(int64_t* bad_position, int64_t* bad_index, Launch launch) {
  IndexError bad{-1, 0};
  const int err = launch(&bad);
  *bad_position = bad.position;
  *bad_index = bad.index;
  return err;
}

}  // namespace

TFO_API const char* tfo_error_string(int error) { return tf_opt_ops::gpu::ErrorString(error); }

// Number of CUDA devices; an error (e.g. no driver) is returned, not raised.
TFO_API int tfo_device_count(int* count) {
  *count = 0;
  return static_cast<int>(cudaGetDeviceCount(count));
}

TFO_API int tfo_device_name(char* buf, int len) {
  cudaDeviceProp prop;
  const cudaError_t err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) return static_cast<int>(err);
  std::strncpy(buf, prop.name, len - 1);
  buf[len - 1] = 0;
  return 0;
}

TFO_API int tfo_mem_info(size_t* free_bytes, size_t* total_bytes) {
  return static_cast<int>(cudaMemGetInfo(free_bytes, total_bytes));
}

TFO_API int tfo_init() {
  int err = static_cast<int>(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  if (err == 0) err = static_cast<int>(cudaEventCreate(&g_start));
  if (err == 0) err = static_cast<int>(cudaEventCreate(&g_stop));
  return err;
}

TFO_API int tfo_malloc(void** ptr, size_t bytes) {
  return static_cast<int>(cudaMalloc(ptr, bytes > 0 ? bytes : 1));
}
TFO_API int tfo_free(void* ptr) { return static_cast<int>(cudaFree(ptr)); }
TFO_API int tfo_memset(void* ptr, int value, size_t bytes) {
  return static_cast<int>(cudaMemsetAsync(ptr, value, bytes, g_stream));
}
TFO_API int tfo_h2d(void* dst, const void* src, size_t bytes) {
  int err = static_cast<int>(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream));
  return err ? err : static_cast<int>(cudaStreamSynchronize(g_stream));
}
TFO_API int tfo_d2h(void* dst, const void* src, size_t bytes) {
  int err = static_cast<int>(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream));
  return err ? err : static_cast<int>(cudaStreamSynchronize(g_stream));
}
// Device-to-device copy on the check's stream: the bandwidth yardstick.
TFO_API int tfo_d2d(void* dst, const void* src, size_t bytes) {
  return static_cast<int>(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream));
}
TFO_API int tfo_sync() { return static_cast<int>(cudaStreamSynchronize(g_stream)); }

// Timing with CUDA events on the check's stream.
TFO_API int tfo_timer_start() { return static_cast<int>(cudaEventRecord(g_start, g_stream)); }
TFO_API int tfo_timer_stop(float* ms) {
  int err = static_cast<int>(cudaEventRecord(g_stop, g_stream));
  if (err == 0) err = static_cast<int>(cudaEventSynchronize(g_stop));
  if (err == 0) err = static_cast<int>(cudaEventElapsedTime(ms, g_start, g_stop));
  return err;
}

TFO_API int tfo_sparse_scratch_bytes(int dtype, int index_type, int64_t num_indices,
                                     int64_t num_rows, int64_t row_size, size_t* bytes) {
  return tf_opt_ops::gpu::SparseScratchBytes(
      static_cast<DType>(dtype),
      MakeSparseRows(nullptr, index_type, num_indices, num_rows, row_size), g_stream, bytes);
}

TFO_API size_t tfo_dense_scratch_bytes(int dtype) {
  return tf_opt_ops::gpu::DenseScratchBytes(static_cast<DType>(dtype));
}

// Sparse lazy Adam; bad_position/bad_index as IndexError. The slots are of
// `slot_dtype` and laid out as rowwise/stochastic/seed/step say
// (AdamStateLayout); slot_dtype == dtype and zeros for the plain op.
// `weight_decay` points to the W ops' weight decay (a host value, as the op's
// input; each touched row decayed once before its update), or is null for
// the ops without decay.
TFO_API int tfo_sparse_lazy_adam(int dtype, int index_type, const void* indices,
                                 int64_t num_indices, int64_t num_rows, int64_t row_size,
                                 const void* grad, void* var, void* m, void* v, double lr,
                                 double beta1, double beta2, double epsilon, double beta1_power,
                                 double beta2_power, const double* weight_decay, int slot_dtype,
                                 int rowwise, int stochastic, uint64_t seed, int64_t step,
                                 void* scratch, size_t scratch_bytes, int64_t* bad_position,
                                 int64_t* bad_index) {
  const DType t = static_cast<DType>(dtype);
  const AdamStep<double> adam =
      LazyAdamStep(t, lr, beta1, beta2, epsilon, beta1_power, beta2_power, weight_decay);
  tf_opt_ops::AdamStateLayout layout;
  layout.rowwise_second_moment = rowwise != 0;
  layout.stochastic_rounding = stochastic != 0;
  layout.seed = seed;
  layout.step = step;
  const SparseRows rows = MakeSparseRows(indices, index_type, num_indices, num_rows, row_size);
  return ReportingIndexError(bad_position, bad_index, [&](IndexError* bad) {
    return tf_opt_ops::gpu::SparseApplyLazyAdam(t, static_cast<DType>(slot_dtype), rows, grad, var,
                                                m, v, adam, layout, scratch, scratch_bytes,
                                                g_stream, bad);
  });
}

TFO_API int tfo_clippy_adagrad(int dtype, int64_t size, const void* grad, void* var, void* accum,
                               double lr, double epsilon, double vrt, double art, double at,
                               int clip_accumulator_update, int use_standard_accumulator_update,
                               void* scale, void* scratch, size_t scratch_bytes) {
  const DType t = static_cast<DType>(dtype);
  const ClippyStep<double> step =
      MakeClippyStep(t, lr, epsilon, vrt, art, at, clip_accumulator_update,
                     use_standard_accumulator_update, nullptr);
  return tf_opt_ops::gpu::ApplyClippyAdagrad(t, t, size, grad, var, accum, step, scale, scratch,
                                             scratch_bytes, g_stream);
}

// Sparse Clippy Adagrad; bad_position/bad_index as IndexError. `weight_decay`
// points to the W ops' weight decay (a host value, as the op's input; each
// touched row decayed once, and both passes read the decayed rows), or is
// null for the ops without decay.
TFO_API int tfo_sparse_clippy_adagrad(
    int dtype, int index_type, const void* indices, int64_t num_indices, int64_t num_rows,
    int64_t row_size, const void* grad, void* var, void* accum, double lr, double epsilon,
    double vrt, double art, double at, int clip_accumulator_update,
    int use_standard_accumulator_update, const double* weight_decay, void* scale, void* scratch,
    size_t scratch_bytes, int64_t* bad_position, int64_t* bad_index) {
  const DType t = static_cast<DType>(dtype);
  const ClippyStep<double> step =
      MakeClippyStep(t, lr, epsilon, vrt, art, at, clip_accumulator_update,
                     use_standard_accumulator_update, weight_decay);
  const SparseRows rows = MakeSparseRows(indices, index_type, num_indices, num_rows, row_size);
  return ReportingIndexError(bad_position, bad_index, [&](IndexError* bad) {
    return tf_opt_ops::gpu::SparseApplyClippyAdagrad(t, t, rows, grad, var, accum, step, scale,
                                                     scratch, scratch_bytes, g_stream, bad);
  });
}

TFO_API int tfo_set_scale_to_one(int dtype, void* scale) {
  return tf_opt_ops::gpu::SetScaleToOne(static_cast<DType>(dtype), scale, g_stream);
}

// Sparse row-wise Adagrad; `accum` holds one value per row of the compute type;
// weight_decay_mode is FBGEMM's number (0 none, 1 L2, 2 decoupled); a 16-bit
// table rounds stochastically with `seed` where stochastic_rounding != 0.
TFO_API int tfo_sparse_rowwise_adagrad(int dtype, int index_type, const void* indices,
                                       int64_t num_indices, int64_t num_rows, int64_t row_size,
                                       const void* grad, void* var, void* accum, double lr,
                                       double epsilon, double weight_decay, int weight_decay_mode,
                                       int stochastic_rounding, int64_t seed, void* scratch,
                                       size_t scratch_bytes, int64_t* bad_position,
                                       int64_t* bad_index) {
  const DType t = static_cast<DType>(dtype);
  const RowwiseAdagradStep<double> step =
      MakeRowwiseStep(t, lr, epsilon, weight_decay, weight_decay_mode, stochastic_rounding, seed);
  const SparseRows rows = MakeSparseRows(indices, index_type, num_indices, num_rows, row_size);
  return ReportingIndexError(bad_position, bad_index, [&](IndexError* bad) {
    return tf_opt_ops::gpu::SparseApplyRowwiseAdagrad(t, rows, grad, var, accum, step, scratch,
                                                      scratch_bytes, g_stream, bad);
  });
}
