"""The optimizers of every Keras flavor against NumPy, the flavor's own Adam and Keras itself.

Each test states one behaviour once; the `flavor` fixture runs it on every flavor
(`tf_opt_ops.keras`, `.tf_keras`, `.legacy`) where it applies. What differs between
the flavors is data, in FLAVORS below. Why they differ: see docs/design.md, "Keras
flavors and checkpoints". Parity with TensorFlow Recommenders' ClippyAdagrad is in
test_tfrs_parity.py (TFRS needs TF_USE_LEGACY_KERAS=1 before TensorFlow is imported).
"""

import dataclasses
from typing import Any
from typing import Callable

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tf_opt_ops
from tf_opt_ops import _core
from tf_opt_ops import _loader
from tf_opt_ops import keras as keras_optimizers
from tf_opt_ops import legacy as legacy_optimizers
from tf_opt_ops import tf_keras as tf_keras_optimizers

import common
import optimizer_checks as checks

OPTS = ["LazyAdam", "ClippyAdagrad"]


@dataclasses.dataclass(frozen=True)
class FlavorCase:
  """One Keras optimizer API, and what the tests expect of it where the APIs differ."""
  name: str
  module: Any  # our optimizers: tf_opt_ops.keras, .tf_keras or .legacy
  keras: Any  # the Keras package its models use: keras or tf_keras
  stock_adam: Callable[..., Any]  # the flavor's own Adam (jit_compile off for tf_keras')
  variable: Callable[..., Any]  # a model variable of that Keras
  build: Callable[[Any, list], None]  # creates an optimizer's state for a variable list
  # OptimizerV2: state in named slots (`get_slot`); a checkpoint read before the
  # state exists is restored when the first step creates it (deferred
  # restoration); extra weights are tracked by name, so the clipping factors of
  # two variables with one name need distinct names (Keras 3 and tf_keras repeat
  # the variable's name in their state, as their Adam does, and track by position).
  optimizer_v2: bool
  loss_scale_optimizer: Callable[[Any], Any]
  # Names of `optimizer.variables` after one step on variables "a" (3x2) and "b" (4,),
  # what checkpoints key on: the stock Adam's for LazyAdam.
  adam_state_names: tuple
  clippy_state_names: tuple  # with export_clipping_factors=True
  model_file_formats: tuple  # formats whose save keeps the optimizer state
  deserialize_kwargs: dict  # for `keras.optimizers.deserialize` of our own configs
  # Serialization names of TF Addons, Merlin and TFRS that resolve to this flavor.
  replaced_names: tuple
  tensor_learning_rate: bool  # takes a tf.Tensor learning rate (Keras 3 does not)
  weight_decay: bool  # has `weight_decay` (OptimizerV2 has not)
  legacy_decay: bool  # has OptimizerV2's `decay` (learning rate / (1 + decay * step))
  jit_compile_attribute: bool  # tf_keras' `optimizer.jit_compile` (on by default with a GPU)
  loss_scale_factor: bool  # Keras 3's `loss_scale_factor`
  keras_multi_optimizer: bool  # keras.optimizers.MultiOptimizer holds our optimizers


