"""A training step with our optimizers survives tf.saved_model (docs/design.md, "Production").

This process builds an Embedding model, wraps it in a `tf.Module` whose
`tf.function` train step applies `LazyAdam` (or `ClippyAdagrad`) of one flavor
(`tf_opt_ops.keras` with a Keras 3 model; `tf_opt_ops.tf_keras` and
`tf_opt_ops.legacy` with a tf_keras model), trains a few steps, saves it with
`tf.saved_model.save`, and goes on training. Fresh subprocesses (this file run
as a script) then:

- `continue`: import tf_opt_ops, load the SavedModel and run the same steps;
  the weights and optimizer state equal this process's;
- `serve`: never import tf_opt_ops, load the inference-only export (lookup and
  forward pass) and serve it; the scores equal this process's;
- `no_library`: never import tf_opt_ops, load the training SavedModel; it fails
  naming the missing op with its `TfOptOps>` prefix.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import common

pytestmark = pytest.mark.slow

ROOT = common.ROOT
PACKAGE_ROOT = os.path.join(ROOT, "python")
FLAVORS = ["keras", "tf_keras", "legacy"]
OPTS = ["LazyAdam", "ClippyAdagrad"]
CASES = [(flavor, opt) for flavor in FLAVORS for opt in OPTS]
ROWS, USED, DIM, BATCH = 40, 30, 4, 16
SAVED_STEPS, MORE_STEPS = 3, 4
OPS = {  # the fused ops each optimizer's train step runs (dense Adam is standard ops)
    "LazyAdam": {"TfOptOps>ResourceSparseApplyLazyAdam"},
    "ClippyAdagrad": {"TfOptOps>ResourceSparseApplyClippyAdagrad",
                      "TfOptOps>ResourceApplyClippyAdagrad"},
}


def batches(first, count):
  """Deterministic batches `first .. first + count - 1`, duplicate ids in each."""
  out = []
  for step in range(first, first + count):
    rng = np.random.default_rng(step)
    ids = rng.integers(0, USED, size=(BATCH, 3)).astype(np.int32)
    ids[1] = ids[0]
    labels = rng.normal(size=(BATCH, 1)).astype(np.float32)
    out.append((ids, labels))
  return out


SERVE_IDS = np.array([[0, 1, 2], [3, 3, 3], [ROWS - 1, 5, 7]], np.int32)


def make_trainer(flavor, opt_name):
  """The training and serving modules (this process only: it imports tf_opt_ops)."""
  import importlib

  import tensorflow as tf

  k = importlib.import_module("keras" if flavor == "keras" else "tf_keras")
  module = importlib.import_module(f"tf_opt_ops.{flavor}")
  k.utils.set_random_seed(0)
  model = k.Sequential([
      k.Input(shape=(3,), dtype="int32"),
      k.layers.Embedding(ROWS, DIM, name="emb"),
      k.layers.Flatten(),
      k.layers.Dense(1, name="out"),
  ])
  if opt_name == "LazyAdam":
    optimizer = module.LazyAdam(learning_rate=0.05)
  else:  # clipping active, and the factors exported (saved, restored) too
    optimizer = module.ClippyAdagrad(learning_rate=0.3, export_clipping_factors=True)

  class Trainer(tf.Module):

    def __init__(self):
      super().__init__()
      self.model = model
      self.optimizer = optimizer
      if flavor != "legacy":  # OptimizerV2 creates its slots in the first step
        optimizer.build(model.trainable_variables)

    @tf.function(
        input_signature=[tf.TensorSpec([None, 3], tf.int32),
                         tf.TensorSpec([None, 1], tf.float32)])
    def train(self, ids, labels):
      variables = self.model.trainable_variables
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(self.model(ids) - labels))
      self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
      return loss

    @tf.function(input_signature=[])
    def state(self):
      """Every model and optimizer variable, by a stable key."""
      out = {f"model_{i}": tf.convert_to_tensor(v) for i, v in enumerate(self.model.weights)}
      out.update({
          f"opt_{i}": tf.convert_to_tensor(v)
          for i, v in enumerate(optimizer_variables(self.optimizer))
      })
      return out

  class Serving(tf.Module):
    """Inference only: the lookup and forward pass, no optimizer."""

    def __init__(self):
      super().__init__()
      self.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.int32, name="ids")])
    def serve(self, ids):
      return {"score": self.model(ids)}

  return Trainer(), Serving()


def optimizer_variables(optimizer):
  variables = optimizer.variables
  return variables() if callable(variables) else variables


def train(trainer, data):
  return [float(trainer.train(ids, labels).numpy()) for ids, labels in data]


def numpy_state(trainer):
  return {k: np.asarray(v.numpy()) for k, v in trainer.state().items()}


# ----------------------------------------------------------------------------- subprocess roles


def role_continue(paths):
  """Loads each training SavedModel after `import tf_opt_ops` and trains MORE_STEPS on."""
  sys.path.insert(0, PACKAGE_ROOT)
  import tensorflow as tf

  import tf_opt_ops  # noqa: F401

  out = {}
  for case, path in paths.items():
    loaded = tf.saved_model.load(path)
    before = {k: v.numpy().tolist() for k, v in loaded.state().items()}
    losses = train(loaded, batches(SAVED_STEPS, MORE_STEPS))
    after = {k: v.numpy().tolist() for k, v in loaded.state().items()}
    out[case] = {"before": before, "after": after, "losses": losses}
  return out


def role_serve(path):
  """Serves the inference export without tf_opt_ops anywhere in the process."""
  import tensorflow as tf
  loaded = tf.saved_model.load(path)
  scores = loaded.signatures["serving_default"](ids=tf.constant(SERVE_IDS))["score"]
  assert "tf_opt_ops" not in sys.modules
  return {"score": scores.numpy().tolist(), "tf_opt_ops_loaded": "tf_opt_ops" in sys.modules}


def role_no_library(paths):
  """Loads each training SavedModel without tf_opt_ops: the error of each."""
  import tensorflow as tf
  out = {}
  for case, path in paths.items():
    try:
      tf.saved_model.load(path)
      out[case] = {"error": None}
    except Exception as e:
      out[case] = {"type": type(e).__name__, "error": str(e)}
  out["tf_opt_ops_loaded"] = "tf_opt_ops" in sys.modules
  return out


def spawn(role, arg):
  env = common.python_env(package=False)  # no route to tf_opt_ops unless the role adds it
  env.pop("TF_USE_LEGACY_KERAS", None)
  return subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), role,
       json.dumps(arg)], env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True)


def collect(proc):
  stdout, stderr = proc.communicate(timeout=300)
  assert proc.returncode == 0, stderr[-4000:]
  return json.loads(stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Trains and saves here, then runs the three subprocesses side by side."""
  tmp = tmp_path_factory.mktemp("saved_model")
  import tensorflow as tf

  here, train_paths = {}, {}
  serve_path = None
  for flavor, opt_name in CASES:
    case = f"{flavor}/{opt_name}"
    trainer, serving = make_trainer(flavor, opt_name)
    train(trainer, batches(0, SAVED_STEPS))
    saved_state = numpy_state(trainer)
    train_paths[case] = str(tmp / f"train_{flavor}_{opt_name}")
    tf.saved_model.save(trainer, train_paths[case])
    if serve_path is None:  # the inference-only export of the Keras 3 LazyAdam model
      serve_path = str(tmp / "serve")
      tf.saved_model.save(serving, serve_path, signatures={"serving_default": serving.serve})
      served_here = serving.serve(tf.constant(SERVE_IDS))["score"].numpy()
    losses = train(trainer, batches(SAVED_STEPS, MORE_STEPS))  # this process goes on
    here[case] = {
        "saved": saved_state, "after": numpy_state(trainer), "losses": losses,
        "optimizer": trainer.optimizer
    }
  procs = {
      "continue": spawn("continue", train_paths), "serve": spawn("serve", serve_path),
      "no_library": spawn("no_library", train_paths)
  }
  there = {role: collect(proc) for role, proc in procs.items()}
  return {"here": here, "there": there, "served_here": served_here}


