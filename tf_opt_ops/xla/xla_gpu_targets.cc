// The XLA custom call targets on the GPU ("CUDA"): the operands as
// xla_targets.h lays them out, run through the very CUDA launchers the
// OpKernels run (gpu_launchers.h), on XLA's stream with scratch memory from
// XLA's allocator. The hyperparameters are read on the host with one copy
// (the launchers take them by value, as the OpKernels read them from host
// memory); the sparse launchers already wait for their index check before
// writing. Built in CUDA builds only; compiled here, run on GPUs only.
// Why: see docs/design.md, "XLA".
#define EIGEN_USE_THREADS  // xla_ffi.h's CPU pool includes Eigen's thread pool

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "tf_opt_ops/core/clippy_adagrad_interface.h"
#include "tf_opt_ops/core/errors.h"
#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/core/lazy_adam_interface.h"
#include "tf_opt_ops/core/rowwise_adagrad_interface.h"
#include "tf_opt_ops/xla/xla_gpu_copy.h"
#include "tf_opt_ops/xla/xla_targets.h"
#if TF_OPT_OPS_XLA_FFI  // else nothing: see xla_targets.h
#include "tf_opt_ops/xla/xla_ffi.h"
#include "tf_opt_ops/xla/xla_target_util.h"

namespace tf_opt_ops {
namespace xla_targets {
namespace {

#if TF_OPT_OPS_XLA_FFI_HAS_0_1  // XLA's stream and device memory from the FFI

absl::Status CudaStatus(int error, const char* what) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed on the GPU: ", gpu::ErrorString(error),
                                          " (CUDA error ", error, ")"));
}

absl::Status GpuTypeOf(const char* target, XLA_FFI_DataType dtype, gpu::DType* out) {
  switch (dtype) {
    case XLA_FFI_DataType_F16:
      *out = gpu::DType::kHalf;
      return absl::OkStatus();
    case XLA_FFI_DataType_BF16:
      *out = gpu::DType::kBfloat16;
      return absl::OkStatus();
    case XLA_FFI_DataType_F32:
      *out = gpu::DType::kFloat;
      return absl::OkStatus();
    case XLA_FFI_DataType_F64:
      *out = gpu::DType::kDouble;
      return absl::OkStatus();
    default:
      return Mismatch(target, absl::StrCat("a variable of XLA type ", dtype));
  }
}

absl::Status SparseRowsOf(const char* target, const Buffer& var, const Buffer& indices,
                          gpu::SparseRows* rows) {
  gpu::IndexType type;
  if (indices.dtype == XLA_FFI_DataType_S32) {
    type = gpu::IndexType::kInt32;
  } else if (indices.dtype == XLA_FFI_DataType_S64) {
    type = gpu::IndexType::kInt64;
  } else {
    return Mismatch(target, absl::StrCat("indices of XLA type ", indices.dtype));
  }
  const int64_t num_rows = var.dim(0);
  *rows = gpu::SparseRows{indices.data, type, indices.num_elements(), num_rows,
                          num_rows > 0 ? var.num_elements() / num_rows : 0};
  return absl::OkStatus();
}

// The call's stream and scratch memory from XLA's allocator, freed (in
// stream order, as the scratch of an OpKernel) when the call returns.
class GpuCall {
 public:
  explicit GpuCall(const Call& call) : call_(call) {}
  ~GpuCall() {
    if (scratch_ == nullptr) return;
    XLA_FFI_DeviceMemory_Free_Args args{};
    args.struct_size = XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE;
    args.ctx = call_.context();
    args.size = scratch_bytes_;
    args.data = scratch_;
    xla_ffi::TakeError(call_.api(), call_.api()->XLA_FFI_DeviceMemory_Free(&args));
  }

