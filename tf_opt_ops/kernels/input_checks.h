// The checks of the fused ops' inputs that need only shapes and dtypes, and
// their error messages: shared by the OpKernels (op_inputs.h adds locking and
// reading the variables) and the XLA kernels (xla_kernels.cc, which check the
// same at compile time), so that a bad input fails with the same message with
// and without XLA. Every check runs before any write.
// Why: see docs/design.md, "Invariants" and "XLA".
#ifndef TF_OPT_OPS_KERNELS_INPUT_CHECKS_H_
#define TF_OPT_OPS_KERNELS_INPUT_CHECKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tf_opt_ops/core/errors.h"
#include "tf_opt_ops/core/rowwise_adagrad_interface.h"

namespace tf_opt_ops {

// A variable or slot whose dtype is not the gradient's.
inline absl::Status VariableDtypeMismatch(const char* name, tensorflow::DataType var_dtype,
                                          tensorflow::DataType dtype) {
  return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(var_dtype),
                         " but grad has dtype ", tensorflow::DataTypeString(dtype),
                         ": the variable, its slots and the gradient must share one dtype "
                         "(cast the gradient, or create the slots with the variable's dtype).");
}

// A slot whose dtype is not the one a V2 op was given for it (Tslot for lazy
// Adam's m and v, Taccum for Clippy's accumulator).
inline absl::Status SlotDtypeMismatch(const char* name, tensorflow::DataType slot_dtype,
                                      tensorflow::DataType want) {
  return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(slot_dtype),
                         " but the op's dtype for it (Tslot or Taccum) is ",
                         tensorflow::DataTypeString(want),
                         ": create the slot with that dtype, or pass the slot's dtype to the op.");
}

// Whether `shape` is [rows] of a table of `table_shape`: one value per row.
inline bool IsRowSlotShape(const tensorflow::TensorShape& shape,
                           const tensorflow::TensorShape& table_shape) {
  return shape.dims() == 1 && table_shape.dims() >= 1 &&
         shape.dim_size(0) == table_shape.dim_size(0);
}

// A slot of one value per row of its variable (row-wise v): shape [rows].
inline absl::Status CheckRowSlotShape(const char* name, const tensorflow::TensorShape& shape,
                                      const char* first_name,
                                      const tensorflow::TensorShape& first_shape) {
  if (IsRowSlotShape(shape, first_shape)) return absl::OkStatus();
  return InvalidArgument(name, " holds one value per row of ", first_name,
                         " (rowwise_second_moment=True), so its shape must be [",
                         first_shape.dims() >= 1 ? first_shape.dim_size(0) : 0, "]: ", name, " ",
                         shape.DebugString(), " vs ", first_name, " ", first_shape.DebugString());
}

// A moving average's sync steps (synced): one int32 per row of `table_name`.
inline absl::Status CheckSyncedShape(const char* name, const tensorflow::TensorShape& shape,
                                     const char* table_name, const tensorflow::TensorShape& table) {
  // A 0-D table is the op's own error, which names it.
  if (table.dims() == 0 || IsRowSlotShape(shape, table)) return absl::OkStatus();
  return InvalidArgument(name, " holds one step count per row of ", table_name,
                         ", so its shape must be [", table.dim_size(0), "]: ", name, " ",
                         shape.DebugString(), " vs ", table_name, " ", table.DebugString(),
                         ": create ", name, " with shape [", table_name, ".shape[0]].");
}

// A slot whose shape is not its variable's.
inline absl::Status CheckSameShape(const char* name, const tensorflow::TensorShape& shape,
                                   const char* first_name,
                                   const tensorflow::TensorShape& first_shape) {
  if (first_shape.IsSameSize(shape)) return absl::OkStatus();
  return InvalidArgument(name, " must have the shape of ", first_name, ": ", name, " ",
                         shape.DebugString(), " vs ", first_name, " ", first_shape.DebugString());
}

