// Locking and validating the inputs of the fused ops, shared by every OpKernel
// on CPU and GPU alike (as TensorFlow's training_op_helpers.h is for its
// training ops): finding and locking the resource variables, checking dtypes
// and shapes, reading scalar hyperparameters. Every check runs before any
// write, and a bad input fails the op with InvalidArgument naming it.
// Why: see docs/design.md, "Invariants".
#ifndef TF_OPT_OPS_KERNELS_OP_INPUTS_H_
#define TF_OPT_OPS_KERNELS_OP_INPUTS_H_

#ifndef EIGEN_USE_THREADS
#error "define EIGEN_USE_THREADS before including any header (TensorFlow kernel idiom)"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tf_opt_ops/core/cpu_kernels.h"
#include "tf_opt_ops/core/grad_scale_interface.h"
#include "tf_opt_ops/core/moving_average_interface.h"
#include "tf_opt_ops/kernels/input_checks.h"
#include "tf_opt_ops/platform/huge_pages.h"

#if GOOGLE_CUDA && !defined(EIGEN_USE_GPU)
#error "define EIGEN_USE_GPU (under GOOGLE_CUDA) before including any header"
#endif

namespace tf_opt_ops {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::TensorShapeUtils;
using CPUDevice = Eigen::ThreadPoolDevice;

// Replaces `*tensor` with a copy of it in a new buffer of its own, on the op's
// device (on GPU, a device-to-device copy on the op's stream): what
// TensorFlow's training ops do before writing a buffer that a read may alias.
template <typename Device>
absl::Status CopyToNewBuffer(OpKernelContext* ctx, Tensor* tensor) {
  Tensor copy;
  tensorflow::AllocatorAttributes attr;
  attr.set_gpu_compatible(true);
  attr.set_nic_compatible(true);
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensor->dtype(), tensor->shape(), &copy, attr));
  const Tensor& source = *tensor;
  ctx->eigen_device<Device>().memcpy(const_cast<char*>(copy.tensor_data().data()),
                                     source.tensor_data().data(), source.TotalBytes());
  *tensor = copy;
  return absl::OkStatus();
}

// The errors LockedVariables::Acquire returns for a variable of the wrong
// dtype and a row slot of the wrong shape, in the words of the op's own
// inputs. The default, kOptimizerVariableErrors, is the optimizers' words.
struct VariableErrors {
  // Variable `k` of Acquire's `inputs`, named `name`, has dtype `got`, not
  // `want`; `table` is the dtype wanted for variable 0.
  absl::Status (*dtype_mismatch)(size_t k, const char* name, tensorflow::DataType got,
                                 tensorflow::DataType want, tensorflow::DataType table);
  // OK, or the error of a row slot `name` of `shape` beside the table
  // `table_name` of `table_shape`.
  absl::Status (*check_row_slot_shape)(const char* name, const TensorShape& shape,
                                       const char* table_name, const TensorShape& table_shape);
};

// The optimizers' variables: T is grad's dtype, and a V2 op's slot dtype
// (Tslot, Taccum) may differ from it.
inline absl::Status OptimizerDtypeMismatch(size_t k, const char* name, tensorflow::DataType got,
                                           tensorflow::DataType want, tensorflow::DataType table) {
  return k > 0 && want != table ? SlotDtypeMismatch(name, got, want)
                                : VariableDtypeMismatch(name, got, want);
}
inline constexpr VariableErrors kOptimizerVariableErrors{OptimizerDtypeMismatch, CheckRowSlotShape};

