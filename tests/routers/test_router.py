"""CompositeOptimizer / MultiOptimizer / OptimizerBlocks in all three Keras flavors.

All flavors run in this one process: tf_keras and Keras 3 live side by side
(`TF_USE_LEGACY_KERAS` only decides what `tf.keras` is, which these tests never
use).
"""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tf_opt_ops import keras as k3_ops
from tf_opt_ops import legacy as legacy_ops
from tf_opt_ops import tf_keras as tfk_ops
from tf_opt_ops.routers import keras as _router_keras
from tf_opt_ops.routers import legacy as _router_legacy
from tf_opt_ops.routers import tf_keras as _router_tf_keras
from tf_opt_ops.routers.rules import variable_path

import common


class Flavor:

  def __init__(self, name, lib, optimizers, routers, ours):
    self.name = name
    self.lib = lib  # keras or tf_keras
    self.opt = optimizers  # namespace with SGD, Adam, Adagrad, RMSprop
    self.Composite = routers.CompositeOptimizer
    self.Multi = routers.MultiOptimizer
    self.Blocks = routers.OptimizerBlocks
    self.ours = ours

  def __repr__(self):
    return self.name

  def variable(self, value, name):
    value = np.asarray(value, np.float32)
    if self.lib is keras:
      return keras.Variable(value, name=name)
    return tf.Variable(value, name=name)

  def variables(self, optimizer):
    v = optimizer.variables
    return list(v() if callable(v) else v)  # OptimizerV2's is a method

  def lr(self, optimizer):
    if self.name == "legacy":
      return float(optimizer._get_hyper("learning_rate"))
    return float(np.asarray(optimizer.learning_rate))


K3 = Flavor("keras3", keras, keras.optimizers, _router_keras, k3_ops)
TFK = Flavor("tf_keras", tf_keras, tf_keras.optimizers, _router_tf_keras, tfk_ops)
LEG = Flavor("legacy", tf_keras, tf_keras.optimizers.legacy, _router_legacy, legacy_ops)
FLAVORS = [K3, TFK, LEG]


def _step(opt, variables, loss_fn):
  with tf.GradientTape() as tape:
    loss = loss_fn()
  grads = tape.gradient(loss, variables)
  opt.apply_gradients(zip(grads, variables))


def _sum_loss(variables, weights=None):
  weights = weights or [1.0] * len(variables)
  return lambda: tf.add_n([w * tf.reduce_sum(v) for w, v in zip(weights, variables)])


def _quadratic(variables):
  targets = [
      np.linspace(-1, 1, int(np.prod(v.shape))).reshape(v.shape).astype(np.float32)
      for v in variables
  ]
  return lambda: tf.add_n([
      tf.reduce_sum(tf.square(v - t) * (i + 1)) for i, (v, t) in enumerate(zip(variables, targets))
  ])


def _values(variables):
  return [np.array(v.numpy()) for v in variables]


# ----------------------------------------------------------------------------- routing


def _pair_factories(f):
  pairs = [(lambda: f.opt.SGD(0.1), lambda: f.opt.Adam(0.05)),
           (lambda: f.opt.Adam(0.02), lambda: f.opt.Adagrad(0.3)),
           (lambda: f.opt.RMSprop(0.01), lambda: f.opt.SGD(0.2))]
  pairs.append((lambda: f.ours.LazyAdam(0.03), lambda: f.ours.ClippyAdagrad(0.2)))
  return pairs


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_composite_equals_each_optimizer_alone(f):
  for make_a, make_b in _pair_factories(f):
    init = [np.full((3,), 0.5), np.arange(4.0).reshape(2, 2), np.array([1.0, -2.0])]
    routed = [f.variable(v, f"w{i}") for i, v in enumerate(init)]
    alone = [f.variable(v, f"w{i}") for i, v in enumerate(init)]
    opt_a, opt_b = make_a(), make_b()
    composite = f.Composite([(opt_a, lambda: routed[:1]), (opt_b, lambda: routed[1:])])
    assert composite.optimizers == [opt_a, opt_b]
    ref_a, ref_b = make_a(), make_b()
    for _ in range(6):
      _step(composite, routed, _quadratic(routed))
      # Reference: the same gradients, each optimizer alone on its variables.
      with tf.GradientTape() as tape:
        loss = _quadratic(alone)()
      grads = tape.gradient(loss, alone)
      ref_a.apply_gradients(zip(grads[:1], alone[:1]))
      ref_b.apply_gradients(zip(grads[1:], alone[1:]))
    for got, want in zip(_values(routed), _values(alone)):
      np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert int(composite.iterations.numpy()) == 6
    assert [int(o.iterations.numpy()) for o in composite.optimizers] == [6, 6]
    # Each sub-optimizer holds state for its own variables only; only the Keras 3
    # router has a counter of its own (TFRS' has none).
    own = [composite.iterations] if f is K3 else []
    assert [id(v) for v in f.variables(composite)
           ] == [id(v) for v in own + f.variables(opt_a) + f.variables(opt_b)]