@pytest.mark.parametrize("flavor,opt_name", CASES)
def test_loaded_training_step_continues_with_the_same_numbers(runs, flavor, opt_name,
                                                              record_property):
  here = runs["here"][f"{flavor}/{opt_name}"]
  there = runs["there"]["continue"][f"{flavor}/{opt_name}"]
  assert set(there["after"]) == set(here["after"])
  # The optimizer's state came back: iteration counter, slots (and clipping factors).
  n_model = sum(k.startswith("model_") for k in here["after"])
  n_opt = sum(k.startswith("opt_") for k in here["after"])
  assert n_model == 3  # embeddings, dense kernel, dense bias
  # The iteration counter (and Keras 3's learning_rate), then per model variable
  # m and v, or the accumulator and the clipping factor.
  own = 2 if flavor == "keras" else 1
  assert n_opt == len(optimizer_variables(here["optimizer"])) == own + 2 * n_model
  for key, value in here["saved"].items():
    np.testing.assert_array_equal(np.asarray(there["before"][key], value.dtype), value,
                                  err_msg=f"{key} as loaded")
  iteration = [
      k for k in here["after"]
      if here["after"][k].shape == () and int(here["after"][k]) == SAVED_STEPS + MORE_STEPS
  ]
  assert iteration, "no iteration counter at SAVED_STEPS + MORE_STEPS"
  worst = 0.0
  for key, value in here["after"].items():
    loaded = np.asarray(there["after"][key], value.dtype)
    worst = max(worst, float(np.abs(loaded.astype(np.float64) - value).max()))
    np.testing.assert_allclose(loaded, value, rtol=0, atol=1e-6, err_msg=key)
  record_property("max_abs_diff", worst)
  np.testing.assert_allclose(there["losses"], here["losses"], rtol=1e-6)
  # The steps did train, lazily: rows outside the data never moved.
  table_saved, table_after = here["saved"]["model_0"], here["after"]["model_0"]
  assert table_after.shape == (ROWS, DIM)
  assert np.abs(table_after[:USED] - table_saved[:USED]).max() > 1e-4
  np.testing.assert_array_equal(table_after[USED:], table_saved[USED:])
  if opt_name == "ClippyAdagrad":
    optimizer = here["optimizer"]
    factors = [float(f.numpy()) for f in optimizer.clipping_factors]
    assert len(factors) == 3 and min(factors) < 1.0  # clipping was active
    # The factors are among the state compared above: they came back as saved and
    # went on updating identically (and did change in the further steps).
    ids = [id(f) for f in optimizer.clipping_factors]
    keys = [f"opt_{i}" for i, v in enumerate(optimizer_variables(optimizer)) if id(v) in ids]
    assert len(keys) == 3
    for key in keys:
      assert here["saved"][key].shape == ()
      assert float(there["before"][key]) == float(here["saved"][key]), key
      np.testing.assert_allclose(float(there["after"][key]), float(here["after"][key]), rtol=0,
                                 atol=1e-6, err_msg=key)
    assert [float(here["after"][k]) for k in keys] == factors
    assert any(float(here["after"][k]) != float(here["saved"][k]) for k in keys)


def test_inference_export_serves_without_the_library(runs):
  served = runs["there"]["serve"]
  assert served["tf_opt_ops_loaded"] is False
  np.testing.assert_allclose(np.asarray(served["score"], np.float32), runs["served_here"],
                             rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("flavor,opt_name", CASES)
def test_training_model_without_the_library_names_the_op(runs, flavor, opt_name):
  result = runs["there"]["no_library"]
  assert result["tf_opt_ops_loaded"] is False
  error = result[f"{flavor}/{opt_name}"]["error"]
  assert error is not None, "the training SavedModel loaded without tf_opt_ops"
  missing = [op for op in OPS[opt_name] if f"Op type not registered '{op}'" in error]
  assert missing, error[:2000]


if __name__ == "__main__":
  ROLES = {"continue": role_continue, "serve": role_serve, "no_library": role_no_library}
  print(json.dumps(ROLES[sys.argv[1]](json.loads(sys.argv[2]))))
