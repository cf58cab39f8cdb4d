"""The Keras base classes' features (clipping, ...) on sparse gradients, at sparse cost.

Each feature gives the numbers of its API's stock code (a NumPy restatement of
it here, then the lazy update of the NumPy reference) while a sparse gradient
stays an `IndexedSlices` up to the op and rows no step names keep their bits.
Why: see docs/optimizers.md, "Keras features at sparse cost".
"""

import functools

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import reference

import common
from optimizer_checks import TOL
from optimizer_checks import make_reference

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
# With weight decay: the decay is fused into the sparse op's W op.
SPARSE_DECAY_OPS = {
    "LazyAdam": "TfOptOps>ResourceSparseApplyLazyAdamW",
    "ClippyAdagrad": "TfOptOps>ResourceSparseApplyClippyAdagradW",
}
# What turns an IndexedSlices into a dense tensor (tf.convert_to_tensor of one).
# An IndexedSlices made dense: summed (`convert_to_tensor`), scattered (Keras 3's sparse ops,
# e.g. `ops.isfinite`: a fill, then the values' results scattered in).
DENSIFYING_OPS = {
    "UnsortedSegmentSum", "ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "SparseToDense"
}
OPTIONS = dict(learning_rate=0.05)
# The project's float32 tolerance against the reference (rtol 1e-5, atol 1e-6): the optimizer
# computes its step's scalars (beta powers, the clip factor) in float32, the reference in
# float64, and a dense gradient gets the flavor's own Adam arithmetic.
FLOAT32_TOL = TOL["float32"]


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
    import keras
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


def _assert_lazy_update(table, table_ref, before, indices):
  """The table is the reference's, and the rows `indices` does not name are as `before`."""
  np.testing.assert_allclose(table.numpy(), table_ref.values(), **FLOAT32_TOL)
  untouched = np.setdiff1d(np.arange(ROWS), indices)
  np.testing.assert_array_equal(table.numpy()[untouched], before[untouched])


def _assert_graph_stays_sparse(step, opt_name, batch, sparse_ops=None):
  """`step`'s graph, traced for `batch`, runs the fused sparse op and densifies nothing."""
  types = _graph_op_types(step, *map(tf.constant, batch))
  assert (sparse_ops or SPARSE_OPS)[opt_name] in types, sorted(types)
  assert not types & DENSIFYING_OPS, sorted(types & DENSIFYING_OPS)
  return types


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
# The clips whose factor or range the sparse op applies where it reads each value (its Scaled
# op; clipvalue's tf.clip_by_value and the legacy flavor's OptimizerV2 clips run in the stock
# code, before the update, and in a graph the update finds the unscaled values and the factor or
# range behind the clipped ones: `_core.scaled_slices_of`).
SCALING_CLIPS = ("clipnorm", "clipvalue", "global_clipnorm")
SCALED_FLAVORS = ("keras", "tf_keras", "legacy")
# The inputs of the Scaled ops' gradient values: grad of lazy Adam, of Clippy.
GRAD_INPUT = {"LazyAdam": 9, "ClippyAdagrad": 7}

# The ops that scale or clip values (tf.clip_by_value: Minimum, then Maximum).
SCALING_OP_TYPES = ("Mul", "RealDiv", "Minimum", "Maximum")


def _scaled_op(op):
  return op + "Scaled"


def _assert_scale_in_op(step, opt_name, batch, op, unused_scaling=False):
  """`step`'s graph feeds the Scaled op `op` the unscaled gradient values and the scale or clip
  range: no multiply, divide or clip of the values anywhere in the graph (`unused_scaling`:
  none whose result anything reads, as of the stock clipvalue's and the legacy flavor's
  OptimizerV2 clip, pruned when the function runs)."""
  graph = step.get_concrete_function(*map(tf.constant, batch)).graph
  nodes = list(graph.as_graph_def().node)
  for function in graph.as_graph_def().library.function:
    nodes.extend(function.node_def)
  scaled = [n for n in nodes if n.op == op]
  assert scaled, sorted({n.op for n in nodes})
  for node in scaled:
    num_scales = node.attr["num_grad_scales"].i
    clips = node.attr["clip_grad_values"].b
    assert num_scales - 2 * clips in ((0, 1, 2) if clips else (1, 2)), (num_scales, clips)
    grad = node.input[GRAD_INPUT[opt_name]].split(":")[0]
    producers = {n.name: n for n in nodes}
    # The values come straight from the step's argument (through identities at most).
    while producers.get(grad) is not None and producers[grad].op == "Identity":
      grad = producers[grad].input[0].split(":")[0]
    assert producers.get(grad) is None or producers[grad].op not in SCALING_OP_TYPES, grad
    # (A square of the values, `values * values`, is the norm's: tf.clip_by_norm's.)
    scaling = [
        n for n in nodes
        if n.op in SCALING_OP_TYPES and any(i.split(":")[0] == grad for i in n.input) and not all(
            i.split(":")[0] == grad for i in n.input)
    ]
    if unused_scaling:
      # The scaled values and what is computed of them only (their divide, identities).
      chain = {n.name for n in scaling}
      grown = True
      while grown:
        readers = {
            n.name
            for n in nodes
            if n.op in ("RealDiv", "Minimum", "Maximum",
                        "Identity") and n.input and n.input[0].split(":")[0] in chain
        }
        grown = not readers <= chain
        chain |= readers
      scaling = [
          (n.op, n.name)
          for n in nodes
          if n.name not in chain and any(i.lstrip("^").split(":")[0] in chain for i in n.input)
      ]
    assert not scaling, scaling


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
    np.testing.assert_allclose(bias.numpy(), bias_ref.values(), **FLOAT32_TOL)
    _assert_lazy_update(table, table_ref, before, indices)
  if mode == "function":
    scaled = clip in SCALING_CLIPS and flavor in SCALED_FLAVORS
    sparse_ops = {opt_name: _scaled_op(SPARSE_OPS[opt_name])} if scaled else None
    _assert_graph_stays_sparse(step, opt_name, _batches()[0], sparse_ops)
    if scaled:
      _assert_scale_in_op(step, opt_name,
                          _batches()[0], sparse_ops[opt_name], unused_scaling=flavor == "legacy" or
                          clip == "clipvalue")