def _dense_model(f, names=("first", "second", "third")):
  lib = f.lib
  inp = lib.Input((3,))
  layers = [
      lib.layers.Dense(2, name=names[0]),
      lib.layers.Dense(2, name=names[1]),
      lib.layers.Dense(1, name=names[2])
  ]
  x = inp
  for layer in layers:
    x = layer(x)
  return lib.Model(inp, x), layers


def _lr_signature(f, model, opt, steps=2):
  """Trains with loss = sum of all weights (gradient 1): each weight moves by -lr * steps."""
  variables = list(model.trainable_variables)
  before = _values(variables)
  for _ in range(steps):
    _step(opt, variables, _sum_loss(variables))
  return {
      variable_path(v): round(float(np.mean((b - v.numpy()) / steps)), 5)
      for v, b in zip(variables, before)
  }


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_multi_optimizer_block_kinds_and_default(f):
  model, (first, second, third) = _dense_model(f)
  sgd = [f.opt.SGD(lr) for lr in (0.1, 0.2, 0.3, 0.4)]
  default = f.opt.SGD(0.5)
  router_ = f.Multi(
      [
          f.Blocks(sgd[0], first),  # a layer
          f.Blocks(sgd[1], [second.kernel]),  # a list of variables
          f.Blocks(sgd[2], lambda: [third.kernel]),  # a callable returning variables
          f.Blocks(sgd[3], r"sec.*/bias"),  # a regular expression, matched in full
      ],
      default_optimizer=default)
  assert router_.optimizers == sgd + [default]
  moved = {}
  for v, lr in zip(model.trainable_variables, [0.1, 0.1, 0.2, 0.4, 0.3, 0.5]):
    path = variable_path(v)
    moved[path] = lr
  got = _lr_signature(f, model, router_)
  assert sorted(got.values()) == sorted(moved.values())
  for v in model.trainable_variables:
    assert got[variable_path(v)] == moved[variable_path(v)]
  assert int(router_.iterations.numpy()) == 2
  # learning_rate reports each sub-optimizer's, in `optimizers` order.
  np.testing.assert_allclose([float(np.asarray(lr)) for lr in router_.learning_rate],
                             [0.1, 0.2, 0.3, 0.4, 0.5], rtol=1e-6)


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_multi_optimizer_strings_resolve_in_flavor(f):
  model, (first, _, _) = _dense_model(f)
  router_ = f.Multi([f.Blocks("adam", first)])
  adam, default = router_.optimizers
  assert type(adam).__name__ == "Adam" and type(default).__name__ == "RMSprop"
  base = {
      "keras3": keras.optimizers.Optimizer, "tf_keras": tf_keras.optimizers.Optimizer,
      "legacy": tf_keras.optimizers.legacy.Optimizer
  }[f.name]
  assert isinstance(adam, base) and isinstance(default, base)
  if f.name == "tf_keras":
    assert not isinstance(adam, tf_keras.optimizers.legacy.Optimizer)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_variable_claimed_twice_raises_naming_both(f):
  a, b = f.opt.SGD(0.1, name="opt_a"), f.opt.Adam(name="opt_b")
  w = f.variable([1.0], "shared")
  with pytest.raises(ValueError, match=r"'shared'.*opt_a.*opt_b"):
    f.Composite([(a, [w]), (b, [w])])
  # Callables are checked when the router first sees its variables.
  composite = f.Composite([(a, lambda: [w]), (b, lambda: [w])])
  with pytest.raises(ValueError, match=r"'shared'.*opt_a.*opt_b"):
    _step(composite, [w], _sum_loss([w]))
  model, (first, second, _) = _dense_model(f)
  multi = f.Multi([f.Blocks(a, first), f.Blocks(b, r"first/.*")])
  with pytest.raises(ValueError, match=r"first/kernel.*opt_a.*opt_b"):
    _step(multi, model.trainable_variables, _sum_loss(model.trainable_variables))
  multi = f.Multi([f.Blocks(a, first)])
  with pytest.raises(ValueError, match=r"first/kernel.*opt_a.*opt_c"):
    multi.add(f.Blocks(f.opt.SGD(name="opt_c"), first.kernel))
  assert len(multi.optimizers) == 2  # The failed add() left nothing behind.


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_update_overrides_and_unresolved_overlap_raises(f):
  model, (first, second, third) = _dense_model(f)
  a, b, c, d = (f.opt.SGD(lr, name=n) for lr, n in ((0.1, "a"), (0.2, "b"), (0.3, "c"), (0.4, "d")))
  multi = f.Multi([f.Blocks(a, [first, second])], default_optimizer=f.opt.SGD(0.5))
  multi.update(f.Blocks(b, second))  # Overrides a for `second`.
  multi.update(f.Blocks(c, second))  # The same block again: replaces the earlier update.
  multi.update(f.Blocks("sgd", third))  # A string in update() resolves too (Merlin crashed).
  with pytest.raises(ValueError, match=r"second/kernel.*'c'.*'d'.*update"):
    multi.update(f.Blocks(d, second.kernel))  # Overlaps update(c, second): ambiguous.
  got = _lr_signature(f, model, multi, steps=1)
  assert got["first/kernel"] == 0.1 and got["second/kernel"] == 0.3
  assert got["second/bias"] == 0.3 and got["third/kernel"] == 0.01  # SGD() default lr


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_unclaimed_variable(f):
  w1, w2 = f.variable([1.0], "w1"), f.variable([2.0], "w2")
  composite = f.Composite([(f.opt.SGD(0.1), lambda: [w1])])
  with pytest.raises(ValueError, match=r"'w2' is not handled by any optimizer"):
    _step(composite, [w1, w2], _sum_loss([w1, w2]))
  # An unclaimed variable without a gradient is left alone.
  composite = f.Composite([(f.opt.SGD(0.1), lambda: [w1])])
  composite.apply_gradients([(tf.constant([1.0]), w1), (None, w2)])
  np.testing.assert_allclose([w1.numpy(), w2.numpy()], [[0.9], [2.0]], rtol=1e-6)
  with pytest.raises(ValueError, match=r"'w2' is not handled by any optimizer"):
    composite.apply_gradients([(tf.constant([1.0]), w1), (tf.constant([1.0]), w2)])
  w1.assign([1.0])
  # A claimed variable without a gradient is fine; so is building with extra variables.
  w3 = f.variable([3.0], "w3")
  composite = f.Composite([(f.opt.SGD(0.1), lambda: [w1]), (f.opt.SGD(0.2), lambda: [w3])])
  _step(composite, [w1], _sum_loss([w1]))
  np.testing.assert_allclose(w3.numpy(), [3.0])
  multi = f.Multi([f.Blocks(f.opt.SGD(0.1), [w1])], default_optimizer=f.opt.SGD(0.25))
  _step(multi, [w1, w2], _sum_loss([w1, w2]))
  np.testing.assert_allclose(w2.numpy(), [1.75], rtol=1e-6)


