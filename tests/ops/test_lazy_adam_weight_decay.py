"""The lazy Adam W ops (`ResourceSparseApplyLazyAdamW`, `...WV2`): weight decay fused into the
update's pass.

The decay is stock Keras' decoupled decay of the touched rows, computed in the
table's dtype, before the Adam update: bit for bit what `_core.decay_weights`
(a gather and a scatter before the op) gives, and the NumPy reference's
`weight_decay`, with and without XLA. Graphs written before the W ops existed
load and run unchanged. Why: see docs/optimizers.md, "Keras features at sparse
cost".

Run as a script with a library from before the W ops (`python
tests/ops/test_lazy_adam_weight_decay.py DIR`) to rewrite the SavedModel that
test_a_saved_model_without_the_input_loads_and_runs loads.
"""

import itertools
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import _core
from tf_opt_ops import ops
from tf_opt_ops import reference
from tf_opt_ops._loader import load_library

from common import stored_tensor
from common import stored_values

ROWS, DIM = 12, 37  # a row wider than the 32 lanes of the row-wise mean
STEP_INDICES = [[3, 0, 3, 7, 3], [11, 5, 0], [7, 7], [2, 9, 4, 9, 1, 10]]
UNTOUCHED_ROWS = [6, 8]
HYPER = dict(lr=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
WEIGHT_DECAY = 0.3  # large, so that every dtype's rows visibly decay
OLD_SAVED_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                               "lazy_adam_without_weight_decay")

# (table dtype, slot options): V1 for every table dtype, V2 for light slots.
V1_CASES = [(t, {}) for t in ("float16", "bfloat16", "float32", "float64")]
V2_CASES = [(t, dict(slot_dtype=s, rowwise_second_moment=rowwise, stochastic_rounding=stochastic))
            for t, s in itertools.product(("float16", "bfloat16", "float32"), repeat=2)
            for rowwise, stochastic in itertools.product((False, True), repeat=2)
            if t != s or rowwise or stochastic]
CASES = V1_CASES + V2_CASES


def _case_id(case):
  dtype, light = case
  return "-".join([dtype] + [f"{k}={v}" for k, v in light.items()])


def _state(dtype, light, seed=0):
  """Variables (var, m, v) of random values, in the reference's stored form and as variables."""
  rng = np.random.default_rng(seed)
  slot_dtype = light.get("slot_dtype", dtype)
  v_shape = (ROWS,) if light.get("rowwise_second_moment") else (ROWS, DIM)
  stored = [
      reference.random_values(rng, (ROWS, DIM), dtype),
      reference.random_values(rng, (ROWS, DIM), slot_dtype, -0.01, 0.01),
      reference.random_values(rng, v_shape, slot_dtype, 0.0, 1e-4),
  ]
  dtypes = (dtype, slot_dtype, slot_dtype)
  return stored, dtypes


def _variables(stored, dtypes):
  return [tf.Variable(stored_tensor(x, d)) for x, d in zip(stored, dtypes)]


def _grad(dtype, t, n):
  return reference.random_values(np.random.default_rng(100 + t), (n, DIM), dtype)


def _op_step(variables, grad, indices, t, light, weight_decay=None):
  var, m, v = variables
  ops.sparse_lazy_adam(var, m, v, grad, indices, beta_1_power=0.9**t, beta_2_power=0.999**t, step=t,
                       weight_decay=weight_decay, **HYPER, **light)


def _assert_same_bits(got, want, what):
  np.testing.assert_array_equal(
      np.asarray(got).view(np.uint8),
      np.asarray(want).view(np.uint8), err_msg=what)