# One row per flavor with every field named: the rows share their shape because
# they are one record three times, data rather than repeated code.
FLAVORS = [
    FlavorCase(
        name="keras",
        module=keras_optimizers,
        keras=keras,
        stock_adam=keras.optimizers.Adam,
        variable=keras.Variable,
        build=lambda opt, variables: opt.build(variables),
        optimizer_v2=False,
        loss_scale_optimizer=keras.optimizers.LossScaleOptimizer,
        adam_state_names=("iteration", "learning_rate", "a_momentum", "a_velocity", "b_momentum",
                          "b_velocity"),
        clippy_state_names=("iteration", "learning_rate", "a_accumulator", "a_clipping_factor",
                            "b_accumulator", "b_clipping_factor"),
        model_file_formats=("keras",),
        deserialize_kwargs={},
        replaced_names=("Addons>LazyAdam", "merlin.models>LazyAdam", "Custom>ClippyAdagrad"),
        tensor_learning_rate=False,
        weight_decay=True,
        legacy_decay=False,
        jit_compile_attribute=False,
        loss_scale_factor=True,
        keras_multi_optimizer=True,
    ),
    FlavorCase(
        name="tf_keras",
        module=tf_keras_optimizers,
        keras=tf_keras,
        stock_adam=lambda **kw: tf_keras.optimizers.Adam(jit_compile=False, **kw),
        variable=tf.Variable,
        build=lambda opt, variables: opt.build(variables),
        optimizer_v2=False,
        loss_scale_optimizer=tf_keras.mixed_precision.LossScaleOptimizer,
        adam_state_names=("iteration:0", "Adam/m/a:0", "Adam/v/a:0", "Adam/m/b:0", "Adam/v/b:0"),
        clippy_state_names=("iteration:0", "Adam/accumulator/a:0", "Adam/clipping_factor/a:0",
                            "Adam/accumulator/b:0", "Adam/clipping_factor/b:0"),
        model_file_formats=("keras", "h5"),
        deserialize_kwargs={},
        replaced_names=("Custom>ClippyAdagrad",),
        tensor_learning_rate=True,
        weight_decay=True,
        legacy_decay=False,
        jit_compile_attribute=True,
        loss_scale_factor=False,
        keras_multi_optimizer=False,
    ),
    FlavorCase(
        name="legacy",
        module=legacy_optimizers,
        keras=tf_keras,
        stock_adam=tf_keras.optimizers.legacy.Adam,
        variable=tf.Variable,
        build=lambda opt, variables: opt._create_all_weights(variables),
        optimizer_v2=True,
        loss_scale_optimizer=tf_keras.mixed_precision.LossScaleOptimizer,
        adam_state_names=("Adam/iter:0", "Adam/a/m:0", "Adam/b/m:0", "Adam/a/v:0", "Adam/b/v:0"),
        clippy_state_names=("Adam/iter:0", "Adam/a/accumulator:0", "Adam/a_clipping_factor:0",
                            "Adam/b/accumulator:0", "Adam/b_clipping_factor:0"),
        # tf_keras' .keras format drops legacy optimizers' state (stock legacy
        # Adam loads with no variables too): HDF5 only.
        model_file_formats=("h5",),
        deserialize_kwargs={"use_legacy_optimizer": True},
        replaced_names=("Addons>LazyAdam", "merlin.models>LazyAdam"),
        tensor_learning_rate=True,
        weight_decay=False,
        legacy_decay=True,
        jit_compile_attribute=False,
        loss_scale_factor=False,
        keras_multi_optimizer=False,
    ),
]


def flavors_where(feature):
  """The flavors whose `feature` field is true, for `parametrize("flavor", ..., indirect=True)`."""
  return [pytest.param(f, id=f.name) for f in FLAVORS if getattr(f, feature)]


@pytest.fixture(params=[pytest.param(f, id=f.name) for f in FLAVORS])
def flavor(request):
  return request.param


def make(flavor, opt, **options):
  return getattr(flavor.module, opt)(**options)


@pytest.fixture
def xla_fallback_messages():
  """The XLA fallback warnings logged while the test runs, the once-only memory cleared."""
  with common.tensorflow_log() as messages:
    yield lambda: [m for m in messages if "XLA" in m]


@pytest.fixture(params=["xla_kernels", "fallback", "gpu_without_xla_kernels"])
def xla_kernels(request, monkeypatch):
  """The ways an update runs inside XLA: the ops' XLA kernels; the standard-ops fallback
  where this TensorFlow has none (before 2.17); and the fallback for a GPU variable
  where GPUs have none (a library built without CUDA). Yields the fallback's reason, or
  None."""
  if request.param == "xla_kernels":
    assert _loader.xla_unavailable() is None, _loader.xla_unavailable()
    yield None
    return
  reason = f"{request.param} in this test"
  monkeypatch.setattr(_loader, "_xla_gpu_unavailable", reason)
  if request.param == "fallback":
    monkeypatch.setattr(_loader, "_xla_unavailable", reason)
  else:
    monkeypatch.setattr(_core, "_on_gpu", lambda var: True)
  yield reason


def expected_fallback_messages(opt, sparse, reason):
  # With the XLA kernels nothing falls back; without them every sparse update
  # and the dense Clippy op do. Dense lazy Adam is standard Adam
  # (ResourceApplyAdam or Adam's own arithmetic), which XLA compiles as is.
  if reason is None:
    return 0
  return 0 if (opt == "LazyAdam" and not sparse) else 1


# ---------------------------------------------------------------- the math


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("opt", OPTS)
def test_sparse_matches_numpy(flavor, opt, dtype, index_dtype):
  checks.check_against_numpy(flavor.module, opt, dtype, index_dtype)