// Holds the locks of the op's resource variables and their live tensors, as
// TensorFlow's training ops do (training_op_helpers.h), written with the
// public Var API only: each variable's mutex taken once, in address order,
// exclusively for dense updates and for `use_locking`. Fails (InvalidArgument)
// when a variable does not exist, is uninitialized, is not of dtype T, or
// differs in shape from the first one. On CPU, the buffers a sparse update
// scatters into get huge pages (huge_pages.h).
//
// Sparse updates keep dense reads cheap. TensorFlow's own sparse ops switch a
// variable to copy-on-read mode, after which every dense read copies the
// whole buffer, and Keras 3's Embedding reads its table densely every step.
// So a variable not yet in that mode is updated in place, under exclusive
// locks, when nothing aliases its buffer, and the mode stays off; only a
// buffer some read still aliases is copied and switched, as TensorFlow's
// sparse ops do. A sparse update of variables all in that mode takes shared
// locks (without `use_locking`), as TensorFlow's. Why: see docs/design.md,
// "Choices".
template <typename Device, typename T>
class LockedVariables {
 public:
  // `inputs` are the input positions of the resource variables (the table
  // first, then its slots), of `dtypes`; `names` name them in errors. Unless
  // `row_slot` is -1, the variable at that position of `inputs` holds one
  // value per row of the first; unless `scalar_slot` is -1, the one at that
  // position is a scalar; unless `synced_slot` is -1, the one at that position
  // is a moving average's synced steps (CheckSyncedShape), a second row slot.
  // `errors` words the dtype and row slot errors.
  absl::Status Acquire(OpKernelContext* ctx, bool use_locking, bool sparse,
                       const std::vector<int>& inputs, const std::vector<const char*>& names,
                       const std::vector<tensorflow::DataType>& dtypes, int row_slot,
                       const VariableErrors& errors = kOptimizerVariableErrors,
                       int scalar_slot = -1, int synced_slot = -1) {
    std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>> variables(inputs.size());
    bool all_copy_on_read = true;
    for (size_t k = 0; k < inputs.size(); ++k) {
      tensorflow::core::RefCountPtr<tensorflow::Var>& var = variables[k];
      if (!tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, inputs[k]), &var)
               .ok()) {
        return InvalidArgument(names[k], " is an uninitialized or deleted variable (input ",
                               inputs[k], " of ", ctx->op_kernel().name(),
                               "): initialize it before applying the optimizer.");
      }
      // A Var's dtype is fixed when it is created, so no lock is needed to
      // read it, and nothing is copied as T before this check. A variable
      // created but never assigned (as a failed XLA call on an uninitialized
      // one leaves it) has no dtype: it is uninitialized, whatever the dtypes.
      const tensorflow::DataType var_dtype = var->tensor()->dtype();
      if (var_dtype == tensorflow::DT_INVALID) return Uninitialized(ctx, names[k], inputs[k]);
      if (var_dtype != dtypes[k]) {
        return errors.dtype_mismatch(k, names[k], var_dtype, dtypes[k], dtypes[0]);
      }
      all_copy_on_read = all_copy_on_read && var->copy_on_read_mode.load();
    }
    // The mode only ever turns on, so a variable seen in it here stays in it.
    const bool in_place = sparse && !all_copy_on_read;
    Lock(variables, /*exclusive=*/use_locking || !sparse || in_place);
    // Every buffer checked before any is taken: taking one adds a reference,
    // which a variable passed twice would then see as an alias.
    for (const auto& var : variables) {
      Tensor* buffer = var->tensor();
      if (!buffer->IsInitialized()) continue;
      if (in_place && !var->copy_on_read_mode.load() && !buffer->RefCountIsOne()) {
        // A read still aliases the buffer: copy it once and switch the mode.
        TF_RETURN_IF_ERROR(CopyToNewBuffer<Device>(ctx, buffer));
        var->copy_on_read_mode.store(true);
      } else if (!sparse && (var->copy_on_read_mode.load() || !buffer->RefCountIsOne())) {
        // A dense write never lands in a buffer that a read may hold.
        TF_RETURN_IF_ERROR(CopyToNewBuffer<Device>(ctx, buffer));
      }
    }
    tensors_.resize(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      tensors_[k] = *variables[k]->tensor();
      if (!tensors_[k].IsInitialized()) return Uninitialized(ctx, names[k], inputs[k]);
    }
    for (size_t k = 1; k < inputs.size(); ++k) {
      if (static_cast<int>(k) == scalar_slot) {
        if (TensorShapeUtils::IsScalar(tensors_[k].shape())) continue;
        return InvalidArgument(names[k], " must be a scalar variable, got shape ",
                               tensors_[k].shape().DebugString());
      }
      if (static_cast<int>(k) == synced_slot) {
        TF_RETURN_IF_ERROR(
            CheckSyncedShape(names[k], tensors_[k].shape(), names[0], tensors_[0].shape()));
        continue;
      }
      TF_RETURN_IF_ERROR(
          static_cast<int>(k) == row_slot
              ? errors.check_row_slot_shape(names[k], tensors_[k].shape(), names[0],
                                            tensors_[0].shape())
              : CheckSameShape(names[k], tensors_[k].shape(), names[0], tensors_[0].shape()));
    }
    if constexpr (std::is_same_v<Device, CPUDevice>) {
      if (sparse) {
        for (size_t k = 0; k < inputs.size(); ++k) {
          AdviseHugePages(variables[k].get(), tensors_[k].tensor_data().data(),
                          tensors_[k].TotalBytes());
        }
      }
    }
    return absl::OkStatus();
  }

  Tensor* tensor(int k) { return &tensors_[k]; }

 private:
  using Variables = std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>>;

  static absl::Status Uninitialized(OpKernelContext* ctx, const char* name, int input) {
    return InvalidArgument(name, " is uninitialized (input ", input, " of ",
                           ctx->op_kernel().name(),
                           "): initialize it before applying the optimizer.");
  }
  // The type of Var::mu(): tsl::mutex, which newer TensorFlow marks deprecated
  // in favour of absl::Mutex, while Var still hands it out.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  using Mutex = std::remove_pointer_t<decltype(std::declval<tensorflow::Var&>().mu())>;
