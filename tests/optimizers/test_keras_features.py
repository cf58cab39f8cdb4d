"""The Keras base classes' features on sparse gradients, at sparse cost.

Each feature gives the numbers of its API's stock code (a NumPy restatement of
it here, then the lazy update of the NumPy reference) while a sparse gradient
stays an `IndexedSlices` up to the op and rows no step names keep their bits.
Why: see docs/optimizers.md, "Keras features at sparse cost".
"""

import numpy as np
import pytest
import tensorflow as tf

import common
from optimizer_checks import TOL
from optimizer_checks import make_reference
from tf_opt_ops import reference

ROWS, COLS, BATCH, STEPS = 12, 3, 6, 3
OPTIMIZERS = ("LazyAdam", "ClippyAdagrad")
MODES = {
    "eager": lambda f: f,
    "function": tf.function,
    "xla": lambda f: tf.function(f, jit_compile=True),
}
SPARSE_OPS = {
    "LazyAdam": "TfOptOps>ResourceSparseApplyLazyAdam",
    "ClippyAdagrad": "TfOptOps>ResourceSparseApplyClippyAdagrad",
}
# What turns an IndexedSlices into a dense tensor (tf.convert_to_tensor of one).
DENSIFYING_OPS = {"UnsortedSegmentSum", "ScatterNd"}
OPTIONS = dict(learning_rate=0.05)
# The sparse update matches the reference to 1e-6; a dense gradient gets the flavor's own Adam
# arithmetic, which rounds differently from the reference's (as in test_optimizers).
DENSE_TOL = TOL["float32"]


def _batches(seed=1, steps=STEPS):
  """Per step: the table's (values, indices) with a duplicate and two rows never named, and a
  dense bias gradient."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(steps):
    indices = rng.integers(0, ROWS - 2, size=BATCH)
    indices[1] = indices[0]
    values = (3.0 * rng.normal(size=(BATCH, COLS))).astype(np.float32)
    bias = rng.normal(size=(COLS,)).astype(np.float32)
    out.append((values, indices, bias))
  return out


def _variables(flavor, seed=0):
  rng = np.random.default_rng(seed)
  table = rng.normal(size=(ROWS, COLS)).astype(np.float32)
  bias = rng.normal(size=(COLS,)).astype(np.float32)
  if flavor == "keras":
    import keras  # pylint: disable=g-import-not-at-top
    return keras.Variable(table, name="table"), keras.Variable(bias, name="bias")
  return tf.Variable(table, name="table"), tf.Variable(bias, name="bias")


def _sparse(values, indices):
  return tf.IndexedSlices(values, indices, tf.constant([ROWS, COLS]))


def _train_step(opt, table, bias=None):
  """`opt.apply_gradients` of the table's sparse gradient (and the bias's dense one)."""

  def step(values, indices, bias_grad=None):
    pairs = [(_sparse(values, indices), table)]
    if bias is not None:
      pairs.append((bias_grad, bias))
    opt.apply_gradients(pairs)

  return step


def _stock_clip(grads, clip):
  """The clipped gradient values, as every API's stock code computes them (a slice's values
  are clipped as they are, duplicate rows not summed first)."""
  (name, c), = clip.items()
  grads = [np.asarray(g, np.float32) for g in grads]
  if name == "clipvalue":
    return [np.clip(g, -c, c) for g in grads]
  if name == "clipnorm":
    return [g * c / max(np.sqrt(np.sum(g * g)), c) for g in grads]
  norm = np.sqrt(sum(np.sum(g * g) for g in grads))
  return [g * (c * min(1.0 / norm, 1.0 / c)) for g in grads]


def _graph_op_types(fn, *args):
  """Op types of `fn`'s graph and the graphs of the functions it calls."""
  graph_def = fn.get_concrete_function(*args).graph.as_graph_def()
  types = {node.op for node in graph_def.node}
  for function in graph_def.library.function:
    types.update(node.op for node in function.node_def)
  return types


CLIPS = {
    "clipnorm": dict(clipnorm=1.5), "clipvalue": dict(clipvalue=0.5),
    "global_clipnorm": dict(global_clipnorm=2.0)
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_clipping_is_stocks_on_the_named_rows(flavor, opt_name, clip, mode):
  """The lazy update of the stock-clipped gradient; the table's gradient reaches the sparse op
  as an IndexedSlices."""
  table, bias = _variables(flavor)
  opt = getattr(common.flavor_module(flavor), opt_name)(**OPTIONS, **CLIPS[clip])
  table_ref = make_reference(opt_name, table.numpy().astype(np.float64), options=OPTIONS)
  bias_ref = make_reference(opt_name, bias.numpy().astype(np.float64), options=OPTIONS)

  step = MODES[mode](_train_step(opt, table, bias))
  for values, indices, bias_grad in _batches():
    before = table.numpy().copy()
    step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
    clipped_values, clipped_bias = _stock_clip([values, bias_grad], CLIPS[clip])
    table_ref.sparse(clipped_values.astype(np.float64), indices)
    bias_ref.dense(clipped_bias.astype(np.float64))
    np.testing.assert_allclose(table.numpy(), table_ref.values(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(bias.numpy(), bias_ref.values(), **DENSE_TOL)
    untouched = np.setdiff1d(np.arange(ROWS), indices)
    np.testing.assert_array_equal(table.numpy()[untouched], before[untouched])
  if mode == "function":
    types = _graph_op_types(step, *map(tf.constant, _batches()[0]))
    assert SPARSE_OPS[opt_name] in types
    assert not types & DENSIFYING_OPS, sorted(types & DENSIFYING_OPS)


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_global_clipnorm_with_light_state(flavor):
  """LazyAdam with a row-wise second moment clips as stock and updates lazily."""
  table, _ = _variables(flavor)
  opt = common.flavor_module(flavor).LazyAdam(**OPTIONS, global_clipnorm=2.0,
                                              rowwise_second_moment=True)
  var = table.numpy().copy()
  m, v = np.zeros_like(var), np.zeros(ROWS, np.float32)
  step = tf.function(_train_step(opt, table))
  for t, (values, indices, _) in enumerate(_batches(), start=1):
    step(tf.constant(values), tf.constant(indices))
    clipped, = _stock_clip([values], dict(global_clipnorm=2.0))
    var, m, v = reference.sparse_lazy_adam(var, m, v, clipped, indices, "float32", lr=0.05,
                                           beta1=0.9, beta2=0.999, epsilon=1e-7, beta1_power=0.9**t,
                                           beta2_power=0.999**t, rowwise_second_moment=True)
    # The row mean of the squared gradient amplifies the clip factor's float32 rounding.
    np.testing.assert_allclose(table.numpy(), var, **TOL["float32"])
