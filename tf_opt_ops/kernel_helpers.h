// What the fused kernels share on the TensorFlow side: finding and locking
// the resource variables, validating inputs before any write, reading scalar
// hyperparameters, and summing duplicate gradient rows.
#ifndef TF_OPT_OPS_KERNEL_HELPERS_H_
#define TF_OPT_OPS_KERNEL_HELPERS_H_

#ifndef EIGEN_USE_THREADS
#error "define EIGEN_USE_THREADS before including any header (TensorFlow kernel idiom)"
#endif

#include <optional>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/kernels/dense_update_functor.h"

#if GOOGLE_CUDA
#ifndef EIGEN_USE_GPU
#error "define EIGEN_USE_GPU (under GOOGLE_CUDA) before including any header"
#endif
namespace tensorflow {
namespace functor {
// The copy training_op_helpers.h makes when a sparse update finds a shared
// buffer (copy-on-read) or a dense one finds it aliased. TensorFlow defines
// the GPU instance in libtensorflow_cc.so.2, which only the GPU wheel exports
// (and not to custom ops by contract); defining it here, ahead of its use,
// keeps the .so dependent on libtensorflow_framework.so.2 alone. A
// device-to-device copy on the op's stream, like TensorFlow's own.
template <typename T>
struct DenseUpdate<Eigen::GpuDevice, T, ASSIGN> {
  void operator()(const Eigen::GpuDevice& d, typename TTypes<T>::Flat params,
                  typename TTypes<T>::ConstFlat update) {
    d.memcpy(params.data(), update.data(), params.size() * sizeof(T));
  }
};
}  // namespace functor
}  // namespace tensorflow
#endif  // GOOGLE_CUDA

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "tf_opt_ops/huge_pages.h"
#include "tf_opt_ops/optimizer_math.h"
#include "tf_opt_ops/row_groups.h"
#if GOOGLE_CUDA
#include "tf_opt_ops/gpu_launchers.h"
#endif

namespace tf_opt_ops {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::TensorShapeUtils;
using CPUDevice = Eigen::ThreadPoolDevice;

template <typename... Args>
absl::Status InvalidArgument(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

// Holds the locks of the op's resource variables and their live tensors.
// Fails (InvalidArgument) when a variable does not exist or is uninitialized.
template <typename Device, typename T>
class LockedVariables {
 public:
  // `inputs` are the input positions of the resource variables; `names` name
  // them in errors. `sparse` as in MaybeLockVariableInputMutexesInOrder.
  absl::Status Acquire(OpKernelContext* ctx, bool use_locking, bool sparse,
                       const std::vector<int>& inputs, const std::vector<const char*>& names) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      tensorflow::core::RefCountPtr<tensorflow::Var> var;
      if (!tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, inputs[k]), &var)
               .ok()) {
        return InvalidArgument(names[k], " is an uninitialized or deleted variable (input ",
                               inputs[k], " of ", ctx->op_kernel().name(),
                               "): initialize it before applying the optimizer.");
      }
    }
    lock_.emplace(tensorflow::MaybeLockVariableInputMutexesInOrder<Device, T>(ctx, use_locking,
                                                                              sparse, inputs));
    tensors_.resize(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      TF_RETURN_IF_ERROR(tensorflow::GetInputTensorFromVariable<Device, T>(
          ctx, inputs[k], use_locking, sparse, &tensors_[k]));
      if (!tensors_[k].IsInitialized()) {
        return InvalidArgument(names[k], " is uninitialized (input ", inputs[k], " of ",
                               ctx->op_kernel().name(),
                               "): initialize it before applying the optimizer.");
      }
    }
    for (size_t k = 1; k < inputs.size(); ++k) {
      if (!tensors_[0].shape().IsSameSize(tensors_[k].shape())) {
        return InvalidArgument(names[k], " must have the shape of ", names[0], ": ", names[k], " ",
                               tensors_[k].shape().DebugString(), " vs ", names[0], " ",
                               tensors_[0].shape().DebugString());
      }
    }
    if (!TensorShapeUtils::IsVectorOrHigher(tensors_[0].shape())) {
      return InvalidArgument(names[0], " must be at least 1-D, got ",
                             tensors_[0].shape().DebugString());
    }
    return absl::OkStatus();
  }

  Tensor* tensor(int k) { return &tensors_[k]; }

 private:
  std::optional<tensorflow::VariableInputLockHolder> lock_;
  std::vector<Tensor> tensors_;
};

// Updates that move less than this run on the calling thread: waking a pool
// thread costs ~45 us here (measured: 1k rows x 16 floats took 115 us per op
// on 2 threads, 70 us on 1), more than such an update takes on one core.
constexpr double kInlineBytes = 1 << 20;

// Runs fn(begin, end) over [0, n): inline for small work, otherwise split over
// TensorFlow's intra-op pool with `cost` per item.
template <typename F>
void ForEachItem(OpKernelContext* ctx, int64_t n, const Eigen::TensorOpCost& cost, F&& fn) {
  if (n * (cost.bytes_loaded() + cost.bytes_stored()) < kInlineBytes) {
    fn(int64_t{0}, n);
    return;
  }
  ctx->eigen_cpu_device().parallelFor(n, cost, std::forward<F>(fn));
}

// Touched rows are scattered over tables far larger than the caches, so the
// hardware prefetcher cannot guess the next one: the row loops ask for the
// rows kPrefetchRows ahead while they work on the current one.
constexpr int64_t kPrefetchRows = 6;