def _assert_same_variables(a, b, dtypes, step):
  for name, x, y, d in zip("var m v".split(), a, b, dtypes):
    _assert_same_bits(stored_values(x, d), stored_values(y, d), f"{name} at step {step}")


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("index_dtype", [tf.int32, tf.int64])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fused_decay_matches_reference_bit_for_bit(case, index_dtype, mode):
  dtype, light = case
  stored, dtypes = _state(dtype, light)
  variables = _variables(stored, dtypes)
  untouched_before = stored_values(variables[0], dtype)[UNTOUCHED_ROWS].copy()
  step = _op_step if mode == "eager" else tf.function(_op_step, autograph=False)
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = _grad(dtype, t, len(indices))
    stored = reference.sparse_lazy_adam(*stored, grad, indices, dtype, lr=HYPER["lr"],
                                        beta1=HYPER["beta_1"], beta2=HYPER["beta_2"],
                                        epsilon=HYPER["epsilon"], beta1_power=0.9**t,
                                        beta2_power=0.999**t, seed=0, step=t,
                                        weight_decay=WEIGHT_DECAY, **light)
    step(variables, stored_tensor(grad, dtype), tf.constant(indices, index_dtype), t, light,
         WEIGHT_DECAY)
    for name, x, want, d in zip("var m v".split(), variables, stored, dtypes):
      _assert_same_bits(stored_values(x, d), want, f"{name} at step {t}")
  # Rows no step named are neither updated nor decayed.
  _assert_same_bits(
      stored_values(variables[0], dtype)[UNTOUCHED_ROWS], untouched_before, "untouched rows")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fused_decay_equals_decay_weights_then_the_op(case):
  # _core.decay_weights (stock Keras' arithmetic in the table's dtype, each duplicated row
  # written once) then the op without decay: what the optimizers ran before the fusion.
  dtype, light = case
  stored, dtypes = _state(dtype, light, seed=1)
  fused, unfused = _variables(stored, dtypes), _variables(stored, dtypes)
  lr = tf.constant(HYPER["lr"], tf.float64 if dtype == "float64" else tf.float32)
  weight_decay = tf.cast(tf.cast(WEIGHT_DECAY, dtype), lr.dtype)  # as _core.lazy_adam passes it
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = stored_tensor(_grad(dtype, t, len(indices)), dtype)
    indices = tf.constant(indices, tf.int64)
    _op_step(fused, grad, indices, t, light, weight_decay)
    _core.decay_weights(unfused[0], tf.IndexedSlices(grad, indices), lr, WEIGHT_DECAY)
    _op_step(unfused, grad, indices, t, light)
    _assert_same_variables(fused, unfused, dtypes, t)


@pytest.mark.parametrize("case", V1_CASES + [c for c in V2_CASES if c[1]["stochastic_rounding"]],
                         ids=_case_id)
def test_xla_matches_the_op(case):
  dtype, light = case
  stored, dtypes = _state(dtype, light, seed=2)
  plain, compiled = _variables(stored, dtypes), _variables(stored, dtypes)
  jitted = tf.function(_op_step, jit_compile=True, autograph=False)
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = stored_tensor(_grad(dtype, t, len(indices)), dtype)
    indices = tf.constant(indices, tf.int32)
    _op_step(plain, grad, indices, t, light, WEIGHT_DECAY)
    jitted(compiled, grad, indices, t, light, WEIGHT_DECAY)
    _assert_same_variables(compiled, plain, dtypes, t)


def test_no_decay_input_is_the_undecayed_update():
  # An empty weight_decay list and a zero decay give the update without decay.
  stored, dtypes = _state("float32", {})
  without, zero = _variables(stored, dtypes), _variables(stored, dtypes)
  grad, indices = stored_tensor(_grad("float32", 1, 3), "float32"), tf.constant([4, 1, 4])
  _op_step(without, grad, indices, 1, {})
  _op_step(zero, grad, indices, 1, {}, 0.0)
  _assert_same_variables(without, zero, dtypes, 1)
  want = reference.sparse_lazy_adam(*stored, _grad("float32", 1, 3), [4, 1, 4], "float32",
                                    lr=HYPER["lr"], beta1=HYPER["beta_1"], beta2=HYPER["beta_2"],
                                    epsilon=HYPER["epsilon"], beta1_power=0.9, beta2_power=0.999)
  _assert_same_bits(without[0].numpy(), want[0], "var")


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_the_w_ops_raw_wrappers_decay(v2, mode):
  # What a user of tf.load_op_library calls: the W op's wrapper takes the decay last.
  var, m, v = (tf.Variable(tf.fill((3, 2), 2.0)) for _ in range(3))
  inputs = dict(var=var.handle, m=m.handle, v=v.handle, beta1_power=0.9, beta2_power=0.999, lr=0.5,
                beta1=0.9, beta2=0.999, epsilon=1e-7, grad=tf.zeros((1, 2)), indices=[1],
                weight_decay=0.25)
  if v2:
    op = load_library().tf_opt_ops_resource_sparse_apply_lazy_adam_wv2
    inputs.update(step=tf.constant(1, tf.int64), Tslot=tf.float32)
  else:
    op = load_library().tf_opt_ops_resource_sparse_apply_lazy_adam_w
  if mode == "eager":
    op(**inputs)
  else:
    tf.function(lambda: op(**inputs) and None)()
  # Row 1: decayed to 2 - 2 * 0.25 * 0.5 = 1.75; a zero gradient on m = v = 2 then moves it by
  # lr_t * m' / (sqrt(v') + eps) with m' = 1.8, v' = 1.998.
  lr_t = 0.5 * np.sqrt(1 - 0.999) / (1 - 0.9)
  want = np.float32(1.75) - np.float32(lr_t) * np.float32(1.8) / (np.sqrt(np.float32(1.998)) +
                                                                  np.float32(1e-7))
  np.testing.assert_allclose(var.numpy()[1], [want, want], rtol=1e-6)
  np.testing.assert_array_equal(var.numpy()[[0, 2]], np.full((2, 2), 2.0, np.float32))