  absl::Status Stream(void** stream) {
    XLA_FFI_Stream_Get_Args args{};
    args.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
    args.ctx = call_.context();
    const std::string error =
        xla_ffi::TakeError(call_.api(), call_.api()->XLA_FFI_Stream_Get(&args));
    if (!error.empty()) return absl::InternalError("XLA gave no GPU stream: " + error);
    *stream = args.stream;
    return absl::OkStatus();
  }

  absl::Status Scratch(size_t bytes, void** scratch) {
    XLA_FFI_DeviceMemory_Allocate_Args args{};
    args.struct_size = XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE;
    args.ctx = call_.context();
    args.size = bytes > 0 ? bytes : 1;
    args.alignment = 256;
    const std::string error =
        xla_ffi::TakeError(call_.api(), call_.api()->XLA_FFI_DeviceMemory_Allocate(&args));
    if (!error.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("allocating ", bytes, " bytes of GPU scratch memory failed: ", error));
    }
    scratch_ = args.data;
    scratch_bytes_ = args.size;
    *scratch = scratch_;
    return absl::OkStatus();
  }

  // The `count` hyperparameters (of type C) on the host.
  template <typename C>
  absl::Status Hyperparameters(const Buffer& hyper, void* stream, int count, C* out) {
    return CudaStatus(gpu::CopyToHost(out, hyper.data, count * sizeof(C), stream),
                      "reading the hyperparameters");
  }

 private:
  const Call& call_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

// Runs a sparse launcher as the OpKernels' LaunchSparse does: scratch sized
// and allocated, `launch(scratch, bytes, &bad)`, a bad index (found before any
// write) turned into the op's error.
template <typename Launch>
absl::Status LaunchSparse(GpuCall& gpu_call, gpu::DType dtype, const gpu::SparseRows& rows,
                          void* stream, const char* what, Launch launch) {
  size_t bytes = 0;
  absl::Status status = CudaStatus(gpu::SparseScratchBytes(dtype, rows, stream, &bytes), what);
  void* scratch = nullptr;
  if (status.ok()) status = gpu_call.Scratch(bytes, &scratch);
  if (!status.ok()) return status;
  gpu::IndexError bad{-1, 0};
  status = CudaStatus(launch(scratch, bytes, &bad), what);
  if (status.ok() && bad.position >= 0) {
    return IndexOutOfRange(bad.position, bad.index, rows.num_rows);
  }
  return status;
}

template <typename F>
absl::Status WithComputeType(gpu::DType dtype, F&& f) {
  if (dtype == gpu::DType::kDouble) return f(double{});
  return f(float{});
}

// The rounding the `layout` operand of a V2 call asks for (xla_targets.h),
// read on the host.
absl::Status ReadLayout(GpuCall& gpu_call, const Buffer& operand, void* stream,
                        AdamStateLayout* layout) {
  int64_t values[kLayoutValues];
  absl::Status status = gpu_call.Hyperparameters(operand, stream, kLayoutValues, values);
  *layout = LayoutFromValues(values);
  return status;
}