@pytest.mark.parametrize("dtype", checks.DTYPES)
@pytest.mark.parametrize("opt", OPTS)
def test_dense_matches_numpy(flavor, opt, dtype):
  checks.check_against_numpy(flavor.module, opt, dtype, sparse=False)


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("opt", OPTS)
def test_hyperparameters_as_callables_and_tensors(flavor, opt, sparse):
  options = dict(checks.HYPER_TYPES[opt])
  if flavor.tensor_learning_rate:
    options["learning_rate"] = tf.constant(0.05)
  checks.check_against_numpy(flavor.module, opt, sparse=sparse, options=options)


@pytest.mark.parametrize("opt", OPTS)
def test_sparse_in_tf_function(flavor, opt):
  checks.check_against_numpy(flavor.module, opt, wrap=tf.function, steps=4)


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("opt", OPTS)
def test_inside_xla_same_math_fallback_logged_once(flavor, opt, sparse, xla_kernels,
                                                   xla_fallback_messages):
  checks.check_against_numpy(flavor.module, opt, sparse=sparse,
                             wrap=lambda f: tf.function(f, jit_compile=True))
  messages = xla_fallback_messages()
  assert len(messages) == expected_fallback_messages(opt, sparse, xla_kernels)
  assert all(opt in m and xla_kernels in m for m in messages)


@pytest.mark.parametrize("flavor", flavors_where("jit_compile_attribute"), indirect=True)
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("opt", OPTS)
def test_inside_xla_via_jit_compile_attribute(flavor, opt, sparse, xla_kernels,
                                              xla_fallback_messages):
  # tf_keras runs update_step inside tf.function(jit_compile=True) when
  # opt.jit_compile is True (its default on a GPU machine).
  checks.check_against_numpy(flavor.module, opt, sparse=sparse,
                             configure=lambda o: setattr(o, "jit_compile", True))
  messages = xla_fallback_messages()
  assert len(messages) == expected_fallback_messages(opt, sparse, xla_kernels)
  assert all(opt in m and xla_kernels in m for m in messages)


@pytest.mark.parametrize("flavor", flavors_where("jit_compile_attribute"), indirect=True)
def test_jit_compile_defaults_as_the_base_class_where_gpus_have_xla_kernels(flavor, monkeypatch):

  def fake(kind=None):
    return ["fake GPU"] if kind == "GPU" else []

  monkeypatch.setattr(tf.config, "list_physical_devices", fake)
  monkeypatch.setattr(tf.compat.v2.config, "list_physical_devices", fake)
  assert flavor.keras.optimizers.Adam().jit_compile  # what the base class does here
  if _loader.xla_unavailable(gpu=True) is None:  # a CUDA build: GPUs have XLA kernels
    for opt in OPTS + ["RowwiseAdagrad"]:
      assert make(flavor, opt).jit_compile
      assert make(flavor, opt, jit_compile=False).get_config()["jit_compile"] is False
  # Where GPUs have no XLA kernels, XLA would run the standard-ops fallback: off.
  monkeypatch.setattr(_loader, "_xla_gpu_unavailable", "no GPU kernels in this test")
  for opt in OPTS + ["RowwiseAdagrad"]:
    optimizer = make(flavor, opt)
    assert optimizer.jit_compile is False
    assert optimizer.get_config()["jit_compile"] is False


def test_dense_lazy_adam_equals_stock_adam(flavor):
  # Same arithmetic as the flavor's own Adam: bit-identical variable and state.
  checks.check_dense_equals(lambda: flavor.module.LazyAdam(learning_rate=0.01),
                            lambda: flavor.stock_adam(learning_rate=0.01))


@pytest.mark.parametrize("flavor", flavors_where("weight_decay"), indirect=True)
def test_weight_decay_matches_stock_adam(flavor):
  checks.check_dense_equals(lambda: flavor.module.LazyAdam(learning_rate=0.01, weight_decay=0.1),
                            lambda: flavor.stock_adam(learning_rate=0.01, weight_decay=0.1))


@pytest.mark.parametrize("flavor", flavors_where("weight_decay"), indirect=True)
@pytest.mark.parametrize("zero", [0, 0.0])
@pytest.mark.parametrize("opt", OPTS)
def test_zero_weight_decay_is_skipped(flavor, opt, zero):
  # No pass over the table: rows outside the batch keep their bits (-0.0 included).
  checks.check_against_numpy(flavor.module, opt, options=dict(weight_decay=zero))


