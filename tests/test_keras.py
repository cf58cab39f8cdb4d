"""tf_opt_ops.keras (Keras 3 optimizers) against NumPy, keras.optimizers.Adam and Keras itself."""

import logging
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import optimizer_refs as refs
import tf_opt_ops
from tf_opt_ops import _core
from tf_opt_ops import keras as flavor

OPTS = ["LazyAdam", "ClippyAdagrad"]


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
def test_hyperparameters_as_callables_and_tensors(opt, sparse):
  options = dict(refs.HYPER_TYPES[opt])
  refs.check_against_numpy(flavor, opt, sparse=sparse, options=options)


@pytest.mark.parametrize("opt", OPTS)
def test_sparse_in_tf_function(opt):
  refs.check_against_numpy(flavor, opt, wrap=tf.function, steps=4)


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("opt", OPTS)
def test_xla_fallback_same_math_and_logged_once(opt, sparse):
  records = []
  handler = logging.Handler()
  handler.emit = records.append
  tf.get_logger().addHandler(handler)
  _core._logged.clear()
  try:
    refs.check_against_numpy(flavor, opt, sparse=sparse, steps=3,
                             wrap=lambda f: tf.function(f, jit_compile=True))
  finally:
    tf.get_logger().removeHandler(handler)
  messages = [r.getMessage() for r in records if "XLA" in r.getMessage()]
  if opt == "LazyAdam" and not sparse:
    assert not messages  # dense Adam is ResourceApplyAdam, which XLA compiles
  else:
    assert len(messages) == 1 and opt in messages[0]


def test_top_level_names_follow_tf_keras():
  assert tf_opt_ops.keras_flavor() == "keras"
  assert tf_opt_ops.LazyAdam is flavor.LazyAdam
  assert tf_opt_ops.ClippyAdagrad is flavor.ClippyAdagrad


def test_import_without_tf_keras_installed():
  code = (
      "import sys; sys.modules['tf_keras'] = None\n"  # `import tf_keras` now fails
      "import tf_opt_ops\n"
      "assert tf_opt_ops.LazyAdam is tf_opt_ops.keras.LazyAdam\n"
      "assert 'tf_opt_ops.legacy' not in sys.modules\n")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        cwd=os.path.dirname(os.path.dirname(tf_opt_ops.__file__)), check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]


def test_dense_lazy_adam_equals_keras_adam():
  # Same arithmetic as keras.optimizers.Adam: bit-identical variable and state.
  refs.check_dense_equals(lambda: flavor.LazyAdam(learning_rate=0.01),
                          lambda: keras.optimizers.Adam(learning_rate=0.01))


def test_global_clipnorm_densifies_like_keras_adam():
  # Keras 3 turns IndexedSlices dense under global_clipnorm: standard Adam then.
  init = np.random.default_rng(0).normal(size=(refs.ROWS, refs.COLS)).astype(np.float32)
  out = []
  for cls in (flavor.LazyAdam, keras.optimizers.Adam):
    var = tf.Variable(init)
    refs.train_table(cls(learning_rate=0.01, global_clipnorm=1.0), var, 3, seed=1)
    out.append(var.numpy())
  np.testing.assert_array_equal(out[0], out[1])


def test_weight_decay_matches_keras_adam_and_zero_is_skipped():
  init = np.random.default_rng(0).normal(size=(4, 2)).astype(np.float32)
  grads = refs.dense_grads(3, shape=init.shape)
  out = []
  for cls in (flavor.LazyAdam, keras.optimizers.Adam):
    var = tf.Variable(init)
    opt = cls(learning_rate=0.01, weight_decay=0.1)
    for g in grads:
      opt.apply_gradients([(tf.constant(g), var)])
    out.append(var.numpy())
  np.testing.assert_allclose(out[0], out[1], rtol=1e-6, atol=1e-7)
  # weight_decay=0: rows outside the batch keep their bits (-0.0 included).
  refs.check_against_numpy(flavor, "LazyAdam", options=dict(weight_decay=0.0))
  refs.check_against_numpy(flavor, "ClippyAdagrad", options=dict(weight_decay=0.0))


def test_learning_rate_schedule_and_callable():
  schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
  init = np.random.default_rng(0).normal(size=(refs.ROWS, refs.COLS)).astype(np.float32)
  for lr, lrs in ((schedule, [0.1, 0.05, 0.025]), (lambda: 0.02, [0.02] * 3)):
    var = tf.Variable(init)
    opt = flavor.LazyAdam(learning_rate=lr)
    ref = refs.LazyAdamRef(init)
    for k, (values, idx) in enumerate(refs.sparse_batches(3, refs.ROWS, refs.COLS, refs.BATCH)):
      opt.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(idx)), var)])
      ref.sparse(values, idx, lr=lrs[k])
    np.testing.assert_allclose(var.numpy(), ref.var, rtol=1e-5, atol=1e-6)


def test_clipping_factors_exported():
  opt, var, ref = refs.check_against_numpy(
      flavor, "ClippyAdagrad", options=dict(export_clipping_factors=True, learning_rate=0.5))
  assert len(opt.clipping_factors) == 1
  assert opt.clipping_factors[0].shape == ()
  assert ref.scale < 1.0  # the step did clip
  np.testing.assert_allclose(float(opt.clipping_factors[0].numpy()), ref.scale, rtol=1e-5)
  # State layout: iteration, learning_rate, then accumulator, clipping factor per variable.
  assert [tuple(v.shape) for v in opt.variables] == [(), (), var.shape, ()]


