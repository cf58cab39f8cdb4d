"""tf_opt_ops.legacy (tf_keras OptimizerV2) against NumPy and tf_keras.optimizers.legacy.Adam."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import optimizer_refs as refs
from tf_opt_ops import legacy as flavor

OPTS = ["LazyAdam", "ClippyAdagrad"]
LegacyAdam = tf_keras.optimizers.legacy.Adam


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("opt", OPTS)
def test_sparse_matches_numpy(opt, dtype, index_dtype):
  refs.check_against_numpy(flavor, opt, dtype, index_dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("opt", OPTS)
def test_dense_matches_numpy(opt, dtype):
  refs.check_against_numpy(flavor, opt, dtype, sparse=False)


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("opt", OPTS)
def test_xla_fallback(opt, sparse):
  refs.check_against_numpy(flavor, opt, sparse=sparse,
                           wrap=lambda f: tf.function(f, jit_compile=True))


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("opt", OPTS)
def test_hyperparameters_as_callables_and_tensors(opt, sparse):
  options = dict(refs.HYPER_TYPES[opt], learning_rate=tf.constant(0.05))
  refs.check_against_numpy(flavor, opt, sparse=sparse, options=options)


@pytest.mark.parametrize("opt", OPTS)
def test_sparse_in_tf_function(opt):
  refs.check_against_numpy(flavor, opt, wrap=tf.function, steps=4)


def test_dense_lazy_adam_equals_legacy_adam():
  # Both run ResourceApplyAdam with the same inputs: bit-identical.
  refs.check_dense_equals(lambda: flavor.LazyAdam(learning_rate=0.01),
                          lambda: LegacyAdam(learning_rate=0.01))


def test_legacy_decay_and_callable_learning_rate():
  init = np.random.default_rng(0).normal(size=(refs.ROWS, refs.COLS)).astype(np.float32)
  var = tf.Variable(init)
  opt = flavor.LazyAdam(learning_rate=lambda: 0.1, decay=0.5)
  ref = refs.LazyAdamRef(init)
  for k, (values, idx) in enumerate(refs.sparse_batches(3, refs.ROWS, refs.COLS, refs.BATCH)):
    opt.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(idx)), var)])
    ref.sparse(values, idx, lr=0.1 / (1 + 0.5 * k))
  np.testing.assert_allclose(var.numpy(), ref.var, rtol=1e-5, atol=1e-6)


def test_slot_names_and_order_match_legacy_adam():
  a = tf.Variable(np.zeros((3, 2), np.float32), name="a")
  b = tf.Variable(np.zeros((4,), np.float32), name="b")
  names = []
  for cls in (flavor.LazyAdam, LegacyAdam):
    opt = cls(name="Adam")
    opt.apply_gradients([(tf.zeros_like(a), a), (tf.zeros_like(b), b)])
    assert opt.get_slot_names() == ["m", "v"]
    names.append([v.name for v in opt.variables()])
  assert names[0] == names[1]
  assert [n.split("/")[-1] for n in names[0]] == ["iter:0", "m:0", "m:0", "v:0", "v:0"]


@pytest.mark.parametrize("direction", ["adam_to_lazy", "lazy_to_adam"])
def test_checkpoint_round_trip_with_legacy_adam(tmp_path, direction):
  pair = (flavor.LazyAdam, LegacyAdam)
  if direction == "adam_to_lazy":
    pair = pair[::-1]
  # OptimizerV2 restores slots when they are created (deferred restoration).
  refs.check_checkpoint_round_trip(tmp_path, *pair, src_sparse=direction == "lazy_to_adam",
                                   build=None)


def test_clipping_factors_exported():
  opt, var, ref = refs.check_against_numpy(
      flavor, "ClippyAdagrad", options=dict(export_clipping_factors=True, learning_rate=0.5))
  assert ref.scale < 1.0
  assert len(opt.clipping_factors) == 1
  factor = opt.clipping_factors[0]
  np.testing.assert_allclose(float(factor.numpy()), ref.scale, rtol=1e-5)
  assert factor.shape == () and factor.dtype == var.dtype
  # Scalar weights, not slots (a SavedModel's RestoredOptimizer gives every slot
  # its variable's shape), listed after their variable's accumulator.
  assert opt.get_slot_names() == ["accumulator"]
  assert [v.ref() for v in opt.variables()
         ] == [opt.iterations.ref(),
               opt.get_slot(var, "accumulator").ref(),
               factor.ref()]


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


def test_clipping_factors_per_variable_with_equal_names():
  variables = _two_tables()
  assert variables[0].name == variables[1].name
  opt = flavor.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  _clippy_steps(opt, variables, 2, seed=1)
  assert len(opt.clipping_factors) == 2
  assert len({f.name for f in opt.clipping_factors}) == 2
  for factor in opt.clipping_factors:
    assert factor.shape == ()
    assert 0.0 < float(factor.numpy()) <= 1.0
  assert float(opt.clipping_factors[0].numpy()) != float(opt.clipping_factors[1].numpy())
  # The same variables again, and in the other order: no new factors.
  opt.apply_gradients(zip([tf.zeros((4,)), tf.zeros((6, 3))], variables[::-1]))
  assert len(opt.clipping_factors) == 2 and len(opt.variables()) == 5


@pytest.mark.parametrize("deferred", [True, False])
def test_clipping_factors_checkpoint_round_trip(tmp_path, deferred):
  src_vars = _two_tables()
  src = flavor.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  _clippy_steps(src, src_vars, 3, seed=1)
  saved = [float(f.numpy()) for f in src.clipping_factors]
  path = tf.train.Checkpoint(v=src_vars, optimizer=src).write(str(tmp_path / "ckpt"))
  dst_vars = [tf.Variable(tf.zeros_like(v)) for v in src_vars]
  dst = flavor.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  if not deferred:  # state first, then the restore; else the restore waits for the state
    dst._create_all_weights(dst_vars)  # pylint: disable=protected-access
  status = tf.train.Checkpoint(v=dst_vars, optimizer=dst).read(path)
  if deferred:
    assert dst.clipping_factors == []
    dst._create_all_weights(dst_vars)  # pylint: disable=protected-access
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


def test_clipping_factors_checkpoint_restore_before_first_step(tmp_path):
  # The usual deferred restore: the first apply_gradients creates and restores the state.
  src_vars = _two_tables()
  src = flavor.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  _clippy_steps(src, src_vars, 3, seed=1)
  path = tf.train.Checkpoint(v=src_vars, optimizer=src).write(str(tmp_path / "ckpt"))
  dst_vars = [tf.Variable(tf.zeros_like(v)) for v in src_vars]
  dst = flavor.ClippyAdagrad(learning_rate=0.5, export_clipping_factors=True)
  status = tf.train.Checkpoint(v=dst_vars, optimizer=dst).read(path)
  _clippy_steps(src, src_vars, 2, seed=2)
  _clippy_steps(dst, dst_vars, 2, seed=2)
  status.assert_consumed()
  assert len(dst.variables()) == 5
  for a, b in zip(
      _clippy_state(src, src_vars) + [v.numpy() for v in src_vars],
      _clippy_state(dst, dst_vars) + [v.numpy() for v in dst_vars], strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("opt", OPTS)
def test_model_fit_with_embedding(opt, jit_compile):
  refs.check_fit(tf_keras, getattr(flavor, opt)(learning_rate=0.05), jit_compile=jit_compile)


@pytest.mark.parametrize("opt", OPTS)
def test_model_file_round_trip_continues_identically(tmp_path, opt):
  # HDF5 only: tf_keras' .keras format drops legacy optimizers' state (stock
  # legacy Adam loads with no variables too).
  fmt = "h5"
  options = dict(export_clipping_factors=True) if opt == "ClippyAdagrad" else {}
  refs.check_model_file_round_trip(tf_keras,
                                   getattr(flavor, opt)(learning_rate=0.05, **options),
                                   str(tmp_path / f"m.{fmt}"))


@pytest.mark.parametrize("opt", OPTS)
def test_mixed_precision_loss_scale_optimizer(opt):
  inner = getattr(flavor, opt)(learning_rate=0.05)
  model = refs.check_fit(tf_keras, tf_keras.mixed_precision.LossScaleOptimizer(inner),
                         dtype="mixed_float16")
  assert model.get_layer("emb").embeddings.dtype == tf.float32
  assert int(inner.iterations.numpy()) == 12


def test_config_round_trip():
  opts = [
      flavor.LazyAdam(learning_rate=0.02, beta_1=0.8, beta_2=0.99, epsilon=1e-5, clipnorm=1.0),
      flavor.ClippyAdagrad(learning_rate=0.3, initial_accumulator_value=0.2,
                           variable_relative_threshold=0.2, accumulator_relative_threshold=0.01,
                           absolute_threshold=1e-3, epsilon=1e-6, export_clipping_factors=True,
                           use_standard_accumulator_update=True),
  ]
  for opt in opts:
    config = opt.get_config()
    again = type(opt).from_config(config)
    assert again.get_config() == config
    restored = tf_keras.optimizers.deserialize(tf_keras.optimizers.serialize(opt),
                                               use_legacy_optimizer=True)
    assert type(restored) is type(opt)
    assert restored.get_config() == config
  assert opts[1].get_config()["use_standard_accumulator_update"] is True


@pytest.mark.parametrize("name", ["Addons>LazyAdam", "merlin.models>LazyAdam"])
def test_tfa_and_merlin_serialization_names_resolve(name):
  # What TF Addons' / Merlin's LazyAdam (a legacy Adam) wrote.
  config = {
      "name": "LazyAdam", "learning_rate": 0.01, "decay": 0.0, "beta_1": 0.9, "beta_2": 0.999,
      "epsilon": 1e-7, "amsgrad": False
  }
  opt = tf_keras.optimizers.deserialize({"class_name": name, "config": config})
  assert type(opt) is flavor.LazyAdam
  assert tf_keras.utils.get_registered_object(name) is flavor.LazyAdam


def test_errors():
  with pytest.raises(ValueError, match="amsgrad"):
    flavor.LazyAdam(amsgrad=True)
  with pytest.raises(ValueError, match="clip_accumulator_update"):
    flavor.ClippyAdagrad(clip_accumulator_update=True, use_standard_accumulator_update=True)