#pragma GCC diagnostic pop

  // Each distinct mutex once, in address order (no deadlock with another op
  // locking an overlapping set).
  void Lock(const Variables& variables, bool exclusive) {
    std::vector<Mutex*> mutexes;
    for (const auto& var : variables) mutexes.push_back(var->mu());
    std::sort(mutexes.begin(), mutexes.end());
    mutexes.erase(std::unique(mutexes.begin(), mutexes.end()), mutexes.end());
    for (Mutex* mu : mutexes) {
      if (exclusive) {
        exclusive_.emplace_back(*mu);
      } else {
        shared_.emplace_back(*mu);
      }
    }
  }

  std::vector<std::unique_lock<Mutex>> exclusive_;
  std::vector<std::shared_lock<Mutex>> shared_;
  std::vector<Tensor> tensors_;
};

// Reads the scalar hyperparameter at `input` of the compute type C, failing
// when it is not a scalar or not of dtype C (the kernels accept any Tscalar,
// so that a mismatch is this error rather than a missing kernel).
template <typename C>
absl::Status ReadScalar(OpKernelContext* ctx, int input, const char* name, C* out) {
  const Tensor& t = ctx->input(input);
  TF_RETURN_IF_ERROR(CheckScalar(name, t.dtype(), tensorflow::DataTypeToEnum<C>::v(), t.shape()));
  *out = t.scalar<C>()();
  return absl::OkStatus();
}

// An op's grad_scale inputs (grad_scale_interface.h): their number, the attr
// num_grad_scales of a Scaled op (0 on the ops without the inputs), and
// whether the last two are a clip range (attr clip_grad_values).
struct GradScaleInputs {
  int count = 0;
  bool clips = false;
};

inline absl::Status GetGradScaleInputs(tensorflow::OpKernelConstruction* ctx,
                                       GradScaleInputs* inputs) {
  *inputs = {};
  if (!ctx->HasAttr(grad_scale::kCountAttr)) return absl::OkStatus();
  TF_RETURN_IF_ERROR(ctx->GetAttr(grad_scale::kCountAttr, &inputs->count));
  if (ctx->HasAttr(grad_scale::kClipsAttr)) {
    TF_RETURN_IF_ERROR(ctx->GetAttr(grad_scale::kClipsAttr, &inputs->clips));
  }
  if (!grad_scale::IsValidCount(inputs->count, inputs->clips)) {
    return InvalidArgument("num_grad_scales = ", inputs->count,
                           " with clip_grad_values = ", inputs->clips ? "true" : "false", ", but ",
                           grad_scale::kCountRule);
  }
  return absl::OkStatus();
}

