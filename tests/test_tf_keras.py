"""tf_opt_ops.tf_keras (tf_keras new optimizers) against NumPy and tf_keras.optimizers.Adam.

Parity with TensorFlow Recommenders' ClippyAdagrad is in test_tfrs_parity.py
(TFRS needs TF_USE_LEGACY_KERAS=1 before TensorFlow is imported).
"""

import logging

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import optimizer_refs as refs
from tf_opt_ops import _core
from tf_opt_ops import tf_keras as flavor

OPTS = ["LazyAdam", "ClippyAdagrad"]


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", refs.DTYPES)
@pytest.mark.parametrize("opt", OPTS)
def test_sparse_matches_numpy(opt, dtype, index_dtype):
  refs.check_against_numpy(flavor, opt, dtype, index_dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("opt", OPTS)
def test_dense_matches_numpy(opt, dtype):
  refs.check_against_numpy(flavor, opt, dtype, sparse=False)


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("opt", OPTS)
def test_hyperparameters_as_callables_and_tensors(opt, sparse):
  options = dict(refs.HYPER_TYPES[opt], learning_rate=tf.constant(0.05))
  refs.check_against_numpy(flavor, opt, sparse=sparse, options=options)


@pytest.mark.parametrize("opt", OPTS)
def test_sparse_in_tf_function(opt):
  refs.check_against_numpy(flavor, opt, wrap=tf.function, steps=4)


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("opt", OPTS)
def test_xla_fallback_via_jit_compile_attribute(opt, sparse):
  # tf_keras runs update_step inside tf.function(jit_compile=True) when
  # opt.jit_compile is True (its default on a GPU machine).
  records = []
  handler = logging.Handler()
  handler.emit = records.append
  tf.get_logger().addHandler(handler)
  _core._logged.clear()

  try:
    refs.check_against_numpy(flavor, opt, sparse=sparse,
                             configure=lambda o: setattr(o, "jit_compile", True))
  finally:
    tf.get_logger().removeHandler(handler)
  messages = [r.getMessage() for r in records if "XLA" in r.getMessage()]
  assert len(messages) == (0 if (opt == "LazyAdam" and not sparse) else 1)


def test_jit_compile_defaults_to_false_even_with_a_gpu(monkeypatch):
  fake = lambda kind=None: ["fake GPU"] if kind == "GPU" else []
  monkeypatch.setattr(tf.config, "list_physical_devices", fake)
  monkeypatch.setattr(tf.compat.v2.config, "list_physical_devices", fake)
  assert tf_keras.optimizers.Adam().jit_compile  # what the base class would do here
  for cls in (flavor.LazyAdam, flavor.ClippyAdagrad):
    opt = cls()
    assert opt.jit_compile is False
    assert opt.get_config()["jit_compile"] is False


def test_dense_lazy_adam_equals_tf_keras_adam():
  refs.check_dense_equals(lambda: flavor.LazyAdam(learning_rate=0.01),
                          lambda: tf_keras.optimizers.Adam(learning_rate=0.01, jit_compile=False))


def test_weight_decay_matches_tf_keras_adam_and_zero_is_skipped():
  refs.check_dense_equals(
      lambda: flavor.LazyAdam(learning_rate=0.01, weight_decay=0.1),
      lambda: tf_keras.optimizers.Adam(learning_rate=0.01, weight_decay=0.1, jit_compile=False))
  # ClippyAdagrad's default weight_decay is the base class' 0: no pass over the table.
  refs.check_against_numpy(flavor, "ClippyAdagrad")
  refs.check_against_numpy(flavor, "LazyAdam", options=dict(weight_decay=0))


def test_learning_rate_schedule():
  schedule = tf_keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
  init = np.random.default_rng(0).normal(size=(refs.ROWS, refs.COLS)).astype(np.float32)
  var = tf.Variable(init)
  opt = flavor.ClippyAdagrad(learning_rate=schedule)
  ref = refs.ClippyRef(init)
  for k, (values, idx) in enumerate(refs.sparse_batches(3, refs.ROWS, refs.COLS, refs.BATCH)):
    opt.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(idx)), var)])
    ref.lr = 0.1 * 0.5**k
    ref.sparse(values, idx)
  np.testing.assert_allclose(var.numpy(), ref.var, rtol=1e-5, atol=1e-6)