def test_state_layout_matches_keras_adam():
  var = keras.Variable(np.zeros((3, 2), np.float32), name="emb")
  layouts = []
  for cls in (flavor.LazyAdam, keras.optimizers.Adam):
    opt = cls()
    opt.build([var])
    layouts.append([(v.name, tuple(v.shape)) for v in opt.variables])
  assert layouts[0] == layouts[1]


@pytest.mark.parametrize("direction", ["adam_to_lazy", "lazy_to_adam"])
def test_checkpoint_round_trip_with_keras_adam(tmp_path, direction):
  pair = (flavor.LazyAdam, keras.optimizers.Adam)
  if direction == "adam_to_lazy":
    pair = pair[::-1]
  refs.check_checkpoint_round_trip(tmp_path, *pair, src_sparse=direction == "lazy_to_adam",
                                   build=lambda opt, var: opt.build([var]))


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("opt", OPTS)
def test_model_fit_with_embedding(opt, jit_compile):
  refs.check_fit(keras, getattr(flavor, opt)(learning_rate=0.05), jit_compile=jit_compile)


def test_inside_keras_multi_optimizer():
  lazy, clippy = flavor.LazyAdam(learning_rate=0.05), flavor.ClippyAdagrad(learning_rate=0.05)
  opt = keras.optimizers.MultiOptimizer(
      keras.optimizers.OptimizerMap(default_optimizer=clippy, optimizer_map={"emb/.*": lazy}))
  model = refs.check_fit(keras, opt)
  assert int(lazy.iterations.numpy()) == int(clippy.iterations.numpy()) == 12
  assert len(lazy.variables) == 4 and len(clippy.variables) == 2 + 2  # 1 and 2 model variables
  assert model.get_layer("emb").embeddings.path == "emb/embeddings"


@pytest.mark.parametrize("opt", OPTS)
def test_keras_file_round_trip_continues_identically(tmp_path, opt):
  options = dict(export_clipping_factors=True) if opt == "ClippyAdagrad" else {}
  refs.check_model_file_round_trip(keras,
                                   getattr(flavor, opt)(learning_rate=0.05, **options),
                                   str(tmp_path / "m.keras"))


@pytest.mark.parametrize("opt", OPTS)
def test_mixed_precision_loss_scale_optimizer(opt):
  inner = getattr(flavor, opt)(learning_rate=0.05)
  model = refs.check_fit(keras, keras.optimizers.LossScaleOptimizer(inner), dtype="mixed_float16")
  assert model.get_layer("emb").embeddings.dtype == "float32"  # float32 master weights
  assert int(inner.iterations.numpy()) == 12


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_model_fit(dtype):
  opt = keras.optimizers.LossScaleOptimizer(flavor.LazyAdam(learning_rate=0.05))
  model = refs.check_fit(keras, opt, dtype=dtype)
  assert model.get_layer("emb").embeddings.dtype == dtype


@pytest.mark.parametrize("opt", OPTS)
def test_loss_scale_factor_with_sparse_gradients(opt):
  # Keras 3's own optimizers raise TypeError here (IndexedSlices / float).
  factor = 8.0
  results = []
  for scale in (None, factor):
    init = np.random.default_rng(0).normal(size=(refs.ROWS, refs.COLS)).astype(np.float32)
    var = tf.Variable(init)
    o = getattr(flavor, opt)(learning_rate=0.05, loss_scale_factor=scale)
    for values, idx in refs.sparse_batches(2, refs.ROWS, refs.COLS, refs.BATCH):
      values = values * (scale or 1.0)
      o.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(idx)), var)])
    results.append(var.numpy())
  np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-7)


def test_config_round_trip():
  opts = [
      flavor.LazyAdam(learning_rate=0.02, beta_1=0.8, beta_2=0.99, epsilon=1e-5, clipnorm=1.0),
      flavor.ClippyAdagrad(learning_rate=0.3, initial_accumulator_value=0.2,
                           variable_relative_threshold=0.2, accumulator_relative_threshold=0.01,
                           absolute_threshold=1e-3, epsilon=1e-6, export_clipping_factors=True,
                           use_standard_accumulator_update=True, weight_decay=0.01),
  ]
  for opt in opts:
    config = opt.get_config()
    again = type(opt).from_config(config)
    assert again.get_config() == config
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert type(restored) is type(opt)
    assert restored.get_config() == config
  assert opts[1].get_config()["use_standard_accumulator_update"] is True


@pytest.mark.parametrize("name,cls", [("Addons>LazyAdam", "LazyAdam"),
                                      ("merlin.models>LazyAdam", "LazyAdam"),
                                      ("Custom>ClippyAdagrad", "ClippyAdagrad")])
def test_replaced_serialization_names_resolve(name, cls):
  config = {"name": cls, "learning_rate": 0.01}
  if cls == "LazyAdam":  # what TF Addons / Merlin (legacy Adam) wrote
    config.update(decay=0.0, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)
  else:  # what TFRS wrote
    config.update(is_legacy_optimizer=False, jit_compile=False, initial_accumulator_value=0.1)
  opt = keras.optimizers.deserialize({"class_name": name, "config": config})
  assert type(opt) is getattr(flavor, cls)
  assert keras.saving.get_registered_object(name) is getattr(flavor, cls)


def test_errors():
  with pytest.raises(ValueError, match="amsgrad"):
    flavor.LazyAdam(amsgrad=True)
  with pytest.raises(ValueError, match="clip_accumulator_update"):
    flavor.ClippyAdagrad(clip_accumulator_update=True, use_standard_accumulator_update=True)
  with pytest.raises(ValueError, match="absolute_threshold"):
    flavor.ClippyAdagrad(absolute_threshold=-1.0)
