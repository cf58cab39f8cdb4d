// The XLA kernels of the fused ops (what tf2xla lowers each op to inside
// tf.function(jit_compile=True) and Keras' jit_compile), and the entry point
// that registers them and their custom call targets: TfOptOpsXlaRegister,
// which the Python loader calls once _tf_opt_ops.so has registered the ops.
//
// Each kernel reads the variables as TensorFlow's own ResourceApplyAdam XLA
// kernel does (ReadVariableInput), checks every input at compile time with
// the OpKernels' checks and messages (input_checks.h), and emits one custom
// call (xla_targets.h) whose results alias the variable operands, then
// assigns those results to the variables (AssignVariable). With TensorFlow
// donating the variables' buffers to the computation, the target updates
// the tables in place. Why: see docs/design.md, "XLA".
#define EIGEN_USE_THREADS  // TensorFlow kernel idiom (the headers below use Eigen)

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "tf_opt_ops/build_id.h"
#include "tf_opt_ops/xla/xla_targets.h"

#if TF_OPT_OPS_XLA_FFI  // else only the entry point, which says why (see xla_targets.h)
#include <utility>
#include <vector>

#include "tensorflow/compiler/tf2xla/type_util.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/kernel_def.pb.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_opt_ops/core/clippy_adagrad_interface.h"
#include "tf_opt_ops/core/lazy_adam_interface.h"
#include "tf_opt_ops/core/rowwise_adagrad_interface.h"
#include "tf_opt_ops/kernels/input_checks.h"
#include "tf_opt_ops/xla/xla_ffi.h"
#if __has_include("xla/hlo/builder/xla_builder.h")  // TensorFlow 2.19 on
#include "xla/hlo/builder/xla_builder.h"
#else
#include "xla/client/xla_builder.h"
#endif

