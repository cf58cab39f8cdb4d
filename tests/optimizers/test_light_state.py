"""LazyAdam's light slot state on every Keras flavor: slots, config, checkpoints.

The kernels' math is tested against the reference in tests/ops/test_light_state_op.py
(and inside XLA in tests/ops/test_xla.py); here, what each flavor's LazyAdam
builds and keeps. Why: see docs/design.md, "Light state".
"""

import numpy as np
import pytest
import tensorflow as tf

import common

ROWS, COLS = 64, 12
LIGHT = {
    "bf16-slots": dict(slot_dtype="bfloat16"),
    "rowwise-v": dict(rowwise_second_moment=True),
    "bf16-m-rowwise-v": dict(slot_dtype="bfloat16", rowwise_second_moment=True),
    "float16-slots": dict(slot_dtype="float16"),
}


def _variables(flavor, seed=0):
  rng = np.random.default_rng(seed)
  values = [rng.normal(size=(ROWS, COLS)).astype(np.float32), rng.normal(size=(COLS,))]
  if flavor == "keras":
    import keras  # pylint: disable=g-import-not-at-top
    return [keras.Variable(v.astype(np.float32), name=f"w{k}") for k, v in enumerate(values)]
  return [tf.Variable(v.astype(np.float32), name=f"w{k}") for k, v in enumerate(values)]


def _state(opt, variables=None):
  """The optimizer's variables; for OptimizerV2 with `variables`, its step and the slots of each
  (its weights are listed in creation order, which a restore changes)."""
  if hasattr(opt, "get_slot") and variables is not None:
    return [opt.iterations] + [opt.get_slot(v, name) for name in ("m", "v") for v in variables]
  return list(opt.variables() if callable(opt.variables) else opt.variables)


def _steps(opt, variables, first, last):
  for t in range(first, last):
    rng = np.random.default_rng(100 + t)
    indices = rng.integers(0, ROWS, 40)
    grads = [
        tf.IndexedSlices(tf.constant(rng.normal(size=(40, COLS)), tf.float32), tf.constant(indices),
                         tf.constant([ROWS, COLS])),
        tf.constant(rng.normal(size=(COLS,)), tf.float32),
    ]
    opt.apply_gradients(zip(grads, variables))


def _numpy(values):
  return [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in values]


@pytest.mark.parametrize("flavor", common.FLAVORS)
@pytest.mark.parametrize("light", LIGHT, ids=list(LIGHT))
def test_slots_have_the_light_layout_and_config_round_trips(flavor, light):
  api = common.flavor_module(flavor)
  options = LIGHT[light]
  variables = _variables(flavor)
  opt = api.LazyAdam(learning_rate=0.01, **options)
  _steps(opt, variables, 1, 3)
  slot_dtype = options.get("slot_dtype", "float32")
  table_slots = [v for v in _state(opt) if tuple(v.shape)[:1] == (ROWS,)]
  want = {(ROWS, COLS), (ROWS,) if options.get("rowwise_second_moment") else (ROWS, COLS)}
  assert {tuple(v.shape) for v in table_slots} == want
  assert {tf.as_dtype(v.dtype).name for v in table_slots} == {slot_dtype}
  assert all(np.isfinite(np.asarray(v.numpy(), np.float64)).all() for v in table_slots)
  config = opt.get_config()
  assert {k: config[k] for k in options} == options
  again = type(opt).from_config(config)
  assert again.get_config() == config


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_default_slots_keep_adams_layout_and_config(flavor):
  opt = common.flavor_module(flavor).LazyAdam(learning_rate=0.01)
  assert "slot_dtype" not in opt.get_config()  # the config of the Adam it replaces


@pytest.mark.parametrize("flavor", common.FLAVORS)
@pytest.mark.parametrize("light", ["bf16-slots", "bf16-m-rowwise-v"])
def test_light_state_resumes_bit_identically(flavor, light, tmp_path):
  api = common.flavor_module(flavor)
  variables = _variables(flavor)
  opt = api.LazyAdam(learning_rate=0.01, **LIGHT[light])
  _steps(opt, variables, 1, 3)
  path = tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(tmp_path / "ckpt"))
  _steps(opt, variables, 3, 6)
  want = _numpy(variables) + _numpy(_state(opt, variables))

  resumed_variables = _variables(flavor, seed=1)
  resumed = api.LazyAdam(learning_rate=0.01, **LIGHT[light])
  tf.train.Checkpoint(variables=resumed_variables, optimizer=resumed).restore(path)
  _steps(resumed, resumed_variables, 3, 6)
  got = _numpy(resumed_variables) + _numpy(_state(resumed, resumed_variables))
  assert len(got) == len(want)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(np.atleast_1d(a).view(np.uint8), np.atleast_1d(b).view(np.uint8))


@pytest.mark.parametrize("flavor", common.FLAVORS)
@pytest.mark.parametrize("saved,restored", [({}, LIGHT["bf16-slots"]),
                                            (LIGHT["bf16-m-rowwise-v"], {})],
                         ids=["float32-into-bfloat16", "light-into-float32"])
def test_a_checkpoint_of_another_slot_layout_fails_naming_it(flavor, saved, restored, tmp_path):
  api = common.flavor_module(flavor)
  variables = _variables(flavor)
  opt = api.LazyAdam(learning_rate=0.01, **saved)
  _steps(opt, variables, 1, 2)
  path = tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(tmp_path / "ckpt"))
  other_variables = _variables(flavor, seed=1)
  other = api.LazyAdam(learning_rate=0.01, **restored)
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match="slot layout|slot_dtype and rowwise_second_moment"):
    tf.train.Checkpoint(variables=other_variables, optimizer=other).restore(path)
    _steps(other, other_variables, 2, 3)


def test_light_options_are_checked():
  api = common.flavor_module("tf_keras")
  with pytest.raises(ValueError, match="slot_dtype must be None"):
    api.LazyAdam(slot_dtype="int8")
  with pytest.raises(ValueError, match="seed must be an integer"):
    api.LazyAdam(slot_dtype="bfloat16", seed=-1)