OTHER = {
    "keras3": lambda: tf_keras.optimizers.legacy.Adam(),
    "tf_keras": lambda: keras.optimizers.Adam(), "legacy": lambda: keras.optimizers.Adam()
}


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_mixing_flavors_raises_type_error(f):
  w = f.variable([1.0], "w")
  with pytest.raises(TypeError, match="cannot be mixed"):
    f.Composite([(OTHER[f.name](), lambda: [w])])
  with pytest.raises(TypeError, match="cannot be mixed"):
    f.Multi([f.Blocks(f.opt.SGD(), [w])], default_optimizer=OTHER[f.name]())
  multi = f.Multi([f.Blocks(f.opt.SGD(), [w])])
  with pytest.raises(TypeError, match="cannot be mixed"):
    multi.add(f.Blocks(OTHER[f.name](), lambda: []))
  with pytest.raises(ValueError, match="can't be empty"):
    f.Composite([])
  with pytest.raises(ValueError, match="can't be empty"):
    f.Multi([])


# ----------------------------------------------------------------------------- iterations


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_iterations_counts_steps_keras3_and_follows_first_optimizer_in_tf_keras(f):
  # Keras 3: the base class owns a counter, one per apply_gradients. tf_keras
  # flavors: no counter of their own, `iterations` is the first sub-optimizer's
  # (as TFRS' and Merlin's routers), so a checkpoint has exactly theirs.
  w1, w2 = f.variable([1.0], "w1"), f.variable([2.0], "w2")
  first, second = f.opt.Adam(0.1), f.opt.Adagrad(0.1)
  composite = f.Composite([(first, lambda: [w1]), (second, lambda: [w2])])
  for _ in range(3):
    _step(composite, [w2], _sum_loss([w2]))
  assert int(composite.iterations.numpy()) == (3 if f is K3 else 0)
  assert int(second.iterations.numpy()) == 3 and int(first.iterations.numpy()) == 0
  if f is not K3:
    assert composite.iterations is first.iterations
  np.testing.assert_allclose(w1.numpy(), [1.0])

  @tf.function
  def step():
    _step(composite, [w1, w2], _sum_loss([w1, w2]))

  step()
  step()
  assert int(composite.iterations.numpy()) == (5 if f is K3 else 2)
  assert int(first.iterations.numpy()) == 2 and int(second.iterations.numpy()) == 5