namespace tf_opt_ops {
namespace {

using ::tensorflow::DataType;
using ::tensorflow::TensorShape;
using ::tensorflow::XlaOpKernelContext;

constexpr char kSparseLazyAdamOp[] = "TfOptOps>ResourceSparseApplyLazyAdam";
constexpr char kSparseLazyAdamV2Op[] = "TfOptOps>ResourceSparseApplyLazyAdamV2";
constexpr char kSparseLazyAdamWOp[] = "TfOptOps>ResourceSparseApplyLazyAdamW";
constexpr char kSparseLazyAdamWV2Op[] = "TfOptOps>ResourceSparseApplyLazyAdamWV2";
constexpr char kClippyAdagradOp[] = "TfOptOps>ResourceApplyClippyAdagrad";
constexpr char kSparseClippyAdagradOp[] = "TfOptOps>ResourceSparseApplyClippyAdagrad";
constexpr char kClippyAdagradV2Op[] = "TfOptOps>ResourceApplyClippyAdagradV2";
constexpr char kSparseClippyAdagradV2Op[] = "TfOptOps>ResourceSparseApplyClippyAdagradV2";
constexpr char kSparseClippyAdagradWOp[] = "TfOptOps>ResourceSparseApplyClippyAdagradW";
constexpr char kSparseClippyAdagradWV2Op[] = "TfOptOps>ResourceSparseApplyClippyAdagradWV2";
constexpr char kSparseRowwiseAdagradOp[] = "TfOptOps>ResourceSparseApplyRowwiseAdagrad";

// The compute type of the hyperparameters: float64 for float64 variables,
// float32 for every other type (as the OpKernels read them).
DataType ScalarType(DataType dtype) {
  return dtype == tensorflow::DT_DOUBLE ? tensorflow::DT_DOUBLE : tensorflow::DT_FLOAT;
}

absl::StatusOr<xla::PrimitiveType> XlaType(DataType dtype) {
  xla::PrimitiveType type;
  absl::Status status = tensorflow::DataTypeToPrimitiveType(dtype, &type);
  if (!status.ok()) return status;
  return type;
}

// The variable at input `index`, read as the OpKernels check it: initialized,
// of `dtype` (the gradient's, or for a slot of its own dtype `table_dtype`,
// Tslot). Fails with their messages.
absl::Status ReadVariable(XlaOpKernelContext* ctx, int index, const char* name, DataType dtype,
                          DataType table_dtype, TensorShape* shape, xla::XlaOp* value) {
  DataType var_dtype = tensorflow::DT_INVALID;
  TensorShape var_shape;
  if (!ctx->GetVariableTypeAndShape(index, &var_dtype, &var_shape).ok() ||
      var_dtype == tensorflow::DT_INVALID) {
    return InvalidArgument(name, " is an uninitialized or deleted variable (input ", index, " of ",
                           ctx->op_kernel().name(),
                           "): initialize it before applying the optimizer.");
  }
  if (var_dtype != dtype) {
    return dtype != table_dtype ? SlotDtypeMismatch(name, var_dtype, dtype)
                                : VariableDtypeMismatch(name, var_dtype, dtype);
  }
  return ctx->ReadVariableInput(index, dtype, shape, value);
}

// The static shape of input `index`. XLA may give an input a dynamic
// (bounded) size, e.g. the output of tf.unique; the targets read whole
// buffers, so that is refused with what to do instead.
absl::Status StaticShape(XlaOpKernelContext* ctx, int index, const char* name, TensorShape* shape) {
  absl::StatusOr<xla::Shape> xla_shape = ctx->InputXlaShape(index);
  if (!xla_shape.ok()) return xla_shape.status();
  if (xla_shape->is_dynamic()) {
    return InvalidArgument(
        name, " of ", ctx->op_kernel().name(), " has a dynamic size inside XLA (",
        xla_shape->ToString(),
        "), which the fused op cannot take: pass the gradient as the model produced it "
        "(the op sums duplicate indices itself, so no tf.unique is needed), or run the step "
        "without jit_compile.");
  }
  shape->Clear();
  for (int64_t d : xla_shape->dimensions()) shape->AddDim(d);
  return absl::OkStatus();
}

// The `count` scalar hyperparameters at inputs `first`.., named `names`,
// checked as the OpKernels check them, then `extra` values, as one vector of
// the compute type.
absl::Status Hyperparameters(XlaOpKernelContext* ctx, DataType dtype, int first, int count,
                             const char* const* names, const std::vector<double>& extra,
                             xla::XlaOp* hyper) {
  const DataType scalar_type = ScalarType(dtype);
  std::vector<xla::XlaOp> parts;
  for (int k = 0; k < count; ++k) {
    const int index = first + k;
    TensorShape shape;
    absl::Status status = StaticShape(ctx, index, names[k], &shape);
    if (!status.ok()) return status;
    status = CheckScalar(names[k], ctx->input_type(index), scalar_type, shape);
    if (!status.ok()) return status;
    parts.push_back(xla::Reshape(ctx->Input(index), {1}));
  }
  xla::XlaBuilder* b = ctx->builder();
  for (double value : extra) {
    parts.push_back(scalar_type == tensorflow::DT_DOUBLE
                        ? xla::ConstantR1<double>(b, {value})
                        : xla::ConstantR1<float>(b, {static_cast<float>(value)}));
  }
  *hyper = xla::ConcatInDim(b, parts, 0);
  return absl::OkStatus();
}

// The custom call `target` over `operands`, with every operand and result
// row-major, results 0..num_aliased-1 aliased to the operands of the same
// position (the variables: updated in place), and the whole result tuple.
// A call whose variables are all empty (a table of no rows) is marked as
// having a side effect: XLA would otherwise drop it whenever nothing reads
// its other results (Clippy's scale), and with it the target's check of the
// indices, which must still reject any index.
absl::StatusOr<xla::XlaOp> UpdateInPlace(XlaOpKernelContext* ctx, const char* target,
                                         const std::vector<xla::XlaOp>& operands,
                                         const std::vector<xla::Shape>& results, int num_aliased) {
  xla::XlaBuilder* b = ctx->builder();
  std::vector<xla::Shape> operand_shapes;
  for (const xla::XlaOp& operand : operands) {
    absl::StatusOr<xla::Shape> shape = b->GetShape(operand);
    if (!shape.ok()) return shape.status();
    operand_shapes.push_back(
        xla::ShapeUtil::MakeShapeWithDescendingLayout(shape->element_type(), shape->dimensions()));
  }
  std::vector<std::pair<xla::ShapeIndex, std::pair<int64_t, xla::ShapeIndex>>> aliasing;
  for (int k = 0; k < num_aliased; ++k) {
    aliasing.push_back({xla::ShapeIndex{k}, {k, xla::ShapeIndex{}}});
  }
  bool variables_empty = true;
  for (int k = 0; k < num_aliased; ++k) {
    variables_empty = variables_empty && xla::ShapeUtil::ElementsIn(results[k]) == 0;
  }
  return xla::CustomCallWithLayout(
      b, target, operands, xla::ShapeUtil::MakeTupleShape(results), operand_shapes, /*opaque=*/"",
      /*has_side_effect=*/variables_empty, aliasing, /*literal=*/nullptr,
      xla::CustomCallSchedule::SCHEDULE_NONE, xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
}

xla::Shape RowMajor(xla::PrimitiveType type, const TensorShape& shape) {
  return xla::ShapeUtil::MakeShapeWithDescendingLayout(type, shape.dim_sizes());
}

// Reads the variables at inputs 0.. (var first, then its slots), of
// `dtypes`, and checks that the slots have var's shape, or, for the one at
// `row_slot` (unless -1), one value per row of var. Their shapes go to
// `shapes`.
absl::Status ReadVariables(XlaOpKernelContext* ctx, const std::vector<DataType>& dtypes,
                           const std::vector<const char*>& names, int row_slot,
                           std::vector<TensorShape>* shapes, std::vector<xla::XlaOp>* values) {
  values->resize(names.size());
  shapes->resize(names.size());
  for (int k = 0; k < static_cast<int>(names.size()); ++k) {
    absl::Status status =
        ReadVariable(ctx, k, names[k], dtypes[k], dtypes[0], &(*shapes)[k], &(*values)[k]);
    if (!status.ok()) return status;
    if (k > 0) {
      status = k == row_slot ? CheckRowSlotShape(names[k], (*shapes)[k], names[0], (*shapes)[0])
                             : CheckSameShape(names[k], (*shapes)[k], names[0], (*shapes)[0]);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

// The `layout` operand of the V2 targets (xla_targets.h): seed, the scalar
// step at input `step_input`, flags.
absl::Status LayoutOperand(XlaOpKernelContext* ctx, int step_input, int64_t seed, int64_t flags,
                           xla::XlaOp* layout) {
  TensorShape step_shape;
  absl::Status status = StaticShape(ctx, step_input, "step", &step_shape);
  if (!status.ok()) return status;
  if (!tensorflow::TensorShapeUtils::IsScalar(step_shape)) {
    return InvalidArgument("step must be a scalar, got shape ", step_shape.DebugString());
  }
  xla::XlaBuilder* b = ctx->builder();
  *layout = xla::ConcatInDim(
      b,
      {xla::ConstantR1<int64_t>(b, {seed}), xla::Reshape(ctx->Input(step_input), {1}),
       xla::ConstantR1<int64_t>(b, {flags})},
      0);
  return absl::OkStatus();
}

absl::Status AssignResults(XlaOpKernelContext* ctx, const std::vector<DataType>& dtypes,
                           xla::XlaOp results) {
  for (int k = 0; k < static_cast<int>(dtypes.size()); ++k) {
    absl::Status status = ctx->AssignVariable(k, dtypes[k], xla::GetTupleElement(results, k));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// The shapes of the results that update the variables of `dtypes` and
// `shapes` in place.
absl::Status VariableResults(const std::vector<DataType>& dtypes,
                             const std::vector<TensorShape>& shapes,
                             std::vector<xla::Shape>* results) {
  for (size_t k = 0; k < dtypes.size(); ++k) {
    absl::StatusOr<xla::PrimitiveType> type = XlaType(dtypes[k]);
    if (!type.ok()) return type.status();
    results->push_back(RowMajor(*type, shapes[k]));
  }
  return absl::OkStatus();
}

// The attributes every op's XLA kernel reads: T and, for a V2 op (`light`),
// the dtype of its slots (`slot_attr`: Tslot or Taccum; else T),
// stochastic_rounding and seed.
class FusedOpXla : public tensorflow::XlaOpKernel {
 protected:
  FusedOpXla(tensorflow::OpKernelConstruction* ctx, bool light, const char* slot_attr)
      : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("T", &dtype_));
    slot_dtype_ = dtype_;
    if (light) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr(slot_attr, &slot_dtype_));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("stochastic_rounding", &stochastic_));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed_));
    }
  }

