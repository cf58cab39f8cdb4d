"""LazyAdam's light slot state on every Keras flavor: slots, config, checkpoints.

The kernels' math is tested against the reference in tests/ops/test_light_state_op.py
(and inside XLA in tests/ops/test_xla.py); here, what each flavor's LazyAdam
builds and keeps. Why: see docs/design.md, "Light state".
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import checkpoints

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
    import keras
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


def _trained(opt, flavor, path):
  """`opt` after two steps on fresh variables, the variables, and a checkpoint of both."""
  variables = _variables(flavor)
  _steps(opt, variables, 1, 3)
  return opt, variables, tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(path))


def _slots_by_variable(opt, variables):
  """[(m, v)] of each of `variables`, as NumPy float64."""
  if hasattr(opt, "get_slot"):
    pairs = [(opt.get_slot(var, "m"), opt.get_slot(var, "v")) for var in variables]
  else:
    index = {id(var): k for k, var in enumerate(variables)}
    pairs = [(opt._momentums[index[id(var)]], opt._velocities[index[id(var)]]) for var in variables]
  return [tuple(np.asarray(s.numpy(), np.float64) for s in pair) for pair in pairs]


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_a_converted_checkpoint_restores_into_the_other_layout(flavor, tmp_path):
  api = common.flavor_module(flavor)
  adam, variables, path = _trained(api.LazyAdam(learning_rate=0.01), flavor, tmp_path / "adam")
  full = _slots_by_variable(adam, variables)

  # Adam's float32 slots -> bfloat16 m and a row-wise v: cast, row means.
  light_path = str(tmp_path / "light")
  assert checkpoints.convert_checkpoint(
      path, light_path, slot_dtype="bfloat16",
      rowwise_second_moment=True) == 4  # m and v of both variables
  light_variables = _variables(flavor, seed=1)
  light = api.LazyAdam(learning_rate=0.01, **LIGHT["bf16-m-rowwise-v"])
  status = tf.train.Checkpoint(variables=light_variables, optimizer=light).restore(light_path)
  _build_slots(light, light_variables)
  status.assert_consumed()
  for (m, v), (want_m, want_v) in zip(_slots_by_variable(light, light_variables), full):
    bf16 = tf.bfloat16.as_numpy_dtype
    np.testing.assert_array_equal(m, want_m.astype(np.float32).astype(bf16).astype(np.float64))
    want_rows = want_v.reshape(len(want_v), -1).mean(axis=1) if want_v.ndim > 1 else want_v
    np.testing.assert_array_equal(v, want_rows.astype(np.float32).astype(bf16).astype(np.float64))
  _steps(light, light_variables, 3, 4)

  # And back: float32 slots, each row's v repeated over the row (exact: bfloat16 fits float32).
  light_slots = _slots_by_variable(light, light_variables)
  path = tf.train.Checkpoint(variables=light_variables,
                             optimizer=light).save(str(tmp_path / "light_trained"))
  back_path = str(tmp_path / "back")
  checkpoints.convert_checkpoint(path, back_path, slot_dtype="float32", rowwise_second_moment=False)
  back_variables = _variables(flavor, seed=2)
  back = api.LazyAdam(learning_rate=0.01)
  status = tf.train.Checkpoint(variables=back_variables, optimizer=back).restore(back_path)
  _build_slots(back, back_variables)
  status.assert_consumed()
  for (m, v), (light_m, light_v) in zip(_slots_by_variable(back, back_variables), light_slots):
    np.testing.assert_array_equal(m, light_m)
    np.testing.assert_array_equal(
        v, np.broadcast_to(light_v.reshape((-1,) + (1,) * (m.ndim - 1)), m.shape))
  _steps(back, back_variables, 4, 5)


def _build_slots(opt, variables):
  if hasattr(opt, "_create_all_weights"):  # OptimizerV2: restored slots are made here
    opt._create_all_weights(variables)
  else:
    opt.build(variables)


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_converting_a_router_checkpoint_converts_the_adam_slots_only(flavor, tmp_path):
  api = common.flavor_module(flavor)

  def router(**light):
    table, bias = _variables(flavor)
    return api.CompositeOptimizer([(api.LazyAdam(learning_rate=0.01, **light), lambda: [table]),
                                   (api.ClippyAdagrad(learning_rate=0.01), lambda: [bias])
                                  ]), [table, bias]

  opt, variables = router()
  _steps(opt, variables, 1, 3)
  path = tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(tmp_path / "router"))
  light_path = str(tmp_path / "light")
  assert checkpoints.convert_checkpoint(path, light_path, slot_dtype="bfloat16",
                                        rowwise_second_moment=True) == 2  # the table's m and v
  before, after = tf.train.load_checkpoint(path), tf.train.load_checkpoint(light_path)
  changed = [
      name for name in before.get_variable_to_dtype_map()
      if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not np.array_equal(
          np.atleast_1d(before.get_tensor(name)).view(np.uint8),
          np.atleast_1d(after.get_tensor(name)).view(np.uint8))
  ]
  assert sorted(changed) == sorted(checkpoints.adam_slot_pairs(path)[0]), changed
  light, light_variables = router(**LIGHT["bf16-m-rowwise-v"])
  tf.train.Checkpoint(variables=light_variables, optimizer=light).restore(light_path)
  _steps(light, light_variables, 3, 4)


def test_the_converter_is_public():
  import tf_opt_ops
  assert tf_opt_ops.convert_checkpoint is checkpoints.convert_checkpoint


def test_a_checkpoint_without_adam_slots_is_refused(tmp_path):
  path = tf.train.Checkpoint(v=tf.Variable([1.0])).save(str(tmp_path / "plain"))
  with pytest.raises(ValueError, match="holds no Adam slots"):
    checkpoints.convert_checkpoint(path, str(tmp_path / "out"), slot_dtype="bfloat16",
                                   rowwise_second_moment=False)


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_clippy_accumulator_dtype_trains_configures_and_resumes(flavor, tmp_path):
  api = common.flavor_module(flavor)
  options = dict(accumulator_dtype="bfloat16", seed=3)
  variables = _variables(flavor)
  opt = api.ClippyAdagrad(learning_rate=0.1, **options)
  _steps(opt, variables, 1, 3)
  accumulators = [v for v in _state(opt) if tuple(v.shape) in ((ROWS, COLS), (COLS,))]
  assert len(accumulators) == 2
  assert {tf.as_dtype(v.dtype).name for v in accumulators} == {"bfloat16"}
  config = opt.get_config()
  assert {k: config[k] for k in options} == options and config["stochastic_rounding"] is None
  assert type(opt).from_config(config).get_config() == config
  assert "accumulator_dtype" not in api.ClippyAdagrad().get_config()  # TFRS' config

  path = tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(tmp_path / "ckpt"))
  _steps(opt, variables, 3, 5)
  resumed_variables = _variables(flavor, seed=1)
  resumed = api.ClippyAdagrad(learning_rate=0.1, **options)
  tf.train.Checkpoint(variables=resumed_variables, optimizer=resumed).restore(path)
  _steps(resumed, resumed_variables, 3, 5)
  for a, b in zip(_numpy(resumed_variables), _numpy(variables)):
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_a_converted_clippy_checkpoint_restores_with_the_accumulator_dtype(flavor, tmp_path):
  api = common.flavor_module(flavor)
  opt, _, path = _trained(api.ClippyAdagrad(learning_rate=0.1), flavor, tmp_path / "clippy")
  light_path = str(tmp_path / "light")
  assert checkpoints.convert_checkpoint(path, light_path, accumulator_dtype="bfloat16") == 2
  light_variables = _variables(flavor, seed=1)
  light = api.ClippyAdagrad(learning_rate=0.1, accumulator_dtype="bfloat16")
  status = tf.train.Checkpoint(variables=light_variables, optimizer=light).restore(light_path)
  _build_slots(light, light_variables)
  status.assert_consumed()
  before = [np.asarray(v.numpy(), np.float64) for v in _state(opt) if len(v.shape)]
  after = [np.asarray(v.numpy(), np.float64) for v in _state(light) if len(v.shape)]
  bf16 = tf.bfloat16.as_numpy_dtype
  assert sorted(a.shape for a in after) == sorted(b.shape for b in before)
  for a in after:  # each accumulator is the cast of one of the float32 ones
    assert any(
        a.shape == b.shape and np.array_equal(a,
                                              b.astype(np.float32).astype(bf16).astype(np.float64))
        for b in before)
  _steps(light, light_variables, 3, 4)
