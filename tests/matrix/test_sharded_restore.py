"""A checkpoint moves between a table on one device and the same table in shards (the state of
a ParameterServerStrategy partitioner), for the Keras 2 flavors: exactly, both ways.

keras 2.15 (TensorFlow 2.15's tf.keras) lists each shard's slot apart; the tf_keras flavor
joins them as tf_keras does, so this holds on every TensorFlow (docs/design.md, "Invariants").
"""

import numpy as np
import pytest
import tensorflow as tf

import matrix_util

ROWS, DIM = 6, 2


def shards_of(values):
  parts = [tf.Variable(values[:4], name="t/part_0"), tf.Variable(values[4:], name="t/part_1")]
  return tf.__internal__.distribute.ShardedVariable(parts), parts


def build(flavor, optimizer, variables):
  matrix_util.flavor(flavor).build(optimizer, variables)


def slot_values(flavor, optimizer, var):
  """m and v of the (whole or sharded) table `var`, as whole arrays."""
  if flavor == "legacy":
    slots = [optimizer.get_slot(var, name) for name in ("m", "v")]
  else:
    slots = list(optimizer.variables)[1:3]
  return [np.concatenate([np.asarray(p) for p in getattr(s, "variables", [s])]) for s in slots]


def grad(seed):
  rng = np.random.default_rng(seed)
  return tf.constant(rng.normal(size=(3, DIM)).astype(np.float32)), tf.constant([0, 3, 5])


@pytest.mark.parametrize("direction", ["one->shards", "shards->one"])
@pytest.mark.parametrize("keras2_flavor", ["tf_keras", "legacy"])
def test_checkpoint_moves_between_shardings(keras2_flavor, direction, tmp_path):
  module = matrix_util.flavor(keras2_flavor).module
  init = np.random.default_rng(0).normal(size=(ROWS, DIM)).astype(np.float32)
  source_sharded = direction == "shards->one"

  def make(sharded, values):
    if sharded:
      whole, parts = shards_of(values)
      return whole, parts
    var = tf.Variable(values, name="t")
    return var, [var]

  def step(optimizer, parts, seed):
    values, indices = grad(seed)
    if len(parts) == 1:
      pairs = [(tf.IndexedSlices(values, indices, tf.constant([ROWS, DIM])), parts[0])]
    else:  # each shard gets its rows, re-indexed, as the partitioned lookup's gradient
      pairs = []
      for p, (lo, hi) in zip(parts, ((0, 4), (4, ROWS))):
        keep = (indices >= lo) & (indices < hi)
        pairs.append((tf.IndexedSlices(tf.boolean_mask(values, keep),
                                       tf.boolean_mask(indices, keep) - lo,
                                       tf.constant([hi - lo, DIM])), p))
    optimizer.apply_gradients(pairs)

  source, source_parts = make(source_sharded, init)
  saved = module.LazyAdam(learning_rate=0.1)
  for seed in range(2):
    step(saved, source_parts, seed)
  path = tf.train.Checkpoint(table=source, optimizer=saved).write(str(tmp_path / "ckpt"))

  target, target_parts = make(not source_sharded, np.zeros_like(init))
  restored = module.LazyAdam(learning_rate=0.1)
  status = tf.train.Checkpoint(table=target, optimizer=restored).read(path)
  build(keras2_flavor, restored, target_parts)  # the restore was pending until the state exists
  if keras2_flavor != "legacy" or source_sharded:
    # (legacy into shards: OptimizerV2 restores the whole slot, which our LazyAdam then moves
    # into the shards' slots by value, so their ShardedVariable has no checkpoint binding.)
    status.assert_consumed()
  want, got = slot_values(keras2_flavor, saved, source), slot_values(keras2_flavor, restored,
                                                                     target)
  for w, g in zip(want, got):
    assert np.abs(w).max() > 0
    np.testing.assert_array_equal(g, w)
  step(saved, source_parts, 7)
  step(restored, target_parts, 7)
  np.testing.assert_allclose(np.concatenate([np.asarray(p) for p in target_parts]),
                             np.concatenate([np.asarray(p) for p in source_parts]), rtol=1e-6,
                             atol=1e-7)
