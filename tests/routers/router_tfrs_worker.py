"""Runs in a subprocess (TF_USE_LEGACY_KERAS=1): our tf_keras routers against TFRS' router.

Re-expresses the checks of TensorFlow Recommenders 0.7.7's
`composite_optimizer_test.py` against our classes, and restores checkpoints
between TFRS' router and ours in both directions. Prints one JSON line.
Called by test_router_tfrs.py; not a test module itself.
"""

import json
import os
import tempfile

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
from tensorflow_recommenders.experimental import optimizers as tfrs_optimizers

from tf_opt_ops import legacy as ours_legacy
from tf_opt_ops import tf_keras as ours_tf_keras

TfrsComposite = tfrs_optimizers.CompositeOptimizer
ROUTERS = {"legacy": ours_legacy.CompositeOptimizer, "tf_keras": ours_tf_keras.CompositeOptimizer}
LEGACY = {
    "sgd": tf.keras.optimizers.legacy.SGD,
    "adam": tf.keras.optimizers.legacy.Adam,
    "rmsprop": tf.keras.optimizers.legacy.RMSprop,
    "adagrad": tf.keras.optimizers.legacy.Adagrad,
}


def same_as_each_alone(router_cls):
  """TFRS' test_composite_optimizer: the router equals each optimizer alone, 10 steps."""
  worst, sequences_equal = 0.0, True
  for first, second in (("sgd", "adam"), ("rmsprop", "sgd"), ("adam", "adagrad"), ("adagrad",
                                                                                   "rmsprop")):
    values = ([1.0, 2.0, 3.0], [0.5, 0.0, -2.0], [0.1, 0.0, -1.0])
    grads = [tf.constant(g) for g in ([0.1, 0.2, 1.0], [-0.1, 0.05, 2.0], [2.1, 0.0, 0.3])]
    routed = [tf.Variable(v) for v in values]
    alone = [tf.Variable(v) for v in values]
    opt1, opt2 = LEGACY[first](), LEGACY[second]()
    router = router_cls([(opt1, lambda: routed[:1]), (opt2, lambda: routed[1:])])
    sequences_equal &= list(router.optimizers) == [opt1, opt2]
    ref1, ref2 = LEGACY[first](), LEGACY[second]()
    for _ in range(10):
      router.apply_gradients(zip(grads, routed))
      ref1.apply_gradients(zip(grads[:1], alone[:1]))
      ref2.apply_gradients(zip(grads[1:], alone[1:]))
    worst = max(worst,
                max(float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(routed, alone)))
  return worst, sequences_equal


def incorrect_inputs_raise(router_cls):
  """TFRS' test_incorrect_inputs: a variable in two optimizers, and one in none, raise."""
  var1, var2, var3 = (tf.Variable([0.1, 0.2,
                                   1.0]), tf.Variable([-5.1, 0.1,
                                                       0.0]), tf.Variable([-2.1, 1.3, 0.0]))
  grads = [
      tf.constant([0.1, 0.2, 1.0]),
      tf.constant([0.5, 0.0, -2.0]),
      tf.constant([-0.2, 0.0, -1.0])
  ]
  raised = 0
  for pairs, variables in (([(tf.keras.optimizers.Adam(), lambda: [var1]),
                             (tf.keras.optimizers.Adagrad(), lambda: [var1, var2])], 2),
                           ([(tf.keras.optimizers.Adam(), lambda: [var1]),
                             (tf.keras.optimizers.Adagrad(), lambda: [var2])], 3)):
    try:
      router_cls(pairs).apply_gradients(list(zip(grads, [var1, var2, var3]))[:variables])
    except ValueError:
      raised += 1
  return raised == 2


