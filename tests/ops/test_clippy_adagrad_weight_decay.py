"""The sparse Clippy W ops (`ResourceSparseApplyClippyAdagradW`, `...WV2`): weight decay fused
into the update's passes.

The decay is stock Keras' decoupled decay of the touched rows, computed in the
table's dtype, before the Clippy update, whose clipping scale reads the
decayed rows: bit for bit what `_core.decay_weights` (a gather and a scatter
before the op) gives, and the NumPy reference's `weight_decay`, with and
without XLA. Why: see docs/optimizers.md, "Keras features at sparse cost".
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import _core
from tf_opt_ops import ops
from tf_opt_ops import reference
from tf_opt_ops._loader import load_library

from common import stored_tensor
from common import stored_values

ROWS, DIM = 12, 19  # a row longer than the CPU pass's 8 lanes, and not a multiple of them
STEP_INDICES = [[3, 0, 3, 7, 3], [11, 5, 0], [7, 7], [2, 9, 4, 9, 1, 10]]
UNTOUCHED_ROWS = [6, 8]
# A large rate and a small variable-relative bound: every step is clipped, and the scale
# (a minimum over the touched rows of a bound that reads |var|) depends on the decay.
HYPER = dict(lr=0.5, epsilon=1e-7, variable_relative_threshold=0.1,
             accumulator_relative_threshold=0.0, absolute_threshold=1e-7)
WEIGHT_DECAY = 0.3  # large, so that every dtype's rows visibly decay

# (table dtype, Clippy options): the V1 op for tables of their own accumulator, with either
# accumulator update; the V2 op for a light accumulator.
CASES = [
    ("float32", {}),
    ("float32", dict(use_standard_accumulator_update=True)),
    ("bfloat16", dict(clip_accumulator_update=True)),
    ("float32", dict(accumulator_dtype="bfloat16", stochastic_rounding=True, seed=7)),
]


def _case_id(case):
  dtype, options = case
  return "-".join([dtype] + [f"{k}={v}" for k, v in options.items() if k != "seed"])


def _accumulator_dtype(dtype, options):
  return options.get("accumulator_dtype", dtype)


def _state(dtype, options, seed=0):
  """(var, accum) of random values in the reference's stored form, and their dtypes."""
  rng = np.random.default_rng(seed)
  accum_dtype = _accumulator_dtype(dtype, options)
  stored = [
      reference.random_values(rng, (ROWS, DIM), dtype),
      reference.random_values(rng, (ROWS, DIM), accum_dtype, 0.05, 0.2),
  ]
  return stored, (dtype, accum_dtype)


def _variables(stored, dtypes):
  return [tf.Variable(stored_tensor(x, d)) for x, d in zip(stored, dtypes)]


def _grad(dtype, t, n):
  return reference.random_values(np.random.default_rng(100 + t), (n, DIM), dtype)


def _op_step(variables, grad, indices, t, options, weight_decay=None):
  var, accum = variables
  return ops.sparse_clippy_adagrad(var, accum, grad, indices, step=t, weight_decay=weight_decay,
                                   **HYPER, **options)


def _reference_step(stored, grad, indices, t, dtype, options, weight_decay=WEIGHT_DECAY):
  return reference.sparse_clippy_adagrad(*stored, grad, indices, dtype, step=t,
                                         weight_decay=weight_decay, **HYPER, **options)


def _assert_same_bits(got, want, what):
  np.testing.assert_array_equal(
      np.asarray(got).reshape(-1).view(np.uint8),
      np.asarray(want).reshape(-1).view(np.uint8), err_msg=what)


def _assert_same_variables(a, b, dtypes, step):
  for name, x, y, d in zip(("var", "accum"), a, b, dtypes):
    _assert_same_bits(stored_values(x, d), stored_values(y, d), f"{name} at step {step}")


