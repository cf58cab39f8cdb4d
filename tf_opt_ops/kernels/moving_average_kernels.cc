// Lazy moving average: OpKernel (validation, locking), the CPU functor, and
// the GPU functor calling the launcher of moving_average_kernels.cu.cc.
#define EIGEN_USE_THREADS  // before any Eigen header: kernels run on the CPU thread pool
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // Eigen::GpuDevice, for the op's stream
#endif

#include "tf_opt_ops/kernels/moving_average_kernels.h"

#include "tf_opt_ops/core/cpu_kernels.h"
#include "tf_opt_ops/core/moving_average_interface.h"
#include "tf_opt_ops/kernels/gpu_glue.h"
#include "tf_opt_ops/kernels/kernel_registration.h"
#include "tf_opt_ops/kernels/op_inputs.h"

namespace tf_opt_ops {
namespace functor {

template <typename T, typename Tindex>
struct SparseApplyLazyMovingAverage<CPUDevice, T, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& var,
                          Tensor* average, Tensor* synced,
                          const MovingAverageStep<ComputeT<T>>& step) {
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    const int64_t num_rows = average->dim_size(0);
    const cpu::MovingAverageRows<Tindex> rows{indices.flat<Tindex>().data(), indices.NumElements(),
                                              num_rows,
                                              num_rows > 0 ? average->NumElements() / num_rows : 0};
    return cpu::SparseApplyLazyMovingAverage<T, Tindex>(pool, rows, var.flat<T>().data(),
                                                        average->flat<T>().data(),
                                                        synced->flat<int32_t>().data(), step);
  }
};

#if GOOGLE_CUDA
// Index check first (one stream synchronization, before any write), then
// the distinct rows on the device.
template <typename T, typename Tindex>
struct SparseApplyLazyMovingAverage<GPUDevice, T, Tindex> {
  absl::Status operator()(OpKernelContext* ctx, const Tensor& indices, const Tensor& var,
                          Tensor* average, Tensor* synced,
                          const MovingAverageStep<ComputeT<T>>& step) {
    const gpu::SparseRows rows = MakeSparseRows<Tindex>(indices, *average);
    return LaunchSparse<T>(ctx, rows, "SparseApplyLazyMovingAverage",
                           [&](void* scratch, size_t bytes, void* stream, gpu::IndexError* bad) {
                             return gpu::SparseApplyLazyMovingAverage(
                                 GpuDType<T>(), rows, var.data(), average->data(),
                                 static_cast<int32_t*>(synced->data()), CastStep<double>(step),
                                 scratch, bytes, stream, bad);
                           });
  }
};
#endif  // GOOGLE_CUDA

}  // namespace functor

namespace {

// average must be at least 1-D (indices name its rows); indices a vector.
absl::Status ValidateRows(const TensorShape& average, const TensorShape& indices) {
  if (!TensorShapeUtils::IsVectorOrHigher(average)) {
    return InvalidArgument("average must be at least 1-D, got ", average.DebugString(),
                           ": indices name its rows.");
  }
  if (!TensorShapeUtils::IsVector(indices)) {
    return InvalidArgument("indices must be a vector, got shape ", indices.DebugString());
  }
  return absl::OkStatus();
}

// The op's variables in kLockOrder: average and var of dtype T, synced int32.
absl::Status DtypeMismatch(size_t k, const char* name, tensorflow::DataType got,
                           tensorflow::DataType want, tensorflow::DataType table) {
  const char* average = moving_average::kVariableNames[0];
  if (k == 0) {
    return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(got), " but T is ",
                           tensorflow::DataTypeString(want),
                           ": pass the table's dtype as T (the dtype of average and var).");
  }
  if (static_cast<int>(k) == moving_average::kSyncedSlot) {
    return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(got),
                           " but must be int32: create ", name,
                           " as an int32 variable of one step count per row of ", average, ".");
  }
  return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(got), " but ", average,
                         " has dtype ", tensorflow::DataTypeString(table),
                         ": create the average with the dtype of the table it averages.");
}

constexpr VariableErrors kErrors{DtypeMismatch, CheckSyncedShape};

}  // namespace

// Op ResourceSparseApplyLazyMovingAverage.
template <typename Device, typename T, typename Tindex>
class SparseApplyLazyMovingAverageOp : public tensorflow::OpKernel {
 public:
  using C = ComputeT<T>;

  explicit SparseApplyLazyMovingAverageOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_locking", &use_locking_));
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    using namespace moving_average;  // NOLINT: the input names
    LockedVariables<Device, T> vars;
    const tensorflow::DataType t = tensorflow::DataTypeToEnum<T>::v();
    OP_REQUIRES_OK(ctx, vars.Acquire(ctx, use_locking_, /*sparse=*/true,
                                     {kLockOrder, kLockOrder + kNumVariables},
                                     {kVariableNames, kVariableNames + kNumVariables},
                                     {t, t, tensorflow::DT_INT32}, kSyncedSlot, kErrors));
    int32_t count = 0;
    C ema_momentum;
    OP_REQUIRES_OK(ctx, ReadScalar<int32_t>(ctx, kCount, kScalarNames[0], &count));
    OP_REQUIRES_OK(ctx, ReadScalar<C>(ctx, kEmaMomentum, kScalarNames[1], &ema_momentum));
    Tensor* average = vars.tensor(0);
    const Tensor& indices = ctx->input(kIndices);
    OP_REQUIRES_OK(ctx, ValidateRows(average->shape(), indices.shape()));
    if (indices.NumElements() == 0) return;
    OP_REQUIRES_OK(ctx, functor::SparseApplyLazyMovingAverage<Device, T, Tindex>()(
                            ctx, indices, *vars.tensor(1), average, vars.tensor(2),
                            MakeMovingAverageStep<T, C>(ema_momentum, count)));
  }

 private:
  bool use_locking_;
};

// On GPUs the scalars are read from host memory.
TF_OPT_OPS_REGISTER_SPARSE_TABLE_OP("TfOptOps>ResourceSparseApplyLazyMovingAverage",
                                    moving_average::kScalarNames, SparseApplyLazyMovingAverageOp)

}  // namespace tf_opt_ops