def check_learning_rates(flavor, opt, learning_rate, step_rates, **options):
  """Sparse steps with `learning_rate` against the reference at `step_rates[k]` in step k."""
  init = np.random.default_rng(0).normal(size=(checks.ROWS, checks.COLS)).astype(np.float32)
  var = tf.Variable(init)
  optimizer = make(flavor, opt, learning_rate=learning_rate, **options)
  ref = checks.make_reference(opt, init)
  batches = checks.sparse_batches(len(step_rates), checks.ROWS, checks.COLS, checks.BATCH)
  for (values, idx), rate in zip(batches, step_rates, strict=True):
    optimizer.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(idx)), var)])
    ref.sparse(values, idx, lr=rate)
  np.testing.assert_allclose(var.numpy(), ref.values(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt", OPTS)
def test_learning_rate_schedule(flavor, opt):
  schedule = flavor.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
  check_learning_rates(flavor, opt, schedule, [0.1, 0.05, 0.025])


@pytest.mark.parametrize("opt", OPTS)
def test_callable_learning_rate(flavor, opt):
  check_learning_rates(flavor, opt, lambda: 0.02, [0.02] * 3)


@pytest.mark.parametrize("flavor", flavors_where("legacy_decay"), indirect=True)
@pytest.mark.parametrize("opt", OPTS)
def test_legacy_decay(flavor, opt):
  check_learning_rates(flavor, opt, lambda: 0.1, [0.1 / (1 + 0.5 * k) for k in range(3)], decay=0.5)


@pytest.mark.parametrize("flavor", flavors_where("loss_scale_factor"), indirect=True)
@pytest.mark.parametrize("opt", OPTS)
def test_loss_scale_factor_with_sparse_gradients(flavor, opt):
  # Keras 3's own optimizers raise TypeError here (IndexedSlices / float).
  factor = 8.0
  results = []
  for scale in (None, factor):
    init = np.random.default_rng(0).normal(size=(checks.ROWS, checks.COLS)).astype(np.float32)
    var = tf.Variable(init)
    optimizer = make(flavor, opt, learning_rate=0.05, loss_scale_factor=scale)
    for values, idx in checks.sparse_batches(2, checks.ROWS, checks.COLS, checks.BATCH):
      values = values * (scale or 1.0)
      optimizer.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(idx)), var)])
    results.append(var.numpy())
  np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- state and checkpoints


def test_clipping_factors_exported(flavor):
  opt, var, ref = checks.check_against_numpy(
      flavor.module, "ClippyAdagrad", options=dict(export_clipping_factors=True, learning_rate=0.5))
  assert ref.scale < 1.0  # the step did clip
  assert len(opt.clipping_factors) == 1
  factor = opt.clipping_factors[0]
  np.testing.assert_allclose(float(factor.numpy()), ref.scale, rtol=1e-5)
  assert factor.shape == () and factor.dtype == var.dtype
  # Scalar weights, not slots (a SavedModel's RestoredOptimizer gives every slot
  # its variable's shape), listed after their variable's accumulator.
  state = checks.variables_of(opt)
  assert [tuple(v.shape) for v in state[-2:]] == [var.shape, ()]
  assert state[-1] is factor


def state_layout(flavor, optimizer):
  """(name, shape) of `optimizer.variables` after one zero step on variables "a" (3x2) and
  "b" (4,)."""
  a = flavor.variable(np.zeros((3, 2), np.float32), name="a")
  b = flavor.variable(np.zeros((4,), np.float32), name="b")
  optimizer.apply_gradients([(tf.zeros((3, 2)), a), (tf.zeros((4,)), b)])
  return [(v.name, tuple(v.shape)) for v in checks.variables_of(optimizer)]


def test_lazy_adam_state_layout_matches_stock_adam(flavor):
  layout = state_layout(flavor, flavor.module.LazyAdam(name="Adam"))
  assert layout == state_layout(flavor, flavor.stock_adam(name="Adam"))
  assert tuple(name for name, _ in layout) == flavor.adam_state_names