def _run_against_reference(case, step_fn, index_dtype):
  dtype, options = case
  stored, dtypes = _state(dtype, options)
  variables = _variables(stored, dtypes)
  untouched_before = stored_values(variables[0], dtype)[UNTOUCHED_ROWS].copy()
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = _grad(dtype, t, len(indices))
    *stored, want_scale = _reference_step(stored, grad, indices, t, dtype, options)
    scale = step_fn(variables, stored_tensor(grad, dtype), tf.constant(indices, index_dtype), t,
                    options, WEIGHT_DECAY)
    for name, x, want, d in zip(("var", "accum"), variables, stored, dtypes):
      _assert_same_bits(stored_values(x, d), want, f"{name} at step {t}")
    _assert_same_bits(np.float32(scale.numpy()), np.float32(want_scale), f"scale at step {t}")
    assert want_scale < 1, "every step of these cases is clipped"
  # Rows no step named are neither updated nor decayed.
  _assert_same_bits(
      stored_values(variables[0], dtype)[UNTOUCHED_ROWS], untouched_before, "untouched rows")


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("index_dtype", [tf.int32, tf.int64])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fused_decay_matches_reference_bit_for_bit(case, index_dtype, mode):
  step = _op_step if mode == "eager" else tf.function(_op_step, autograph=False)
  _run_against_reference(case, step, index_dtype)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_xla_matches_reference_bit_for_bit(case):
  _run_against_reference(case, tf.function(_op_step, jit_compile=True, autograph=False), tf.int32)


def test_the_scale_reads_the_decayed_rows():
  # The reference's scale with the decay differs from the one without, so the bit-for-bit
  # tests above see a scale computed from undecayed rows.
  dtype, options = CASES[0]
  stored, _ = _state(dtype, options)
  grad, indices = _grad(dtype, 1, 5), STEP_INDICES[0]
  decayed = _reference_step(stored, grad, indices, 1, dtype, options)[2]
  undecayed = _reference_step(stored, grad, indices, 1, dtype, options, weight_decay=None)[2]
  assert decayed != undecayed
  # The bound is mostly the variable-relative term, which the decay scales by 1 - wd * lr.
  np.testing.assert_allclose(decayed, undecayed * (1 - WEIGHT_DECAY * HYPER["lr"]), rtol=1e-2)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fused_decay_equals_decay_weights_then_the_op(case):
  # _core.decay_weights (stock Keras' arithmetic in the table's dtype, each duplicated row
  # written once) then the op without decay: what the optimizers ran before the fusion.
  dtype, options = case
  stored, dtypes = _state(dtype, options, seed=1)
  fused, unfused = _variables(stored, dtypes), _variables(stored, dtypes)
  lr = tf.constant(HYPER["lr"], tf.float32)
  weight_decay = tf.cast(tf.cast(WEIGHT_DECAY, dtype), tf.float32)  # as _core passes it
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = stored_tensor(_grad(dtype, t, len(indices)), dtype)
    indices = tf.constant(indices, tf.int64)
    fused_scale = _op_step(fused, grad, indices, t, options, weight_decay)
    _core.decay_weights(unfused[0], tf.IndexedSlices(grad, indices), lr, WEIGHT_DECAY)
    unfused_scale = _op_step(unfused, grad, indices, t, options)
    _assert_same_variables(fused, unfused, dtypes, t)
    _assert_same_bits(fused_scale.numpy(), unfused_scale.numpy(), f"scale at step {t}")


# The wiring of _core.clippy_adagrad: the W op for a sparse gradient with the op's own scale;
# decay_weights (a scatter for a sparse gradient) before the plain op for a given scale, and
# the whole variable decayed for a dense gradient.
CORE_GRADIENTS = {
    "sparse": ("TfOptOps>ResourceSparseApplyClippyAdagradW", "ResourceScatterUpdate"),
    "sparse-given-scale":
        ("TfOptOps>ResourceSparseApplyClippyAdagrad", "TfOptOps>ResourceSparseApplyClippyAdagradW"),
    "dense": ("TfOptOps>ResourceApplyClippyAdagrad", "ResourceScatterUpdate"),
}


def _core_step(var, accum, grad, indices, gradient, weight_decay):
  grad = tf.IndexedSlices(grad, indices) if gradient != "dense" else grad
  scale = tf.constant(0.25) if gradient == "sparse-given-scale" else None
  return _core.clippy_adagrad(var, accum, grad, weight_decay=weight_decay, scale=scale,
                              clip_accumulator_update=False, use_standard_accumulator_update=False,
                              **HYPER)


