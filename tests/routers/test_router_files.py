"""Router model files and configs saved before the routers moved into `tf_opt_ops.routers`
still load, into the same classes, with their weights and state.

tests/routers/data/ holds them (written by data/make_router_files.py at the commit it
names): a trained MultiOptimizer's model file per flavor (`.keras` for Keras 3, `.h5` for
tf_keras), and both routers' `get_config()`. Those tf_keras files were saved when
MultiOptimizer did not save its default optimizer: they load with every variable they hold,
and the default optimizer starting fresh, with a warning.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import common

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def _expected(stem):
  with np.load(os.path.join(DATA, f"{stem}_expected.npz"), allow_pickle=True) as data:
    return list(data["weights"]), list(data["optimizer"])


def _variables(optimizer):
  v = optimizer.variables
  return list(v() if callable(v) else v)


_KERAS3_LOAD = """
import json, sys
import numpy as np, keras
import tf_opt_ops  # registers the names
model = keras.saving.load_model(sys.argv[1])
router = model.optimizer
with np.load(sys.argv[2], allow_pickle=True) as data:
  weights, state = list(data["weights"]), list(data["optimizer"])
got = [np.asarray(v.numpy()) for v in router.variables]
print(json.dumps(dict(
    type=f"{type(router).__module__}.{type(router).__name__}",
    weights=all(np.array_equal(a, b) for a, b in zip(model.get_weights(), weights)),
    state=len(got) == len(state) and all(np.array_equal(a, b) for a, b in zip(got, state)))))
"""


@pytest.mark.slow
def test_keras3_model_file_loads_with_its_router_state():
  # In a fresh process, as a model file is loaded: the routing config names variable paths,
  # which start with the model's name (`sequential`), as Keras 3 named it when it was saved.
  result = common.run_python(None, "-c", _KERAS3_LOAD, os.path.join(DATA, "keras_multi.keras"),
                             os.path.join(DATA, "keras_multi_expected.npz"))
  out = json.loads(result.stdout.strip().splitlines()[-1])
  assert out == {"type": "tf_opt_ops.routers.keras.MultiOptimizer", "weights": True, "state": True}


@pytest.mark.parametrize("flavor", common.TF_KERAS_FLAVORS)
def test_tf_keras_model_file_loads_and_the_default_optimizer_starts_fresh(flavor):
  import tf_keras
  module = common.flavor_module(flavor)
  with pytest.warns(UserWarning, match="holds no state of the default optimizer"):
    model = tf_keras.models.load_model(os.path.join(DATA, f"{flavor}_multi.h5"))
    router = model.optimizer
    rng = np.random.default_rng(0)
    # tf_keras loads optimizer weights at the first step.
    model.train_on_batch(
        rng.integers(0, 50, (4, 2)).astype("int32"),
        rng.normal(size=(4, 1)).astype("float32"))
  assert type(router) is module.MultiOptimizer
  assert [type(o).__name__ for o in router.optimizers] == ["LazyAdam", "ClippyAdagrad"]
  weights, state = _expected(f"{flavor}_multi")
  assert len(model.get_weights()) == len(weights)
  # Everything but the default optimizer's state is as saved (then one step on).
  default_state = _variables(router.default_optimizer)
  saved_state = [v for v in _variables(router) if all(v is not d for d in default_state)]
  assert len(saved_state) == len(state)
  first = router.optimizers[0]
  assert int(first.iterations.numpy()) == int(state[0]) + 1


@pytest.mark.parametrize("kind", ["multi", "composite"])
@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_configs_load_and_route(flavor, kind):
  module = common.flavor_module(flavor)
  with open(os.path.join(DATA, f"{flavor}_{kind}_config.json"), encoding="utf-8") as f:
    config = json.load(f)
  cls = module.MultiOptimizer if kind == "multi" else module.CompositeOptimizer
  router = cls.from_config(config)
  assert [type(o).__name__ for o in router.optimizers] == ["LazyAdam", "ClippyAdagrad"]
  if flavor == "keras":
    import keras as k
  else:
    import tf_keras as k
  model = k.Sequential([
      k.Input(shape=(2,), dtype="int32"),
      k.layers.Embedding(50, 4, name="emb"),
      k.layers.Flatten(),
      k.layers.Dense(1, name="head")
  ])
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(model(np.array([[1, 2]], np.int32))**2)
  variables = model.trainable_variables
  router.apply_gradients(zip(tape.gradient(loss, variables), variables))
  table = router._table
  assert [v.name for v in table.variables_of(router.optimizers[0])] == [variables[0].name]