  DataType dtype_;
  DataType slot_dtype_;
  bool stochastic_ = false;
  int64_t seed_ = 0;
};

// Ops ResourceSparseApplyLazyAdam and, kLight, ResourceSparseApplyLazyAdamV2
// (slots of dtype Tslot, the layout from the attrs and the step input,
// passed to the target as its `layout` operand).
template <bool kLight>
class SparseApplyLazyAdamXla : public FusedOpXla {
 public:
  explicit SparseApplyLazyAdamXla(tensorflow::OpKernelConstruction* ctx)
      : FusedOpXla(ctx, kLight, "Tslot") {
    if (kLight) OP_REQUIRES_OK(ctx, ctx->GetAttr("rowwise_second_moment", &rowwise_));
    decays_ = lazy_adam::HasWeightDecay(ctx->num_inputs(), kLight);
  }

  void Compile(XlaOpKernelContext* ctx) override {
    using namespace lazy_adam;  // NOLINT: the input names
    TensorShape grad_shape, indices_shape;
    std::vector<TensorShape> shapes;
    std::vector<xla::XlaOp> vars;
    const std::vector<DataType> dtypes = {dtype_, slot_dtype_, slot_dtype_};
    OP_REQUIRES_OK(ctx, ReadVariables(ctx, dtypes, {kVariableNames, kVariableNames + kNumVariables},
                                      rowwise_ ? kV : -1, &shapes, &vars));
    xla::XlaOp hyper;
    OP_REQUIRES_OK(ctx, Hyperparameters(ctx, dtype_, kFirstHyperparameter, kNumHyperparameters,
                                        kHyperparameterNames, {}, &hyper));
    // Then the weight decay and whether it applies (lazy_adam::Hyperparameters' values).
    xla::XlaOp decay;
    OP_REQUIRES_OK(ctx, decays_ ? Hyperparameters(ctx, dtype_, WeightDecayInput(kLight), 1,
                                                  &kWeightDecayName, {1.0}, &decay)
                                : Hyperparameters(ctx, dtype_, 0, 0, nullptr, {0.0, 0.0}, &decay));
    hyper = xla::ConcatInDim(ctx->builder(), {hyper, decay}, 0);
    OP_REQUIRES_OK(ctx, StaticShape(ctx, kGrad, "grad", &grad_shape));
    OP_REQUIRES_OK(ctx, StaticShape(ctx, kIndices, "indices", &indices_shape));
    OP_REQUIRES_OK(ctx, ValidateSparseGrad(shapes[kVar], grad_shape, indices_shape));
    xla::XlaOp layout;
    if (kLight) {
      const int64_t flags = (rowwise_ ? xla_targets::kLayoutRowwise : 0) |
                            (stochastic_ ? xla_targets::kLayoutStochastic : 0);
      OP_REQUIRES_OK(ctx, LayoutOperand(ctx, kStep, seed_, flags, &layout));
    }
    if (indices_shape.num_elements() == 0) return;  // nothing to update
    std::vector<xla::Shape> results;
    OP_REQUIRES_OK(ctx, VariableResults(dtypes, shapes, &results));
    // In the order of xla_targets::LazyAdamOperand.
    std::vector<xla::XlaOp> operands = {vars[kVar],           vars[kM], vars[kV], ctx->Input(kGrad),
                                        ctx->Input(kIndices), hyper};
    if (kLight) operands.push_back(layout);
    absl::StatusOr<xla::XlaOp> updated =
        UpdateInPlace(ctx, kLight ? xla_targets::kSparseLazyAdamV2 : xla_targets::kSparseLazyAdam,
                      operands, results, kNumVariables);
    OP_REQUIRES_OK(ctx, updated.status());
    OP_REQUIRES_OK(ctx, AssignResults(ctx, dtypes, *updated));
  }