// Prefetches `bytes` from `p` for writing, one cache line at a time.
inline void PrefetchForWrite(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, /*rw=*/1, /*locality=*/3);
}

// Reads the scalar hyperparameter at `input`, failing when it is not a scalar.
template <typename C>
absl::Status ReadScalar(OpKernelContext* ctx, int input, const char* name, C* out) {
  const Tensor& t = ctx->input(input);
  if (!TensorShapeUtils::IsScalar(t.shape())) {
    return InvalidArgument(name, " must be a scalar, got shape ", t.shape().DebugString());
  }
  *out = t.scalar<C>()();
  return absl::OkStatus();
}

// grad must be [len(indices), var.shape[1:]...]; indices a vector.
inline absl::Status ValidateSparseGrad(const Tensor& var, const Tensor& grad,
                                       const Tensor& indices) {
  if (!TensorShapeUtils::IsVector(indices.shape())) {
    return InvalidArgument("indices must be a vector, got shape ", indices.shape().DebugString());
  }
  if (grad.dims() < 1 || grad.dim_size(0) != indices.dim_size(0)) {
    return InvalidArgument("grad must have one row per index: grad ", grad.shape().DebugString(),
                           " vs indices ", indices.shape().DebugString());
  }
  bool rows_match = grad.dims() == var.dims();
  for (int d = 1; rows_match && d < var.dims(); ++d) {
    rows_match = grad.dim_size(d) == var.dim_size(d);
  }
  if (!rows_match) {
    return InvalidArgument("grad rows must have the shape of var rows: grad ",
                           grad.shape().DebugString(), " vs var ", var.shape().DebugString());
  }
  return absl::OkStatus();
}

inline absl::Status ValidateDenseGrad(const Tensor& var, const Tensor& grad) {
  if (!var.shape().IsSameSize(grad.shape())) {
    return InvalidArgument("grad must have the shape of var: grad ", grad.shape().DebugString(),
                           " vs var ", var.shape().DebugString());
  }
  return absl::OkStatus();
}

// The error of an index outside [0, num_rows), on CPU and GPU alike.
inline absl::Status IndexOutOfRange(int64_t position, int64_t index, int64_t num_rows) {
  return InvalidArgument("indices[", position, "] = ", index, " is not in [0, ", num_rows,
                         "): every index must name a row of var");
}

// Groups `indices` by row after checking each is in [0, num_rows).
template <typename Tindex>
absl::Status GroupRows(const Tensor& indices, int64_t num_rows, RowGroups* groups) {
  const auto flat = indices.flat<Tindex>();
  const int64_t bad = groups->Build(flat.data(), flat.size(), num_rows);
  if (bad >= 0) return IndexOutOfRange(bad, static_cast<int64_t>(flat(bad)), num_rows);
  return absl::OkStatus();
}

// The gradient of each unique row, as a row-major [num_unique, dim] array:
// the caller's grad itself when there are no duplicates, otherwise the
// duplicate-summed rows (in the compute type C) in a temporary owned here.
template <typename T>
class SummedGradRows {
 public:
  using C = ComputeT<T>;

  absl::Status Init(OpKernelContext* ctx, const RowGroups& groups, const T* grad, int64_t dim) {
    grad_ = grad;
    summed_used_ = groups.has_duplicates();
    if (!summed_used_) return absl::OkStatus();
    TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DataTypeToEnum<C>::v(),
                                          TensorShape({groups.num_unique(), dim}), &summed_));
    C* out = summed_.flat<C>().data();
    const auto sum_groups = [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        C* row = out + u * dim;
        int64_t p = groups.first(u);
        const T* g = grad + p * dim;
        for (int64_t j = 0; j < dim; ++j) row[j] = Load<C>(g[j]);
        for (p = groups.next(p); p >= 0; p = groups.next(p)) {
          g = grad + p * dim;
          for (int64_t j = 0; j < dim; ++j) row[j] += Load<C>(g[j]);
        }
      }
    };
    ForEachItem(ctx, groups.num_unique(),
                Eigen::TensorOpCost(2.0 * dim * sizeof(T), dim * sizeof(C), dim), sum_groups);
    return absl::OkStatus();
  }

  // Calls f(rows) with a `const T*` or `const C*` pointer to the rows.
  template <typename F>
  void Visit(F&& f) const {
    if (summed_used_) {
      f(summed_.flat<C>().data());
    } else {
      f(grad_);
    }
  }

 private:
  const T* grad_ = nullptr;
  bool summed_used_ = false;
  Tensor summed_;
};

#if GOOGLE_CUDA
// ------------------------------------------------------------------- GPU glue
// The GPU functors call the TensorFlow-free launchers of gpu_launchers.h with
// the op's stream and scratch from the op's allocator.
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

// A failed CUDA call (e.g. a driver older than the CUDA 13 runtime linked
// into the library) fails the op with the CUDA error named.
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

// The launchers take the compute-type values widened to double (exact).
template <typename C>
AdamStep<double> Widen(const AdamStep<C>& s) {
  return AdamStep<double>{s.lr_t,  s.beta1,           s.one_minus_beta1,
                          s.beta2, s.one_minus_beta2, s.epsilon};
}
template <typename C>
ClippyStep<double> Widen(const ClippyStep<C>& s) {
  return ClippyStep<double>{s.lr,
                            s.epsilon,
                            s.variable_relative_threshold,
                            s.accumulator_relative_threshold,
                            s.absolute_threshold,
                            s.clip_accumulator_update,
                            s.use_standard_accumulator_update};
}
#endif  // GOOGLE_CUDA

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_KERNEL_HELPERS_H_
