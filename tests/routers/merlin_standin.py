"""A stand-in for what Merlin Models 23.12 does with routers, for tests (not a test module).

Merlin Models 23.12 does not import under TensorFlow 2.21, so the tests run
against this stand-in, written for them from Merlin's behaviour
(`merlin/models/tf/blocks/optimizer.py`, `merlin/models/tf/core/base.py`). It
reproduces what a router of ours must match:

- `ModelContext`: one layer every tower of a Merlin model references, and
  through which each tower's `trainable_variables` holds every embedding table;
- `MultiOptimizer`, an OptimizerV2 with Merlin's state and checkpoint layout:
  dependencies `Optimizer<i>` for the constructor's pairs and
  `Optimizer<1 + number of pairs>` for `add()`/`update()`; the default
  optimizer is not a dependency (its state is never saved); no counter of its
  own (`iterations` is the first pair's optimizer's); `variables()` are the
  pairs' optimizers' weights; optimizer strings resolve to legacy optimizers;
- its routing: each block's variables are collected by a breadth-first walk
  over `_flatten_modules(include_self=False, recursive=False)` that skips the
  `ModelContext` and takes each module's own `_trainable_weights`;
  `update()` pairs override the others; unclaimed variables go to the default;
- its config: `{"name", "default_optimizer", "optimizers_and_blocks":
  [(optimizer config, [layer config, ...]), ...], "update_optimizers_and_blocks": [...]}`.
"""

import collections

import tensorflow as tf
import tf_keras

_Legacy = tf_keras.optimizers.legacy


class ModelContext(tf_keras.layers.Layer):
  """Holds every embedding table of the model; each tower references it."""

  def __init__(self, tables, **kwargs):
    super().__init__(**kwargs)
    self.tables = list(tables)


class Tower(tf_keras.layers.Layer):
  """Embeddings of its own features, then a dense layer; references the shared context."""

  def __init__(self, embedding, context, units=3, dense_name=None, **kwargs):
    super().__init__(**kwargs)
    self.embedding = embedding
    self.dense = tf_keras.layers.Dense(units, name=dense_name or f"{self.name}_dense")
    self.context = context

  def get_config(self):  # Merlin's blocks serialize as layer configs.
    return {"name": self.name, "trainable": self.trainable}

  def call(self, ids):
    return self.dense(tf.reshape(self.embedding(ids), (tf.shape(ids)[0], -1)))


class TwoTowerModel(tf_keras.Model):
  """user tower + item tower -> head, all embedding tables in one shared context."""

  def __init__(self, users=20, items=30, dim=4, dense_name=None, **kwargs):
    super().__init__(**kwargs)
    user_table = tf_keras.layers.Embedding(users, dim, name="user_emb")
    item_table = tf_keras.layers.Embedding(items, dim, name="item_emb")
    self.context = ModelContext([user_table, item_table], name="context")
    self.user_tower = Tower(user_table, self.context, name="user_tower", dense_name=dense_name)
    self.item_tower = Tower(item_table, self.context, name="item_tower", dense_name=dense_name)
    self.head = tf_keras.layers.Dense(1, name="head")

  def call(self, inputs):
    users, items = inputs
    return self.head(tf.concat([self.user_tower(users), self.item_tower(items)], axis=1))


class OptimizerBlocks:
  """Merlin's pair of an optimizer and the blocks (layers) it trains."""

  def __init__(self, optimizer, blocks):
    self.optimizer = optimizer
    self.blocks = blocks

  def get_config(self):
    return (tf_keras.optimizers.serialize(self.optimizer),
            [tf_keras.layers.serialize(block) for block in self.blocks])


def _get(optimizer):
  return tf_keras.optimizers.get(optimizer, use_legacy_optimizer=True)


class MultiOptimizer(_Legacy.Optimizer):
  """Merlin Models 23.12's router: state, routing and config as described above."""

  def __init__(self, optimizers_and_blocks, default_optimizer="rmsprop", name="MultiOptimizer",
               update_optimizers_and_blocks=None):
    super().__init__(name=name)
    self.default_optimizer = _get(default_optimizer)
    self.optimizers_and_blocks = []
    for i, pair in enumerate(optimizers_and_blocks):
      pair.optimizer = _get(pair.optimizer)
      if not isinstance(pair.blocks, (list, tuple)):
        pair.blocks = [pair.blocks]
      self._track_trackable(pair.optimizer, name=f"Optimizer{i}")
      self.optimizers_and_blocks.append(pair)
    self.update_optimizers_and_blocks = list(update_optimizers_and_blocks or [])

  def _track_new(self, pair):
    pair.optimizer = _get(pair.optimizer)
    if not isinstance(pair.blocks, (list, tuple)):
      pair.blocks = [pair.blocks]
    if all(p.optimizer is not pair.optimizer for p in self.optimizers_and_blocks):
      self._track_trackable(pair.optimizer, name=f"Optimizer{1 + len(self.optimizers_and_blocks)}")

  def add(self, pair):
    self._track_new(pair)
    self.optimizers_and_blocks.append(pair)

  def update(self, pair):
    self._track_new(pair)
    self.update_optimizers_and_blocks.append(pair)

  @staticmethod
  def _claim(pairs, owners, disjoint):
    for pair in pairs:
      for block in pair.blocks:
        queue = collections.deque([block])
        while queue:
          module = queue.popleft()
          for variable in getattr(module, "_trainable_weights", ()):
            if disjoint and variable.ref() in owners:
              raise ValueError(f"{variable.name} is claimed by two optimizers")
            owners[variable.ref()] = pair.optimizer
          queue.extend(m for m in module._flatten_modules(include_self=False, recursive=False)
                       if not isinstance(m, ModelContext))

  def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
    owners = {}
    self._claim(self.optimizers_and_blocks, owners, disjoint=True)
    self._claim(self.update_optimizers_and_blocks, owners, disjoint=False)
    groups = collections.defaultdict(list)
    for grad, variable in grads_and_vars:
      groups[owners.get(variable.ref(), self.default_optimizer)].append((grad, variable))
    for optimizer, pairs in groups.items():
      optimizer.apply_gradients(pairs, name=name,
                                experimental_aggregate_gradients=experimental_aggregate_gradients)

  @property
  def iterations(self):
    return self.optimizers_and_blocks[0].optimizer.iterations

  @iterations.setter
  def iterations(self, variable):
    for pair in self.optimizers_and_blocks:
      pair.optimizer.iterations = variable

  def variables(self):
    return self.weights

  @property
  def weights(self):
    return [w for pair in self.optimizers_and_blocks for w in pair.optimizer.weights]

  @property
  def optimizers(self):
    return [pair.optimizer for pair in self.optimizers_and_blocks] + [self.default_optimizer]

  def get_config(self):
    return {
        "name": self._name,
        "default_optimizer": tf_keras.optimizers.serialize(self.default_optimizer),
        "optimizers_and_blocks": [pair.get_config() for pair in self.optimizers_and_blocks],
        "update_optimizers_and_blocks":
            [pair.get_config() for pair in self.update_optimizers_and_blocks],
    }