 private:
  bool rowwise_ = false;
  bool decays_ = false;  // a W op: the weight decay is its last input
};

// Both Clippy ops and their V2 (kLight: the accumulator of dtype Taccum, and
// the `layout` operand as lazy Adam V2's: seed, step, kLayoutStochastic), and
// the sparse ones' W ops (the weight decay their last input).
template <bool kSparse, bool kLight>
class ClippyAdagradXla : public FusedOpXla {
 public:
  explicit ClippyAdagradXla(tensorflow::OpKernelConstruction* ctx)
      : FusedOpXla(ctx, kLight, "Taccum") {
    OP_REQUIRES_OK(ctx, GetClippyAccumulatorUpdateAttrs(ctx, &clip_accumulator_update_,
                                                        &use_standard_accumulator_update_));
    decays_ = kSparse && clippy_adagrad::HasWeightDecay(ctx->num_inputs(), kLight);
  }

  void Compile(XlaOpKernelContext* ctx) override {
    using namespace clippy_adagrad;  // NOLINT: the input names
    TensorShape grad_shape, indices_shape;
    std::vector<TensorShape> shapes;
    std::vector<xla::XlaOp> vars;
    const std::vector<DataType> dtypes = {dtype_, slot_dtype_};
    OP_REQUIRES_OK(ctx, ReadVariables(ctx, dtypes, {kVariableNames, kVariableNames + kNumVariables},
                                      /*row_slot=*/-1, &shapes, &vars));
    xla::XlaOp hyper;
    OP_REQUIRES_OK(ctx, Hyperparameters(ctx, dtype_, kFirstHyperparameter, kNumHyperparameters,
                                        kHyperparameterNames,
                                        {clip_accumulator_update_ ? 1.0 : 0.0,
                                         use_standard_accumulator_update_ ? 1.0 : 0.0},
                                        &hyper));
    // Then the weight decay and whether it applies (clippy_adagrad::StepFromValues).
    xla::XlaOp decay;
    OP_REQUIRES_OK(ctx, decays_ ? Hyperparameters(ctx, dtype_, WeightDecayInput(kLight), 1,
                                                  &kWeightDecayName, {1.0}, &decay)
                                : Hyperparameters(ctx, dtype_, 0, 0, nullptr, {0.0, 0.0}, &decay));
    hyper = xla::ConcatInDim(ctx->builder(), {hyper, decay}, 0);
    OP_REQUIRES_OK(ctx, StaticShape(ctx, kGrad, "grad", &grad_shape));
    absl::StatusOr<xla::PrimitiveType> scalar_type = XlaType(ScalarType(dtype_));
    OP_REQUIRES_OK(ctx, scalar_type.status());
    // In the order of xla_targets::ClippyOperand.
    std::vector<xla::XlaOp> operands = {vars[kVar], vars[kAccum], ctx->Input(kGrad)};
    const char* target = xla_targets::kClippyAdagrad;
    if constexpr (kSparse) {
      OP_REQUIRES_OK(ctx, StaticShape(ctx, kIndices, "indices", &indices_shape));
      OP_REQUIRES_OK(ctx, ValidateSparseGrad(shapes[kVar], grad_shape, indices_shape));
      if (indices_shape.num_elements() == 0) {  // nothing touched: nothing clipped
        ctx->SetOutput(
            0, xla::ConvertElementType(xla::ConstantR0<float>(ctx->builder(), 1.0f), *scalar_type));
        return;
      }
      operands.push_back(ctx->Input(kIndices));
      target = xla_targets::kSparseClippyAdagrad;
    } else {
      OP_REQUIRES_OK(ctx, ValidateDenseGrad(shapes[kVar], grad_shape));
    }
    operands.push_back(hyper);
    if (kLight) {
      xla::XlaOp layout;
      OP_REQUIRES_OK(ctx, LayoutOperand(ctx, StepInput(kSparse), seed_,
                                        stochastic_ ? xla_targets::kLayoutStochastic : 0, &layout));
      operands.push_back(layout);
    }
    std::vector<xla::Shape> results;
    OP_REQUIRES_OK(ctx, VariableResults(dtypes, shapes, &results));
    results.push_back(xla::ShapeUtil::MakeShapeWithDescendingLayout(*scalar_type, {}));
    absl::StatusOr<xla::XlaOp> updated =
        UpdateInPlace(ctx, target, operands, results, kNumVariables);
    OP_REQUIRES_OK(ctx, updated.status());
    OP_REQUIRES_OK(ctx, AssignResults(ctx, dtypes, *updated));
    ctx->SetOutput(0, xla::GetTupleElement(*updated, kNumVariables));
  }