# The legacy flavor has no weight decay or EMA.
FLAVOR_VARIANTS = [(flavor, variant)
                   for flavor in SCALED_FLAVORS
                   for variant in ("plain", "weight-decay", "ema", "light")
                   if flavor != "legacy" or variant in ("plain", "light")]


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("clip", SCALING_CLIPS)
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("flavor,variant", FLAVOR_VARIANTS)
def test_the_clip_factor_in_the_op_is_the_scaled_values_bit_for_bit(monkeypatch, flavor, opt_name,
                                                                    clip, mode, variant):
  """The Scaled op (the clip factor applied where it reads each value) gives every variable the
  bits of the op fed the clipped values (the path of a GPU or XLA variable: `ScaledSlices.values`;
  the legacy flavor's: OptimizerV2's clipped values themselves), with weight decay, with the EMA
  kept in the update's pass, and with light state."""
  from tf_opt_ops import _core

  options = dict(OPTIONS, **CLIPS[clip])
  if variant == "weight-decay":
    options["weight_decay"] = 0.01
  elif variant == "ema":
    options.update(use_ema=True, ema_momentum=EMA_MOMENTUM)
  elif variant == "light":
    options.update(
        dict(slot_dtype="bfloat16") if opt_name == "LazyAdam" else dict(
            accumulator_dtype="bfloat16"))
  make = getattr(common.flavor_module(flavor), opt_name)
  runs = {}
  for path in ("in the op", "values scaled first"):
    with monkeypatch.context() as patch:
      if path == "values scaled first":
        patch.setattr(_core, "_scales_in_op", lambda var, on_mesh: False)
        patch.setattr(_core, "scaled_slices_of", lambda values, indices: None)
      run_ = (*_variables(flavor), make(**options))
      table, bias, opt = run_
      step = MODES[mode](_train_step(opt, table, bias))
      for values, indices, bias_grad in _batches():
        step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
      if mode == "function":
        types = _graph_op_types(step, *map(tf.constant, _batches()[0]))
        assert any(t.endswith("Scaled") for t in types) == (path == "in the op"), sorted(types)
    runs[path] = _all_values(run_)
  assert len(runs["in the op"]) == len(runs["values scaled first"])
  for ours, theirs in zip(runs["in the op"], runs["values scaled first"]):
    np.testing.assert_array_equal(ours, theirs)


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
    np.testing.assert_allclose(table.numpy(), var, **FLOAT32_TOL)


# ----------------------------------------------------------------------------- accumulation

ACCUMULATION_STEPS = 3
WINDOWS = 2


def _window_reference(opt_name, options, clip=None, dense=False, steps=ACCUMULATION_STEPS):
  """The references of table and bias after each micro-step: Keras 3's average of the window's
  gradients (clipped as stock clips it), applied lazily on the rows the window named (`dense`:
  on every row, as Keras 3 applies it)."""
  table, bias = _variables("keras")
  table_ref = make_reference(opt_name, table.numpy().astype(np.float64), options=options)
  bias_ref = make_reference(opt_name, bias.numpy().astype(np.float64), options=options)
  acc, acc_bias, named = np.zeros((ROWS, COLS), np.float32), np.zeros(COLS, np.float32), set()
  after = []
  for k, (values, indices, bias_grad) in enumerate(_micro_batches(steps), start=1):
    np.add.at(acc, indices, values)
    acc_bias += bias_grad
    named.update(indices.tolist())
    if k % steps == 0:
      rows = np.arange(ROWS) if dense else np.array(sorted(named))
      window = [acc[rows] / steps, acc_bias / steps]
      if clip:
        window = _stock_clip(window, clip)
      table_ref.sparse(window[0].astype(np.float64), rows)
      bias_ref.dense(window[1].astype(np.float64))
      acc[:], acc_bias[:], named = 0, 0, set()
    after.append((table_ref.values().copy(), bias_ref.values().copy()))
  return after