@pytest.mark.parametrize("gradient", CORE_GRADIENTS)
def test_core_clippy_adagrad_runs_the_w_op_for_sparse_gradients(gradient):
  stored, dtypes = _state("float32", {}, seed=2)
  got, want = _variables(stored, dtypes), _variables(stored, dtypes)
  indices = tf.constant(STEP_INDICES[0])
  grad = stored_tensor(_grad("float32", 1, ROWS if gradient == "dense" else 5), "float32")
  step = tf.function(_core_step, autograph=False)
  step(*got, grad, indices, gradient, WEIGHT_DECAY)
  # Every path equals decaying first (the rows named, or all for a dense gradient), then Clippy.
  _core.decay_weights(want[0],
                      tf.IndexedSlices(grad, indices) if gradient != "dense" else grad, HYPER["lr"],
                      WEIGHT_DECAY)
  step(*want, grad, indices, gradient, None)
  _assert_same_variables(got, want, dtypes, 1)
  graph = step.get_concrete_function(*got, grad, indices, gradient, WEIGHT_DECAY).graph
  types = {op.type for op in graph.get_operations()}
  runs, does_not_run = CORE_GRADIENTS[gradient]
  assert runs in types and does_not_run not in types, sorted(types)


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_the_w_ops_raw_wrappers_decay(v2, mode):
  # What a user of tf.load_op_library calls: the W op's wrapper takes the decay last.
  var, accum = tf.Variable(tf.fill((3, 2), 2.0)), tf.Variable(tf.fill((3, 2), 1.0))
  inputs = dict(var=var.handle, accum=accum.handle, lr=0.5, epsilon=0.0,
                variable_relative_threshold=0.25, accumulator_relative_threshold=0.0,
                absolute_threshold=0.0, grad=tf.fill((1, 2), 4.0), indices=[1], weight_decay=0.25)
  if v2:
    op = load_library().tf_opt_ops_resource_sparse_apply_clippy_adagrad_wv2
    inputs.update(step=tf.constant(1, tf.int64), Taccum=tf.float32)
  else:
    op = load_library().tf_opt_ops_resource_sparse_apply_clippy_adagrad_w
  scale = op(**inputs) if mode == "eager" else tf.function(lambda: op(**inputs))()
  # Row 1: decayed to 2 - 2 * 0.25 * 0.5 = 1.75; delta = 0.5 * 4 / sqrt(1) = 2 against the bound
  # 0.25 * 1.75 (of the decayed row; 0.5 of the undecayed one): scale 0.21875, var 1.3125.
  np.testing.assert_array_equal(scale.numpy(), np.float32(0.21875))
  np.testing.assert_array_equal(var.numpy()[1], [1.3125, 1.3125])
  np.testing.assert_array_equal(accum.numpy()[1], [17.0, 17.0])
  np.testing.assert_array_equal(var.numpy()[[0, 2]], np.full((2, 2), 2.0, np.float32))


def test_an_empty_update_neither_decays_nor_clips():
  var, accum = tf.Variable(tf.fill((3, 2), 2.0)), tf.Variable(tf.fill((3, 2), 1.0))
  scale = ops.sparse_clippy_adagrad(var, accum, tf.zeros((0, 2)), tf.zeros((0,), tf.int32),
                                    weight_decay=0.5)
  assert scale.numpy() == 1.0
  np.testing.assert_array_equal(var.numpy(), np.full((3, 2), 2.0, np.float32))


@pytest.mark.parametrize("light", [{}, dict(accumulator_dtype="float16")], ids=["V1", "V2"])
def test_a_non_scalar_weight_decay_is_refused(light):
  var, accum = tf.Variable(tf.zeros((3, 2))), tf.Variable(tf.zeros((3, 2)))
  if light:
    accum = tf.Variable(tf.zeros((3, 2), tf.float16))
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="weight_decay"):
    ops.sparse_clippy_adagrad(var, accum, tf.ones((1, 2)), [0],
                              weight_decay=tf.constant([0.1, 0.2]), **light)
  np.testing.assert_array_equal(var.numpy(), np.zeros((3, 2), np.float32))


def test_only_the_w_ops_take_a_weight_decay():
  # What keeps old graphs and the generated wrappers of the ops without decay as they are.
  from tensorflow.python.framework import op_def_registry

  load_library()
  for name in ("TfOptOps>ResourceSparseApplyClippyAdagrad",
               "TfOptOps>ResourceSparseApplyClippyAdagradV2"):
    inputs = [arg.name for arg in op_def_registry.get(name).input_arg]
    assert "weight_decay" not in inputs, inputs
    w_name = name.replace("AdagradV2", "AdagradWV2") if name.endswith("V2") else name + "W"
    w_inputs = [arg.name for arg in op_def_registry.get(w_name).input_arg]
    assert w_inputs == inputs + ["weight_decay"]
