"""Training under MirroredStrategy equals one device on the same global batch.

Why: see docs/design.md, "Invariants".

Each flavor (Keras 3, tf_keras, tf_keras legacy) runs in subprocesses of its own:
TensorFlow's logical devices must be configured before TensorFlow initialises
them, which a pytest process has usually done already. The subprocess is this
file run as a script (`python test_distribute.py FLAVOR OPTIMIZERS`); it splits the one
physical CPU into two logical CPUs, trains the same Embedding + Dense model
with `model.fit` on one device and under `MirroredStrategy` over both (the
same global batches, duplicate ids inside each replica's half and across the
two halves), and prints the largest absolute weight and state differences as
one JSON line.
"""

import json
import os
import subprocess
import sys

import pytest

import common

pytestmark = pytest.mark.slow

FLAVORS = ["keras", "tf_keras", "legacy"]
OPTS = ["LazyAdam", "ClippyAdagrad", "CompositeOptimizer"]
# Each group runs in a process of its own: MirroredStrategy instances created one after
# another in one Keras 3 process can reuse collective instance keys.
OPT_GROUPS = [["LazyAdam", "ClippyAdagrad"], ["CompositeOptimizer"]]
ROOT = common.ROOT

ROWS, USED, DIM, BATCH, STEPS = 30, 24, 4, 8, 6  # rows >= USED never appear in the data