// Reads an op's grad_scale inputs (GetGradScaleInputs), its last: scalars of
// the gradient's dtype T (the op's type constraint).
template <typename T>
absl::Status ReadGradScale(OpKernelContext* ctx, const GradScaleInputs& inputs,
                           GradScale<ComputeT<T>>* scale) {
  using C = ComputeT<T>;
  const int first = grad_scale::FirstInput(ctx->num_inputs(), inputs.count);
  C values[grad_scale::kMaxCount] = {};
  for (int k = 0; k < inputs.count; ++k) {
    const Tensor& t = ctx->input(first + k);
    if (!TensorShapeUtils::IsScalar(t.shape())) {
      return InvalidArgument(grad_scale::kName, "[", k, "] must be a scalar, got shape ",
                             t.shape().DebugString());
    }
    values[k] = static_cast<C>(t.scalar<T>()());
  }
  *scale = GradScale<C>{};
  scale->count = inputs.count - (inputs.clips ? grad_scale::kClipCount : 0);
  if (scale->count > 0) scale->numerator = values[0];
  if (scale->count > 1) {
    scale->denominator = values[1];
    scale->inverse_denominator = ExactInverse(scale->denominator);
  }
  if (inputs.clips) {
    scale->clips = true;
    scale->clip_min = values[scale->count];
    scale->clip_max = values[scale->count + 1];
    // TensorFlow's minimum and maximum give NaN for a NaN bound, whatever the
    // value; a NaN numerator gives every value NaN, which the bounds then keep.
    if (std::isnan(scale->clip_min) || std::isnan(scale->clip_max)) {
      scale->numerator = std::numeric_limits<C>::quiet_NaN();
    }
  }
  return absl::OkStatus();
}

// A sparse op's validated inputs as the CPU updates (cpu_kernels.h) take them.
template <typename T, typename Tindex>
cpu::SparseGrad<T, Tindex> CpuSparseGrad(const Tensor& indices, const Tensor& grad,
                                         const Tensor& var,
                                         const GradScale<ComputeT<T>>& scale = {}) {
  const int64_t num_rows = var.dim_size(0);
  return cpu::SparseGrad<T, Tindex>{indices.flat<Tindex>().data(),
                                    indices.NumElements(),
                                    grad.flat<T>().data(),
                                    num_rows,
                                    num_rows > 0 ? var.NumElements() / num_rows : 0,
                                    scale};
}

// The averaged ops' variables (an optimizer's with a moving average kept in
// its pass): the table, its slots and the average of the gradient's dtype;
// synced, at `kSyncedSlot` of Acquire's `inputs`, int32.
template <int kSyncedSlot>
absl::Status AveragedDtypeMismatch(size_t k, const char* name, tensorflow::DataType got,
                                   tensorflow::DataType want, tensorflow::DataType) {
  if (static_cast<int>(k) != kSyncedSlot) return VariableDtypeMismatch(name, got, want);
  return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(got),
                         " but must be int32: create ", name,
                         " as an int32 variable of one step count per row of var.");
}

template <int kSyncedSlot>
inline constexpr VariableErrors kAveragedErrors{AveragedDtypeMismatch<kSyncedSlot>,
                                                CheckSyncedShape};

// Locks and validates the variables of an averaged op: the `num_variables` at
// `inputs`, named by `names`, of the table's dtype T but synced, the one at
// kSyncedSlot, int32.
template <int kSyncedSlot, typename T>
absl::Status AcquireAveragedVariables(OpKernelContext* ctx, bool use_locking, const int* inputs,
                                      const char* const* names, int num_variables,
                                      LockedVariables<CPUDevice, T>* vars) {
  std::vector<tensorflow::DataType> dtypes(num_variables, tensorflow::DataTypeToEnum<T>::v());
  dtypes[kSyncedSlot] = tensorflow::DT_INT32;
  return vars->Acquire(ctx, use_locking, /*sparse=*/true, {inputs, inputs + num_variables},
                       {names, names + num_variables}, dtypes, kSyncedSlot,
                       kAveragedErrors<kSyncedSlot>);
}

// The moving average of an averaged op: the locked `average` and `synced`,
// the step from its scalar inputs count, at `count_input`, and ema_momentum,
// the next (as op ResourceSparseApplyLazyMovingAverage has them).
template <typename T>
absl::Status ReadLazyAverage(OpKernelContext* ctx, int count_input, Tensor* average, Tensor* synced,
                             cpu::LazyAverage<T>* lazy) {
  using C = ComputeT<T>;
  int32_t count = 0;
  C ema_momentum;
  TF_RETURN_IF_ERROR(
      ReadScalar<int32_t>(ctx, count_input, moving_average::kScalarNames[0], &count));
  TF_RETURN_IF_ERROR(
      ReadScalar<C>(ctx, count_input + 1, moving_average::kScalarNames[1], &ema_momentum));
  *lazy = {average->flat<T>().data(), synced->flat<int32_t>().data(),
           MakeMovingAverageStep<T, C>(ema_momentum, count)};
  return absl::OkStatus();
}