// Both lazy Adam targets; kLight reads the slots' type and the layout operand.
template <bool kLight>
absl::Status SparseLazyAdam(const Call& call) {
  using Operand = LazyAdamOperand;
  const char* target = kLight ? kSparseLazyAdamV2 : kSparseLazyAdam;
  absl::Status status = CheckCall(call, target, kLight ? Operand::kLayout + 1 : Operand::kLayout,
                                  lazy_adam::kNumVariables, /*aliased=*/lazy_adam::kNumVariables);
  gpu::DType dtype, slot_dtype;
  if (status.ok()) status = GpuTypeOf(target, call.arg(Operand::kVar).dtype, &dtype);
  if (status.ok()) status = GpuTypeOf(target, call.arg(Operand::kM).dtype, &slot_dtype);
  gpu::SparseRows rows;
  if (status.ok()) {
    status = SparseRowsOf(target, call.arg(Operand::kVar), call.arg(Operand::kIndices), &rows);
  }
  GpuCall gpu_call(call);
  void* stream = nullptr;
  if (status.ok()) status = gpu_call.Stream(&stream);
  AdamStateLayout layout;
  if (kLight && status.ok()) {
    status = ReadLayout(gpu_call, call.arg(Operand::kLayout), stream, &layout);
  }
  if (!status.ok()) return status;
  return WithComputeType(dtype, [&](auto c) {
    using C = decltype(c);
    lazy_adam::Hyperparameters<C> hyper;
    absl::Status read = gpu_call.Hyperparameters(call.arg(Operand::kHyper), stream,
                                                 lazy_adam::kNumHyperValues, hyper.values);
    if (!read.ok()) return read;
    // Computed on the host in the compute type, exactly as the OpKernel does.
    const AdamStep<double> step = CastStep<double>(hyper.Step());
    return LaunchSparse(gpu_call, dtype, rows, stream, "SparseApplyLazyAdam",
                        [&](void* scratch, size_t bytes, gpu::IndexError* bad) {
                          return gpu::SparseApplyLazyAdam(
                              dtype, slot_dtype, rows, call.arg(Operand::kGrad).data,
                              call.ret(Operand::kVar).data, call.ret(Operand::kM).data,
                              call.ret(Operand::kV).data, step, layout, scratch, bytes, stream,
                              bad);
                        });
  });
}

// Both Clippy targets: the accumulator of the table's type, or with the
// layout operand (V2 ops) of its own.
template <bool kSparse>
absl::Status ClippyAdagrad(const Call& call) {
  using Operand = ClippyOperand;
  const ClippyCall<kSparse> clippy(call, /*aliased=*/clippy_adagrad::kNumVariables);
  const char* target = clippy.target;
  const int hyper_index = clippy.hyper;
  const bool light = clippy.light;
  absl::Status status = clippy.status;
  gpu::DType dtype, accum_dtype;
  if (status.ok()) status = GpuTypeOf(target, call.arg(Operand::kVar).dtype, &dtype);
  if (status.ok()) status = GpuTypeOf(target, call.arg(Operand::kAccum).dtype, &accum_dtype);
  gpu::SparseRows rows;
  if (kSparse && status.ok()) {
    status = SparseRowsOf(target, call.arg(Operand::kVar), call.arg(Operand::kIndices), &rows);
  }
  GpuCall gpu_call(call);
  void* stream = nullptr;
  if (status.ok()) status = gpu_call.Stream(&stream);
  AdamStateLayout layout;
  if (light && status.ok()) {
    status = ReadLayout(gpu_call, call.arg(hyper_index + 1), stream, &layout);
  }
  if (!status.ok()) return status;
  return WithComputeType(dtype, [&](auto c) {
    using C = decltype(c);
    C h[clippy_adagrad::kNumHyperValues];
    absl::Status read =
        gpu_call.Hyperparameters(call.arg(hyper_index), stream, clippy_adagrad::kNumHyperValues, h);
    if (!read.ok()) return read;
    ClippyStep<C> c_step = clippy_adagrad::StepFromValues(h);
    c_step.stochastic_rounding = layout.stochastic_rounding;
    c_step.noise_key = light ? ClippyNoiseKey(layout.seed, layout.step) : 0;
    const ClippyStep<double> step = CastStep<double>(c_step);
    void* var = call.ret(Operand::kVar).data;
    void* accum = call.ret(Operand::kAccum).data;
    void* scale = call.ret(Operand::kScaleResult).data;
    const void* grad = call.arg(Operand::kGrad).data;
    if constexpr (kSparse) {
      return LaunchSparse(gpu_call, dtype, rows, stream, "SparseApplyClippyAdagrad",
                          [&](void* scratch, size_t bytes, gpu::IndexError* bad) {
                            return gpu::SparseApplyClippyAdagrad(dtype, accum_dtype, rows, grad,
                                                                 var, accum, step, scale, scratch,
                                                                 bytes, stream, bad);
                          });
    } else {
      const size_t bytes = gpu::DenseScratchBytes(dtype);
      void* scratch = nullptr;
      absl::Status allocated = gpu_call.Scratch(bytes, &scratch);
      if (!allocated.ok()) return allocated;
      return CudaStatus(
          gpu::ApplyClippyAdagrad(dtype, accum_dtype, call.arg(Operand::kVar).num_elements(), grad,
                                  var, accum, step, scale, scratch, bytes, stream),
          "ApplyClippyAdagrad");
    }
  });
}

