"""Blocks in any build state: layers, models and nested models not built yet.

Merlin builds its towers lazily and routes them before the first step; a tf_keras
`Sequential` without an input shape raises on `trainable_weights` until it is built. A router
takes such blocks at construction, round-trips them through `get_config()`, and routes their
variables once the first step has built them, in every flavor.
"""

import numpy as np
import pytest
import tensorflow as tf

import common


def _keras(flavor):
  if flavor == "keras":
    import keras
    return keras
  import tf_keras
  return tf_keras


class _Towers:
  """Two towers not built yet: the user tower an embedding and a Sequential inside a
  Sequential (no input shape: tf_keras raises on its `trainable_weights` until it is called)."""

  def __init__(self, flavor):
    k = _keras(flavor)
    k.utils.set_random_seed(0)
    self.user_emb = k.layers.Embedding(20, 4, name="user_emb")
    inner = k.Sequential([k.layers.Dense(3, activation="tanh", name="user_dense")], name="inner")
    self.user = k.Sequential([inner], name="user")
    self.item = k.layers.Embedding(30, 4, name="item_emb")
    self.head = k.layers.Dense(1, name="head")

  def __call__(self, ids):
    user = self.user(tf.reshape(self.user_emb(ids[:, :1]), (-1, 4)))
    item = tf.reshape(self.item(ids[:, 1:]), (-1, 4))
    return self.head(tf.concat([user, item], axis=1))

  def user_variables(self):
    return self.user_emb.trainable_variables + self.user.trainable_variables

  def variables(self):
    return self.user_variables() + self.item.trainable_variables + self.head.trainable_variables


def _step(towers, router, ids, labels):
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean((towers(ids) - labels)**2)
  variables = towers.variables()
  router.apply_gradients(zip(tape.gradient(loss, variables), variables))


def _sgd(flavor, lr):
  k = _keras(flavor)
  return k.optimizers.legacy.SGD(lr) if flavor == "legacy" else k.optimizers.SGD(lr)


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_unbuilt_towers_route_at_the_first_step(flavor):
  api = common.flavor_module(flavor)
  towers = _Towers(flavor)
  if flavor != "keras":
    with pytest.raises(ValueError, match="not yet been created"):
      towers.user.trainable_weights  # so the walk reads each layer's own list  # noqa: B018
  user_opt, item_opt = _sgd(flavor, 0.5), _sgd(flavor, 0.1)
  router = api.MultiOptimizer([
      api.OptimizerBlocks(user_opt, [towers.user_emb, towers.user]),
      api.OptimizerBlocks(item_opt, towers.item)
  ], default_optimizer=_sgd(flavor, 0.0))
  config = router.get_config()  # blocks not built yet: written by layer name
  ids = np.array([[1, 2], [3, 4], [1, 5]], np.int32)
  labels = np.ones((3, 1), np.float32)
  towers(ids)  # builds them
  before = {id(v): v.numpy() for v in towers.variables()}
  _step(towers, router, ids, labels)
  routed = {id(o): {id(v) for v in router._table.variables_of(o)} for o in router.optimizers}
  assert routed[id(user_opt)] == {id(v) for v in towers.user_variables()}
  assert len(routed[id(user_opt)]) == 3  # the table, and the nested model's kernel and bias
  assert routed[id(item_opt)] == {id(v) for v in towers.item.trainable_variables}
  for v in towers.head.trainable_variables:  # the default optimizer (learning rate 0)
    np.testing.assert_array_equal(v.numpy(), before[id(v)])
  for v in towers.user_variables() + towers.item.trainable_variables:
    assert not np.array_equal(v.numpy(), before[id(v)])  # routed to an optimizer that trains
  # The config written before the build routes a fresh copy of the towers the same way.
  towers2 = _Towers(flavor)
  router2 = type(router).from_config(config)
  towers2(ids)
  _step(towers2, router2, ids, labels)
  assert ({id(v) for v in router2._table.variables_of(router2.optimizers[0])
          } == {id(v) for v in towers2.user_variables()})


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_unbuilt_layer_and_model_blocks_config_round_trip(flavor):
  api = common.flavor_module(flavor)
  towers = _Towers(flavor)
  blocks = api.OptimizerBlocks("sgd", [towers.user, towers.item])
  optimizer, serialized = blocks.get_config()
  restored = api.OptimizerBlocks.from_config((optimizer, serialized))
  assert [b.name for b in restored.blocks] == ["user", "item_emb"]
  router = api.CompositeOptimizer([(_sgd(flavor, 0.1), towers.user), (_sgd(flavor,
                                                                           0.1), towers.item)])
  assert len(router.optimizers) == 2