def test_clippy_state_layout(flavor):
  optimizer = flavor.module.ClippyAdagrad(name="Adam", export_clipping_factors=True)
  layout = state_layout(flavor, optimizer)
  assert tuple(name for name, _ in layout) == flavor.clippy_state_names
  # Per variable its accumulator, then its scalar clipping factor.
  assert [shape for _, shape in layout[-4:]] == [(3, 2), (), (4,), ()]


@pytest.mark.parametrize("flavor", flavors_where("optimizer_v2"), indirect=True)
def test_slots(flavor):
  var = tf.Variable(np.zeros((3, 2), np.float32))
  lazy = flavor.module.LazyAdam()
  lazy.apply_gradients([(tf.zeros((3, 2)), var)])
  assert lazy.get_slot_names() == ["m", "v"]
  clippy = flavor.module.ClippyAdagrad(export_clipping_factors=True)
  clippy.apply_gradients([(tf.zeros((3, 2)), var)])
  assert clippy.get_slot_names() == ["accumulator"]  # the clipping factor is no slot
  assert [v.ref() for v in checks.variables_of(clippy)] == [
      clippy.iterations.ref(),
      clippy.get_slot(var, "accumulator").ref(), clippy.clipping_factors[0].ref()
  ]


@pytest.mark.parametrize("direction", ["adam_to_lazy", "lazy_to_adam"])
def test_checkpoint_round_trip_with_stock_adam(flavor, tmp_path, direction):
  pair = (flavor.module.LazyAdam, flavor.stock_adam)
  if direction == "adam_to_lazy":
    pair = pair[::-1]
  # Restored into existing state, or (OptimizerV2) into the state the first step creates.
  build = None if flavor.optimizer_v2 else (lambda opt, var: flavor.build(opt, [var]))
  checks.check_checkpoint_round_trip(tmp_path, *pair, src_sparse=direction == "lazy_to_adam",
                                     build=build)


def _two_tables():
  # Eager variables need not have unique names: both are "Variable".
  rng = np.random.default_rng(7)
  return [tf.Variable(rng.normal(size=shape).astype(np.float32)) for shape in [(6, 3), (4,)]]


def _clippy_state(opt, variables):
  """Iterations, then each variable's accumulator and clipping factor, as NumPy arrays.

  By role, not `opt.variables()` order: a restore into existing model variables
  creates their slots at once, before the iteration counter.
  """
  state = [opt.iterations]
  for var, factor in zip(variables, opt.clipping_factors, strict=True):
    state += [opt.get_slot(var, "accumulator"), factor]
  return [v.numpy() for v in state]


def _clippy_steps(opt, variables, steps, seed):
  rng = np.random.default_rng(seed)
  for _ in range(steps):
    grads = [
        tf.IndexedSlices(tf.constant(rng.normal(size=(3, 3)).astype(np.float32)),
                         tf.constant([0, 2, 0]), tf.constant([6, 3])),
        tf.constant(rng.normal(size=(4,)).astype(np.float32))
    ]
    opt.apply_gradients(zip(grads, variables))


def test_clipping_factors_per_variable_with_equal_names(flavor):
  variables = _two_tables()
  assert variables[0].name == variables[1].name
  opt = flavor.module.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  _clippy_steps(opt, variables, 2, seed=1)
  assert len(opt.clipping_factors) == 2
  if flavor.optimizer_v2:
    assert len({f.name for f in opt.clipping_factors}) == 2
  for factor in opt.clipping_factors:
    assert factor.shape == ()
    assert 0.0 < float(factor.numpy()) <= 1.0
  assert float(opt.clipping_factors[0].numpy()) != float(opt.clipping_factors[1].numpy())
  # The same variables again, and in the other order: no new factors.
  opt.apply_gradients(zip([tf.zeros((4,)), tf.zeros((6, 3))], variables[::-1]))
  assert len(opt.clipping_factors) == 2
  assert len(checks.variables_of(opt)) == len(flavor.clippy_state_names)