 private:
  bool clip_accumulator_update_;
  bool use_standard_accumulator_update_;
  bool decays_ = false;  // a sparse W op: the weight decay is its last input
};

// Op ResourceSparseApplyRowwiseAdagrad: the accumulator of the compute type,
// one value per row of var; the weight decay mode travels in `hyper`, the
// table's rounding in the `layout` operand (seed, no step, kLayoutStochastic).
class SparseApplyRowwiseAdagradXla : public FusedOpXla {
 public:
  explicit SparseApplyRowwiseAdagradXla(tensorflow::OpKernelConstruction* ctx)
      : FusedOpXla(ctx, /*light=*/false, nullptr) {
    OP_REQUIRES_OK(ctx, ReadRowwiseAdagradAttrs(ctx, &mode_, &stochastic_, &seed_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    using namespace rowwise_adagrad;  // NOLINT: the input names
    TensorShape grad_shape, indices_shape;
    std::vector<TensorShape> shapes;
    std::vector<xla::XlaOp> vars;
    const std::vector<DataType> dtypes = {dtype_, ScalarType(dtype_)};
    OP_REQUIRES_OK(ctx, ReadVariables(ctx, dtypes, {kVariableNames, kVariableNames + kNumVariables},
                                      /*row_slot=*/kAccum, &shapes, &vars));
    xla::XlaOp hyper;
    OP_REQUIRES_OK(ctx,
                   Hyperparameters(ctx, dtype_, kFirstHyperparameter, kNumHyperparameters,
                                   kHyperparameterNames, {static_cast<double>(mode_)}, &hyper));
    OP_REQUIRES_OK(ctx, StaticShape(ctx, kGrad, "grad", &grad_shape));
    OP_REQUIRES_OK(ctx, StaticShape(ctx, kIndices, "indices", &indices_shape));
    OP_REQUIRES_OK(ctx, ValidateSparseGrad(shapes[kVar], grad_shape, indices_shape));
    if (indices_shape.num_elements() == 0) return;  // nothing to update
    std::vector<xla::Shape> results;
    OP_REQUIRES_OK(ctx, VariableResults(dtypes, shapes, &results));
    // In the order of xla_targets::RowwiseAdagradOperand.
    xla::XlaBuilder* b = ctx->builder();
    const xla::XlaOp layout =
        xla::ConstantR1<int64_t>(b, {seed_, 0, stochastic_ ? xla_targets::kLayoutStochastic : 0});
    const std::vector<xla::XlaOp> operands = {vars[kVar],           vars[kAccum], ctx->Input(kGrad),
                                              ctx->Input(kIndices), hyper,        layout};
    absl::StatusOr<xla::XlaOp> updated =
        UpdateInPlace(ctx, xla_targets::kSparseRowwiseAdagrad, operands, results, kNumVariables);
    OP_REQUIRES_OK(ctx, updated.status());
    OP_REQUIRES_OK(ctx, AssignResults(ctx, dtypes, *updated));
  }

 private:
  RowwiseWeightDecay mode_;
  bool stochastic_ = false;
  int64_t seed_ = 0;
};

template <typename Kernel>
tensorflow::OpKernel* Create(tensorflow::OpKernelConstruction* ctx) {
  return new Kernel(ctx);
}

struct XlaKernel {
  const char* op;
  tensorflow::XlaOpRegistry::Factory factory;
};

const XlaKernel kKernels[] = {
    {kSparseLazyAdamOp, Create<SparseApplyLazyAdamXla<false>>},
    {kSparseLazyAdamV2Op, Create<SparseApplyLazyAdamXla<true>>},
    {kSparseLazyAdamWOp, Create<SparseApplyLazyAdamXla<false>>},
    {kSparseLazyAdamWV2Op, Create<SparseApplyLazyAdamXla<true>>},
    {kClippyAdagradOp, Create<ClippyAdagradXla<false, false>>},
    {kSparseClippyAdagradOp, Create<ClippyAdagradXla<true, false>>},
    {kClippyAdagradV2Op, Create<ClippyAdagradXla<false, true>>},
    {kSparseClippyAdagradV2Op, Create<ClippyAdagradXla<true, true>>},
    {kSparseClippyAdagradWOp, Create<ClippyAdagradXla<true, false>>},
    {kSparseClippyAdagradWV2Op, Create<ClippyAdagradXla<true, true>>},
    {kSparseRowwiseAdagradOp, Create<SparseApplyRowwiseAdagradXla>},
};

// True once TensorFlow has turned the XLA op registry into kernels (at its
// first XLA compilation): registrations made after that get no kernels from
// it, so ours must be registered as kernels directly.
bool CompilationKernelsRegistered() {
  const tensorflow::KernelList kernels = tensorflow::GetRegisteredKernelsForOp("Identity");
  for (const tensorflow::KernelDef& kernel : kernels.kernel()) {
    if (kernel.device_type() == tensorflow::DEVICE_CPU_XLA_JIT) return true;
  }
  return false;
}

// What XlaOpRegistry::RegisterCompilationKernels does for one op on one XLA
// device: a kernel of class XlaJitOp for every type the op allows.
void RegisterCompilationKernel(const tensorflow::OpDef& op_def, const std::string& device,
                               tensorflow::XlaOpRegistry::Factory factory) {
  auto* kernel_def = new tensorflow::KernelDef;
  kernel_def->set_op(op_def.name());
  kernel_def->set_device_type(device);
  for (const tensorflow::OpDef::AttrDef& attr : op_def.attr()) {
    if (attr.type() != "type") continue;
    tensorflow::KernelDef::AttrConstraint* constraint = kernel_def->add_constraint();
    constraint->set_name(attr.name());
    *constraint->mutable_allowed_values() = attr.allowed_values();
  }
  // Lives as long as the process, as TensorFlow's own registrars.
  new tensorflow::kernel_factory::OpKernelRegistrar(kernel_def, "XlaJitOp", factory);
}

// Bits of TfOptOpsXlaRegister's result: the XLA devices with kernels.
constexpr int kCpu = 1;
constexpr int kGpu = 2;

// Registers the kernels and targets; returns the devices they serve (-1 and
// `error` set on failure, `note` set when the GPU has none).
int Register(const char* build_id, std::string* error, std::string* note) {
  if (std::strcmp(build_id, TF_OPT_OPS_BUILD_ID) != 0) {
    *error = std::string("this XLA library is build ") + TF_OPT_OPS_BUILD_ID +
             " but the package expects build " + build_id +
             ": reinstall tf_opt_ops, or rebuild both libraries (make build)";
    return -1;
  }
  std::vector<const tensorflow::OpDef*> op_defs;
  for (const XlaKernel& kernel : kKernels) {
    const tensorflow::OpRegistrationData* data = nullptr;
    if (!tensorflow::OpRegistry::Global()->LookUp(kernel.op, &data).ok()) {
      *error = std::string("op ") + kernel.op +
               " is not registered: load _tf_opt_ops.so (import tf_opt_ops) before its XLA "
               "library";
      return -1;
    }
    op_defs.push_back(&data->op_def);
  }
  for (const std::string& op : tensorflow::XlaOpRegistry::GetAllRegisteredOps()) {
    // Another copy of this library (loaded from another path) registered
    // the kernels and targets; registering again would abort in TensorFlow.
    if (op == kSparseLazyAdamOp) {
      *note = "the XLA kernels were registered by another copy of this library";
      return kCpu;
    }
  }
  const XLA_FFI_Api* api = xla::ffi::GetXlaFfiApi();
  *error = xla_targets::RegisterCpuTargets(api);
  if (!error->empty()) {
    *error = "registering the CPU custom call targets with XLA failed: " + *error;
    return -1;
  }
  int devices = kCpu;
  std::vector<absl::string_view> device_names = {tensorflow::DEVICE_CPU_XLA_JIT};
#if GOOGLE_CUDA
  // A CPU-only TensorFlow may have no CUDA platform to register with: the
  // GPU then has no kernels, which the optimizers learn from the result.
  const std::string gpu_error = xla_targets::RegisterGpuTargets(api);
  if (gpu_error.empty()) {
    devices |= kGpu;
    device_names.push_back(tensorflow::DEVICE_GPU_XLA_JIT);
  } else {
    *note = "no XLA kernels on GPUs: registering the GPU custom call targets failed: " + gpu_error;
  }
#else
  *note = "no XLA kernels on GPUs: this library was built without CUDA";
#endif
  const bool late = CompilationKernelsRegistered();
  for (size_t k = 0; k < op_defs.size(); ++k) {
    new tensorflow::XlaOpRegistrar(tensorflow::XlaOpRegistrationBuilder::Name(kKernels[k].op)
                                       .Device(device_names)
                                       .Build(kKernels[k].factory));
    if (late) {
      for (absl::string_view device : device_names) {
        RegisterCompilationKernel(*op_defs[k], std::string(device), kKernels[k].factory);
      }
    }
  }
  return devices;
}

}  // namespace
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_FFI

// Registers the XLA kernels and custom call targets, once per process;
// `build_id` is the build the package expects (its _build_info.py). Returns
// the XLA devices that have kernels (1: the CPU, 2: GPUs), with a note in
// `message` when GPUs have none; or -1, with what failed and what to do in
// `message`, having registered no kernel.
extern "C" __attribute__((visibility("default"))) int TfOptOpsXlaRegister(const char* build_id,
                                                                          char* message,
                                                                          size_t size) {
  static std::mutex mu;
  static int devices = 0;
  static std::string note;
  std::lock_guard<std::mutex> lock(mu);
  if (devices <= 0) {
#if TF_OPT_OPS_XLA_FFI
    std::string error;
    devices = tf_opt_ops::Register(build_id, &error, &note);
    if (devices < 0) note = error;
#else
    (void)build_id;
    devices = -1;
    note =
        "this TensorFlow has no XLA FFI in its headers (xla/ffi/api/c_api.h, from TensorFlow "
        "2.17 on), which the XLA kernels' custom calls are written against";
#endif
  }
  std::snprintf(message, size, "%s", note.c_str());
  return devices;
}
