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
#include "tf_opt_ops/core/errors.h"
#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/xla/xla_gpu_copy.h"
#include "tf_opt_ops/xla/xla_targets.h"
#if TF_OPT_OPS_XLA_FFI  // else nothing: see xla_targets.h
#include "tf_opt_ops/xla/xla_ffi.h"

namespace tf_opt_ops {
namespace xla_targets {
namespace {

using xla_ffi::Buffer;
using xla_ffi::Call;

#if TF_OPT_OPS_XLA_FFI_HAS_0_1  // XLA's stream and device memory from the FFI

absl::Status Mismatch(const char* target, const std::string& what) {
  return absl::InternalError(absl::StrCat("tf_opt_ops: custom call ", target, " got ", what,
                                          ", not what its XLA kernel emits; please report this "
                                          "as a tf_opt_ops bug."));
}

absl::Status CheckCall(const Call& call, const char* target, int64_t args, int64_t rets,
                       int aliased) {
  if (call.num_args() != args || call.num_rets() != rets) {
    return Mismatch(target, absl::StrCat(call.num_args(), " operands and ", call.num_rets(),
                                         " results (expected ", args, " and ", rets, ")"));
  }
  for (int k = 0; k < aliased; ++k) {
    if (call.arg(k).data != call.ret(k).data) {
      return Mismatch(target, absl::StrCat("result ", k, " apart from operand ", k,
                                           " (they must alias: the update is in place)"));
    }
  }
  return absl::OkStatus();
}

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
  int64_t values[kAdamLayoutValues];
  absl::Status status = gpu_call.Hyperparameters(operand, stream, kAdamLayoutValues, values);
  layout->seed = static_cast<uint64_t>(values[0]);
  layout->step = values[1];
  layout->rowwise_second_moment = (values[2] & kLayoutRowwise) != 0;
  layout->stochastic_rounding = (values[2] & kLayoutStochastic) != 0;
  return status;
}

// Both lazy Adam targets; kLight reads the slots' type and the layout operand.
template <bool kLight>
absl::Status SparseLazyAdam(const Call& call) {
  const char* target = kLight ? kSparseLazyAdamV2 : kSparseLazyAdam;
  absl::Status status = CheckCall(call, target, kLight ? 7 : 6, 3, 3);
  gpu::DType dtype, slot_dtype;
  if (status.ok()) status = GpuTypeOf(target, call.arg(0).dtype, &dtype);
  if (status.ok()) status = GpuTypeOf(target, call.arg(1).dtype, &slot_dtype);
  gpu::SparseRows rows;
  if (status.ok()) status = SparseRowsOf(target, call.arg(0), call.arg(4), &rows);
  GpuCall gpu_call(call);
  void* stream = nullptr;
  if (status.ok()) status = gpu_call.Stream(&stream);
  AdamStateLayout layout;
  if (kLight && status.ok()) status = ReadLayout(gpu_call, call.arg(6), stream, &layout);
  if (!status.ok()) return status;
  return WithComputeType(dtype, [&](auto c) {
    using C = decltype(c);
    C h[kAdamHyperparameters];
    absl::Status read = gpu_call.Hyperparameters(call.arg(5), stream, kAdamHyperparameters, h);
    if (!read.ok()) return read;
    // Computed on the host in the compute type, exactly as the OpKernel does.
    const AdamStep<double> step =
        CastStep<double>(MakeAdamStep<C>(h[2], h[3], h[4], h[5], h[0], h[1]));
    return LaunchSparse(gpu_call, dtype, rows, stream, "SparseApplyLazyAdam",
                        [&](void* scratch, size_t bytes, gpu::IndexError* bad) {
                          return gpu::SparseApplyLazyAdam(dtype, slot_dtype, rows, call.arg(3).data,
                                                          call.ret(0).data, call.ret(1).data,
                                                          call.ret(2).data, step, layout, scratch,
                                                          bytes, stream, bad);
                        });
  });
}

// Both Clippy targets: the accumulator of the table's type, or with the
// layout operand (V2 ops) of its own.
template <bool kSparse>
absl::Status ClippyAdagrad(const Call& call) {
  const char* target = kSparse ? kSparseClippyAdagrad : kClippyAdagrad;
  const int hyper_index = kSparse ? 4 : 3;
  const bool light = call.num_args() == hyper_index + 2;
  absl::Status status = CheckCall(call, target, hyper_index + (light ? 2 : 1), 3, 2);
  gpu::DType dtype, accum_dtype;
  if (status.ok()) status = GpuTypeOf(target, call.arg(0).dtype, &dtype);
  if (status.ok()) status = GpuTypeOf(target, call.arg(1).dtype, &accum_dtype);
  gpu::SparseRows rows;
  if (kSparse && status.ok()) status = SparseRowsOf(target, call.arg(0), call.arg(3), &rows);
  GpuCall gpu_call(call);
  void* stream = nullptr;
  if (status.ok()) status = gpu_call.Stream(&stream);
  AdamStateLayout layout;
  if (light && status.ok())
    status = ReadLayout(gpu_call, call.arg(hyper_index + 1), stream, &layout);
  if (!status.ok()) return status;
  return WithComputeType(dtype, [&](auto c) {
    using C = decltype(c);
    C h[kClippyHyperparameters];
    absl::Status read =
        gpu_call.Hyperparameters(call.arg(hyper_index), stream, kClippyHyperparameters, h);
    if (!read.ok()) return read;
    ClippyStep<C> c_step{h[0], h[1], h[2], h[3], h[4], h[5] != C(0), h[6] != C(0)};
    c_step.stochastic_rounding = layout.stochastic_rounding;
    c_step.noise_key = light ? ClippyNoiseKey(layout.seed, layout.step) : 0;
    const ClippyStep<double> step = CastStep<double>(c_step);
    void* var = call.ret(0).data;
    void* accum = call.ret(1).data;
    void* scale = call.ret(2).data;
    const void* grad = call.arg(2).data;
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
          gpu::ApplyClippyAdagrad(dtype, accum_dtype, call.arg(0).num_elements(), grad, var, accum,
                                  step, scale, scratch, bytes, stream),
          "ApplyClippyAdagrad");
    }
  });
}

template <absl::Status (*kBody)(const Call&)>
XLA_FFI_Error* Handler(XLA_FFI_CallFrame* frame) {
  if (xla_ffi::AnswerMetadataQuery(frame)) return nullptr;
  const Call call(frame);
  if (!call.executing()) return nullptr;
  return call.Fail(kBody(call));
}

#endif  // TF_OPT_OPS_XLA_FFI_HAS_0_1

}  // namespace

std::string RegisterGpuTargets(const XLA_FFI_Api* api) {
#if TF_OPT_OPS_XLA_FFI_HAS_0_1
  for (const auto& [name, handler] :
       {std::pair<const char*, XLA_FFI_Handler*>{kSparseLazyAdam, Handler<SparseLazyAdam<false>>},
        {kSparseLazyAdamV2, Handler<SparseLazyAdam<true>>},
        {kClippyAdagrad, Handler<ClippyAdagrad<false>>},
        {kSparseClippyAdagrad, Handler<ClippyAdagrad<true>>}}) {
    const std::string error = xla_ffi::RegisterHandler(api, name, "CUDA", handler);
    if (!error.empty()) return error;
  }
  return "";
#else
  (void)api;
  return "this TensorFlow's XLA FFI has no GPU stream or device memory API (version 0.1, "
         "TensorFlow 2.18 on)";
#endif
}

}  // namespace xla_targets
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_FFI