@pytest.mark.parametrize("flavor", flavors_where("optimizer_v2"), indirect=True)
@pytest.mark.parametrize("deferred", [True, False])
def test_clipping_factors_checkpoint_round_trip(flavor, tmp_path, deferred):
  src_vars = _two_tables()
  src = flavor.module.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  _clippy_steps(src, src_vars, 3, seed=1)
  saved = [float(f.numpy()) for f in src.clipping_factors]
  path = tf.train.Checkpoint(v=src_vars, optimizer=src).write(str(tmp_path / "ckpt"))
  dst_vars = [tf.Variable(tf.zeros_like(v)) for v in src_vars]
  dst = flavor.module.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  if not deferred:  # state first, then the restore; else the restore waits for the state
    flavor.build(dst, dst_vars)
  status = tf.train.Checkpoint(v=dst_vars, optimizer=dst).read(path)
  if deferred:
    assert dst.clipping_factors == []
    flavor.build(dst, dst_vars)
  status.assert_consumed()
  assert [float(f.numpy()) for f in dst.clipping_factors] == saved
  for a, b in zip(_clippy_state(src, src_vars), _clippy_state(dst, dst_vars), strict=True):
    np.testing.assert_array_equal(a, b)
  _clippy_steps(src, src_vars, 2, seed=2)
  _clippy_steps(dst, dst_vars, 2, seed=2)
  for a, b in zip(
      _clippy_state(src, src_vars) + [v.numpy() for v in src_vars],
      _clippy_state(dst, dst_vars) + [v.numpy() for v in dst_vars], strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert int(dst.iterations.numpy()) == 5


@pytest.mark.parametrize("flavor", flavors_where("optimizer_v2"), indirect=True)
def test_clipping_factors_checkpoint_restore_before_first_step(flavor, tmp_path):
  # The usual deferred restore: the first apply_gradients creates and restores the state.
  src_vars = _two_tables()
  src = flavor.module.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  _clippy_steps(src, src_vars, 3, seed=1)
  path = tf.train.Checkpoint(v=src_vars, optimizer=src).write(str(tmp_path / "ckpt"))
  dst_vars = [tf.Variable(tf.zeros_like(v)) for v in src_vars]
  dst = flavor.module.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  status = tf.train.Checkpoint(v=dst_vars, optimizer=dst).read(path)
  _clippy_steps(src, src_vars, 2, seed=2)
  _clippy_steps(dst, dst_vars, 2, seed=2)
  status.assert_consumed()
  assert len(checks.variables_of(dst)) == len(flavor.clippy_state_names)
  for a, b in zip(
      _clippy_state(src, src_vars) + [v.numpy() for v in src_vars],
      _clippy_state(dst, dst_vars) + [v.numpy() for v in dst_vars], strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- in Keras models


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("opt", OPTS)
def test_model_fit_with_embedding(flavor, opt, jit_compile):
  checks.check_fit(flavor.keras, make(flavor, opt, learning_rate=0.05), jit_compile=jit_compile)


@pytest.mark.parametrize("opt", OPTS)
def test_model_file_round_trip_continues_identically(flavor, tmp_path, opt):
  options = dict(export_clipping_factors=True) if opt == "ClippyAdagrad" else {}
  for fmt in flavor.model_file_formats:
    checks.check_model_file_round_trip(flavor.keras, make(flavor, opt, learning_rate=0.05,
                                                          **options), str(tmp_path / f"m.{fmt}"))


@pytest.mark.parametrize("opt", OPTS)
def test_mixed_precision_loss_scale_optimizer(flavor, opt):
  inner = make(flavor, opt, learning_rate=0.05)
  model = checks.check_fit(flavor.keras, flavor.loss_scale_optimizer(inner), dtype="mixed_float16")
  assert tf.as_dtype(model.get_layer("emb").embeddings.dtype) == tf.float32  # master weights
  assert int(inner.iterations.numpy()) == 12


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_model_fit(flavor, dtype):
  opt = flavor.loss_scale_optimizer(flavor.module.LazyAdam(learning_rate=0.05))
  model = checks.check_fit(flavor.keras, opt, dtype=dtype)
  assert tf.as_dtype(model.get_layer("emb").embeddings.dtype) == tf.as_dtype(dtype)


@pytest.mark.parametrize("flavor", flavors_where("keras_multi_optimizer"), indirect=True)
def test_inside_keras_multi_optimizer(flavor):
  lazy = flavor.module.LazyAdam(learning_rate=0.05)
  clippy = flavor.module.ClippyAdagrad(learning_rate=0.05)
  opt = flavor.keras.optimizers.MultiOptimizer(
      flavor.keras.optimizers.OptimizerMap(default_optimizer=clippy,
                                           optimizer_map={"emb/.*": lazy}))
  model = checks.check_fit(flavor.keras, opt)
  assert int(lazy.iterations.numpy()) == int(clippy.iterations.numpy()) == 12
  assert len(lazy.variables) == 4 and len(clippy.variables) == 2 + 2  # 1 and 2 model variables
  assert model.get_layer("emb").embeddings.path == "emb/embeddings"


# ---------------------------------------------------------------- configs and names


def test_config_round_trip(flavor):
  clippy_options = dict(weight_decay=0.01) if flavor.weight_decay else {}
  opts = [
      flavor.module.LazyAdam(learning_rate=0.02, beta_1=0.8, beta_2=0.99, epsilon=1e-5,
                             clipnorm=1.0),
      flavor.module.ClippyAdagrad(learning_rate=0.3, initial_accumulator_value=0.2,
                                  variable_relative_threshold=0.2,
                                  accumulator_relative_threshold=0.01, absolute_threshold=1e-3,
                                  epsilon=1e-6, export_clipping_factors=True,
                                  use_standard_accumulator_update=True, **clippy_options),
  ]
  for opt in opts:
    config = opt.get_config()
    again = type(opt).from_config(config)
    assert again.get_config() == config
    restored = flavor.keras.optimizers.deserialize(flavor.keras.optimizers.serialize(opt),
                                                   **flavor.deserialize_kwargs)
    assert type(restored) is type(opt)
    assert restored.get_config() == config
  assert opts[1].get_config()["use_standard_accumulator_update"] is True


# What TF Addons' and Merlin's LazyAdam (a legacy Adam) and TFRS' ClippyAdagrad
# (get_config: no use_standard_accumulator_update) wrote.
REPLACED_CONFIGS = {
    "LazyAdam": {
        "name": "LazyAdam", "learning_rate": 0.01, "decay": 0.0, "beta_1": 0.9, "beta_2": 0.999,
        "epsilon": 1e-7, "amsgrad": False
    },
    "ClippyAdagrad": {
        "name": "ClippyAdagrad", "weight_decay": 0, "clipnorm": None, "global_clipnorm": None,
        "clipvalue": None, "use_ema": False, "ema_momentum": 0.99, "ema_overwrite_frequency": None,
        "jit_compile": False, "is_legacy_optimizer": False, "learning_rate": 0.01,
        "initial_accumulator_value": 0.1, "variable_relative_threshold": 0.1,
        "absolute_threshold": 1e-7, "accumulator_relative_threshold": 0.0, "epsilon": 1e-7,
        "export_clipping_factors": True, "clip_accumulator_update": True
    },
}


@pytest.mark.parametrize(
    "flavor,name",
    [pytest.param(f, n, id=f"{f.name}-{n}") for f in FLAVORS for n in f.replaced_names],
    indirect=["flavor"])
def test_replaced_serialization_names_resolve(flavor, name):
  cls = getattr(flavor.module, name.split(">")[1])
  config = REPLACED_CONFIGS[cls.__name__]
  opt = flavor.keras.optimizers.deserialize({"class_name": name, "config": config})
  assert type(opt) is cls
  assert flavor.keras.saving.get_registered_object(name) is cls
  if cls.__name__ == "ClippyAdagrad":
    assert opt.clip_accumulator_update and opt.export_clipping_factors


def test_errors(flavor):
  with pytest.raises(ValueError, match="amsgrad"):
    flavor.module.LazyAdam(amsgrad=True)
  with pytest.raises(ValueError, match="clip_accumulator_update"):
    flavor.module.ClippyAdagrad(clip_accumulator_update=True, use_standard_accumulator_update=True)
  with pytest.raises(ValueError, match="absolute_threshold"):
    flavor.module.ClippyAdagrad(absolute_threshold=-1.0)


# ---------------------------------------------------------------- the package's top level


def test_top_level_names_follow_tf_keras():
  assert tf_opt_ops.keras_flavor() == "keras"
  assert tf_opt_ops.LazyAdam is keras_optimizers.LazyAdam
  assert tf_opt_ops.ClippyAdagrad is keras_optimizers.ClippyAdagrad


@pytest.mark.slow
def test_import_without_tf_keras_installed():
  code = (
      "import sys; sys.modules['tf_keras'] = None\n"  # `import tf_keras` now fails
      "import tf_opt_ops\n"
      "assert tf_opt_ops.LazyAdam is tf_opt_ops.keras.LazyAdam\n"
      "assert 'tf_opt_ops.legacy' not in sys.modules\n")
  common.run_python(code)
