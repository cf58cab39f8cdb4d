"""Each flavor's routers in `model.fit`: the routed variables train as each optimizer alone."""

import numpy as np
import pytest
import tensorflow as tf

import matrix_util

ROWS, USED, DIM, BATCH, BATCHES, EPOCHS = 24, 18, 4, 16, 4, 2


def data():
  rng = np.random.default_rng(0)
  ids = rng.integers(0, USED, size=(BATCH * BATCHES, 2)).astype(np.int32)
  ids[1] = ids[0]  # duplicate ids in a batch
  return ids, rng.normal(size=(BATCH * BATCHES, 1)).astype(np.float32)


def make_model(k):
  k.utils.set_random_seed(3)
  return matrix_util.embedding_model(k, ROWS, DIM, 2)


def optimizers(flavor):
  return flavor.module.LazyAdam(learning_rate=0.05), flavor.module.ClippyAdagrad(learning_rate=0.3)


def make_router(flavor, kind, model, lazy, clippy):
  emb, out = model.get_layer("emb"), model.get_layer("out")
  if kind == "MultiOptimizer":
    blocks = flavor.module.OptimizerBlocks
    return flavor.module.MultiOptimizer([blocks(lazy, emb), blocks(clippy, out)])
  return flavor.module.CompositeOptimizer([(lazy, lambda: emb.trainable_variables),
                                           (clippy, lambda: out.trainable_variables)])


def weights(model):
  return [np.asarray(w) for w in model.get_weights()]


@pytest.mark.parametrize("kind", ["MultiOptimizer", "CompositeOptimizer"])
def test_router_in_fit_is_each_optimizer_alone(flavor, kind):
  ids, labels = data()
  routed = make_model(flavor.keras)
  initial = weights(routed)
  lazy, clippy = optimizers(flavor)
  router = make_router(flavor, kind, routed, lazy, clippy)
  routed.compile(optimizer=router, loss="mse")
  routed.fit(ids, labels, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)

  alone = make_model(flavor.keras)
  np.testing.assert_array_equal(weights(alone)[0], initial[0])
  lazy_alone, clippy_alone = optimizers(flavor)
  emb, out = alone.get_layer("emb").trainable_variables, alone.get_layer("out").trainable_variables
  for _ in range(EPOCHS):
    for b in range(BATCHES):
      x, y = ids[b * BATCH:(b + 1) * BATCH], labels[b * BATCH:(b + 1) * BATCH]
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(alone(x, training=True) - y))
      grads = tape.gradient(loss, emb + out)
      assert isinstance(grads[0], tf.IndexedSlices)  # the fused sparse op's path
      lazy_alone.apply_gradients(zip(grads[:1], emb))
      clippy_alone.apply_gradients(zip(grads[1:], out))

  got, want = weights(routed), weights(alone)
  for g, w, before in zip(got, want, initial):
    assert not np.array_equal(g, before)  # every variable trained
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(got[0][USED:], initial[0][USED:])  # rows never looked up
  steps = EPOCHS * BATCHES
  assert int(np.asarray(lazy.iterations)) == steps and int(np.asarray(clippy.iterations)) == steps
  assert int(np.asarray(router.iterations)) == steps
