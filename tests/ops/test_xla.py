"""The fused ops inside XLA: their XLA kernels, and every path that compiles an update.

_tf_opt_ops_xla.so lowers each op to one XLA custom call into the same C++ code the
OpKernels run, updating the variable and its slots in place. Here: the compiled HLO
holds that call and none of the standard-ops fallback, with the tables aliased from
parameter to result and never copied; every flavor and router trains bit-identically
with and without XLA (optimizer steps, Keras 3 `model.fit(jit_compile=True)`, tf_keras'
`jit_compile`, mixed precision); a bad input fails the step with the OpKernel's error
and leaves every variable as it was. Why: see docs/design.md, "XLA".
"""

import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tf_opt_ops import _loader
from tf_opt_ops import keras as k3_ops
from tf_opt_ops import legacy as legacy_ops
from tf_opt_ops import ops
from tf_opt_ops import tf_keras as tfk_ops

import common

ROWS, COLS, BATCH = 1000, 16, 96  # a table shape no other tensor of the tests has
TABLE = f"f32[{ROWS},{COLS}]"
TARGETS = {
    ("LazyAdam", True): "tf_opt_ops_sparse_lazy_adam",
    ("ClippyAdagrad", True): "tf_opt_ops_sparse_clippy_adagrad",
    ("ClippyAdagrad", False): "tf_opt_ops_clippy_adagrad",
    ("RowwiseAdagrad", True): "tf_opt_ops_sparse_rowwise_adagrad",
}
OPTS = ["LazyAdam", "ClippyAdagrad", "RowwiseAdagrad"]
ROW_SLOT = f"f32[{ROWS}]"  # row-wise Adagrad's accumulator: one value per row
FLAVORS = {"keras": k3_ops, "tf_keras": tfk_ops, "legacy": legacy_ops}
NP_DTYPES = {"float32": np.float32, "float64": np.float64, "bfloat16": tf.bfloat16.as_numpy_dtype}


@pytest.fixture(autouse=True)
def no_fallback():
  """Every test here runs the XLA kernels: the standard-ops fallback would log."""
  with common.tensorflow_log() as messages:
    yield
  fallbacks = [m for m in messages if "falling back" in m]
  assert not fallbacks, fallbacks


def test_xla_kernels_are_registered():
  assert _loader.xla_unavailable() is None
  assert os.path.exists(_loader.XLA_LIBRARY_PATH)