// A scalar hyperparameter: of the compute dtype `want`, rank 0.
inline absl::Status CheckScalar(const char* name, tensorflow::DataType dtype,
                                tensorflow::DataType want, const tensorflow::TensorShape& shape) {
  if (dtype != want) {
    return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(dtype), " but must be ",
                           tensorflow::DataTypeString(want),
                           ": hyperparameters are float64 for float64 variables and float32 "
                           "for every other dtype.");
  }
  if (!tensorflow::TensorShapeUtils::IsScalar(shape)) {
    return InvalidArgument(name, " must be a scalar, got shape ", shape.DebugString());
  }
  return absl::OkStatus();
}

// var must be at least 1-D (its rows are what indices name); grad must be
// [len(indices), var.shape[1:]...]; indices a vector.
inline absl::Status ValidateSparseGrad(const tensorflow::TensorShape& var,
                                       const tensorflow::TensorShape& grad,
                                       const tensorflow::TensorShape& indices) {
  using tensorflow::TensorShapeUtils;
  if (!TensorShapeUtils::IsVectorOrHigher(var)) {
    return InvalidArgument("var must be at least 1-D for a sparse update, got ", var.DebugString(),
                           ": indices name rows, so use the dense op for a scalar variable.");
  }
  if (!TensorShapeUtils::IsVector(indices)) {
    return InvalidArgument("indices must be a vector, got shape ", indices.DebugString());
  }
  if (grad.dims() < 1 || grad.dim_size(0) != indices.dim_size(0)) {
    return InvalidArgument("grad must have one row per index: grad ", grad.DebugString(),
                           " vs indices ", indices.DebugString());
  }
  bool rows_match = grad.dims() == var.dims();
  for (int d = 1; rows_match && d < var.dims(); ++d) {
    rows_match = grad.dim_size(d) == var.dim_size(d);
  }
  if (!rows_match) {
    return InvalidArgument("grad rows must have the shape of var rows: grad ", grad.DebugString(),
                           " vs var ", var.DebugString());
  }
  return absl::OkStatus();
}

inline absl::Status ValidateDenseGrad(const tensorflow::TensorShape& var,
                                      const tensorflow::TensorShape& grad) {
  if (!var.IsSameSize(grad)) {
    return InvalidArgument("grad must have the shape of var: grad ", grad.DebugString(), " vs var ",
                           var.DebugString());
  }
  return absl::OkStatus();
}

// Clippy Adagrad's accumulator-update attributes, read and checked alike by the
// OpKernel and the XLA kernel. `Ctx` is an OpKernelConstruction (a template, so
// that this header needs no OpKernel header).
template <typename Ctx>
absl::Status GetClippyAccumulatorUpdateAttrs(Ctx* ctx, bool* clip_accumulator_update,
                                             bool* use_standard_accumulator_update) {
  absl::Status status = ctx->GetAttr("clip_accumulator_update", clip_accumulator_update);
  if (!status.ok()) return status;
  status = ctx->GetAttr("use_standard_accumulator_update", use_standard_accumulator_update);
  if (!status.ok()) return status;
  if (*clip_accumulator_update && *use_standard_accumulator_update) {
    return InvalidArgument(
        "clip_accumulator_update and use_standard_accumulator_update cannot both be true: set "
        "at most one of them.");
  }
  return absl::OkStatus();
}

// The attrs of ResourceSparseApplyRowwiseAdagrad, read the same way by its
// OpKernel and its XLA kernel (`ctx`: either's OpKernelConstruction).
template <typename Construction>
absl::Status ReadRowwiseAdagradAttrs(Construction* ctx, RowwiseWeightDecay* mode,
                                     bool* stochastic_rounding, int64_t* seed) {
  std::string name;
  absl::Status status = ctx->GetAttr("weight_decay_mode", &name);
  if (!status.ok()) return status;
  if (!rowwise_adagrad::WeightDecayModeFromName(name.c_str(), mode)) {
    return InvalidArgument("weight_decay_mode must be \"none\", \"l2\" or \"decoupled\", got \"",
                           name, "\"");
  }
  status = ctx->GetAttr("stochastic_rounding", stochastic_rounding);
  if (!status.ok()) return status;
  return ctx->GetAttr("seed", seed);
}

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_KERNELS_INPUT_CHECKS_H_
