// Gradient accumulation on a sparse gradient's rows: the OpKernels
// (validation, locking) of ResourceSparseAccumulateRows and
// ResourceSparseTakeWindowGradient, calling the CPU loops of
// cpu_accumulate.h. CPU only: on GPUs the Python optimizers keep the same
// numbers in TensorFlow ops (tf_opt_ops/_core.py).
#define EIGEN_USE_THREADS  // before any Eigen header: kernels run on the CPU thread pool
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // op_inputs.h's GPU device, unused by these CPU-only kernels
#endif

#include <cstdint>

#include "tf_opt_ops/core/accumulate_interface.h"
#include "tf_opt_ops/core/cpu_accumulate.h"
#include "tf_opt_ops/kernels/kernel_registration.h"
#include "tf_opt_ops/kernels/op_inputs.h"

namespace tf_opt_ops {
namespace {

using namespace accumulate;  // NOLINT: the input names

absl::Status DtypeMismatch(size_t k, const char* name, tensorflow::DataType got,
                           tensorflow::DataType want, tensorflow::DataType) {
  return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(got), " but must be ",
                         tensorflow::DataTypeString(want),
                         k == 0 ? ": pass the accumulator's dtype as T (cast the values to it)."
                                : ": row_ids, row_count and indices share one integer dtype.");
}

// row_ids: one id per row of the accumulator.
absl::Status CheckRowIdsShape(const char* name, const TensorShape& shape,
                              const char* accumulator_name, const TensorShape& accumulator) {
  // A 0-D accumulator is Acquire's caller's error, which names it.
  if (accumulator.dims() == 0 || IsRowSlotShape(shape, accumulator)) return absl::OkStatus();
  return InvalidArgument(name, " holds one id per row of ", accumulator_name,
                         ", so its shape must be [", accumulator.dim_size(0), "]: ", name, " ",
                         shape.DebugString(), " vs ", accumulator_name, " ",
                         accumulator.DebugString());
}

constexpr VariableErrors kErrors{DtypeMismatch, CheckRowIdsShape};

// The variables of both ops, locked (exclusively: the ids and count are
// rewritten whole) and validated, and the micro-step's rows checked against
// the accumulator.
template <typename T, typename Tindex>
class AccumulateInputs {
 public:
  absl::Status Acquire(OpKernelContext* ctx) {
    TF_RETURN_IF_ERROR(vars_.Acquire(
        ctx, /*use_locking=*/true, /*sparse=*/true, {kVariables, kVariables + kNumVariables},
        {kVariableNames, kVariableNames + kNumVariables},
        {tensorflow::DataTypeToEnum<T>::v(), tensorflow::DataTypeToEnum<Tindex>::v(),
         tensorflow::DataTypeToEnum<Tindex>::v()},
        kRowIdsSlot, kErrors, kRowCountSlot));
    const TensorShape& accumulator = vars_.tensor(0)->shape();
    const TensorShape& indices = ctx->input(kIndices).shape();
    const TensorShape& values = ctx->input(kValues).shape();
    if (!TensorShapeUtils::IsVectorOrHigher(accumulator)) {
      return InvalidArgument("accumulator must be at least 1-D, got ", accumulator.DebugString(),
                             ": indices name its rows.");
    }
    if (!TensorShapeUtils::IsVector(indices)) {
      return InvalidArgument("indices must be a vector, got shape ", indices.DebugString());
    }
    bool rows_match =
        values.dims() == accumulator.dims() && values.dim_size(0) == indices.dim_size(0);
    for (int d = 1; rows_match && d < accumulator.dims(); ++d) {
      rows_match = values.dim_size(d) == accumulator.dim_size(d);
    }
    if (!rows_match) {
      return InvalidArgument("values must hold one accumulator row per index: values ",
                             values.DebugString(), " vs accumulator ", accumulator.DebugString(),
                             " and indices ", indices.DebugString());
    }
    return absl::OkStatus();
  }