def test_clipping_factors_exported_and_state_layout():
  opt, var, ref = refs.check_against_numpy(
      flavor, "ClippyAdagrad", options=dict(export_clipping_factors=True, learning_rate=0.5))
  assert ref.scale < 1.0
  np.testing.assert_allclose(float(opt.clipping_factors[0].numpy()), ref.scale, rtol=1e-5)
  names = [v.name for v in opt.variables]
  assert [n.split("/")[1] for n in names[1:]] == ["accumulator", "clipping_factor"]


def test_state_layout_matches_tf_keras_adam():
  var = tf.Variable(np.zeros((3, 2), np.float32), name="emb")
  layouts = []
  for cls in (flavor.LazyAdam, tf_keras.optimizers.Adam):
    opt = cls(name="Adam")
    opt.build([var])
    layouts.append([(v.name, tuple(v.shape)) for v in opt.variables])
  assert layouts[0] == layouts[1]


@pytest.mark.parametrize("direction", ["adam_to_lazy", "lazy_to_adam"])
def test_checkpoint_round_trip_with_tf_keras_adam(tmp_path, direction):
  pair = (flavor.LazyAdam, lambda **kw: tf_keras.optimizers.Adam(jit_compile=False, **kw))
  if direction == "adam_to_lazy":
    pair = pair[::-1]
  refs.check_checkpoint_round_trip(tmp_path, *pair, src_sparse=direction == "lazy_to_adam",
                                   build=lambda opt, var: opt.build([var]))


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("opt", OPTS)
def test_model_fit_with_embedding(opt, jit_compile):
  refs.check_fit(tf_keras, getattr(flavor, opt)(learning_rate=0.05), jit_compile=jit_compile)


@pytest.mark.parametrize("fmt", ["keras", "h5"])
@pytest.mark.parametrize("opt", OPTS)
def test_model_file_round_trip_continues_identically(tmp_path, opt, fmt):
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
                           use_standard_accumulator_update=True, weight_decay=0.01),
  ]
  for opt in opts:
    config = opt.get_config()
    again = type(opt).from_config(config)
    assert again.get_config() == config
    restored = tf_keras.optimizers.deserialize(tf_keras.optimizers.serialize(opt))
    assert type(restored) is type(opt)
    assert restored.get_config() == config
  assert opts[1].get_config()["use_standard_accumulator_update"] is True


def test_tfrs_serialization_name_resolves():
  # What TFRS' ClippyAdagrad.get_config wrote (no use_standard_accumulator_update).
  config = {
      "name": "ClippyAdagrad", "weight_decay": 0, "clipnorm": None, "global_clipnorm": None,
      "clipvalue": None, "use_ema": False, "ema_momentum": 0.99, "ema_overwrite_frequency": None,
      "jit_compile": False, "is_legacy_optimizer": False, "learning_rate": 0.01,
      "initial_accumulator_value": 0.1, "variable_relative_threshold": 0.1,
      "absolute_threshold": 1e-7, "accumulator_relative_threshold": 0.0, "epsilon": 1e-7,
      "export_clipping_factors": True, "clip_accumulator_update": True
  }
  opt = tf_keras.optimizers.deserialize({"class_name": "Custom>ClippyAdagrad", "config": config})
  assert type(opt) is flavor.ClippyAdagrad
  assert opt.clip_accumulator_update and opt.export_clipping_factors


def test_errors():
  with pytest.raises(ValueError, match="amsgrad"):
    flavor.LazyAdam(amsgrad=True)
  with pytest.raises(ValueError, match="clip_accumulator_update"):
    flavor.ClippyAdagrad(clip_accumulator_update=True, use_standard_accumulator_update=True)