# ----------------------------------------------------------------------------- state


def _tower_model(f, seed=3):
  """Two towers: embeddings (sparse gradients) and an MLP."""
  lib = f.lib
  rng = np.random.default_rng(seed)
  users, items = lib.Input((1,), dtype="int32"), lib.Input((1,), dtype="int32")
  user_emb = lib.layers.Embedding(20, 4, name="user_emb")
  item_emb = lib.layers.Embedding(30, 4, name="item_emb")
  flat = lib.layers.Flatten()
  hidden = lib.layers.Dense(8, activation="relu", name="hidden")
  out = lib.layers.Dense(1, name="out")
  x = lib.layers.Concatenate()([flat(user_emb(users)), flat(item_emb(items))])
  model = lib.Model([users, items], out(hidden(x)))
  model.set_weights([rng.normal(0, 0.3, w.shape).astype(np.float32) for w in model.get_weights()])
  return model, (user_emb, item_emb)


def _tower_data(steps, batch=16, seed=5):
  rng = np.random.default_rng(seed)
  u = rng.integers(0, 20, (steps * batch, 1)).astype(np.int32)
  i = rng.integers(0, 30, (steps * batch, 1)).astype(np.int32)
  y = ((u[:, 0] % 3 + i[:, 0] % 2) / 3.0).reshape(-1, 1).astype(np.float32)
  return [u, i], y


def _tower_router(f, embeddings, sparse=None, default=None):
  sparse = sparse or f.ours.LazyAdam(0.05)
  default = default or f.ours.ClippyAdagrad(0.1)
  # tf_keras flavors save the default optimizer's state only when asked (Merlin never does).
  kwargs = {} if f is K3 else {"save_default_optimizer": True}
  return f.Multi([f.Blocks(sparse, list(embeddings))], default_optimizer=default, **kwargs)


def _train_loop(model, opt, data, start, stop, batch=16):
  (u, i), y = data
  variables = model.trainable_variables
  for s in range(start, stop):
    sl = slice(s * batch, (s + 1) * batch)
    with tf.GradientTape() as tape:
      pred = model([u[sl], i[sl]])
      loss = tf.reduce_mean(tf.square(pred - y[sl]))
    grads = tape.gradient(loss, variables)
    opt.apply_gradients(zip(grads, variables))


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_checkpoint_round_trip_mid_training(f, tmp_path):
  data = _tower_data(6)
  model, embs = _tower_model(f)
  opt = _tower_router(f, embs)
  _train_loop(model, opt, data, 0, 3)
  path = tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt"))
  _train_loop(model, opt, data, 3, 6)
  keys = [name for name, _ in tf.train.list_variables(path)]
  assert any(
      "optimizer/default_optimizer/" in k or "OPTIMIZER_SLOT/optimizer/default_optimizer" in k
      for k in keys), keys
  assert any("Optimizer0" in k for k in keys)

  model2, embs2 = _tower_model(f, seed=11)  # Different initial values.
  opt2 = _tower_router(f, embs2)
  status = tf.train.Checkpoint(model=model2, optimizer=opt2).read(path)
  if f.name != "legacy":  # Legacy slots are created (and restored) at the first step.
    opt2.build(model2.trainable_variables)
    status.assert_consumed()
  _train_loop(model2, opt2, data, 3, 6)
  if f.name == "legacy":
    status.assert_consumed()
  for a, b in zip(model.get_weights(), model2.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert int(opt2.iterations.numpy()) == 6
  for sub, sub2 in zip(opt.optimizers, opt2.optimizers):
    # Legacy slots restored at the first step are named without the router's scope.
    def strip(name):
      return re.sub(r"^MultiOptimizer/(Optimizer\d+|default_optimizer)/", "", name)

    state = {strip(v.name): v.numpy() for v in f.variables(sub)}
    state2 = {strip(v.name): v.numpy() for v in f.variables(sub2)}
    assert sorted(state) == sorted(state2) and len(state) > 1
    for name in state:
      np.testing.assert_allclose(state[name], state2[name], rtol=1e-6, atol=1e-7, err_msg=name)


def _fit(model, data, epochs=1, batch=16):
  x, y = data
  model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)


