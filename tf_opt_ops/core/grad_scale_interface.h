// The scale of a sparse op's gradient values (Keras' clipnorm and
// global_clipnorm) and their clip range (Keras' clipvalue), applied where the
// op reads each value instead of in a tensor of scaled values before it,
// stated once for every Scaled op (those
// of lazy Adam and its W, V2 and averaged ops, and of sparse Clippy Adagrad
// and its W, V2 and averaged ops): its inputs come after all the inputs of
// the op it extends, as the list input `grad_scale: num_grad_scales * T`.
// Ops of their own, so that the ops they extend, their graphs and generated
// Python wrappers stay as they are. TensorFlow-free, as the other interfaces.
// Why: see docs/design.md, "Clipping in the update".
#ifndef TF_OPT_OPS_CORE_GRAD_SCALE_INTERFACE_H_
#define TF_OPT_OPS_CORE_GRAD_SCALE_INTERFACE_H_

namespace tf_opt_ops {
namespace grad_scale {

constexpr const char* kName = "grad_scale";
constexpr const char* kCountAttr = "num_grad_scales";
// A bool attr, false by default (so graphs saved before it load unchanged):
// the last two grad_scale inputs are the least and the greatest value each
// scaled value is clipped to, as tf.clip_by_value clips (a NaN stays NaN).
constexpr const char* kClipsAttr = "clip_grad_values";

// The scale's own inputs, first: 0: no scale; 1: each value g read as
// g * grad_scale[0]; 2: as (g * grad_scale[0]) / grad_scale[1]
// (optimizer_math.h's GradScale). Then the clip range's 2 where it clips.
constexpr int kMaxScaleCount = 2;
constexpr int kClipCount = 2;
constexpr int kMaxCount = kMaxScaleCount + kClipCount;

// Whether `count` grad_scale inputs fit the attr clip_grad_values = `clips`;
// kCountRule says what does, for the errors of the shape function and the
// kernel alike.
constexpr bool IsValidCount(int count, bool clips) {
  return count >= (clips ? kClipCount : 0) && count - (clips ? kClipCount : 0) <= kMaxScaleCount;
}
constexpr const char* kCountRule =
    "grad_scale holds at most 2 scale values (a factor, or a factor and a divisor), then with "
    "clip_grad_values the least and the greatest value, and nothing else.";
static_assert(kMaxScaleCount == 2 && kClipCount == 2, "kCountRule states these counts");

// The first grad_scale input of an op with `num_inputs` inputs, `count` of
// them the scale's.
constexpr int FirstInput(int num_inputs, int count) { return num_inputs - count; }

}  // namespace grad_scale
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_GRAD_SCALE_INTERFACE_H_