// The row-wise Adagrad target: the accumulator of the compute type (float,
// double for a double table), one value per row of var.
absl::Status SparseRowwiseAdagrad(const Call& call) {
  using Operand = RowwiseAdagradOperand;
  const char* target = kSparseRowwiseAdagrad;
  absl::Status status =
      CheckCall(call, target, Operand::kLayout + 1, rowwise_adagrad::kNumVariables,
                /*aliased=*/rowwise_adagrad::kNumVariables);
  gpu::DType dtype, accum_dtype;
  if (status.ok()) status = GpuTypeOf(target, call.arg(Operand::kVar).dtype, &dtype);
  if (status.ok()) status = GpuTypeOf(target, call.arg(Operand::kAccum).dtype, &accum_dtype);
  if (status.ok() &&
      accum_dtype != (dtype == gpu::DType::kDouble ? gpu::DType::kDouble : gpu::DType::kFloat)) {
    status = Mismatch(target,
                      absl::StrCat("an accumulator of XLA type ", call.arg(Operand::kAccum).dtype,
                                   " (it is of the compute type, F32 or F64)"));
  }
  gpu::SparseRows rows;
  if (status.ok()) {
    status = SparseRowsOf(target, call.arg(Operand::kVar), call.arg(Operand::kIndices), &rows);
  }
  GpuCall gpu_call(call);
  void* stream = nullptr;
  if (status.ok()) status = gpu_call.Stream(&stream);
  if (!status.ok()) return status;
  return WithComputeType(dtype, [&](auto c) {
    using C = decltype(c);
    C h[rowwise_adagrad::kNumHyperValues];
    absl::Status read = gpu_call.Hyperparameters(call.arg(Operand::kHyper), stream,
                                                 rowwise_adagrad::kNumHyperValues, h);
    if (!read.ok()) return read;
    AdamStateLayout layout;
    read = ReadLayout(gpu_call, call.arg(Operand::kLayout), stream, &layout);
    if (!read.ok()) return read;
    RowwiseAdagradStep<double> step = CastStep<double>(rowwise_adagrad::StepFromValues(h));
    step.stochastic_rounding = layout.stochastic_rounding;
    step.seed = layout.seed;
    return LaunchSparse(gpu_call, dtype, rows, stream, "SparseApplyRowwiseAdagrad",
                        [&](void* scratch, size_t bytes, gpu::IndexError* bad) {
                          return gpu::SparseApplyRowwiseAdagrad(
                              dtype, rows, call.arg(Operand::kGrad).data,
                              call.ret(Operand::kVar).data, call.ret(Operand::kAccum).data, step,
                              scratch, bytes, stream, bad);
                        });
  });
}

#endif  // TF_OPT_OPS_XLA_FFI_HAS_0_1

}  // namespace

std::string RegisterGpuTargets(const XLA_FFI_Api* api) {
#if TF_OPT_OPS_XLA_FFI_HAS_0_1
  return RegisterTargets<SparseLazyAdam<false>, SparseLazyAdam<true>, ClippyAdagrad<false>,
                         ClippyAdagrad<true>, SparseRowwiseAdagrad>(api, "CUDA");
#else
  (void)api;
  return "this TensorFlow's XLA FFI has no GPU stream or device memory API (version 0.1, "
         "TensorFlow 2.18 on)";
#endif
}

}  // namespace xla_targets
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_FFI