// A window's variables of another dtype: the table's (T) for the optimizer's
// and the accumulator, the indices' for row_ids and row_count.
inline absl::Status WindowDtypeMismatch(size_t, const char* name, tensorflow::DataType got,
                                        tensorflow::DataType want, tensorflow::DataType) {
  if (!tensorflow::DataTypeIsInteger(want)) return VariableDtypeMismatch(name, got, want);
  return InvalidArgument(name, " has dtype ", tensorflow::DataTypeString(got), " but must be ",
                         tensorflow::DataTypeString(want),
                         ": row_ids, row_count and indices share one integer dtype.");
}

inline constexpr VariableErrors kWindowVariableErrors{WindowDtypeMismatch, CheckRowSlotShape};

// The inputs of a window's apply step in one op (ResourceSparseApplyLazyAdamWindow,
// ResourceSparseApplyClippyAdagradWindow, ResourceSparseApplyLazyAdamWindowAveraged
// and their W ops): the optimizer's variables, the table first (with a moving
// average's synced steps, int32, where `synced_slot` is not -1), then the
// window's accumulator, row_ids and row_count, locked exclusively (the ids and the count are
// rewritten whole) and validated; then the window's last micro-step (grad, indices) and steps
// checked and grouped with the held ids (cpu::WindowGradient::Group). Nothing
// is written until both have succeeded.
template <typename T, typename Tindex>
class WindowApplyInputs {
 public:
  // `inputs` and `names`: the `num_variables` variables, the window's three
  // last; `errors` words the dtype errors.
  absl::Status Acquire(OpKernelContext* ctx, const int* inputs, const char* const* names,
                       int num_variables, int synced_slot = -1,
                       const VariableErrors& errors = kWindowVariableErrors) {
    num_variables_ = num_variables;
    std::vector<tensorflow::DataType> dtypes(num_variables, tensorflow::DataTypeToEnum<T>::v());
    dtypes[RowIdsSlot()] = dtypes[RowCountSlot()] = tensorflow::DataTypeToEnum<Tindex>::v();
    if (synced_slot != -1) dtypes[synced_slot] = tensorflow::DT_INT32;
    return vars_.Acquire(ctx, /*use_locking=*/true, /*sparse=*/true,
                         {inputs, inputs + num_variables}, {names, names + num_variables}, dtypes,
                         RowIdsSlot(), errors, RowCountSlot(), synced_slot);
  }

  absl::Status Group(OpKernelContext* ctx, const CpuPool& pool, int grad_input, int indices_input,
                     int steps_input) {
    int64_t steps = 0;
    TF_RETURN_IF_ERROR(ReadScalar<int64_t>(ctx, steps_input, "steps", &steps));
    if (steps <= 0) {
      return InvalidArgument("steps = ", steps,
                             " must be positive: the number of micro-steps in the window.");
    }
    steps_ = static_cast<T>(steps);
    const Tensor& var = *vars_.tensor(0);
    const Tensor& grad = ctx->input(grad_input);
    const Tensor& indices = ctx->input(indices_input);
    TF_RETURN_IF_ERROR(ValidateSparseGrad(var.shape(), grad.shape(), indices.shape()));
    const int64_t num_rows = var.dim_size(0);
    const cpu::AccumulatorWindow<T, Tindex> window{
        vars_.tensor(RowIdsSlot() - 1)->template flat<T>().data(), num_rows,
        num_rows > 0 ? var.NumElements() / num_rows : 0,
        vars_.tensor(RowIdsSlot())->template flat<Tindex>().data(),
        vars_.tensor(RowCountSlot())->template flat<Tindex>().data()};
    return window_.Group(
        pool, window,
        {indices.flat<Tindex>().data(), indices.NumElements(), grad.flat<T>().data()});
  }

  // Variable k of Acquire's `inputs`.
  Tensor* tensor(int k) { return vars_.tensor(k); }
  cpu::WindowGradient<T, Tindex>& window() { return window_; }
  T steps() const { return steps_; }

 private:
  int RowIdsSlot() const { return num_variables_ - 2; }
  int RowCountSlot() const { return num_variables_ - 1; }

  LockedVariables<CPUDevice, T> vars_;
  int num_variables_ = 0;
  cpu::WindowGradient<T, Tindex> window_;
  T steps_{};
};

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_KERNELS_OP_INPUTS_H_