def _data():
  import numpy as np
  rng = np.random.default_rng(0)
  x = rng.integers(0, USED, size=(BATCH * STEPS, 3)).astype(np.int32)
  for step in range(STEPS):
    b = step * BATCH
    x[b + 1] = x[b]  # duplicates inside replica 0's half of the batch
    x[b + BATCH // 2] = x[b]  # and across the two replicas' halves
    x[b + BATCH // 2 + 1, 0] = x[b, 0]
  y = rng.normal(size=(BATCH * STEPS, 1)).astype(np.float32)
  return x, y


def _optimizer(module, name, model):
  if name == "CompositeOptimizer":  # LazyAdam on the table, ClippyAdagrad on the rest
    table = model.get_layer("emb").trainable_variables
    rest = [v for v in model.trainable_variables if all(v is not t for t in table)]
    return module.CompositeOptimizer([(_optimizer(module, "LazyAdam", model), lambda: table),
                                      (_optimizer(module, "ClippyAdagrad", model), lambda: rest)])
  if name == "LazyAdam":
    return module.LazyAdam(learning_rate=0.05)
  # Thresholds that let the table train while clipping stays active (scale < 1).
  return module.ClippyAdagrad(learning_rate=0.2, variable_relative_threshold=0.5,
                              absolute_threshold=1e-3, export_clipping_factors=True)


def _state(opt):
  variables = opt.variables() if callable(opt.variables) else opt.variables
  return [v.numpy() for v in variables]


def worker(flavor, opts):
  """Runs in the subprocess; prints one JSON line of results for the optimizers `opts`."""
  sys.path.insert(0, os.path.join(ROOT, "python"))
  import numpy as np
  import tensorflow as tf

  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  devices = [d.name for d in tf.config.list_logical_devices("CPU")]
  assert len(devices) == 2, devices

  import importlib
  module = importlib.import_module(f"tf_opt_ops.{flavor}")
  k = importlib.import_module("keras" if flavor == "keras" else "tf_keras")

  x, y = _data()

  def build():
    inputs = k.Input(shape=(3,), dtype="int32")
    h = k.layers.Embedding(ROWS, DIM, name="emb")(inputs)
    h = k.layers.Flatten()(h)
    h = k.layers.Dense(4, activation="tanh", name="hidden")(h)
    return k.Model(inputs, k.layers.Dense(1, name="out")(h))

  k.utils.set_random_seed(0)
  init = build().get_weights()
  results = {"devices": devices}
  for name in opts:
    runs = {}
    for mode in ("one", "mirrored"):
      strategy = (tf.distribute.MirroredStrategy(devices) if mode == "mirrored" else
                  tf.distribute.get_strategy())
      with strategy.scope():
        model = build()
        model.set_weights(init)
        opt = _optimizer(module, name, model)
        model.compile(optimizer=opt, loss="mse")
      replicas = strategy.num_replicas_in_sync
      model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
      # Every replica's copy of every model variable must hold the same values.
      spread = 0.0
      for w in model.weights:
        tf_variable = w.value if flavor == "keras" else w  # Keras 3 wraps a tf.Variable
        copies = [np.asarray(c.numpy()) for c in strategy.experimental_local_results(tf_variable)]
        spread = max([spread] + [float(np.abs(c - copies[0]).max()) for c in copies])
      runs[mode] = dict(weights=model.get_weights(), state=_state(opt), replicas=replicas,
                        iterations=int(opt.iterations.numpy()), spread=spread, copies=len(copies),
                        factors=[float(f.numpy()) for f in getattr(opt, "clipping_factors", [])])
    one, mirrored = runs["one"], runs["mirrored"]
    emb_before, emb_after = init[0], one["weights"][0]
    results[name] = {
        "replicas": [one["replicas"], mirrored["replicas"]],
        "iterations": [one["iterations"], mirrored["iterations"]],
        "weights": max(
            float(np.abs(a - b).max()) for a, b in zip(one["weights"], mirrored["weights"])),
        "state": max(
            float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
            for a, b in zip(one["state"], mirrored["state"])),
        "state_count": [len(one["state"]), len(mirrored["state"])],
        "replica_copies": mirrored["copies"],
        "replica_spread": mirrored["spread"],
        "trained": float(np.abs(emb_after[:USED] - emb_before[:USED]).max()),
        "unused_rows_changed": float(np.abs(emb_after[USED:] - emb_before[USED:]).max()),
    }
    if name == "ClippyAdagrad":
      results[name]["clipping_factors"] = [one["factors"], mirrored["factors"]]
  print(json.dumps(results))


@pytest.fixture(scope="module")
def results():
  """Runs each flavor and optimizer group in a subprocess, concurrently; {flavor: results}."""
  env = common.python_env()
  env.pop("TF_USE_LEGACY_KERAS", None)
  command = [sys.executable, os.path.abspath(__file__)]
  procs = {(f, ",".join(g)): subprocess.Popen(command + [f, ",".join(g)], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True) for f in FLAVORS for g in OPT_GROUPS}
  out = {f: {} for f in FLAVORS}
  for (flavor, group), proc in procs.items():
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{flavor} {group}:\n{stderr[-4000:]}"
    out[flavor].update(json.loads(stdout.strip().splitlines()[-1]))
  return out


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mirrored_equals_one_device(results, flavor, opt, record_property):
  r = results[flavor][opt]
  record_property("max_abs_diff_weights", r["weights"])
  record_property("max_abs_diff_state", r["state"])
  assert len(results[flavor]["devices"]) == 2
  assert r["replicas"] == [1, 2]
  assert r["iterations"] == [STEPS, STEPS]
  assert r["state_count"][0] == r["state_count"][1] > 1
  assert r["trained"] > 1e-3  # the embedding did train...
  assert r["unused_rows_changed"] == 0.0  # ...lazily: rows outside the data keep their bits
  assert r["weights"] <= 1e-5
  assert r["state"] <= 1e-5
  assert r["replica_copies"] == 2 and r["replica_spread"] == 0.0
  if opt == "ClippyAdagrad":
    one, mirrored = r["clipping_factors"]
    assert len(one) == len(mirrored) == 5  # one per model variable
    assert min(one) < 1.0  # clipping was active
    assert max(abs(a - b) for a, b in zip(one, mirrored)) <= 1e-5


if __name__ == "__main__":
  worker(sys.argv[1], sys.argv[2].split(","))