def checkpoint_save_restore_export(router_cls):
  """TFRS' test_checkpoint_save_restore_export, with its tf_keras Adam and Adagrad."""

  def get_model():
    model = tf.keras.experimental.LinearModel(units=10)
    router = router_cls([(tf.keras.optimizers.Adam(), lambda: model.trainable_variables[:1]),
                         (tf.keras.optimizers.Adagrad(), lambda: model.trainable_variables[1:])])
    model.compile(optimizer=router, loss=tf.keras.losses.MSE)
    return model

  rng = np.random.RandomState(42)
  x, y = rng.normal(size=(8 * 16, 5)), rng.normal(size=(8 * 16, 1))
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
  model = get_model()
  model.fit(dataset, epochs=1, verbose=0)
  result = {
      "iterations": int(model.optimizer.iterations.numpy()),
      "variables": len(model.optimizer.variables())
  }
  path = tf.train.Checkpoint(model=model).write(os.path.join(tempfile.mkdtemp(), "ckpt"))
  new_model = get_model()
  new_model.fit(dataset.take(1), verbose=0)
  tf.train.Checkpoint(model=new_model).read(path).assert_consumed()
  result["restored_iterations"] = int(new_model.optimizer.iterations.numpy())
  result["restored_state_diff"] = max(
      float(np.max(np.abs(a.numpy() - b.numpy())))
      for a, b in zip(new_model.optimizer.variables(), model.optimizer.variables()))
  prediction = new_model.predict(dataset, verbose=0)
  with tempfile.TemporaryDirectory() as tmp:
    export = os.path.join(tmp, "model_with_composite_optimizer")
    new_model.save(export, include_optimizer=False)
    loaded = tf.keras.models.load_model(export)
    result["export_diff"] = float(np.max(np.abs(loaded.predict(dataset, verbose=0) - prediction)))
  return result


def checkpoints_both_ways(make_tfrs, make_ours):
  """TFRS -> ours and ours -> TFRS: assert_consumed, then 3 more steps give the same model."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(48, 3)).astype(np.float32)
  y = rng.normal(size=(48, 2)).astype(np.float32)

  def make(factory, seed):
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.layers.Dense(4), tf.keras.layers.Dense(2)])
    model.build((None, 3))
    variables = model.trainable_variables
    return model, factory(lambda: variables[:2], lambda: variables[2:])

  def train(model, opt, start, stop):
    for s in range(start, stop):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x[s * 8:(s + 1) * 8]) - y[s * 8:(s + 1) * 8]))
      variables = model.trainable_variables
      opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

  result = {}
  for direction, writer, reader in (("tfrs_to_ours", make_tfrs, make_ours), ("ours_to_tfrs",
                                                                             make_ours, make_tfrs)):
    model, opt = make(writer, 4)
    train(model, opt, 0, 3)
    path = tf.train.Checkpoint(model=model,
                               optimizer=opt).write(os.path.join(tempfile.mkdtemp(), "ckpt"))
    train(model, opt, 3, 6)
    model2, opt2 = make(reader, 9)
    status = tf.train.Checkpoint(model=model2, optimizer=opt2).read(path)
    train(model2, opt2, 3, 6)
    status.assert_consumed()
    result[direction] = {
        "diff": max(
            float(np.max(np.abs(a - b))) for a, b in zip(model.get_weights(), model2.get_weights())
        ),
        "iterations": [int(opt.iterations.numpy()),
                       int(opt2.iterations.numpy())],
        "keys": [[k, list(shape)] for k, shape in tf.train.list_variables(path)],
    }
  return result


def main():
  out = {}
  for flavor, router_cls in ROUTERS.items():
    diff, sequences_equal = same_as_each_alone(router_cls)
    out[flavor] = {
        "alone_diff": diff,
        "optimizers_in_order": sequences_equal,
        "incorrect_inputs_raise": incorrect_inputs_raise(router_cls),
        "checkpoint_test": checkpoint_save_restore_export(router_cls),
        "legacy_pair": checkpoints_both_ways(
            lambda a, b: TfrsComposite([(LEGACY["adam"](0.05), a), (LEGACY["adagrad"](0.2), b)]),
            lambda a, b, cls=router_cls: cls([(LEGACY["adam"](0.05), a), (LEGACY["adagrad"]
                                                                          (0.2), b)])),
        # Both tf_keras APIs in one router: the two checkpoint-compatible classes
        # (TFA's LazyAdam is a legacy Adam; TFRS' ClippyAdagrad a tf_keras one).
        "mixed_apis": checkpoints_both_ways(
            lambda a, b: TfrsComposite([(LEGACY["adam"](0.05), a),
                                        (tfrs_optimizers.ClippyAdagrad(0.2), b)]),
            lambda a, b, cls=router_cls: cls([(ours_legacy.LazyAdam(0.05), a),
                                              (ours_tf_keras.ClippyAdagrad(0.2), b)])),
    }
  print(json.dumps(out))


if __name__ == "__main__":
  main()