# Each flavor with each model file format whose save keeps optimizer state (the
# flavors' model_file_formats in test_optimizers.py).
@pytest.mark.parametrize("f,file_format", [(K3, "keras"), (TFK, "keras"), (TFK, "h5"), (LEG, "h5")],
                         ids=str)
def test_model_file_round_trip_with_optimizer_state(f, file_format, tmp_path):
  data = _tower_data(4)
  model, embs = _tower_model(f)
  model.compile(optimizer=_tower_router(f, embs), loss="mse")
  _fit(model, data)
  path = str(tmp_path / f"model.{file_format}")
  model.save(path)
  loaded = f.lib.models.load_model(path)
  assert type(loaded.optimizer) is type(model.optimizer)
  assert int(loaded.optimizer.iterations.numpy()) == 4
  assert len(loaded.optimizer.optimizers) == 2
  for a, b in zip(f.variables(model.optimizer), f.variables(loaded.optimizer)):
    np.testing.assert_allclose(a.numpy(), b.numpy())
  _fit(model, data)
  _fit(loaded, data)
  for a, b in zip(model.get_weights(), loaded.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_config_round_trip(f):
  model, (first, second, third) = _dense_model(f)
  shared = f.opt.Adam(0.02, name="shared")
  multi = f.Multi([
      f.Blocks(shared, first),
      f.Blocks(f.opt.SGD(0.3), r"second/.*"),
      f.Blocks(shared, lambda: [third.bias])
  ], default_optimizer=f.opt.Adagrad(0.4))
  multi.update(f.Blocks(f.opt.SGD(0.7), first.bias))
  config = multi.get_config()
  restored = type(multi).from_config(config)
  assert restored.get_config() == config
  assert [type(o) for o in restored.optimizers] == [type(o) for o in multi.optimizers]
  assert [o.get_config() for o in restored.optimizers] == [o.get_config() for o in multi.optimizers]
  assert len(restored.optimizers) == 4  # `shared` stays one optimizer.
  # The restored router routes the same model's variables the same way.
  model2, _ = _dense_model(f)
  model2.set_weights(model.get_weights())
  variables, variables2 = model.trainable_variables, model2.trainable_variables
  for _ in range(2):
    _step(multi, variables, _quadratic(variables))
    _step(restored, variables2, _quadratic(variables2))
  for a, b in zip(_values(variables), _values(variables2)):
    np.testing.assert_allclose(a, b, rtol=1e-6)

  w = [f.variable([1.0], "cw0"), f.variable([2.0], "cw1")]
  composite = f.Composite([(f.opt.SGD(0.1), lambda: w[:1]), (f.opt.Adam(0.1), lambda: w[1:])])
  _step(composite, w, _sum_loss(w))
  config = composite.get_config()
  assert config["entries"][0]["blocks"] == ["cw0"]
  restored = type(composite).from_config(config)
  assert restored.get_config() == config
  serialize = keras.optimizers.serialize if f.lib is keras else tf_keras.optimizers.serialize
  deserialize = (
      keras.optimizers.deserialize if f.lib is keras else
      lambda c: tf_keras.optimizers.deserialize(c, use_legacy_optimizer=f.name == "legacy"))
  again = deserialize(serialize(multi))
  assert type(again) is type(multi) and again.get_config() == multi.get_config()


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_model_fit_same_as_custom_loop(f):
  data = _tower_data(5)
  model, embs = _tower_model(f)
  model.compile(optimizer=_tower_router(f, embs), loss="mse")
  _fit(model, data)
  assert int(model.optimizer.iterations.numpy()) == 5
  assert [int(o.iterations.numpy()) for o in model.optimizer.optimizers] == [5, 5]
  loop_model, loop_embs = _tower_model(f)
  _train_loop(loop_model, _tower_router(f, loop_embs), data, 0, 5)
  for a, b in zip(model.get_weights(), loop_model.get_weights()):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_two_tower_same_weights_in_all_flavors():
  data = _tower_data(10)
  weights = {}
  for f in FLAVORS:
    model, embs = _tower_model(f)
    router_ = f.Multi([f.Blocks(f.ours.LazyAdam(0.05), list(embs))],
                      default_optimizer=f.ours.ClippyAdagrad(0.1))
    model.compile(optimizer=router_, loss="mse")
    _fit(model, data)
    assert int(router_.iterations.numpy()) == 10
    weights[f.name] = model.get_weights()
  for name in ("tf_keras", "legacy"):
    for a, b in zip(weights["keras3"], weights[name]):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
  # The embeddings really were trained lazily: rows never looked up are unchanged.
  start, _ = _tower_model(K3)
  (u, _), _ = data
  untouched = sorted(set(range(20)) - set(u[:, 0].tolist()))
  if untouched:
    np.testing.assert_array_equal(weights["keras3"][0][untouched],
                                  start.get_weights()[0][untouched])


def test_our_optimizers_inside_keras_multi_optimizer():
  data = _tower_data(4)
  model, embs = _tower_model(K3)
  ours = K3.ours.LazyAdam(0.05)
  optimizer_map = keras.optimizers.OptimizerMap(default_optimizer=K3.ours.ClippyAdagrad(0.1))
  optimizer_map[".*_emb/.*"] = ours
  model.compile(optimizer=keras.optimizers.MultiOptimizer(optimizer_map), loss="mse")
  _fit(model, data)
  assert int(ours.iterations.numpy()) == 4
  ref_model, ref_embs = _tower_model(K3)
  ref_model.compile(optimizer=_tower_router(K3, ref_embs), loss="mse")
  _fit(ref_model, data)
  for a, b in zip(model.get_weights(), ref_model.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_mixed_precision_loss_scale_optimizer_around_router():
  data = _tower_data(3)
  try:
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    model, embs = _tower_model(K3)
    opt = _tower_router(K3, embs)
    model.compile(optimizer=opt, loss="mse")  # Keras wraps it in a LossScaleOptimizer.
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    _fit(model, data)
  finally:
    keras.mixed_precision.set_dtype_policy("float32")
  assert int(opt.iterations.numpy()) == 3
  assert [int(o.iterations.numpy()) for o in opt.optimizers] == [3, 3]
  try:
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    model, embs = _tower_model(TFK)
    opt = _tower_router(TFK, embs)
    model.compile(optimizer=tf_keras.mixed_precision.LossScaleOptimizer(opt), loss="mse")
    _fit(model, data)
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  assert [int(o.iterations.numpy()) for o in opt.optimizers] == [3, 3]
  assert all(np.isfinite(w).all() for w in model.get_weights())


_MIRRORED_SCRIPT = r"""
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, tf_keras
import test_router as t

for f in t.FLAVORS:
  results = []
  mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  for strategy in (tf.distribute.get_strategy(), mirrored):
    with strategy.scope():
      model, embs = t._tower_model(f)
      opt = t._tower_router(f, embs)
      model.compile(optimizer=opt, loss="mse")
    t._fit(model, t._tower_data(4))
    results.append((model.get_weights(), int(opt.iterations.numpy()),
                    [int(o.iterations.numpy()) for o in opt.optimizers]))
  (single, it1, sub1), (mirrored, it2, sub2) = results
  assert it1 == it2 == 4 and sub1 == sub2 == [4, 4], (f, it1, it2, sub1, sub2)
  for a, b in zip(single, mirrored):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f.name)
  print("OK", f.name)
"""


@pytest.mark.slow
def test_mirrored_strategy_matches_single_device():
  proc = common.run_python(_MIRRORED_SCRIPT, cwd=os.path.dirname(os.path.abspath(__file__)),
                           timeout=300)
  assert proc.stdout.count("OK") == 3, proc.stdout


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_learning_rate_setter_and_add_after_build(f):
  model, (first, second, third) = _dense_model(f)
  a, b = f.opt.SGD(0.1), f.opt.SGD(0.2)
  multi = f.Multi([f.Blocks(a, first)], default_optimizer=b)
  multi.learning_rate = [0.3, 0.4]
  assert [f.lr(o) for o in multi.optimizers] == pytest.approx([0.3, 0.4])
  multi.learning_rate = 0.25
  assert [f.lr(o) for o in multi.optimizers] == pytest.approx([0.25, 0.25])
  with pytest.raises(ValueError, match="Expected 2 learning rates"):
    multi.learning_rate = [0.1, 0.2, 0.3]
  _lr_signature(f, model, multi, steps=1)  # Builds: first -> a, the rest -> b.
  # A fresh optimizer may take variables after the first step...
  multi.add(f.Blocks(f.opt.SGD(0.5), third))
  got = _lr_signature(f, model, multi, steps=1)
  assert got["third/kernel"] == 0.5 and got["first/kernel"] == 0.25
  assert got["second/kernel"] == 0.25
  # ...but a built Keras 3 / tf_keras optimizer cannot take new ones.
  if f.name == "legacy":
    multi.learning_rate = [0.6, 0.5, 0.25]  # `optimizers`: a, the added one, the default.
    multi.update(f.Blocks(a, second))
    assert _lr_signature(f, model, multi, steps=1)["second/kernel"] == 0.6
  else:
    with pytest.raises(ValueError, match="already built"):
      multi.update(f.Blocks(a, second))
    assert len(multi.optimizers) == 3


def test_merlin_multi_optimizer_config_loads_into_legacy_router():
  # What Merlin Models' MultiOptimizer.get_config() writes (blocks are serialized layers).
  adam = {
      "class_name": "Adam", "config": {"name": "Adam", "learning_rate": 0.01},
      "use_legacy_optimizer": True
  }
  sgd = {"class_name": "SGD", "config": {"name": "SGD", "learning_rate": 0.3}}
  merlin = {
      "name": "MultiOptimizer",
      "default_optimizer": {"class_name": "SGD", "config": {"name": "SGD", "learning_rate": 0.5}},
      "optimizers_and_blocks": [[adam, [{"class_name": "Dense", "config": {"name": "first"}}]],
                                [sgd, [{"class_name": "Dense", "config": {"name": "second"}}]]],
      "update_optimizers_and_blocks":
          [[{"class_name": "SGD", "config": {"name": "SGD", "learning_rate": 0.2}},
            [{"class_name": "Dense", "config": {"name": "second"}}]]],
  }
  cls = tf_keras.utils.get_registered_object("merlin.models>MultiOptimizer")
  assert cls is LEG.Multi
  multi = cls.from_config(merlin)
  assert [type(o).__name__ for o in multi.optimizers] == ["Adam", "SGD", "SGD", "SGD"]
  model, _ = _dense_model(LEG)
  got = _lr_signature(LEG, model, multi, steps=1)
  assert got["second/kernel"] == 0.2 and got["third/kernel"] == 0.5
  assert got["first/kernel"] != 0.5  # Adam's step, not the default's.
  assert keras.saving.get_registered_object("merlin.models>MultiOptimizer") is K3.Multi


# ----------------------------------------------------------------------------- no silent routing


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_block_that_claims_nothing_raises_in_multi_and_warns_in_composite(f):
  model, (first, _, _) = _dense_model(f)
  variables = model.trainable_variables
  # MultiOptimizer: the variables meant for it would silently go to the default.
  multi = f.Multi([f.Blocks(f.opt.SGD(0.1), first), f.Blocks(f.opt.SGD(0.2), r"secnd/.*")])
  with pytest.raises(ValueError, match=r"pattern 'secnd/\.\*'.*claims no variable.*default"):
    _step(multi, variables, _sum_loss(variables))
  unbuilt = f.lib.layers.Dense(3, name="never_called")
  multi = f.Multi([f.Blocks(f.opt.SGD(0.1), [first, unbuilt])])
  with pytest.raises(ValueError, match="layer 'never_called'.*claims no variable"):
    _step(multi, variables, _sum_loss(variables))
  # CompositeOptimizer: an unclaimed variable already raises; an empty block warns.
  composite = f.Composite([(f.opt.SGD(0.1), lambda: variables), (f.opt.SGD(0.2), lambda: [])])
  with pytest.warns(UserWarning, match="claims no variable: it trains nothing"):
    _step(composite, variables, _sum_loss(variables))


# ----------------------------------------------------------------------------- Merlin's API


@pytest.mark.parametrize("f", FLAVORS, ids=repr)
def test_multi_optimizer_api_and_config_as_merlin(f):
  lr = {"first": 0.1, "second": 0.2, "default": 0.5, "update": 0.7}

  def router(first, second, third, by_keyword):
    pairs = [f.Blocks(f.opt.SGD(lr["first"]), first), f.Blocks("sgd", [second])]
    update = [f.Blocks(f.opt.SGD(lr["update"]), third)]
    if by_keyword:  # As Merlin's from_config calls it.
      return f.Multi(optimizers_and_blocks=pairs, default_optimizer=f.opt.SGD(lr["default"]),
                     update_optimizers_and_blocks=update)
    multi = f.Multi(pairs, default_optimizer=f.opt.SGD(lr["default"]))
    multi.update(update[0])
    return multi

  # Blocks that are layers not built yet, as Merlin builds a router before its model.
  layers = [f.lib.layers.Dense(2, name=n) for n in ("first", "second", "third")]
  multi = router(*layers, by_keyword=True)
  pairs = multi.optimizers_and_blocks
  assert [type(p) for p in pairs] == [f.Blocks, f.Blocks]
  assert [p.blocks for p in pairs] == [layers[0], [layers[1]]]
  assert pairs[1].optimizer is multi.optimizers[1]  # The string, resolved.
  assert [p.blocks for p in multi.update_optimizers_and_blocks] == [layers[2]]
  config = multi.get_config()  # Needs no variables.
  assert [e["blocks"] for e in config["entries"]] == [[{"layer": "first"}], [{"layer": "second"}],
                                                      [{"layer": "third"}]]
  # Merlin's OptimizerBlocks format: (serialized optimizer, [serialized layer, ...]).
  optimizer_config, block_configs = pairs[0].get_config()
  assert block_configs[0]["config"]["name"] == "first"
  again = f.Blocks.from_config(pairs[0].get_config())
  assert type(again.optimizer) is type(pairs[0].optimizer)
  assert again.optimizer.get_config() == pairs[0].optimizer.get_config()
  assert again.blocks[0].name == "first" and again.get_config()[0] == optimizer_config

  # The router, the keyword form, update(), and the config loaded for a model built
  # from those layers all route alike.
  model, built = _dense_model(f)
  expected = {
      "first/kernel": lr["first"], "first/bias": lr["first"], "second/kernel": 0.01,
      "second/bias": 0.01, "third/kernel": lr["update"], "third/bias": lr["update"]
  }
  for make in (lambda: router(*built, by_keyword=True), lambda: router(*built, by_keyword=False),
               lambda: type(multi).from_config(config)):
    model.set_weights([np.zeros_like(w) for w in model.get_weights()])
    assert _lr_signature(f, model, make(), steps=1) == expected


# ----------------------------------------------------------------------------- both tf_keras APIs


@pytest.mark.parametrize("f", [TFK, LEG], ids=repr)
def test_tf_keras_routers_drive_both_tf_keras_apis(f, tmp_path):
  # A legacy optimizer (built on demand) next to a tf_keras one (built once), as TFRS allows.
  def make():
    model, (first, second, third) = _dense_model(f)
    model.set_weights([np.full(w.shape, 0.5, np.float32) for w in model.get_weights()])
    router_ = f.Multi([
        f.Blocks(tf_keras.optimizers.legacy.Adam(0.05), first),
        f.Blocks(tf_keras.optimizers.Adagrad(0.2), second)
    ], default_optimizer=tf_keras.optimizers.legacy.RMSprop(0.01))
    return model, router_

  model, router_ = make()
  variables = model.trainable_variables
  alone = [tf.Variable(v.numpy()) for v in variables]
  refs = [
      tf_keras.optimizers.legacy.Adam(0.05),
      tf_keras.optimizers.Adagrad(0.2),
      tf_keras.optimizers.legacy.RMSprop(0.01)
  ]
  for _ in range(3):
    _step(router_, variables, _quadratic(variables))
    with tf.GradientTape() as tape:
      loss = _quadratic(alone)()
    grads = tape.gradient(loss, alone)
    for i, ref in enumerate(refs):
      ref.apply_gradients(zip(grads[2 * i:2 * i + 2], alone[2 * i:2 * i + 2]))
  for got, want in zip(_values(variables), _values(alone)):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  adam, adagrad, _ = router_.optimizers
  assert router_.iterations is adam.iterations and int(adagrad.iterations.numpy()) == 3
  rmsprop = router_.default_optimizer
  # Every sub-optimizer's state, the default optimizer's included.
  assert len(f.variables(router_)) == (len(adam.variables()) + len(adagrad.variables) +
                                       len(rmsprop.variables()))

  path = tf.train.Checkpoint(model=model, optimizer=router_).write(str(tmp_path / "ckpt"))
  model2, router2 = make()
  status = tf.train.Checkpoint(model=model2, optimizer=router2).read(path)
  _step(router2, model2.trainable_variables, _quadratic(model2.trainable_variables))
  status.assert_consumed()
  _step(router_, variables, _quadratic(variables))
  assert int(router2.iterations.numpy()) == 4

  def state(router):
    # Per sub-optimizer, in checkpoint order; slots restored on `read` are created first and
    # named without the router's scope.
    return [{
        re.sub(r"^MultiOptimizer/(Optimizer\d+|default_optimizer)/", "", v.name): v.numpy()
        for v in f.variables(opt)
    }
            for opt in router._saved_optimizers()]

  before, after = state(router_), state(router2)
  # 5 (Adam) + 3 (Adagrad) + 3 (the default RMSprop, resumed too)
  assert [len(s) for s in before] == [len(s) for s in after] == [5, 3, 3]
  for want, got in zip(before, after):
    assert sorted(want) == sorted(got)
    for name, value in want.items():
      np.testing.assert_allclose(value, got[name], rtol=1e-6, atol=1e-7, err_msg=name)
