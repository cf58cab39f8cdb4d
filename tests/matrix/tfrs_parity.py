"""TFRS' ClippyAdagrad against tf_opt_ops.tf_keras.ClippyAdagrad (run by the matrix suite).

A script, run in a fresh process: from TensorFlow 2.16 on with
TF_USE_LEGACY_KERAS=1 (TFRS builds on tf.keras, which must be Keras 2). Prints
`PARITY <json>` with the largest differences measured; asserts what must hold
exactly.
"""

import itertools
import json
import os
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow_recommenders.experimental.optimizers import clippy_adagrad as tfrs_clippy

import tf_opt_ops
from tf_opt_ops.tf_keras import ClippyAdagrad

ROWS, USED, BATCH, STEPS = 30, 25, 16, 8


def make_model(seed=0):
  tf.keras.utils.set_random_seed(seed)
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(3,), dtype="int32"),
      tf.keras.layers.Embedding(ROWS, 4),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(1),
  ])
  return model


def batches(seed, steps=STEPS):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(steps):
    ids = rng.integers(0, USED, size=(BATCH, 3)).astype(np.int32)
    ids[1] = ids[0]  # duplicate ids in every batch
    out.append((tf.constant(ids), tf.constant(rng.normal(size=(BATCH, 1)).astype(np.float32))))
  return out


def train(model, optimizer, data, sparse=True):
  for ids, labels in data:
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(ids) - labels))
    grads = tape.gradient(loss, model.trainable_variables)
    if not sparse:
      grads = [tf.convert_to_tensor(g) for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


def max_diff(a, b):
  assert len(a) == len(b)
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b))


def state(optimizer):
  return [v.numpy() for v in optimizer.variables]


def main():
  assert tf_opt_ops.keras_flavor() == "tf_keras"  # tf.keras is Keras 2 here
  assert issubclass(tfrs_clippy.ClippyAdagrad, tf.keras.optimizers.Optimizer)
  result = {"weights": 0.0, "state": 0.0, "runs": 0, "clipped_runs": 0}
  for (clip, standard), sparse in itertools.product([(False, False), (True, False), (False, True)],
                                                    [True, False]):
    options = dict(learning_rate=0.5, clip_accumulator_update=clip,
                   use_standard_accumulator_update=standard, export_clipping_factors=True)
    weights, states, factors = [], [], []
    for cls in (tfrs_clippy.ClippyAdagrad, ClippyAdagrad):
      model = make_model()
      optimizer = cls(**options)
      train(model, optimizer, batches(1), sparse)
      weights.append(model.get_weights())
      states.append(state(optimizer))
      factors.append([float(f.numpy()) for f in optimizer.clipping_factors])
    result["weights"] = max(result["weights"], max_diff(*weights))
    result["state"] = max(result["state"], max_diff(*states))
    result["clipped_runs"] += int(min(factors[1]) < 1.0)
    result["runs"] += 1
  # A TFRS checkpoint restores into ours (assert_consumed), which trains on as TFRS does.
  options = dict(learning_rate=0.3, export_clipping_factors=True, clip_accumulator_update=True)
  model, theirs = make_model(), tfrs_clippy.ClippyAdagrad(**options)
  train(model, theirs, batches(2, 4))
  with tempfile.TemporaryDirectory() as tmp:
    path = tf.train.Checkpoint(model=model, optimizer=theirs).write(os.path.join(tmp, "ckpt"))
    restored, ours = make_model(seed=7), ClippyAdagrad(**options)
    ours.build(restored.trainable_variables)
    tf.train.Checkpoint(model=restored, optimizer=ours).read(path).assert_consumed()
  assert max_diff(state(theirs), state(ours)) == 0.0
  more = batches(3, 4)
  train(model, theirs, more)
  train(restored, ours, more)
  result["checkpoint"] = max(max_diff(model.get_weights(), restored.get_weights()),
                             max_diff(state(theirs), state(ours)))
  # TFRS' serialized name loads into ours.
  config = tf.keras.optimizers.serialize(tfrs_clippy.ClippyAdagrad(learning_rate=0.2))
  loaded = tf.keras.optimizers.deserialize(dict(config, class_name="Custom>ClippyAdagrad"),
                                           use_legacy_optimizer=False)
  assert type(loaded) is ClippyAdagrad, type(loaded)
  print("PARITY", json.dumps(result))


if __name__ == "__main__":
  main()