  cpu::AccumulatorWindow<T, Tindex> window() {
    Tensor* accumulator = vars_.tensor(0);
    Tensor* row_ids = vars_.tensor(kRowIdsSlot);
    Tensor* row_count = vars_.tensor(kRowCountSlot);
    const int64_t num_rows = accumulator->dim_size(0);
    return {accumulator->flat<T>().data(), num_rows,
            num_rows > 0 ? accumulator->NumElements() / num_rows : 0,
            row_ids->flat<Tindex>().data(), row_count->flat<Tindex>().data()};
  }

  static cpu::MicroStepRows<T, Tindex> step(OpKernelContext* ctx) {
    const Tensor& indices = ctx->input(kIndices);
    return {indices.flat<Tindex>().data(), indices.NumElements(),
            ctx->input(kValues).flat<T>().data()};
  }

  const TensorShape& accumulator_shape() { return vars_.tensor(0)->shape(); }

 private:
  LockedVariables<CPUDevice, T> vars_;
};

}  // namespace

// Op ResourceSparseAccumulateRows.
template <typename T, typename Tindex>
class SparseAccumulateRowsOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    AccumulateInputs<T, Tindex> inputs;
    OP_REQUIRES_OK(ctx, inputs.Acquire(ctx));
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    OP_REQUIRES_OK(ctx,
                   cpu::SparseAccumulateRows<T, Tindex>(pool, inputs.window(), inputs.step(ctx)));
  }
};

// Op ResourceSparseTakeWindowGradient.
template <typename T, typename Tindex>
class SparseTakeWindowGradientOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    AccumulateInputs<T, Tindex> inputs;
    OP_REQUIRES_OK(ctx, inputs.Acquire(ctx));
    const Tensor& steps = ctx->input(kSteps);
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(steps.shape()) && steps.scalar<int64_t>()() > 0,
                InvalidArgument("steps must be a positive scalar, got ", steps.DebugString()));
    const EigenCpuPool pool(ctx->eigen_cpu_device());
    cpu::WindowGradient<T, Tindex> window;
    OP_REQUIRES_OK(ctx, window.Group(pool, inputs.window(), inputs.step(ctx)));
    TensorShape average_shape = inputs.accumulator_shape();
    average_shape.set_dim(0, window.num_rows());
    Tensor* rows = nullptr;
    Tensor* average = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({window.num_rows()}), &rows));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, average_shape, &average));
    window.Take(pool, static_cast<T>(steps.scalar<int64_t>()()), rows->flat<int64_t>().data(),
                average->flat<T>().data());
  }
};

#define TF_OPT_OPS_REGISTER_ACCUMULATE_KERNELS(T, Tindex)                      \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseAccumulateRows")     \
                                 .Device(tensorflow::DEVICE_CPU)               \
                                 .TypeConstraint<T>("T")                       \
                                 .TypeConstraint<Tindex>("Tindices"),          \
                             SparseAccumulateRowsOp<T, Tindex>)                \
  TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>ResourceSparseTakeWindowGradient") \
                                 .Device(tensorflow::DEVICE_CPU)               \
                                 .TypeConstraint<T>("T")                       \
                                 .TypeConstraint<Tindex>("Tindices"),          \
                             SparseTakeWindowGradientOp<T, Tindex>)
#define TF_OPT_OPS_REGISTER_ACCUMULATE_T(T)          \
  TF_OPT_OPS_REGISTER_ACCUMULATE_KERNELS(T, int32_t) \
  TF_OPT_OPS_REGISTER_ACCUMULATE_KERNELS(T, int64_t)
TF_OPT_OPS_REGISTER_ACCUMULATE_T(Eigen::half)
TF_OPT_OPS_REGISTER_ACCUMULATE_T(Eigen::bfloat16)
TF_OPT_OPS_REGISTER_ACCUMULATE_T(float)
TF_OPT_OPS_REGISTER_ACCUMULATE_T(double)
#undef TF_OPT_OPS_REGISTER_ACCUMULATE_T
#undef TF_OPT_OPS_REGISTER_ACCUMULATE_KERNELS

}  // namespace tf_opt_ops