def _batches(steps, seed=0, rows=ROWS, cols=COLS, batch=BATCH):
  """Sparse gradients with duplicate indices (a quarter of each batch repeats)."""
  rng = np.random.default_rng(seed)
  for _ in range(steps):
    indices = rng.integers(0, rows // 2, size=batch)
    indices[::4] = indices[1::4]
    yield rng.normal(size=(batch, cols)), indices


def _variable(flavor, value, dtype="float32", name="table"):
  value = np.asarray(value).astype(NP_DTYPES[dtype])
  if flavor == "keras":
    return keras.Variable(value, dtype=dtype, name=name)
  return tf.Variable(value, name=name)


def _state(opt, variables=()):
  state = opt.variables() if callable(opt.variables) else opt.variables
  return [np.asarray(v.numpy()) for v in list(variables) + list(state)]


def _assert_bit_identical(got, want):
  assert len(got) == len(want)
  for k, (a, b) in enumerate(zip(got, want)):
    assert a.dtype == b.dtype and a.shape == b.shape, k
    np.testing.assert_array_equal(
        np.atleast_1d(a).view(np.uint8),
        np.atleast_1d(b).view(np.uint8), err_msg=f"state {k}")


def _build(opt, variables):
  if hasattr(opt, "_create_all_weights"):  # OptimizerV2 (legacy)
    opt._create_all_weights(variables)
  elif hasattr(opt, "build"):
    opt.build(variables)


def _train(make_opt, flavor, jit, steps=4, dtype="float32", index_dtype="int32", seed=0,
           sparse=True):
  """`steps` optimizer steps on tables "a" and "b" in a tf.function, with XLA or not.

  `make_opt(tables)` makes the optimizer. Returns the tables and the optimizer state.
  """
  rng = np.random.default_rng(seed)
  tables = [
      _variable(flavor, rng.normal(size=(ROWS, COLS)), dtype, "a"),
      _variable(flavor, rng.normal(size=(ROWS // 2, COLS)), dtype, "b")
  ]
  opt = make_opt(tables)
  _build(opt, tables)

  @tf.function(jit_compile=jit)
  def step(values_a, indices_a, values_b, indices_b):
    grads = []
    for values, indices, rows in ((values_a, indices_a, ROWS), (values_b, indices_b, ROWS // 2)):
      shape = tf.constant([rows, COLS], index_dtype)
      grads.append(
          tf.IndexedSlices(values, indices, shape) if sparse else tf.math.
          unsorted_segment_sum(values, indices, rows))
    opt.apply_gradients(zip(grads, tables))

  for (va, ia), (vb, ib) in zip(_batches(steps, seed + 1), _batches(steps, seed + 2, ROWS // 2)):
    step(tf.constant(va, dtype), tf.constant(ia, index_dtype), tf.constant(vb, dtype),
         tf.constant(ib, index_dtype))
  return _state(opt, tables)


# ----------------------------------------------------------------------------- the HLO


def _compiled(flavor, opt_name, stage, sparse=True):
  """The HLO of one jitted optimizer step on a (ROWS, COLS) table."""
  table = _variable(flavor, np.zeros((ROWS, COLS)))
  opt = getattr(FLAVORS[flavor], opt_name)(learning_rate=0.01)
  _build(opt, [table])

  @tf.function(jit_compile=True)
  def step(values, indices):
    if sparse:
      grad = tf.IndexedSlices(values, indices, tf.constant([ROWS, COLS]))
    else:
      grad = tf.math.unsorted_segment_sum(values, indices, ROWS)
    opt.apply_gradients([(grad, table)])

  values, indices = next(_batches(1))
  args = (tf.constant(values, tf.float32), tf.constant(indices, tf.int32))
  step(*args)
  return step.experimental_get_compiler_ir(*args)(stage=stage)


# An instruction's `metadata={...}` names TensorFlow's source files, whose paths hold the
# clone's (and the user's) folder names: what the HLO computes is the rest.
_METADATA = re.compile(r',? metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}')


def _instructions(hlo):
  """`hlo` without the instructions' metadata."""
  return _METADATA.sub("", hlo)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("opt_name,sparse", TARGETS)
def test_hlo_is_one_custom_call_and_no_fallback(flavor, opt_name, sparse):
  hlo = _instructions(_compiled(flavor, opt_name, "hlo", sparse))
  assert hlo.count(f'custom_call_target="{TARGETS[opt_name, sparse]}"') == 1, hlo
  assert "tf_opt_ops" not in hlo.replace(f'"{TARGETS[opt_name, sparse]}"', ""), hlo
  if sparse:
    # The standard-ops fallback: unique (a sort), segment sums (a scatter),
    # reading the touched rows (a gather), writing them (a scatter).
    for op in ("scatter(", "sort(", "gather("):
      assert op not in hlo, (op, hlo)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("opt_name,sparse", TARGETS)
def test_tables_aliased_and_never_copied(flavor, opt_name, sparse):
  hlo = _compiled(flavor, opt_name, "optimized_hlo", sparse)
  header = hlo.splitlines()[0]
  # The table and its slots (m and v, or the accumulator) go from parameter to
  # result in one buffer: XLA updates them where TensorFlow keeps them...
  state = rf"(?:{re.escape(TABLE)}\{{1,0\}}|{re.escape(ROW_SLOT)}\{{0\}})"
  tables = {int(n) for n in re.findall(rf"= {state} parameter\((\d+)\).*XLA_Args", hlo)}
  assert len(tables) == (3 if opt_name == "LazyAdam" else 2), hlo
  aliased = {int(n) for n in re.findall(r"\{\d+\}: \((\d+), \{\}, may-alias\)", header)}
  assert tables <= aliased, (tables, header)
  # ...through the custom call, which writes its operands in place...
  call = next(line for line in hlo.splitlines() if "custom-call(" in line)
  assert "output_to_operand_aliasing={{0}: (0, {}), {1}: (1, {})" in call, call
  # ...and nothing copies a table.
  copies = [
      line for line in hlo.splitlines()
      if (TABLE in line or f"{ROW_SLOT}{{0}}" in line) and " copy(" in line
  ]
  assert not copies, copies


# ----------------------------------------------------------------------------- same numbers


def _make(flavor, opt_name, **options):
  return lambda tables: getattr(FLAVORS[flavor], opt_name)(learning_rate=0.05, **options)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("opt_name", OPTS)
@pytest.mark.parametrize("dtype,index_dtype", [("float32", "int32"), ("float64", "int64"),
                                               ("bfloat16", "int32")])
def test_optimizer_steps_bit_identical_with_and_without_xla(flavor, opt_name, dtype, index_dtype):
  make = _make(flavor, opt_name)
  want = _train(make, flavor, jit=False, dtype=dtype, index_dtype=index_dtype)
  got = _train(make, flavor, jit=True, dtype=dtype, index_dtype=index_dtype)
  _assert_bit_identical(got, want)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_dense_clippy_bit_identical_with_and_without_xla(flavor):
  make = _make(flavor, "ClippyAdagrad", clip_accumulator_update=True)
  _assert_bit_identical(_train(make, flavor, jit=True, sparse=False),
                        _train(make, flavor, jit=False, sparse=False))


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("flag", ["clip_accumulator_update", "use_standard_accumulator_update"])
def test_clippy_flags_bit_identical_with_and_without_xla(flavor, flag):
  make = _make(flavor, "ClippyAdagrad", **{flag: True})
  _assert_bit_identical(_train(make, flavor, jit=True), _train(make, flavor, jit=False))


@pytest.mark.parametrize("op",
                         ["LazyAdam", "ClippyAdagrad", "dense ClippyAdagrad", "RowwiseAdagrad"])
def test_large_updates_bit_identical_with_and_without_xla(op):
  # Large enough for every parallel loop on XLA's thread pool: the batch in
  # several chunks of RowGroups (grouped in parallel), the summing of
  # duplicates and the row loops over more than a thread's share, Clippy's
  # minimum reduced across threads.
  rows, dim, batch = 100_000, 16, 50_000
  rng = np.random.default_rng(0)
  init = rng.normal(size=(rows, dim)).astype(np.float32)
  indices = rng.integers(0, rows, size=batch)
  values = rng.normal(size=(batch, dim)).astype(np.float32)
  results = []
  for jit in (False, True):
    slot_shape = (rows,) if op == "RowwiseAdagrad" else (rows, dim)
    tables = [tf.Variable(init), tf.Variable(np.full(slot_shape, 0.1, np.float32))]
    if op == "LazyAdam":
      tables.append(tf.Variable(np.zeros((rows, dim), np.float32)))

    @tf.function(jit_compile=jit)
    def step(g, i, tables=tables):
      if op == "LazyAdam":
        ops.sparse_lazy_adam(*tables, g, i, beta_1_power=0.9, beta_2_power=0.999)
        return tf.constant(1.0)
      if op == "ClippyAdagrad":
        return ops.sparse_clippy_adagrad(*tables, g, i, lr=0.5)
      if op == "RowwiseAdagrad":
        ops.sparse_rowwise_adagrad(*tables, g, i, lr=0.5, weight_decay=0.01, weight_decay_mode="l2")
        return tf.constant(1.0)
      return ops.clippy_adagrad(*tables, tf.math.unsorted_segment_sum(g, i, rows), lr=0.5)

    scales = [step(tf.constant(values), tf.constant(indices)).numpy() for _ in range(2)]
    results.append([t.numpy() for t in tables] + [np.array(scales)])
  _assert_bit_identical(results[1], results[0])
  # Clippy clipped: the reduction counted.
  assert results[0][-1][0] < 1.0 or op in ("LazyAdam", "RowwiseAdagrad")


def _routers(flavor):
  module = FLAVORS[flavor]
  return {
      # LazyAdam on table "a", ClippyAdagrad on "b".
      "CompositeOptimizer": lambda tables: module.CompositeOptimizer([(module.LazyAdam(
          0.03), lambda: tables[:1]), (module.ClippyAdagrad(0.2), lambda: tables[1:])]),
      "MultiOptimizer": lambda tables: module.MultiOptimizer([
          module.OptimizerBlocks(module.ClippyAdagrad(0.2), tables[1:])
      ], default_optimizer=module.LazyAdam(0.03)),
  }


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("router", ["CompositeOptimizer", "MultiOptimizer"])
def test_routers_bit_identical_with_and_without_xla(flavor, router):
  make = _routers(flavor)[router]
  _assert_bit_identical(_train(make, flavor, jit=True), _train(make, flavor, jit=False))


@pytest.mark.parametrize("flavor", ["tf_keras", "legacy"])
@pytest.mark.parametrize("opt_name", OPTS)
def test_tf_keras_loss_scale_optimizer_bit_identical_with_and_without_xla(flavor, opt_name):
  inner = _make(flavor, opt_name)

  def make(tables):
    return tf_keras.mixed_precision.LossScaleOptimizer(inner(tables))

  _assert_bit_identical(_train(make, flavor, jit=True), _train(make, flavor, jit=False))


@pytest.mark.parametrize("opt_name", OPTS)
def test_tf_keras_jit_compile_attribute_bit_identical(opt_name):
  # tf_keras compiles its update step itself when `jit_compile` is True (its
  # default on a GPU machine): here, outside any tf.function.
  results = []
  for jit_compile in (False, True):
    rng = np.random.default_rng(0)
    table = tf.Variable(rng.normal(size=(ROWS, COLS)).astype(np.float32))
    opt = getattr(tfk_ops, opt_name)(learning_rate=0.05, jit_compile=jit_compile)
    for values, indices in _batches(4):
      grad = tf.IndexedSlices(tf.constant(values, tf.float32), tf.constant(indices),
                              tf.constant([ROWS, COLS]))
      opt.apply_gradients([(grad, table)])
    results.append(_state(opt, [table]))
  _assert_bit_identical(results[1], results[0])


def _fit_keras3(make_opt, jit, epochs=2):
  """Keras 3 model.fit with `jit_compile`; a model whose gradient is elementwise (an
  Embedding flattened against the target), so that XLA and TensorFlow compute the very
  same gradients and any difference would be the optimizer's."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([
      keras.Input((2,), dtype="int32"),
      keras.layers.Embedding(ROWS, 8, name="emb"),
      keras.layers.Flatten()
  ])
  opt = make_opt(model)
  model.compile(optimizer=opt, loss="mse", jit_compile=jit)
  rng = np.random.default_rng(0)
  x = rng.integers(0, 100, size=(48, 2)).astype(np.int32)
  y = rng.normal(size=(48, 16)).astype(np.float32)
  model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, shuffle=False)
  return [np.asarray(w.numpy()) for w in model.weights] + _state(opt)


KERAS3_FIT = {
    "LazyAdam": lambda model: k3_ops.LazyAdam(0.05),
    "ClippyAdagrad": lambda model: k3_ops.ClippyAdagrad(0.2, export_clipping_factors=True),
    "LossScaleOptimizer": lambda model: keras.optimizers.LossScaleOptimizer(k3_ops.LazyAdam(0.05)),
    "loss_scale_factor": lambda model: k3_ops.LazyAdam(0.05, loss_scale_factor=128.0),
    "CompositeOptimizer": lambda model: k3_ops.CompositeOptimizer([(k3_ops.ClippyAdagrad(
        0.2), lambda: model.get_layer("emb").trainable_variables)]),
    "RowwiseAdagrad": lambda model: k3_ops.RowwiseAdagrad(0.1, weight_decay=0.01, weight_decay_mode=
                                                          "decoupled"),
}


@pytest.mark.parametrize("case", KERAS3_FIT)
def test_keras3_fit_jit_compile_bit_identical(case):
  # Keras 3's compile(jit_compile="auto") is XLA wherever there is a GPU.
  _assert_bit_identical(_fit_keras3(KERAS3_FIT[case], jit=True),
                        _fit_keras3(KERAS3_FIT[case], jit=False))


# ----------------------------------------------------------------------------- bad inputs


def _tables(n=3, rows=50):
  return [tf.Variable(np.full((rows, 4), k + 1.0, np.float32)) for k in range(n)]


def _op_tables(op, rows=50):
  """The variables of op `op` (_sparse_ops): a (rows, 4) table and its slots, row-wise
  Adagrad's accumulator one value per row."""
  n, _ = _sparse_ops()[op]
  tables = _tables(n, rows)
  if op == "RowwiseAdagrad":
    tables[1] = tf.Variable(np.full((rows,), 2.0, np.float32))
  return tables


def _sparse_ops():
  hyper = dict(lr=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
  return {
      "LazyAdam": (3, lambda t, g, i: ops.sparse_lazy_adam(*t, g, i, beta_1_power=0.9, beta_2_power=
                                                           0.999, **hyper)),
      "ClippyAdagrad": (2, lambda t, g, i: ops.sparse_clippy_adagrad(*t, g, i, lr=0.1)),
      "RowwiseAdagrad": (2, lambda t, g, i: ops.sparse_rowwise_adagrad(
          *t, g, i, lr=0.1, weight_decay=0.1, weight_decay_mode="l2")),
  }


@pytest.mark.parametrize("op", ["LazyAdam", "ClippyAdagrad", "RowwiseAdagrad"])
@pytest.mark.parametrize("bad", [50, -1])
def test_bad_index_fails_the_step_and_changes_nothing(op, bad):
  _, apply = _sparse_ops()[op]
  tables = _op_tables(op)

  @tf.function(jit_compile=True)
  def step(g, i):
    apply(tables, g, i)

  g = tf.ones((4, 4))
  step(g, tf.constant([0, 3, 3, 49]))
  before = [t.numpy().copy() for t in tables]
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=re.escape(f"indices[2] = {bad} is not in [0, 50)")):
    step(g, tf.constant([1, 2, bad, 3]))
  for got, want in zip(tables, before):
    np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8))
  step(g, tf.constant([1, 2, 3, 3]))  # the variables stay usable: the next step runs
  assert not np.array_equal(tables[0].numpy(), before[0])


@pytest.mark.parametrize("op", ["LazyAdam", "ClippyAdagrad", "RowwiseAdagrad"])
def test_index_into_a_table_of_no_rows_fails_eagerly_in_a_graph_and_under_xla(op):
  # Every variable the custom call updates is then empty, and nothing reads
  # Clippy's scale here: XLA would drop the call, and its index check, unless
  # the call is kept.
  _, apply = _sparse_ops()[op]
  tables = _op_tables(op, rows=0)
  shapes = [t.shape.as_list() for t in tables]

  def step(g, i):
    apply(tables, g, i)

  for run in (step, tf.function(step), tf.function(step, jit_compile=True)):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape("indices[0] = 0 is not in [0, 0)")):
      run(tf.ones((1, 4)), tf.constant([0]))
  assert [t.shape.as_list() for t in tables] == shapes


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("opt_name", OPTS)
def test_bad_index_in_an_optimizer_step_leaves_tables_and_slots(flavor, opt_name):
  rng = np.random.default_rng(0)
  table = _variable(flavor, rng.normal(size=(ROWS, COLS)))
  opt = getattr(FLAVORS[flavor], opt_name)(learning_rate=0.05)
  _build(opt, [table])

  @tf.function(jit_compile=True)
  def step(values, indices):
    opt.apply_gradients([(tf.IndexedSlices(values, indices, tf.constant([ROWS, COLS])), table)])

  step(tf.ones((2, COLS)), tf.constant([1, 2]))
  before = _state(opt, [table])
  with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(f"indices[1] = {ROWS} is")):
    step(tf.ones((2, COLS)), tf.constant([1, ROWS]))
  # The table and its slots are as they were. (The step counter is another
  # update of the step, which XLA may have applied first: steps are not
  # transactions, with or without XLA.)
  after = _state(opt, [table])
  slots = [k for k, a in enumerate(before) if a.shape[:1] == (ROWS,)]
  assert len(slots) >= 2
  _assert_bit_identical([after[k] for k in slots], [before[k] for k in slots])


@pytest.mark.parametrize("op", ["LazyAdam", "ClippyAdagrad", "RowwiseAdagrad"])
def test_bad_inputs_fail_with_the_opkernel_message(op):
  # What no shape function sees: a slot of another dtype. XLA's kernel checks
  # it at compile time, with the OpKernel's words.
  _, apply = _sparse_ops()[op]
  messages = []
  for jit in (False, True):
    tables = _op_tables(op)
    tables[1] = tf.Variable(np.zeros(tables[1].shape, np.float64))

    @tf.function(jit_compile=jit)
    def step(g, i, tables=tables):
      apply(tables, g, i)

    with pytest.raises(tf.errors.InvalidArgumentError) as error:
      step(tf.ones((2, 4)), tf.constant([0, 1]))
    messages.append(
        re.search(r"(\w+ has dtype double but grad has dtype float: [^.]*)", str(error.value)))
    np.testing.assert_array_equal(tables[0].numpy(), np.ones((50, 4)))
  assert messages[0] and messages[1], messages
  assert messages[0].group(1) == messages[1].group(1)


def test_empty_indices_change_nothing_and_clippy_scale_is_one():
  tables = _tables(2)

  @tf.function(jit_compile=True)
  def step():
    return ops.sparse_clippy_adagrad(*tables, tf.zeros((0, 4)), tf.zeros((0,), tf.int32), lr=0.1)

  assert float(step().numpy()) == 1.0
  assert step.experimental_get_compiler_ir()(stage="hlo").count("custom-call(") == 0
  np.testing.assert_array_equal(tables[0].numpy(), np.ones((50, 4)))


def test_dynamic_sizes_refused_with_what_to_do():
  tables = _tables(3)

  @tf.function(jit_compile=True)
  def step(g, i):
    unique, positions = tf.unique(i)
    summed = tf.math.unsorted_segment_sum(g, positions, tf.shape(unique)[0])
    ops.sparse_lazy_adam(*tables, summed, unique, beta_1_power=0.9, beta_2_power=0.999)

  with pytest.raises(tf.errors.InvalidArgumentError, match="dynamic size inside XLA.*no tf.unique"):
    step(tf.ones((4, 4)), tf.constant([1, 1, 2, 3]))


# ----------------------------------------------------------------------------- registration


@pytest.mark.slow
def test_registered_after_tensorflow_compiled_with_xla():
  # TensorFlow turns its XLA op registry into kernels at its first XLA
  # compilation; kernels registered after that are registered directly.
  script = textwrap.dedent("""
      import numpy as np, tensorflow as tf
      print(tf.function(lambda x: x * 2, jit_compile=True)(tf.constant(1.0)).numpy())
      from tf_opt_ops import _loader, keras as k3
      assert _loader.xla_unavailable() is None, _loader.xla_unavailable()
      table = tf.Variable(np.zeros((10, 2), np.float32))
      opt = k3.LazyAdam(0.1)
      opt.build([table])
      step = tf.function(lambda g: opt.apply_gradients(
          [(tf.IndexedSlices(g, tf.constant([1, 1]), tf.constant([10, 2])), table)]),
          jit_compile=True)
      step(tf.ones((2, 2)))
      assert "tf_opt_ops_sparse_lazy_adam" in step.experimental_get_compiler_ir(
          tf.ones((2, 2)))(stage="hlo")
      print("ok", np.round(table.numpy()[1], 4))
  """)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "ok [-0.1 -0.1]" in result.stdout, result.stdout


def test_xla_library_needs_no_more_than_tensorflow():
  # Its own library, beside the op library: TensorFlow's C++ library by
  # soname, no run path; the op library stays free of it (test_portability).
  readelf = subprocess.run(["readelf", "-d", "--wide", _loader.XLA_LIBRARY_PATH],
                           capture_output=True, text=True, check=True).stdout
  needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", readelf)
  assert "libtensorflow_cc.so.2" in needed and "libtensorflow_framework.so.2" in needed
  assert "RUNPATH" not in readelf and "RPATH" not in readelf
  ops_library = subprocess.run(["readelf", "-d", "--wide", _loader.LIBRARY_PATH],
                               capture_output=True, text=True, check=True).stdout
  assert "libtensorflow_cc" not in ops_library


def test_xla_library_exports_only_its_entry_point():
  # Hidden visibility, as the op library: its copies of the CPU updates and
  # (in a CUDA build) the static CUDA runtime stay its own.
  def symbols(*flags):
    out = subprocess.run(["nm", "-D", *flags, _loader.XLA_LIBRARY_PATH], capture_output=True,
                         text=True, check=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]

  strong = {fields[-1] for fields in symbols("--defined-only") if fields[-2] in "TDBR"}
  assert strong == {"TfOptOpsXlaRegister"}, sorted(strong)
  cuda = re.compile(r"^(__)?cu(da)?[A-Z_]")
  assert not [fields[-1] for fields in symbols("--undefined-only") if cuda.match(fields[-1])]


# ----------------------------------------------------------------------------- light state

LIGHT = {
    "bf16-slots": dict(slot_dtype="bfloat16"),
    "rowwise-v": dict(rowwise_second_moment=True),
    "bf16-rowwise-nearest": dict(slot_dtype="bfloat16", rowwise_second_moment=True,
                                 stochastic_rounding=False),
}


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("light", LIGHT, ids=list(LIGHT))
def test_light_state_bit_identical_with_and_without_xla(flavor, light):
  make = _make(flavor, "LazyAdam", **LIGHT[light])
  _assert_bit_identical(_train(make, flavor, jit=True), _train(make, flavor, jit=False))
  # A dense gradient runs the same op on every row.
  _assert_bit_identical(_train(make, flavor, jit=True, sparse=False),
                        _train(make, flavor, jit=False, sparse=False))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_light_state_hlo_is_one_custom_call(flavor):
  table = _variable(flavor, np.zeros((ROWS, COLS)))
  opt = FLAVORS[flavor].LazyAdam(learning_rate=0.01, slot_dtype="bfloat16",
                                 rowwise_second_moment=True)
  _build(opt, [table])

  @tf.function(jit_compile=True)
  def step(values, indices):
    opt.apply_gradients([(tf.IndexedSlices(values, indices, tf.constant([ROWS, COLS])), table)])

  values, indices = next(_batches(1))
  args = (tf.constant(values, tf.float32), tf.constant(indices, tf.int32))
  step(*args)
  hlo = _instructions(step.experimental_get_compiler_ir(*args)(stage="hlo"))
  assert hlo.count('custom_call_target="tf_opt_ops_sparse_lazy_adam_v2"') == 1, hlo
  for op in ("scatter(", "sort(", "gather("):
    assert op not in hlo, (op, hlo)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_light_clippy_accumulator_bit_identical_with_and_without_xla(flavor, sparse):
  make = _make(flavor, "ClippyAdagrad", accumulator_dtype="bfloat16")
  _assert_bit_identical(_train(make, flavor, jit=True, sparse=sparse),
                        _train(make, flavor, jit=False, sparse=sparse))
