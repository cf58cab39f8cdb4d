"""Our tf_keras routers against Merlin Models 23.12.0's MultiOptimizer, inside Merlin's models.

The real Merlin (imported through peer_shim by conftest.py): its two-tower models, where each
tower reaches every embedding table through the model's shared `ModelContext`, its
`MultiOptimizer` and `OptimizerBlocks`, its checkpoints and its `get_config()`. Why the routers
match it: docs/design.md, "Routers".
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from merlin.datasets.synthetic import generate_data
from merlin.schema import Tags

from tf_opt_ops import legacy as ours_legacy
from tf_opt_ops import tf_keras as ours_tf_keras

L = tf_keras.optimizers.legacy
FLAVORS = {"tf_keras": ours_tf_keras, "legacy": ours_legacy}
FEATURES = ["user_id", "user_categories", "item_id", "item_category", "click"]


@pytest.fixture(scope="module")
def batches(mm):
  """Six batches of 16 rows of Merlin's synthetic e-commerce data, in Merlin's format."""
  data = generate_data("e-commerce", num_rows=96)
  data.schema = data.schema.select_by_name(FEATURES)
  return data.schema, list(mm.Loader(data, batch_size=16, shuffle=False))


@pytest.fixture
def make_model(mm, batches):
  """A Merlin two-tower ranking model, built: (model, user tower, item tower)."""
  schema, data = batches

  def make(seed=0, dense_name=None):
    # A fresh session first: layers get the same names in every model (as in a new process).
    tf_keras.backend.clear_session()
    tf_keras.utils.set_random_seed(seed)

    def tower(tag):
      block = mm.InputBlock(schema.select_by_tag(tag)).connect(mm.MLPBlock([8]))
      return block.connect(mm.Block.from_layer(tf_keras.layers.Dense(8, name=dense_name))) \
          if dense_name else block

    user, item = tower(Tags.USER), tower(Tags.ITEM)
    model = mm.Model(mm.ParallelBlock({"user": user, "item": item}, aggregation="concat"),
                     mm.BinaryClassificationTask("click"))
    model(data[0][0])
    return model, user, item

  return make


def _train(model, optimizer, batches, start, stop):
  _, data = batches
  for features, labels in data[start:stop]:
    with tf.GradientTape() as tape:
      predictions = model(features)
      loss = tf.reduce_mean(
          tf_keras.losses.binary_crossentropy(tf.cast(tf.reshape(labels, (-1, 1)), tf.float32),
                                              predictions))
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))


def _pairs(blocks_cls, user, item):
  # Stateful sub-optimizers on the towers; SGD (whose state Merlin never saves) by default.
  return dict(
      optimizers_and_blocks=[blocks_cls(L.Adam(0.05), user),
                             blocks_cls(L.Adagrad(0.2), [item])], default_optimizer=L.SGD(0.1))


def _merlin(mm, model):
  _, user, item = model
  return mm.MultiOptimizer(**_pairs(mm.OptimizerBlocks, user, item))


def _ours(module, model, **kwargs):
  _, user, item = model
  return module.MultiOptimizer(**_pairs(module.OptimizerBlocks, user, item), **kwargs)


def _max_diff(a, b):
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b))


def _trained(model):
  return [v.numpy() for v in model.trainable_variables]


def test_every_tower_holds_every_table_through_the_shared_context(make_model):
  # What made `trainable_variables`-based blocks claim each table twice.
  model, user, item = make_model()
  tables = [v for v in model.trainable_variables if "embeddings" in v.name]
  assert len(tables) == 4
  context = [layer for layer in user._flatten_modules() if type(layer).__name__ == "ModelContext"]
  assert context and context[0] is model.context
  for tower in (user, item):
    held = {v.ref() for v in tower.trainable_variables}
    assert all(table.ref() in held for table in tables)


@pytest.mark.parametrize("name", FLAVORS)
def test_blocks_route_like_merlin_in_a_merlin_model(name, mm, make_model, batches, record_property):
  reference, model = make_model(), make_model()
  merlin_router = _merlin(mm, reference)
  ours = _ours(FLAVORS[name], model, save_default_optimizer=False)  # Merlin's layout
  _train(reference[0], merlin_router, batches, 0, 5)
  _train(model[0], ours, batches, 0, 5)
  diff = _max_diff(_trained(reference[0]), _trained(model[0]))
  record_property("max_abs_diff_vs_merlin", diff)
  assert diff < 1e-6
  # The same optimizer for each variable (by its place in the model) as Merlin's walk.
  position = {v.ref(): i for i, v in enumerate(reference[0].trainable_variables)}
  theirs_routes = {
      position[ref]: merlin_router.optimizers.index(opt)
      for ref, opt in merlin_router.var_optimizer_dict.items()
  }
  position = {v.ref(): i for i, v in enumerate(model[0].trainable_variables)}
  ours_routes = {
      position[v.ref()]: i for i, opt in enumerate(ours.optimizers)
      for v in ours._table.variables_of(opt)
  }
  default = len(ours.optimizers) - 1
  assert ours_routes == {i: theirs_routes.get(i, default) for i in range(len(position))}
  adam, adagrad, sgd = ours.optimizers
  for optimizer, tower in ((adam, model[1]), (adagrad, model[2])):
    # The tower's own two tables and its dense layer, not the other tower's tables.
    routed = ours._table.variables_of(optimizer)
    assert len(routed) == 4
    assert sum("embeddings" in v.name for v in routed) == 2
    assert {v.ref() for v in routed} <= {v.ref() for v in tower.trainable_variables}
  assert [v.name for v in ours._table.variables_of(sgd)] == [
      f"{model[0].name}/click/binary_classification_task/output_layer/kernel:0",
      f"{model[0].name}/click/binary_classification_task/output_layer/bias:0"
  ]
  assert int(ours.iterations.numpy()) == int(merlin_router.iterations.numpy()) == 5
  # The same `variables()`: each sub-optimizer's, in the same order (names aside).
  ours_state, merlin_state = ours.variables(), merlin_router.variables()
  assert [v.shape for v in ours_state] == [v.shape for v in merlin_state]
  assert _max_diff([v.numpy() for v in ours_state], [v.numpy() for v in merlin_state]) < 1e-6


@pytest.mark.parametrize("name", FLAVORS)
def test_a_variable_two_blocks_really_own_still_raises(name, make_model, batches):
  module = FLAVORS[name]
  model, user, _ = make_model()
  mlp = user.layers[-1]  # the tower's MLPBlock, inside the tower
  with pytest.raises(
      ValueError, match=r"private__dense(_\d+)?/dense(_\d+)?/kernel' is claimed by two optimizers"):
    module.MultiOptimizer(
        [module.OptimizerBlocks(L.Adam(), user),
         module.OptimizerBlocks(L.SGD(), mlp)])


def _checkpoint_round_trip(writer, reader, make_model, batches, tmp_path):
  """Writer trains 3 steps, saves, trains 3 more; the reader restores and trains the same 3."""
  model, model2 = make_model(), make_model(seed=7)
  opt, opt2 = writer(model), reader(model2)
  _train(model[0], opt, batches, 0, 3)
  path = tf.train.Checkpoint(model=model[0], optimizer=opt).write(str(tmp_path / "ckpt"))
  _train(model[0], opt, batches, 3, 6)
  status = tf.train.Checkpoint(model=model2[0], optimizer=opt2).read(path)
  _train(model2[0], opt2, batches, 3,
         6)  # Legacy slots are created (and restored) at the first step.
  status.assert_consumed()
  assert int(opt2.iterations.numpy()) == int(opt.iterations.numpy()) == 6
  return _max_diff(_trained(model[0]), _trained(model2[0])), path


@pytest.mark.parametrize("name", FLAVORS)
def test_checkpoints_restore_both_ways_with_merlin(name, mm, make_model, batches, tmp_path,
                                                   record_property):

  def merlin(model):
    return _merlin(mm, model)

  def ours(model):
    return _ours(FLAVORS[name], model, save_default_optimizer=False)  # Merlin's layout

  diff, merlin_path = _checkpoint_round_trip(merlin, ours, make_model, batches,
                                             tmp_path / "from_merlin")
  record_property("merlin_to_ours_max_abs_diff", diff)
  assert diff < 1e-6
  diff, ours_path = _checkpoint_round_trip(ours, merlin, make_model, batches,
                                           tmp_path / "from_ours")
  record_property("ours_to_merlin_max_abs_diff", diff)
  assert diff < 1e-6
  # The very same layout: every key and shape.
  assert tf.train.list_variables(merlin_path) == tf.train.list_variables(ours_path)


@pytest.mark.parametrize("name", FLAVORS)
def test_by_default_the_default_optimizer_is_saved_which_merlin_cannot_restore(
    name, mm, make_model, batches, tmp_path):
  module = FLAVORS[name]

  def ours(model):
    return module.MultiOptimizer([module.OptimizerBlocks(L.Adam(0.05), model[1])],
                                 default_optimizer=L.Adagrad(0.2))

  model = make_model()
  opt = ours(model)
  _train(model[0], opt, batches, 0, 2)
  path = tf.train.Checkpoint(model=model[0], optimizer=opt).write(str(tmp_path / "ckpt"))
  keys = [k for k, _ in tf.train.list_variables(path)]
  assert any("optimizer/default_optimizer/accumulator" in k for k in keys), keys
  model2 = make_model()
  opt2 = ours(model2)
  status = tf.train.Checkpoint(model=model2[0], optimizer=opt2).read(path)
  _train(model2[0], opt2, batches, 0, 1)
  status.assert_consumed()
  model3 = make_model()
  opt3 = mm.MultiOptimizer([mm.OptimizerBlocks(L.Adam(0.05), model3[1])],
                           default_optimizer=L.Adagrad(0.2))
  status = tf.train.Checkpoint(model=model3[0], optimizer=opt3).read(path)
  _train(model3[0], opt3, batches, 0, 1)
  with pytest.raises(AssertionError, match="default_optimizer"):
    status.assert_consumed()


def _routes(model, optimizer_of):
  """{position of a variable in the model: (its optimizer's class, learning rate)}."""
  position = {v.ref(): i for i, v in enumerate(model.trainable_variables)}
  return {
      position[ref]: (type(opt).__name__, round(float(opt.learning_rate), 6))
      for ref, opt in optimizer_of.items()
  }


def test_merlin_config_loads_with_the_same_routing_of_named_layers(mm, make_model, batches):
  # The item tower's MLPBlock, a SequentialBlock whose config holds no name: its layers' do.
  reference = make_model()
  merlin_router = _merlin(mm, reference)
  merlin_router.update(mm.OptimizerBlocks(L.SGD(0.3), reference[2].layers[-1]))
  config = merlin_router.get_config()
  model = make_model()  # as a new process would build it: the same layer names
  # conftest.py imported Merlin before tf_opt_ops: Merlin's name loads ours.
  cls = tf.keras.utils.get_registered_object("merlin.models>MultiOptimizer")
  assert cls is ours_legacy.MultiOptimizer
  ours = cls.from_config(config)
  assert [type(o).__name__ for o in ours.optimizers] == ["Adam", "Adagrad", "SGD", "SGD"]
  _train(reference[0], merlin_router, batches, 0, 1)
  _train(model[0], ours, batches, 0, 1)
  theirs_routes = _routes(reference[0], merlin_router.var_optimizer_dict)
  ours_routes = _routes(
      model[0], {v.ref(): opt for opt in ours.optimizers for v in ours._table.variables_of(opt)})
  default = ("SGD", 0.1)
  tables = {i for i, v in enumerate(model[0].trainable_variables) if "embeddings" in v.name}
  assert len(tables) == 4
  for i in range(len(model[0].trainable_variables)):
    if i in tables:
      # Merlin names its tables `<model>/embeddings`: no layer name reaches them from a
      # config (docs/routing.md); Merlin's own from_config routes nothing at all.
      assert ours_routes[i] == default
    else:
      assert ours_routes[i] == theirs_routes.get(i, default), i
  # The item tower's dense layer: the update's SGD in both.
  item_dense = [
      i for i, v in enumerate(model[0].trainable_variables)
      if v.ref() in {w.ref() for w in model[2].layers[-1].trainable_variables}
  ]
  assert item_dense and all(ours_routes[i] == ("SGD", 0.3) for i in item_dense)


def _assert_first_step_raises(router, model, match):
  """The router's first step on `model` (built on inputs of width 3) raises ValueError `match`."""
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(tf.ones((2, 3))))
  grads = tape.gradient(loss, model.trainable_variables)
  with pytest.raises(ValueError, match=match):
    router.apply_gradients(zip(grads, model.trainable_variables))


@pytest.mark.parametrize("name", FLAVORS)
def test_merlin_config_whose_blocks_claim_nothing_raises_at_the_first_step(name, mm):
  # Variables inside a Sequential are not named after it: Merlin's config (blocks
  # by layer name) cannot route them. It used to send them to the default
  # optimizer silently.
  def sequential(seed):
    tf_keras.utils.set_random_seed(seed)
    first = tf_keras.Sequential([tf_keras.layers.Dense(4)], name="tower")
    model = tf_keras.Sequential([first, tf_keras.layers.Dense(1)])
    model.build((None, 3))
    return model, first

  _, tower = sequential(0)
  config = mm.MultiOptimizer([mm.OptimizerBlocks(L.Adam(0.05), [tower])],
                             default_optimizer=L.SGD(0.1)).get_config()
  _assert_first_step_raises(FLAVORS[name].MultiOptimizer.from_config(config),
                            sequential(0)[0], "layer name 'tower'.*claims no variable")


@pytest.mark.parametrize("name", FLAVORS)
def test_merlin_config_block_whose_name_two_layers_share_raises(name, mm):
  # Both towers hold a Dense layer called "dense": by name, the block is ambiguous.
  def two_towers():
    towers = [
        tf_keras.Sequential([tf_keras.layers.Dense(4, name="dense")], name=f"{side}_tower")
        for side in ("user", "item")
    ]
    inputs = tf_keras.Input((3,))
    model = tf_keras.Model(inputs, tf_keras.layers.Concatenate()([t(inputs) for t in towers]))
    return model, towers

  _, towers = two_towers()
  config = mm.MultiOptimizer([mm.OptimizerBlocks(L.Adam(0.05), [towers[1].layers[0]])],
                             default_optimizer=L.SGD(0.1)).get_config()
  _assert_first_step_raises(FLAVORS[name].MultiOptimizer.from_config(config),
                            two_towers()[0], "layer name 'dense'.*is ambiguous")


@pytest.mark.parametrize("name", FLAVORS)
def test_a_merlin_checkpoint_restores_and_says_the_default_optimizer_starts_fresh(
    name, mm, make_model, batches, tmp_path):
  # Merlin saves no state of its default optimizer: ours (which does) restores everything
  # the checkpoint holds, then warns once, at the next step, that the default starts fresh,
  # and goes on exactly as Merlin's own class restored from the same checkpoint.
  model = make_model()
  merlin_router = _merlin(mm, model)
  _train(model[0], merlin_router, batches, 0, 2)
  path = tf.train.Checkpoint(model=model[0], optimizer=merlin_router).write(str(tmp_path / "ckpt"))
  theirs_model, ours_model = make_model(seed=7), make_model(seed=8)
  theirs, ours = _merlin(mm, theirs_model), _ours(FLAVORS[name], ours_model)
  status = tf.train.Checkpoint(model=theirs_model[0], optimizer=theirs).read(path)
  tf.train.Checkpoint(model=ours_model[0], optimizer=ours).read(path)
  _train(theirs_model[0], theirs, batches, 2, 4)
  status.assert_consumed()
  with pytest.warns(UserWarning, match="holds no state of the default optimizer.*start fresh"):
    _train(ours_model[0], ours, batches, 2, 3)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # once
    _train(ours_model[0], ours, batches, 3, 4)
  assert int(ours.iterations.numpy()) == int(theirs.iterations.numpy()) == 4
  assert _max_diff(_trained(theirs_model[0]), _trained(ours_model[0])) < 1e-6
