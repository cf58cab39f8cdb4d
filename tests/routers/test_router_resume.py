"""A job resumed from a checkpoint continues exactly as if it had never stopped.

For every flavor and both routers (MultiOptimizer with a stateful default optimizer,
CompositeOptimizer): train k steps, checkpoint, restore into a fresh model and router,
train on; the weights and every sub-optimizer's state (slots, step counters) equal the
uninterrupted run's: bit for bit on one device, to 1e-6 under MirroredStrategy (run in a
subprocess of two logical CPUs). ParameterServerStrategy with sharded variables, restored
into the same layout and across one device and shards, is tests/distributed/test_cluster.py.
"""

import json
import os
import re
import sys

import numpy as np
import pytest

import common

ROWS, DIM, BATCH, STEPS, SAVED_AT = 30, 4, 8, 4, 2
KINDS = ("multi", "composite")


def _keras(flavor):
  if flavor == "keras":
    import keras
    return keras
  import tf_keras
  return tf_keras


def _model(flavor):
  k = _keras(flavor)
  k.utils.set_random_seed(0)
  return k.Sequential([
      k.Input(shape=(3,), dtype="int32"),
      k.layers.Embedding(ROWS, DIM, name="emb"),
      k.layers.Flatten(),
      k.layers.Dense(1, name="head")
  ])


def _router(flavor, kind, model):
  api = common.flavor_module(flavor)
  emb, head = model.get_layer("emb"), model.get_layer("head")
  if kind == "multi":
    # The default optimizer is stateful (Adam's moments and its bias-correction step).
    return api.MultiOptimizer([api.OptimizerBlocks(api.LazyAdam(0.05), emb)],
                              default_optimizer=api.LazyAdam(0.02))
  return api.CompositeOptimizer([(api.LazyAdam(0.05), lambda: emb.trainable_variables),
                                 (api.ClippyAdagrad(0.2, variable_relative_threshold=0.5),
                                  lambda: head.trainable_variables)])


def _variables(optimizer):
  v = optimizer.variables
  return list(v() if callable(v) else v)  # OptimizerV2's is a method


def _state(model, router):
  """(weights, every sub-optimizer's variables): the sub-optimizers in `optimizers` order
  (the default optimizer last), each one's variables by name, sorted. A legacy optimizer
  creates slots restored on `read` first, named without the router's scope."""
  state = []
  for i, optimizer in enumerate(router.optimizers):
    named = {(i, re.sub(r"^\w+Optimizer/(Optimizer\d+|default_optimizer)/", "", v.name)): v
             for v in _variables(optimizer)}
    state.extend(np.asarray(named[key].numpy()) for key in sorted(named))
  return [np.asarray(w) for w in model.get_weights()], state


def run(flavor, kind, strategy, ckpt_dir):
  """(uninterrupted state, resumed state) of one flavor and router kind."""
  import tensorflow as tf
  x, y = common.duplicate_id_batches(ROWS, BATCH, STEPS)

  def make():
    with strategy.scope():
      model = _model(flavor)
      router = _router(flavor, kind, model)
      if flavor != "legacy":  # Keras 3 and tf_keras build before a restore
        router.build(model.trainable_variables)
    return model, router

  def train(model, router, steps):

    def replica_step(xb, yb):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(xb) - yb)**2)
      variables = model.trainable_variables
      router.apply_gradients(zip(tape.gradient(loss, variables), variables))

    step = tf.function(lambda xb, yb: strategy.run(replica_step, args=(xb, yb)))
    for s in steps:
      step(x[s * BATCH:(s + 1) * BATCH], y[s * BATCH:(s + 1) * BATCH])

  model, router = make()
  train(model, router, range(STEPS))
  uninterrupted = _state(model, router)

  model, router = make()
  train(model, router, range(SAVED_AT))
  path = tf.train.Checkpoint(model=model,
                             optimizer=router).write(os.path.join(ckpt_dir, f"{flavor}_{kind}"))
  model, router = make()
  status = tf.train.Checkpoint(model=model, optimizer=router).read(path)
  train(model, router, range(SAVED_AT, STEPS))
  status.assert_consumed()  # everything saved came back, the default optimizer's included
  return uninterrupted, _state(model, router)


def _max_diff(a, b):
  weights = max(float(np.abs(p - q).max()) for p, q in zip(a[0], b[0]))
  state = max(float(np.abs(p - q).max()) for p, q in zip(a[1], b[1]))
  return weights, state


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_resumed_on_one_device_is_bit_identical(flavor, kind, tmp_path):
  import tensorflow as tf
  uninterrupted, resumed = run(flavor, kind, tf.distribute.get_strategy(), str(tmp_path))
  assert len(uninterrupted[1]) == len(resumed[1]) > 0
  for want, got in zip(uninterrupted[0] + uninterrupted[1], resumed[0] + resumed[1]):
    np.testing.assert_array_equal(want, got)


def _mirrored_main(flavor, ckpt_dir):
  import tensorflow as tf
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  out = {}
  for kind in KINDS:
    uninterrupted, resumed = run(flavor, kind, strategy, ckpt_dir)
    out[kind] = dict(zip(("weights", "state"), _max_diff(uninterrupted, resumed)),
                     variables=[len(uninterrupted[1]), len(resumed[1])])
  print(json.dumps(out))


@pytest.mark.slow
@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_resumed_under_mirrored_strategy_matches(flavor, tmp_path):
  result = common.run_python(None, os.path.abspath(__file__), flavor, str(tmp_path), timeout=300)
  out = json.loads(result.stdout.strip().splitlines()[-1])
  for kind in KINDS:
    assert out[kind]["variables"][0] == out[kind]["variables"][1] > 0, out
    assert out[kind]["weights"] <= 1e-6 and out[kind]["state"] <= 1e-6, out


if __name__ == "__main__":
  if sys.argv[1] != "keras":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
  _mirrored_main(*sys.argv[1:3])
