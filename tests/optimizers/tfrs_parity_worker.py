"""Runs in a subprocess (TF_USE_LEGACY_KERAS=1): TFRS ClippyAdagrad vs tf_opt_ops.tf_keras.

Prints one JSON line with the largest absolute weight differences measured.
Called by test_tfrs_parity.py; not a test module itself.
"""

import itertools
import json
import os
import tempfile

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
from tensorflow_recommenders.experimental import optimizers as tfrs_optimizers

import tf_opt_ops
from tf_opt_ops.tf_keras import ClippyAdagrad

TfrsClippy = tfrs_optimizers.ClippyAdagrad

ROWS, USED, STEPS, BATCH = 30, 25, 20, 16


def make_model(seed=0):
  tf.keras.utils.set_random_seed(seed)
  model = tf.keras.Sequential([
      tf.keras.layers.Embedding(ROWS, 4, input_length=3),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(8, activation="relu"),
      tf.keras.layers.Dense(1),
  ])
  model.build((None, 3))
  return model


def batches(steps, seed):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(steps):
    x = rng.integers(0, USED, size=(BATCH, 3)).astype(np.int32)
    x[1] = x[0]  # duplicate ids in every batch
    y = rng.normal(size=(BATCH, 1)).astype(np.float32)
    out.append((tf.constant(x), tf.constant(y)))
  return out


def train(model, opt, data, sparse):
  for x, y in data:
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    if not sparse:
      grads = [tf.convert_to_tensor(g) for g in grads]
    opt.apply_gradients(zip(grads, model.trainable_variables))


def max_diff(a, b):
  return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def state(opt):
  return [v.numpy() for v in opt.variables]


OPTION_GRID = [
    dict(clip_accumulator_update=c, use_standard_accumulator_update=s, export_clipping_factors=e,
         **t) for (c, s), e, t in itertools.product([(False, False), (True, False), (
             False, True)], [False, True], [
                 dict(learning_rate=0.1),
                 dict(learning_rate=0.5, variable_relative_threshold=0.01,
                      accumulator_relative_threshold=1e-3, absolute_threshold=1e-4,
                      initial_accumulator_value=0.01, epsilon=1e-6)
             ])
]


def parity():
  result = {"sparse": 0.0, "dense": 0.0, "state": 0.0, "runs": 0, "clipped_runs": 0}
  for options, sparse in itertools.product(OPTION_GRID, [True, False]):
    data = batches(STEPS, seed=1)
    weights, states, factors = [], [], []
    for cls in (TfrsClippy, ClippyAdagrad):
      model = make_model()
      initial = model.get_weights()
      opt = cls(**options)
      train(model, opt, data, sparse)
      weights.append(model.get_weights())
      states.append(state(opt))
      factors.append([float(f.numpy()) for f in opt.clipping_factors])
      # Embedding rows never looked up keep their bits.
      assert np.array_equal(model.get_weights()[0][USED:], initial[0][USED:])
    key = "sparse" if sparse else "dense"
    result[key] = max(result[key], max_diff(*weights))
    assert len(states[0]) == len(states[1])
    result["state"] = max(result["state"], max_diff(*states))
    if options["export_clipping_factors"]:
      assert len(factors[1]) == len(factors[0]) == 5
      result["clipped_runs"] += int(min(factors[1]) < 1.0)
    result["runs"] += 1
  return result


def checkpoint(src_cls, dst_cls, tmp):
  options = dict(learning_rate=0.3, export_clipping_factors=True, clip_accumulator_update=True)
  first, second = batches(5, seed=2), batches(5, seed=3)
  model = make_model()
  src = src_cls(**options)
  train(model, src, first, sparse=True)
  path = tf.train.Checkpoint(model=model, optimizer=src).write(os.path.join(tmp, "ckpt"))
  restored = make_model(seed=7)
  dst = dst_cls(**options)
  dst.build(restored.trainable_variables)
  tf.train.Checkpoint(model=restored, optimizer=dst).read(path).assert_consumed()
  if max_diff(state(src), state(dst)) != 0.0:
    raise AssertionError("restored optimizer state differs")
  train(model, src, second, sparse=True)
  train(restored, dst, second, sparse=True)
  return max(max_diff(model.get_weights(), restored.get_weights()),
             max_diff(state(src), state(dst)))


def main():
  assert tf_opt_ops.ClippyAdagrad is ClippyAdagrad  # top level follows tf.keras (tf_keras here)
  result = parity()
  with tempfile.TemporaryDirectory() as tmp:
    result["checkpoint_tfrs_to_ours"] = checkpoint(TfrsClippy, ClippyAdagrad, tmp)
  with tempfile.TemporaryDirectory() as tmp:
    result["checkpoint_ours_to_tfrs"] = checkpoint(ClippyAdagrad, TfrsClippy, tmp)
  # A TFRS config (which lacks use_standard_accumulator_update) builds ours.
  config = TfrsClippy(learning_rate=0.2, clip_accumulator_update=True).get_config()
  ours = tf.keras.optimizers.deserialize({"class_name": "Custom>ClippyAdagrad", "config": config})
  assert type(ours) is ClippyAdagrad, type(ours)
  assert ours.clip_accumulator_update and not ours.use_standard_accumulator_update
  print(json.dumps(result))


if __name__ == "__main__":
  main()
