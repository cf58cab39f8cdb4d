"""Our tf_keras routers against Merlin Models' MultiOptimizer, inside a Merlin-shaped model.

Merlin Models 23.12 does not import under TensorFlow 2.21: `merlin_standin`
reproduces its router and the shared `ModelContext` of its models (see that
module). Why the routers match it: see docs/design.md, "Routers".
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import merlin_standin as merlin
from tf_opt_ops.routers import legacy as _router_legacy
from tf_opt_ops.routers import tf_keras as _router_tf_keras

L = tf_keras.optimizers.legacy
FLAVORS = {"tf_keras": _router_tf_keras, "legacy": _router_legacy}


def _model(seed=0, **kwargs):
  tf_keras.utils.set_random_seed(seed)
  model = merlin.TwoTowerModel(name="model", **kwargs)
  model((tf.zeros((1, 2), tf.int32), tf.zeros((1, 2), tf.int32)))
  return model


def _data(steps, batch=16, seed=1):
  rng = np.random.default_rng(seed)
  users = rng.integers(0, 20, (steps, batch, 2)).astype(np.int32)
  items = rng.integers(0, 30, (steps, batch, 2)).astype(np.int32)
  labels = rng.normal(size=(steps, batch, 1)).astype(np.float32)
  return users, items, labels


def _train(model, optimizer, data, start, stop):
  users, items, labels = data
  for s in range(start, stop):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model((users[s], items[s])) - labels[s]))
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))


def _pairs(blocks_cls, model):
  # Stateful sub-optimizers on the towers; SGD (whose state Merlin never saves) by default.
  return dict(
      optimizers_and_blocks=[
          blocks_cls(L.Adam(0.05), model.user_tower),
          blocks_cls(L.Adagrad(0.2), [model.item_tower])
      ], default_optimizer=L.SGD(0.1))


def _merlin(model):
  return merlin.MultiOptimizer(**_pairs(merlin.OptimizerBlocks, model))


def _ours(module, model, **kwargs):
  return module.MultiOptimizer(**_pairs(module.OptimizerBlocks, model), **kwargs)


def _max_diff(a, b):
  return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def test_every_tower_holds_every_table_through_the_shared_context():
  # What made `trainable_variables`-based blocks claim each table twice.
  model = _model()
  names = {v.name for v in model.user_tower.trainable_variables}
  assert "model/item_tower/item_emb/embeddings:0" in names


@pytest.mark.parametrize("name", FLAVORS)
def test_blocks_route_like_merlin_in_a_merlin_model(name, record_property):
  data = _data(5)
  reference, model = _model(), _model()
  merlin_router = _merlin(reference)
  ours = _ours(FLAVORS[name], model, save_default_optimizer=False)  # Merlin's layout
  _train(reference, merlin_router, data, 0, 5)
  _train(model, ours, data, 0, 5)
  diff = _max_diff(reference.get_weights(), model.get_weights())
  record_property("max_abs_diff_vs_merlin", diff)
  assert diff < 1e-6
  adam, adagrad, sgd = ours.optimizers
  routed = {o: sorted(v.name for v in ours._table.variables_of(o)) for o in ours.optimizers}  # pylint: disable=protected-access
  for optimizer, tower in ((adam, "user"), (adagrad, "item")):
    assert routed[optimizer] == sorted([
        f"model/{tower}_tower/{tower}_tower_dense/bias:0",
        f"model/{tower}_tower/{tower}_tower_dense/kernel:0",
        f"model/{tower}_tower/{tower}_emb/embeddings:0"
    ])
  assert routed[sgd] == ["model/head/bias:0", "model/head/kernel:0"]
  assert int(ours.iterations.numpy()) == int(merlin_router.iterations.numpy()) == 5
  # The same `variables()`: each sub-optimizer's, in the same order (names aside).
  ours_state, merlin_state = ours.variables(), merlin_router.variables()
  assert [v.shape for v in ours_state] == [v.shape for v in merlin_state]
  assert _max_diff([v.numpy() for v in ours_state], [v.numpy() for v in merlin_state]) < 1e-6


@pytest.mark.parametrize("name", FLAVORS)
def test_a_variable_two_blocks_really_own_still_raises(name):
  module, model = FLAVORS[name], _model()
  with pytest.raises(ValueError, match="user_tower_dense/kernel' is claimed by two optimizers"):
    module.MultiOptimizer([
        module.OptimizerBlocks(L.Adam(), model.user_tower),
        module.OptimizerBlocks(L.SGD(), model.user_tower.dense)
    ])


def _checkpoint_round_trip(writer, reader, tmp_path):
  """Writer trains 3 steps, saves, trains 3 more; the reader restores and trains the same 3."""
  data = _data(6)
  model, model2 = _model(), _model(seed=7)
  opt, opt2 = writer(model), reader(model2)
  _train(model, opt, data, 0, 3)
  path = tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt"))
  _train(model, opt, data, 3, 6)
  status = tf.train.Checkpoint(model=model2, optimizer=opt2).read(path)
  _train(model2, opt2, data, 3, 6)  # Legacy slots are created (and restored) at the first step.
  status.assert_consumed()
  assert int(opt2.iterations.numpy()) == int(opt.iterations.numpy()) == 6
  return _max_diff(model.get_weights(), model2.get_weights()), path


@pytest.mark.parametrize("name", FLAVORS)
def test_checkpoints_restore_both_ways_with_merlin(name, tmp_path, record_property):

  def ours(model):
    return _ours(FLAVORS[name], model, save_default_optimizer=False)  # Merlin's layout

  diff, merlin_path = _checkpoint_round_trip(_merlin, ours, tmp_path / "from_merlin")
  record_property("merlin_to_ours_max_abs_diff", diff)
  assert diff < 1e-6
  diff, ours_path = _checkpoint_round_trip(ours, _merlin, tmp_path / "from_ours")
  record_property("ours_to_merlin_max_abs_diff", diff)
  assert diff < 1e-6
  # The very same layout: every key and shape.
  assert tf.train.list_variables(merlin_path) == tf.train.list_variables(ours_path)


@pytest.mark.parametrize("name", FLAVORS)
def test_by_default_the_default_optimizer_is_saved_which_merlin_cannot_restore(name, tmp_path):
  module = FLAVORS[name]

  def ours(model):
    return module.MultiOptimizer([module.OptimizerBlocks(L.Adam(0.05), model.user_tower)],
                                 default_optimizer=L.Adagrad(0.2))

  data = _data(2)
  model = _model()
  opt = ours(model)
  _train(model, opt, data, 0, 2)
  path = tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt"))
  keys = [k for k, _ in tf.train.list_variables(path)]
  assert any("optimizer/default_optimizer/accumulator" in k for k in keys), keys
  model2 = _model()
  opt2 = ours(model2)
  status = tf.train.Checkpoint(model=model2, optimizer=opt2).read(path)
  _train(model2, opt2, data, 0, 1)
  status.assert_consumed()
  model3 = _model()
  opt3 = merlin.MultiOptimizer([merlin.OptimizerBlocks(L.Adam(0.05), model3.user_tower)],
                               default_optimizer=L.Adagrad(0.2))
  status = tf.train.Checkpoint(model=model3, optimizer=opt3).read(path)
  _train(model3, opt3, data, 0, 1)
  with pytest.raises(AssertionError, match="default_optimizer"):
    status.assert_consumed()


def test_merlin_config_loads_with_the_same_routing():
  data = _data(4)
  reference, model = _model(), _model()
  merlin_router = _merlin(reference)
  merlin_router.update(merlin.OptimizerBlocks(L.SGD(0.3), reference.item_tower.dense))
  config = merlin_router.get_config()
  cls = tf_keras.utils.get_registered_object("merlin.models>MultiOptimizer")
  assert cls is _router_legacy.MultiOptimizer
  ours = cls.from_config(config)
  assert [type(o).__name__ for o in ours.optimizers] == ["Adam", "Adagrad", "SGD", "SGD"]
  _train(reference, merlin_router, data, 0, 4)
  _train(model, ours, data, 0, 4)
  assert _max_diff(reference.get_weights(), model.get_weights()) < 1e-6


@pytest.mark.parametrize("name", FLAVORS)
def test_merlin_config_whose_blocks_claim_nothing_raises_at_the_first_step(name):
  # Variables inside a Sequential are not named after it: Merlin's config (blocks
  # by layer name) cannot route them. It used to send them to the default
  # optimizer silently.
  def sequential(seed):
    tf_keras.utils.set_random_seed(seed)
    first = tf_keras.Sequential([tf_keras.layers.Dense(4)], name="tower")
    model = tf_keras.Sequential([first, tf_keras.layers.Dense(1)])
    model.build((None, 3))
    return model, first

  reference, tower = sequential(0)
  config = merlin.MultiOptimizer([merlin.OptimizerBlocks(L.Adam(0.05), tower)],
                                 default_optimizer=L.SGD(0.1)).get_config()
  ours = FLAVORS[name].MultiOptimizer.from_config(config)
  model, _ = sequential(0)
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(tf.ones((2, 3))))
  grads = tape.gradient(loss, model.trainable_variables)
  with pytest.raises(ValueError, match="layer name 'tower'.*claims no variable"):
    ours.apply_gradients(zip(grads, model.trainable_variables))


@pytest.mark.parametrize("name", FLAVORS)
def test_merlin_config_block_whose_name_two_layers_share_raises(name):
  # Both towers' dense layers are called "dense": by name, the block is ambiguous.
  reference = _model(dense_name="dense")
  config = merlin.MultiOptimizer([merlin.OptimizerBlocks(L.Adam(0.05), reference.item_tower.dense)],
                                 default_optimizer=L.SGD(0.1)).get_config()
  ours = FLAVORS[name].MultiOptimizer.from_config(config)
  with pytest.raises(ValueError, match="layer name 'dense'.*is ambiguous.*user_tower/"):
    _train(_model(dense_name="dense"), ours, _data(1), 0, 1)


@pytest.mark.parametrize("name", FLAVORS)
def test_a_merlin_checkpoint_restores_and_says_the_default_optimizer_starts_fresh(name, tmp_path):
  # Merlin saves no state of its default optimizer: ours (which does) restores everything
  # the checkpoint holds, then warns once, at the next step, that the default starts fresh,
  # and goes on exactly as Merlin's own class restored from the same checkpoint.
  data = _data(4)
  model = _model()
  merlin_router = _merlin(model)
  _train(model, merlin_router, data, 0, 2)
  path = tf.train.Checkpoint(model=model, optimizer=merlin_router).write(str(tmp_path / "ckpt"))
  theirs_model, ours_model = _model(seed=7), _model(seed=8)
  theirs, ours = _merlin(theirs_model), _ours(FLAVORS[name], ours_model)
  status = tf.train.Checkpoint(model=theirs_model, optimizer=theirs).read(path)
  tf.train.Checkpoint(model=ours_model, optimizer=ours).read(path)
  _train(theirs_model, theirs, data, 2, 4)
  status.assert_consumed()
  with pytest.warns(UserWarning, match="holds no state of the default optimizer.*start fresh"):
    _train(ours_model, ours, data, 2, 3)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # once
    _train(ours_model, ours, data, 3, 4)
  assert int(ours.iterations.numpy()) == int(theirs.iterations.numpy()) == 4
  assert _max_diff(theirs_model.get_weights(), ours_model.get_weights()) < 1e-6