def test_a_non_scalar_weight_decay_is_refused():
  var, m, v = (tf.Variable(tf.zeros((3, 2))) for _ in range(3))
  with pytest.raises(tf.errors.InvalidArgumentError, match="weight_decay"):
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, 2)), [0], beta_1_power=0.9, beta_2_power=0.999,
                         weight_decay=tf.constant([0.1, 0.2]))


def test_only_the_w_ops_take_a_weight_decay():
  # What keeps old graphs and the generated wrappers of the ops without decay as they are.
  from tensorflow.python.framework import op_def_registry

  load_library()
  for name in ("TfOptOps>ResourceSparseApplyLazyAdam", "TfOptOps>ResourceSparseApplyLazyAdamV2"):
    inputs = [arg.name for arg in op_def_registry.get(name).input_arg]
    assert "weight_decay" not in inputs, inputs
    w_inputs = [arg.name for arg in op_def_registry.get(name.replace("Adam", "AdamW")).input_arg]
    assert w_inputs == inputs + ["weight_decay"]


def test_a_saved_model_without_the_input_loads_and_runs():
  # Written by a library from before the W ops (see the module doc): the ops without decay
  # must still run it.
  load_library()
  loaded = tf.saved_model.load(OLD_SAVED_MODEL)
  for case, variables in zip(_SAVED_CASES, loaded.cases):
    dtype, light = case
    dtypes = (dtype, light.get("slot_dtype", dtype), light.get("slot_dtype", dtype))
    stored = [stored_values(x, d) for x, d in zip(variables, dtypes)]
    grad = _grad(dtype, 1, len(STEP_INDICES[0]))
    want = reference.sparse_lazy_adam(*stored, grad, STEP_INDICES[0], dtype, lr=HYPER["lr"],
                                      beta1=HYPER["beta_1"], beta2=HYPER["beta_2"],
                                      epsilon=HYPER["epsilon"], beta1_power=0.9, beta2_power=0.999,
                                      seed=0, step=1, **light)
    loaded.steps[_SAVED_CASES.index(case)](stored_tensor(grad, dtype),
                                           tf.constant(STEP_INDICES[0], tf.int64))
    for name, x, w, d in zip("var m v".split(), variables, want, dtypes):
      _assert_same_bits(stored_values(x, d), w, f"{_case_id(case)}: {name}")


# The cases of the saved model: a V1 op and a V2 op.
_SAVED_CASES = [("float32", {}), ("bfloat16", dict(slot_dtype="float32"))]


def _saved_step(variables, dtype, light):
  var, m, v = variables

  def step(grad, indices):
    ops.sparse_lazy_adam(var, m, v, grad, indices, beta_1_power=0.9, beta_2_power=0.999, step=1,
                         **HYPER, **light)
    return tf.constant(0)

  signature = [tf.TensorSpec([None, DIM], tf.as_dtype(dtype)), tf.TensorSpec([None], tf.int64)]
  return tf.function(step, input_signature=signature, autograph=False)


def write_saved_model(path):
  """The SavedModel test_a_saved_model_without_the_input_loads_and_runs loads."""
  module = tf.Module()
  module.cases, module.steps = [], []
  for dtype, light in _SAVED_CASES:
    variables = _variables(*_state(dtype, light, seed=3))
    module.cases.append(variables)
    module.steps.append(_saved_step(variables, dtype, light))
  tf.saved_model.save(module, path)


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  write_saved_model(sys.argv[1])