def _micro_batches(steps=ACCUMULATION_STEPS):
  """The micro-steps of WINDOWS windows of `steps` and one into the next."""
  return _batches(seed=7, steps=steps * WINDOWS + 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("clip", [None, "global_clipnorm"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_gradient_accumulation_applies_the_window_on_its_rows(opt_name, clip, mode):
  """Keras 3's window average, applied lazily on the rows the window named; rows no micro-step
  named keep their bits; the accumulator is cleared after each window. Inside XLA (static
  shapes) the base class's dense accumulation runs, with its numbers."""
  import keras
  table, bias = _variables("keras")
  options = dict(OPTIONS, gradient_accumulation_steps=ACCUMULATION_STEPS)
  opt = getattr(common.flavor_module("keras"), opt_name)(**options, **CLIPS.get(clip, {}))
  dense = mode == "xla"
  want = _window_reference(opt_name, OPTIONS, CLIPS.get(clip), dense=dense)
  step = MODES[mode](_train_step(opt, table, bias))
  initial = table.numpy().copy()
  named = set()
  for k, (values, indices, bias_grad) in enumerate(_micro_batches(), start=1):
    step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
    named.update(indices.tolist())
    np.testing.assert_allclose(table.numpy(), want[k - 1][0], **FLOAT32_TOL)
    np.testing.assert_allclose(bias.numpy(), want[k - 1][1], **FLOAT32_TOL)
  never = np.setdiff1d(np.arange(ROWS), sorted(named))
  np.testing.assert_array_equal(table.numpy()[never], initial[never])
  assert int(opt.iterations.numpy()) == WINDOWS
  # One micro-step into the third window: its rows only are in the accumulator.
  values, indices, _ = _micro_batches()[-1]
  pending = np.zeros((ROWS, COLS), np.float32)
  np.add.at(pending, indices, values)
  accumulator = keras.ops.convert_to_numpy(opt._accumulated_gradients[0])
  np.testing.assert_allclose(accumulator, pending, **FLOAT32_TOL)
  if not dense:
    # The window's row ids so far: that micro-step's indices, in order.
    count = int(keras.ops.convert_to_numpy(opt._window_row_counts[0]))
    ids = keras.ops.convert_to_numpy(opt._window_row_ids[0])[:count]
    np.testing.assert_array_equal(ids, indices)
  if mode == "function":
    # Without clipping the update takes the window's average in its own op.
    # With clipping the window's average is taken first, and the update applies the clip
    # factor where it reads it (its Scaled op).
    fused = clip is None
    sparse_ops = WINDOW_OPS if fused else {opt_name: _scaled_op(SPARSE_OPS[opt_name])}
    types = _assert_graph_stays_sparse(step, opt_name, _micro_batches()[0], sparse_ops)
    # On the CPU each side of the window is one fused op, which reads and writes the window's
    # rows only: no scatter or gather of the accumulator or its ids in TensorFlow ops.
    accumulation_ops = {ACCUMULATE_OP, WINDOW_OPS[opt_name]} if fused else ACCUMULATION_OPS
    assert accumulation_ops <= types, sorted(types)
    assert not types & ROW_COPYING_OPS, sorted(types & ROW_COPYING_OPS)


ACCUMULATE_OP = "TfOptOps>ResourceSparseAccumulateRows"
TAKE_WINDOW_OP = "TfOptOps>ResourceSparseTakeWindowGradient"
ACCUMULATION_OPS = {ACCUMULATE_OP, TAKE_WINDOW_OP}
# The window's apply step in one op (with weight decay: the W op's).
WINDOW_OPS = {
    "LazyAdam": "TfOptOps>ResourceSparseApplyLazyAdamWindow",
    "ClippyAdagrad": "TfOptOps>ResourceSparseApplyClippyAdagradWindow",
}
WINDOW_DECAY_OPS = {
    "LazyAdam": "TfOptOps>ResourceSparseApplyLazyAdamWWindow",
    "ClippyAdagrad": "TfOptOps>ResourceSparseApplyClippyAdagradWWindow",
}
# With EMA: the window op that keeps the average too, (plain, with weight decay); ClippyAdagrad
# has none, and takes the window's average first.
WINDOW_AVERAGED_OPS = {
    "LazyAdam": ("TfOptOps>ResourceSparseApplyLazyAdamWindowAveraged",
                 "TfOptOps>ResourceSparseApplyLazyAdamWWindowAveraged"),
}
ROW_COPYING_OPS = {
    "ResourceScatterUpdate", "ResourceScatterAdd", "ResourceGather", "Unique", "TensorScatterAdd"
}


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_gradient_accumulation_window_naming_more_ids_than_rows(opt_name):
  """A window whose micro-steps name more row ids than the table has rows (its ids kept
  deduplicated, at most one per row) applies the window's average on its rows."""
  import keras
  steps = 5  # 4 earlier micro-steps of BATCH ids each: 24 ids, 12 rows
  table, bias = _variables("keras")
  opt = getattr(common.flavor_module("keras"), opt_name)(**OPTIONS,
                                                         gradient_accumulation_steps=steps)
  want = _window_reference(opt_name, OPTIONS, steps=steps)
  step = tf.function(_train_step(opt, table, bias))
  for k, (values, indices, bias_grad) in enumerate(_micro_batches(steps), start=1):
    step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
    np.testing.assert_allclose(table.numpy(), want[k - 1][0], **FLOAT32_TOL)
    if k % steps == steps - 1:  # the window's ids before its last micro-step
      count = int(keras.ops.convert_to_numpy(opt._window_row_counts[0]))
      ids = keras.ops.convert_to_numpy(opt._window_row_ids[0])[:count]
      named = np.concatenate([b[1] for b in _micro_batches(steps)[k - steps + 1:k]])
      assert count <= ROWS
      np.testing.assert_array_equal(np.unique(ids), np.unique(named))
  assert int(opt.iterations.numpy()) == WINDOWS


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_gradient_accumulation_resumes_mid_window_bit_identical(tmp_path, opt_name):
  """A checkpoint written inside a window restores the window's rows and marks: the resumed run
  equals the uninterrupted one bit for bit."""
  whole, resumed = _resumed_mid_window(
      tmp_path, opt_name, dict(OPTIONS, gradient_accumulation_steps=ACCUMULATION_STEPS))
  for ours, theirs in zip(_all_values(resumed), _all_values(whole)):
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("use_ema", [False, True], ids=["no-ema", "ema"])
@pytest.mark.parametrize("weight_decay", [None, 0.01], ids=["plain", "weight-decay"])
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_window_in_one_op_is_the_two_ops_bit_for_bit(monkeypatch, opt_name, mode, weight_decay,
                                                     use_ema):
  """Keras 3 LazyAdam and ClippyAdagrad on the CPU take the window's average in their update's
  op (ResourceSparseApply{LazyAdam,ClippyAdagrad}[W]Window; with EMA LazyAdam's
  ...[W]WindowAveraged, which keeps the average too): over several windows and a partial one
  every variable, the accumulators, the window's row ids, the averages and their sync steps
  included, equals the run that takes the average first (TakeWindowGradient, then the update)
  bit for bit."""
  from tf_opt_ops import _core

  options = dict(OPTIONS, gradient_accumulation_steps=ACCUMULATION_STEPS, weight_decay=weight_decay)
  if use_ema:
    options.update(use_ema=True, ema_momentum=EMA_MOMENTUM)
  make = getattr(common.flavor_module("keras"), opt_name)
  batches = _micro_batches() + _batches(seed=8, steps=ACCUMULATION_STEPS * 2)
  window_op = (WINDOW_OPS if weight_decay is None else WINDOW_DECAY_OPS)[opt_name]
  fuses = not use_ema or opt_name in WINDOW_AVERAGED_OPS
  if use_ema and fuses:
    window_op = WINDOW_AVERAGED_OPS[opt_name][weight_decay is not None]
  runs = {}
  for path in ("one op", "two ops"):
    with monkeypatch.context() as patch:
      if path == "two ops":
        patch.setattr(_core, "window_fuses", lambda var, accumulator: False)
      run_ = (*_variables("keras"), make(**options))
      table, bias, opt = run_
      step = MODES[mode](_train_step(opt, table, bias))
      for values, indices, bias_grad in batches:
        step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
      if mode == "function":
        types = _graph_op_types(step, *map(tf.constant, batches[0]))
        if path == "one op" and fuses:
          assert window_op in types and TAKE_WINDOW_OP not in types, sorted(types)
        else:
          assert ACCUMULATION_OPS <= types and window_op not in types, sorted(types)
    runs[path] = _all_values(run_)
  assert len(runs["one op"]) == len(runs["two ops"])
  for ours, theirs in zip(runs["one op"], runs["two ops"]):
    np.testing.assert_array_equal(ours, theirs)
  # The windows moved the table (the two runs are not both at the start).
  assert not np.array_equal(runs["one op"][0], _variables("keras")[0].numpy())


def _resumed_mid_window(tmp_path, opt_name, options):
  """Keras 3 `opt_name(**options)` trained on a window and a half, uninterrupted and resumed
  from a checkpoint written one micro-step into the first window: (table, bias, optimizer) of
  each run."""
  batches = _micro_batches() + _batches(seed=8, steps=ACCUMULATION_STEPS)
  make = getattr(common.flavor_module("keras"), opt_name)

  def run(start, stop, table, bias, opt):
    step = tf.function(_train_step(opt, table, bias))
    for values, indices, bias_grad in batches[start:stop]:
      step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))

  whole = (*_variables("keras"), make(**options))
  run(0, len(batches), *whole)
  first = (*_variables("keras"), make(**options))
  half = len(_micro_batches())  # one micro-step into a window
  run(0, half, *first)
  path = tf.train.Checkpoint(table=first[0], bias=first[1], opt=first[2]).save(tmp_path / "ckpt")
  resumed = (*_variables("keras", seed=5), make(**options))
  resumed[2].build([resumed[0], resumed[1]])
  tf.train.Checkpoint(table=resumed[0], bias=resumed[1], opt=resumed[2]).restore(path)
  run(half, len(batches), *resumed)
  return whole, resumed


# ----------------------------------------------------------------------------- weight decay

WEIGHT_DECAY = 0.1
DECAY_FLAVORS = ("keras", "tf_keras")  # OptimizerV2 has no weight decay


def _stock_decay(ref, rows, lr=OPTIONS["learning_rate"]):
  """Stock `var -= var * wd * lr` (in float32) on `rows` of reference `ref`'s variable."""
  var = ref.var
  decayed = var[rows] - var[rows] * np.float32(WEIGHT_DECAY) * np.float32(lr)
  var[rows] = decayed.astype(var.dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("exclude_bias", [False, True], ids=["all", "exclude-bias"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("flavor", DECAY_FLAVORS)
def test_weight_decay_decays_the_updated_rows(flavor, opt_name, exclude_bias, mode):
  """A sparse gradient's rows are decayed as stock decays a variable, then updated; rows it does
  not name keep their bits; a dense gradient's variable is decayed whole; exclusions hold."""
  table, bias = _variables(flavor)
  opt = getattr(common.flavor_module(flavor), opt_name)(**OPTIONS, weight_decay=WEIGHT_DECAY)
  if exclude_bias:
    opt.exclude_from_weight_decay(var_names=["bias"])
  table_ref = make_reference(opt_name, table.numpy().astype(np.float64), options=OPTIONS)
  bias_ref = make_reference(opt_name, bias.numpy().astype(np.float64), options=OPTIONS)
  step = MODES[mode](_train_step(opt, table, bias))
  for values, indices, bias_grad in _batches():
    before = table.numpy().copy()
    step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
    _stock_decay(table_ref, np.unique(indices))
    if not exclude_bias:
      _stock_decay(bias_ref, slice(None))
    table_ref.sparse(values.astype(np.float64), indices)
    bias_ref.dense(bias_grad.astype(np.float64))
    np.testing.assert_allclose(bias.numpy(), bias_ref.values(), **FLOAT32_TOL)
    _assert_lazy_update(table, table_ref, before, indices)
  if mode == "function":
    types = _assert_graph_stays_sparse(step, opt_name, _batches()[0], SPARSE_DECAY_OPS)
    # The decay is fused: no scatter of decayed rows before the op.
    assert "ResourceScatterUpdate" not in types, sorted(types)


# ----------------------------------------------------------------------------- EMA

EMA_FLAVORS = ("keras", "tf_keras")  # OptimizerV2 has no EMA
EMA_MOMENTUM = 0.8
EMA_STEPS = 5
# The fused ops of the sparse rows' EMA outside XLA (inside, TensorFlow's ops): on the CPU
# each optimizer's update keeps the average in its own pass, (plain, with weight decay).
EMA_OP = "TfOptOps>ResourceSparseApplyLazyMovingAverage"
AVERAGED_OPS = {
    "LazyAdam": ("TfOptOps>ResourceSparseApplyLazyAdamAveraged",
                 "TfOptOps>ResourceSparseApplyLazyAdamWAveraged"),
    "ClippyAdagrad": ("TfOptOps>ResourceSparseApplyClippyAdagradAveraged",
                      "TfOptOps>ResourceSparseApplyClippyAdagradWAveraged"),
}
EMA_SPARSE_OPS = {name: ops[0] for name, ops in AVERAGED_OPS.items()}
# With gradient accumulation: LazyAdam's window op keeps the average; ClippyAdagrad takes the
# window's average first, then its averaged op runs.
EMA_WINDOW_SPARSE_OPS = dict(EMA_SPARSE_OPS, LazyAdam=WINDOW_AVERAGED_OPS["LazyAdam"][0])


def _assert_ema_graph(step, opt_name, batch, sparse_ops=None):
  """`step`'s graph stays sparse, its EMA in the fused ops: the optimizer's op keeps the
  average (no moving-average op, no separate update)."""
  types = _assert_graph_stays_sparse(step, opt_name, batch, sparse_ops or EMA_SPARSE_OPS)
  assert EMA_OP not in types and SPARSE_OPS[opt_name] not in types, sorted(types)
  return types


def _average_variables(opt):
  return list(getattr(opt, "_model_variables_moving_average", []))


class _StockAverage:
  """The flavor's stock EMA of (table, bias) in float32: Keras 3 starts from zeros and sets the
  average to the variable at its first step; tf_keras starts from the variable."""

  def __init__(self, flavor, values):
    self.flavor = flavor
    self.averages = [np.array(v, np.float32) for v in values]
    self.steps = 0

  def step(self, values):
    m = np.float32(0.0 if self.flavor == "keras" and self.steps == 0 else EMA_MOMENTUM)
    self.averages = [
        m * a + (np.float32(1) - m) * np.float32(v) for a, v in zip(self.averages, values)
    ]
    self.steps += 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("overwrite", [None, 2], ids=["finalize", "overwrite-2"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("flavor", EMA_FLAVORS)
def test_ema_is_stocks_and_touches_the_updated_rows(flavor, opt_name, overwrite, mode):
  """The variables (overwritten every `overwrite` steps) and the averages (after
  finalize_variable_values) are stock EMA's; between reads a step writes the average rows its
  gradient names only."""
  table, bias = _variables(flavor)
  opt = getattr(common.flavor_module(flavor), opt_name)(**OPTIONS, use_ema=True,
                                                        ema_momentum=EMA_MOMENTUM,
                                                        ema_overwrite_frequency=overwrite)
  table_ref = make_reference(opt_name, table.numpy().astype(np.float64), options=OPTIONS)
  bias_ref = make_reference(opt_name, bias.numpy().astype(np.float64), options=OPTIONS)
  stock = _StockAverage(flavor, [table.numpy(), bias.numpy()])
  step = MODES[mode](_train_step(opt, table, bias))
  for t, (values, indices, bias_grad) in enumerate(_batches(steps=EMA_STEPS)):
    averages_before = [np.asarray(a.numpy()).copy() for a in _average_variables(opt)]
    step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
    table_ref.sparse(values.astype(np.float64), indices)
    bias_ref.dense(bias_grad.astype(np.float64))
    stock.step([table_ref.var, bias_ref.var])
    if overwrite and (t + 1) % overwrite == 0:
      table_ref.var, bias_ref.var = (a.copy() for a in stock.averages)
    np.testing.assert_allclose(table.numpy(), table_ref.values(), **FLOAT32_TOL)
    np.testing.assert_allclose(bias.numpy(), bias_ref.values(), **FLOAT32_TOL)
    if averages_before and t > 0 and not (overwrite and (t + 1) % overwrite == 0):
      untouched = np.setdiff1d(np.arange(ROWS), indices)
      after = np.asarray(_average_variables(opt)[0].numpy())
      np.testing.assert_array_equal(after[untouched], averages_before[0][untouched])
  opt.finalize_variable_values([table, bias])
  np.testing.assert_allclose(table.numpy(), stock.averages[0], **FLOAT32_TOL)
  np.testing.assert_allclose(bias.numpy(), stock.averages[1], **FLOAT32_TOL)
  if mode == "function":
    _assert_ema_graph(step, opt_name, _batches()[0])


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("flavor", EMA_FLAVORS)
def test_ema_resumes_from_a_checkpoint_bit_identical(tmp_path, flavor, opt_name):
  """A checkpoint keeps the averages with their sync steps: the resumed run's variables, state
  and final averages equal the uninterrupted run's bit for bit."""
  options = dict(OPTIONS, use_ema=True, ema_momentum=EMA_MOMENTUM)
  batches = _batches(steps=2 * EMA_STEPS)
  make = getattr(common.flavor_module(flavor), opt_name)

  def run(start, stop, table, bias, opt):
    step = tf.function(_train_step(opt, table, bias))
    for values, indices, bias_grad in batches[start:stop]:
      step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))

  whole = (*_variables(flavor), make(**options))
  run(0, len(batches), *whole)
  first = (*_variables(flavor), make(**options))
  run(0, EMA_STEPS, *first)
  path = tf.train.Checkpoint(table=first[0], bias=first[1], opt=first[2]).save(tmp_path / "ckpt")
  resumed = (*_variables(flavor, seed=5), make(**options))
  resumed[2].build([resumed[0], resumed[1]])
  tf.train.Checkpoint(table=resumed[0], bias=resumed[1], opt=resumed[2]).restore(path)
  run(EMA_STEPS, len(batches), *resumed)
  for run_ in (whole, resumed):
    run_[2].finalize_variable_values([run_[0], run_[1]])
  state = [_all_values(r) for r in (resumed, whole)]
  assert len(state[0]) == len(state[1])
  for ours, theirs in zip(*state):
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("weight_decay", [None, 0.01], ids=["plain", "weight-decay"])
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("flavor", EMA_FLAVORS)
def test_ema_in_one_op_is_the_two_ops_bit_for_bit(monkeypatch, flavor, opt_name, mode,
                                                  weight_decay):
  """On the CPU each optimizer keeps the average in its update's pass (ResourceSparseApply
  LazyAdam[W]Averaged, ClippyAdagrad[W]Averaged, the clipping factors exported): every
  variable, the averages and their sync steps included, equals the run of the moving-average op
  followed by the update (the path of a GPU variable) bit for bit."""
  from tf_opt_ops import _core

  options = dict(OPTIONS, use_ema=True, ema_momentum=EMA_MOMENTUM, weight_decay=weight_decay)
  if opt_name == "ClippyAdagrad":
    options["export_clipping_factors"] = True
  make = getattr(common.flavor_module(flavor), opt_name)
  batches = _batches(steps=EMA_STEPS)
  runs = {}
  for path in ("one op", "two ops"):
    with monkeypatch.context() as patch:
      if path == "two ops":
        patch.setattr(_core, "_on_gpu", lambda var: True)
      run_ = (*_variables(flavor), make(**options))
      table, bias, opt = run_
      step = MODES[mode](_train_step(opt, table, bias))
      for values, indices, bias_grad in batches:
        step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
      if mode == "function":
        sparse_ops = {opt_name: AVERAGED_OPS[opt_name][1 if weight_decay else 0]}
        if path == "one op":
          _assert_ema_graph(step, opt_name, batches[0], sparse_ops)
        else:
          assert EMA_OP in _graph_op_types(step, *map(tf.constant, batches[0]))
    runs[path] = _all_values(run_)
  assert len(runs["one op"]) == len(runs["two ops"])
  for ours, theirs in zip(runs["one op"], runs["two ops"]):
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("overwrite", [None, 2], ids=["finalize", "overwrite-2"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_ema_with_gradient_accumulation_is_stocks_and_stays_lazy(opt_name, overwrite, mode):
  """Keras 3 moves the averages every micro-step (toward unchanged variables between apply
  steps), with momentum 0 through the first window (its `iterations` counts windows) and the
  overwrite every micro-step of each `ema_overwrite_frequency`-th window: the lazy EMA gives
  those numbers, and no micro-step writes an average row (an apply step writes the window's
  rows only)."""
  table, bias = _variables("keras")
  options = dict(OPTIONS, gradient_accumulation_steps=ACCUMULATION_STEPS)
  opt = getattr(common.flavor_module("keras"), opt_name)(**options, use_ema=True,
                                                         ema_momentum=EMA_MOMENTUM,
                                                         ema_overwrite_frequency=overwrite)
  opt.build([table, bias])
  assert opt._lazy_average
  step = MODES[mode](_train_step(opt, table, bias))
  table_ref = make_reference(opt_name, table.numpy().astype(np.float64), options=OPTIONS)
  bias_ref = make_reference(opt_name, bias.numpy().astype(np.float64), options=OPTIONS)
  acc, acc_bias, named = np.zeros((ROWS, COLS), np.float32), np.zeros(COLS, np.float32), set()
  averages = [np.zeros((ROWS, COLS), np.float32), np.zeros(COLS, np.float32)]
  for k, (values, indices, bias_grad) in enumerate(_micro_batches()):
    window = k // ACCUMULATION_STEPS  # stock's `iterations` during this micro-step
    applies = (k + 1) % ACCUMULATION_STEPS == 0
    before = np.asarray(opt._model_variables_moving_average[0].numpy()).copy()
    step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
    np.add.at(acc, indices, values)
    acc_bias += bias_grad
    named.update(indices.tolist())
    window_rows = np.array(sorted(named))
    if applies:
      table_ref.sparse((acc[window_rows] / ACCUMULATION_STEPS).astype(np.float64), window_rows)
      bias_ref.dense((acc_bias / ACCUMULATION_STEPS).astype(np.float64))
      acc[:], acc_bias[:], named = 0, 0, set()
    m = np.float32(0.0 if window == 0 else EMA_MOMENTUM)
    averages = [
        m * a + (np.float32(1) - m) * np.float32(v)
        for a, v in zip(averages, [table_ref.var, bias_ref.var])
    ]
    overwritten = overwrite and (window + 1) % overwrite == 0
    if overwritten:
      table_ref.var, bias_ref.var = (a.copy() for a in averages)
    np.testing.assert_allclose(table.numpy(), table_ref.values(), **FLOAT32_TOL)
    np.testing.assert_allclose(bias.numpy(), bias_ref.values(), **FLOAT32_TOL)
    if window > 0 and not overwritten:
      after = np.asarray(opt._model_variables_moving_average[0].numpy())
      resting = np.setdiff1d(np.arange(ROWS), window_rows if applies else [])
      np.testing.assert_array_equal(after[resting], before[resting])
  opt.finalize_variable_values([table, bias])
  np.testing.assert_allclose(table.numpy(), averages[0], **FLOAT32_TOL)
  np.testing.assert_allclose(bias.numpy(), averages[1], **FLOAT32_TOL)
  if mode == "function":
    # LazyAdam's window op keeps the average: no take of the window's average before it.
    types = _assert_ema_graph(step, opt_name, _micro_batches()[0], EMA_WINDOW_SPARSE_OPS)
    if opt_name in WINDOW_AVERAGED_OPS:
      assert TAKE_WINDOW_OP not in types, sorted(types)


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
def test_ema_with_gradient_accumulation_resumes_mid_window_bit_identical(tmp_path, opt_name):
  """A checkpoint written inside a window keeps the window's rows, the averages and their sync
  steps: the resumed run's variables, state and final averages equal the uninterrupted run's
  bit for bit."""
  whole, resumed = _resumed_mid_window(
      tmp_path, opt_name,
      dict(OPTIONS, gradient_accumulation_steps=ACCUMULATION_STEPS, use_ema=True,
           ema_momentum=EMA_MOMENTUM))
  assert resumed[2]._lazy_average
  for run_ in (whole, resumed):
    run_[2].finalize_variable_values([run_[0], run_[1]])
  state = [_all_values(r) for r in (resumed, whole)]
  assert len(state[0]) == len(state[1])
  for ours, theirs in zip(*state):
    np.testing.assert_array_equal(ours, theirs)


def _all_values(run_):
  """The model variables and the optimizer's, as NumPy arrays."""
  table, bias, opt = run_
  opt_vars = opt.variables() if callable(opt.variables) else opt.variables
  return [np.asarray(v.numpy()) for v in [table, bias, *opt_vars]]


# ----------------------------------------------------------------------------- Keras 3 routing


def test_keras3_multi_optimizer_trains_and_resumes_from_a_keras_file(tmp_path):
  """keras.optimizers.MultiOptimizer with ours inside: sparse rows stay lazy, and a `.keras`
  round trip resumes training bit for bit."""
  import keras

  from optimizer_checks import EMB_USED
  from optimizer_checks import embedding_data
  from optimizer_checks import embedding_model
  api = common.flavor_module("keras")
  keras.utils.set_random_seed(0)
  model = embedding_model(keras)
  optimizer = keras.optimizers.MultiOptimizer(
      keras.optimizers.OptimizerMap(default_optimizer=api.ClippyAdagrad(learning_rate=0.1),
                                    optimizer_map={"emb/.*": api.LazyAdam(learning_rate=0.01)}))
  model.compile(optimizer=optimizer, loss="mse")
  before = np.array(model.get_layer("emb").embeddings.numpy())
  x, y = embedding_data()
  model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
  after = np.array(model.get_layer("emb").embeddings.numpy())
  np.testing.assert_array_equal(after[EMB_USED:], before[EMB_USED:])
  assert np.abs(after[:EMB_USED] - before[:EMB_USED]).max() > 1e-5
  assert [type(o).__name__ for o in optimizer.optimizers] == ["LazyAdam", "ClippyAdagrad"]
  model.save(tmp_path / "model.keras")
  loaded = keras.models.load_model(tmp_path / "model.keras")
  assert [type(o) for o in loaded.optimizer.optimizers] == [api.LazyAdam, api.ClippyAdagrad]
  for m in (model, loaded):
    m.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
  for ours, theirs in zip(loaded.get_weights(), model.get_weights()):
    np.testing.assert_array_equal(ours, theirs)
  for ours, theirs in zip(loaded.optimizer.variables, model.optimizer.variables):
    np.testing.assert_array_equal(np.asarray(ours.numpy()), np.asarray(theirs.numpy()))


@pytest.mark.parametrize("flavor", DECAY_FLAVORS)
def test_features_through_our_router(flavor):
  """Features set on an optimizer inside our CompositeOptimizer run there at sparse cost:
  global_clipnorm (over that optimizer's gradients) and weight decay on the table's rows."""
  api = common.flavor_module(flavor)
  table, bias = _variables(flavor)
  inner = api.LazyAdam(**OPTIONS, global_clipnorm=2.0, weight_decay=WEIGHT_DECAY)
  router = api.CompositeOptimizer([(inner, lambda: [table]),
                                   (api.ClippyAdagrad(**OPTIONS), lambda: [bias])])
  table_ref = make_reference("LazyAdam", table.numpy().astype(np.float64), options=OPTIONS)
  step = tf.function(_train_step(router, table, bias))
  for values, indices, bias_grad in _batches():
    before = table.numpy().copy()
    step(tf.constant(values), tf.constant(indices), tf.constant(bias_grad))
    clipped, = _stock_clip([values], dict(global_clipnorm=2.0))
    _stock_decay(table_ref, np.unique(indices))
    table_ref.sparse(clipped.astype(np.float64), indices)
    _assert_lazy_update(table, table_ref, before, indices)
  # The clip factor too goes into the W op's pass (its Scaled op).
  sparse_ops = {"LazyAdam": _scaled_op(SPARSE_DECAY_OPS["LazyAdam"])}
  _assert_graph_stays_sparse(step, "LazyAdam", _batches()[0], sparse_ops)
  _assert_scale_in_op(step, "LazyAdam", _batches()[0], sparse_ops["LazyAdam"])


# ----------------------------------------------------------------------------- mixed precision

LOSS_SCALE = 128.0


def _loss_scaled(wrapper, flavor, opt_name, **options):
  """(optimizer, unscale(grads)) of `opt_name` (OPTIONS and `options`) in `flavor` under
  loss-scale `wrapper`."""
  make = functools.partial(getattr(common.flavor_module(flavor), opt_name), **OPTIONS, **options)
  if wrapper == "loss_scale_factor":
    return make(loss_scale_factor=LOSS_SCALE), lambda grads: grads
  if flavor == "keras":
    import keras
    opt = keras.optimizers.LossScaleOptimizer(make(), initial_scale=LOSS_SCALE)
    return opt, lambda grads: grads  # its apply unscales
  from tf_opt_ops import _keras2
  opt = _keras2.package().mixed_precision.LossScaleOptimizer(make(), dynamic=False,
                                                             initial_scale=LOSS_SCALE)
  return opt, opt.get_unscaled_gradients


LOSS_SCALED = [("keras", "LossScaleOptimizer"), ("keras", "loss_scale_factor"),
               ("tf_keras", "LossScaleOptimizer"), ("legacy", "LossScaleOptimizer")]


@pytest.mark.parametrize("clip", [None, "clipvalue"])
@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("flavor,wrapper", LOSS_SCALED, ids=["-".join(c) for c in LOSS_SCALED])
def test_loss_scaling_keeps_the_gradient_sparse(flavor, wrapper, opt_name, clip):
  """Each API's loss scaling around ours unscales and checks the slices' values only: the update
  is the reference's of the unscaled gradient (clipped by value with `clip`), lazily, with no
  densifying op, and the unscaled (and clipped) values are never written: one Scaled op takes
  the values as the step's argument gives them, with the scale (and the clip range)."""
  table, _ = _variables(flavor)
  clip_options = CLIPS[clip] if clip else {}
  opt, unscale = _loss_scaled(wrapper, flavor, opt_name, **clip_options)
  table_ref = make_reference(opt_name, table.numpy().astype(np.float64), options=OPTIONS)

  @tf.function
  def step(values, indices):
    grads = unscale([_sparse(values * LOSS_SCALE, indices)])
    opt.apply_gradients([(grads[0], table)])

  for values, indices, _ in _batches():
    before = table.numpy().copy()
    step(tf.constant(values), tf.constant(indices))
    if clip:
      values, = _stock_clip([values], clip_options)
    table_ref.sparse(values.astype(np.float64), indices)
    _assert_lazy_update(table, table_ref, before, indices)
  op = _scaled_op(SPARSE_OPS[opt_name])
  _assert_graph_stays_sparse(step, opt_name, _batches()[0][:2], {opt_name: op})
  graph = step.get_concrete_function(*map(tf.constant, _batches()[0][:2])).graph.as_graph_def()
  nodes = [n for f in graph.library.function for n in f.node_def] + list(graph.node)
  assert {n.attr["clip_grad_values"].b for n in nodes if n.op == op} == {bool(clip)}


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_keras3_loss_scale_check_reads_the_slices_values(mode):
  """Keras 3's LossScaleOptimizer around ours checks the slices' values, not a dense copy: a NaN
  in a row the slices name twice skips the step and halves the scale, and finite values are
  applied. (Keras' own check scatters the values' checks into a dense copy, which keeps one of
  a row's two here, the finite one: it applied the NaN to the table.)"""
  import keras

  from tf_opt_ops import keras as k3_ops
  init = np.ones((ROWS, COLS), np.float32)
  table = keras.Variable(init)
  opt = keras.optimizers.LossScaleOptimizer(k3_ops.LazyAdam(0.1), initial_scale=LOSS_SCALE)
  step = MODES[mode](
      lambda values, indices: opt.apply_gradients([(_sparse(values, indices), table)]))
  indices = tf.constant([2, 2, 5])
  values = np.ones((3, COLS), np.float32)
  values[0, 0] = np.nan
  step(tf.constant(values), indices)
  np.testing.assert_array_equal(table.numpy(), init)
  assert float(opt.dynamic_scale.numpy()) == LOSS_SCALE / 2
  values[0, 0] = 1.0
  step(tf.constant(values), indices)
  changed = np.flatnonzero((table.numpy() != init).any(axis=1))
  np.testing.assert_array_equal(changed, [2, 5])
  assert float(opt.dynamic_scale.numpy()) == LOSS_SCALE / 2


SLICE_SCALINGS = {
    "factor": ((0.37,), None),
    "factor-divisor": ((1.5, 7.25), None),
    "clip": ((), (-0.3, 0.2)),
    "factor-divisor-clip": ((1.5, 7.25), (-0.05, 0.04)),
}


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_keras3_loss_scale_check_of_finite_values_whose_sum_overflows(mode):
  """The check sums the slices' values first (one read); finite values whose sum overflows are
  still finite, as Keras' check of each value says: the step is applied, the scale kept. An
  infinity among them skips it and halves the scale."""
  import keras

  from tf_opt_ops import keras as k3_ops
  init = np.ones((ROWS, COLS), np.float32)
  table = keras.Variable(init)
  opt = keras.optimizers.LossScaleOptimizer(k3_ops.LazyAdam(0.1), initial_scale=LOSS_SCALE,
                                            dynamic_growth_steps=1000)
  step = MODES[mode](
      lambda values, indices: opt.apply_gradients([(_sparse(values, indices), table)]))
  values = np.full((2, COLS), 3e38, np.float32)
  assert not np.isfinite(values.sum(dtype=np.float32))
  step(tf.constant(values), tf.constant([1, 4]))
  # Applied: the inner optimizer stepped, and its first moment holds the rows (the table itself
  # does not move: the second moment of values this large overflows).
  assert int(opt.inner_optimizer.iterations.numpy()) == 1
  m = opt.inner_optimizer._momentums[0].numpy()
  np.testing.assert_array_equal(np.flatnonzero(m.any(axis=1)), [1, 4])
  assert float(opt.dynamic_scale.numpy()) == LOSS_SCALE
  values[1, 2] = np.inf
  step(tf.constant(values), tf.constant([1, 4]))
  assert int(opt.inner_optimizer.iterations.numpy()) == 1
  np.testing.assert_array_equal(opt.inner_optimizer._momentums[0].numpy(), m)
  assert float(opt.dynamic_scale.numpy()) == LOSS_SCALE / 2


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("scaling", SLICE_SCALINGS)
def test_scaled_slices_give_every_other_reader_the_scaled_values(mode, scaling):
  """A `ScaledSlices` read by code that does not know the factor (densifying, composite
  decomposition, `.values`) gives the values Keras' clipping writes: `values * factor`
  (`/ divisor`), clipped to the range, in their dtype."""
  from tf_opt_ops import _core

  values, indices, _ = _batches()[0]
  scale, clip = SLICE_SCALINGS[scaling]

  # The factors as arguments: Grappler would fold constant ones into one multiply (as it would
  # Keras' own expression).
  def read(values, indices, grad_scale, grad_clip):
    slices = _core.ScaledSlices(values, indices, tf.constant([ROWS, COLS]), grad_scale, grad_clip or
                                None)
    assert slices.dtype == tf.float32
    flat = tf.nest.flatten(slices, expand_composites=True)
    return tf.convert_to_tensor(slices), slices.values, flat[0]

  dense, scaled, flat = MODES[mode](read)(tf.constant(values), tf.constant(indices),
                                          tuple(tf.constant(x, tf.float32) for x in scale),
                                          tuple(tf.constant(x, tf.float32) for x in clip or ()))
  want = values
  if scale:
    want = want * np.float32(scale[0])
  if len(scale) == 2:
    want = want / np.float32(scale[1])
  if clip:
    assert (want < clip[0]).any() and (want > clip[1]).any()
    want = np.minimum(np.maximum(want, np.float32(clip[0])), np.float32(clip[1]))
  want_dense = np.zeros((ROWS, COLS), np.float32)
  np.add.at(want_dense, indices, want)
  np.testing.assert_array_equal(scaled, want)
  np.testing.assert_array_equal(flat, want)
  np.testing.assert_array_equal(dense, want_dense)


def test_only_values_times_one_value_give_their_unscaled_values():
  """`_core.scaled_slices_of` (the legacy flavor's clipped values, the unscaled values of a loss
  scale, clipvalue's clipped values): in a graph, values `x * factor`, `x * factor / divisor`
  and `x / divisor` (factor, divisor of one value each; identities around), and those or `x`
  clipped by `tf.clip_by_value` to one-value bounds, give `x`, the scale (a factor of 1 for
  `x / divisor`) and the range; other values, and values in eager mode, nothing."""
  from tf_opt_ops import _core

  found = {}

  @tf.function
  def probe(x, factor, divisor, row):
    indices = tf.constant([0, 1])
    cases = {
        "quotient": tf.identity(x * factor / divisor),
        "product": tf.identity(factor * x),
        "by a row": x * row,
        "divided only": x / divisor,
        "sum": x + factor,
        "by a row, divided": x * row / divisor,
        "clipped": tf.clip_by_value(tf.identity(x), -0.5, factor),
        "quotient clipped": tf.clip_by_value(x * factor / divisor, -0.5, 0.5),
        "clipped by a row": tf.clip_by_value(x, -0.5, row),
        "clipped the other way": tf.minimum(tf.maximum(x, -0.5), 0.5),
        "minimum only": tf.minimum(x, 0.5),
    }
    for name, values in cases.items():
      slices = _core.scaled_slices_of(values, indices)
      found[name] = None if slices is None else (slices.unscaled_values.name == x.name,
                                                 len(slices.grad_scale),
                                                 slices.grad_clip is not None)

  probe(tf.ones((2, COLS)), tf.constant(2.0), tf.constant([[3.0]]), tf.ones((COLS,)))
  assert found == {
      "quotient": (True, 2, False), "product": (True, 1, False), "by a row": None,
      "divided only": (True, 2, False), "sum": None, "by a row, divided": (False, 2, False),
      "clipped": (True, 0, True), "quotient clipped": (True, 2, True), "clipped by a row": None,
      "clipped the other way": None, "minimum only": None
  }
  assert _core.scaled_slices_of(tf.ones((2, COLS)) * 2.0, tf.constant([0, 1])) is None


def _clipnorm_pair(flavor, clipnorm):
  """(ours, stock): each flavor's clip by norm of a list of gradients, ours and its base class's."""
  ours = common.flavor_module(flavor).LazyAdam(clipnorm=clipnorm)
  if flavor == "legacy":
    # OptimizerV2 clips in `_transform_gradients` with `tf.clip_by_norm`.
    return (lambda grads: [g for g, _ in ours._transform_gradients([(g, None) for g in grads])],
            lambda grads: [tf.clip_by_norm(g, clipnorm) for g in grads])
  if flavor == "keras":
    import keras
    stock = keras.optimizers.Adam(clipnorm=clipnorm)
  else:
    import tf_keras
    stock = tf_keras.optimizers.Adam(clipnorm=clipnorm)
  return ours._clip_gradients, stock._clip_gradients


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_clipnorm_gives_the_stock_clips_bits(flavor, dtype, mode):
  """`clipnorm` without the base class's tensor of squares: a slice's clipped values are the
  base class's bit for bit (legacy: `tf.clip_by_norm`'s, as OptimizerV2 clips), a Python
  clip norm such as 0.3 taken to a float64 table's dtype directly; a dense gradient's too."""
  rng = np.random.default_rng(7)
  for clipnorm, spread in ((1.5, 1.0), (1.5, 1e-3), (0.3, 40.0)):
    ours, stock = _clipnorm_pair(flavor, clipnorm)
    values = tf.constant(rng.normal(0, spread, (BATCH, COLS)), dtype)
    indices = tf.constant(rng.integers(0, ROWS, BATCH))
    slices = tf.IndexedSlices(values, indices, tf.constant([ROWS, COLS]))
    dense = tf.constant(rng.normal(0, spread, (ROWS, COLS)), dtype)

    def clip(ours=ours, stock=stock, slices=slices, dense=dense):
      (sparse_ours, dense_ours), (sparse_stock, dense_stock) = ours([slices,
                                                                     dense]), stock([slices, dense])
      return (sparse_ours.values, sparse_ours.indices, sparse_stock.values, dense_ours, dense_stock)

    sparse_ours, indices_ours, sparse_stock, dense_ours, dense_stock = (tf.function(clip) if mode
                                                                        == "function" else clip)()
    assert sparse_ours.dtype == sparse_stock.dtype == tf.as_dtype(dtype)
    np.testing.assert_array_equal(indices_ours.numpy(), indices.numpy())
    np.testing.assert_array_equal(sparse_ours.numpy().view(np.uint8),
                                  sparse_stock.numpy().view(np.uint8),
                                  err_msg=f"{dtype} clipnorm={clipnorm} spread={spread}")
    np.testing.assert_array_equal(dense_ours.numpy().view(np.uint8),
                                  dense_stock.numpy().view(np.uint8))
