"""MultiWorkerMirroredStrategy over two worker processes equals one device.

Both workers run this file (`python test_multi_worker.py`, with `TF_CONFIG`
naming each its task) on free localhost ports: each trains the shared
Embedding + Dense model of `test_cluster` with a custom loop on its half of
every global batch (duplicate ids inside each half and across the two), the
gradients all-reduced (a table's `IndexedSlices` all-gathered, duplicates
summed by the kernels), and the same model on one device on the whole batch.
Worker 0 prints the largest differences as one JSON line. A custom loop
because Keras 3's `model.fit` fails under this strategy for its own Adam too.
"""

import json
import os
import subprocess
import sys

import pytest

from tf_opt_ops.server import free_ports

import common
from test_cluster import BATCH
from test_cluster import ROOT
from test_cluster import STEPS
from test_cluster import USED
from test_cluster import _build
from test_cluster import _env
from test_cluster import _factors
from test_cluster import _optimizer
from test_cluster import _state

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

FLAVORS = ["keras", "tf_keras", "legacy"]
CASES = ["LazyAdam", "ClippyAdagrad_factors", "CompositeOptimizer"]
TIMEOUT_S = 300


def worker():
  """Runs in each worker process; worker 0 prints one JSON line of results."""
  sys.path.insert(0, os.path.join(ROOT, "python"))
  import importlib

  import numpy as np
  import tensorflow as tf

  strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first: it configures the runtime
  task = strategy.cluster_resolver.task_id
  workers = strategy.num_replicas_in_sync
  x, y = common.duplicate_id_batches(USED, BATCH, STEPS)
  x[BATCH // 2::BATCH] = x[::BATCH]  # also duplicated across the two workers' halves
  results = {"replicas": workers}
  for flavor in FLAVORS:
    module = importlib.import_module(f"tf_opt_ops.{flavor}")
    k = importlib.import_module("keras" if flavor == "keras" else "tf_keras")
    k.utils.set_random_seed(0)
    init = _build(k).get_weights()
    for case in CASES:
      runs = {}
      for mode in ("one", "multi_worker"):
        scope_strategy = strategy if mode == "multi_worker" else tf.distribute.get_strategy()
        with scope_strategy.scope():
          model = _build(k)
          model.set_weights(init)
          opt = _optimizer(module, case, model)

        def replica_step(xb, yb, model=model, opt=opt):
          with tf.GradientTape() as tape:
            # Summed over this replica's rows, divided by the global batch: the
            # all-reduced gradient is the global batch's mean.
            loss = tf.reduce_sum((model(xb) - yb)**2) / BATCH
          variables = model.trainable_variables
          opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        step = tf.function(lambda xb, yb, s=scope_strategy, f=replica_step: s.run(f, args=(xb, yb)))
        for s in range(STEPS):
          rows = slice(s * BATCH, (s + 1) * BATCH)
          if mode == "multi_worker":
            half = BATCH // workers
            rows = slice(s * BATCH + task * half, s * BATCH + (task + 1) * half)
          step(x[rows], y[rows])
        runs[mode] = dict(weights=[np.asarray(w) for w in model.get_weights()], state=_state(opt),
                          factors=_factors(opt), iterations=int(opt.iterations.numpy()))
      one, multi = runs["one"], runs["multi_worker"]
      results[f"{flavor}/{case}"] = {
          "weights": max(
              float(np.abs(a - b).max()) for a, b in zip(one["weights"], multi["weights"])),
          "names": [sorted(one["state"]), sorted(multi["state"])],
          "state": max(
              float(np.abs(one["state"][n] - multi["state"].get(n, np.nan)).max())
              for n in one["state"]),
          "factors": [one["factors"], multi["factors"]],
          "iterations": [one["iterations"], multi["iterations"]],
          "trained": float(np.abs(one["weights"][0][:USED] - init[0][:USED]).max()),
          "unused_rows_changed": float(np.abs(multi["weights"][0][USED:] - init[0][USED:]).max()),
      }
  if task == 0:
    print(json.dumps(results))


@pytest.fixture(scope="module")
def results():
  spec = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
  procs = []
  try:
    for index in range(2):
      tf_config = json.dumps({"cluster": spec, "task": {"type": "worker", "index": index}})
      procs.append(
          subprocess.Popen([sys.executable, os.path.abspath(__file__)],
                           env=dict(_env(), TF_CONFIG=tf_config), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait(timeout=30)
  for p, (_, stderr) in zip(procs, outputs):
    assert p.returncode == 0, stderr[-4000:]
  return json.loads(outputs[0][0].strip().splitlines()[-1])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_worker_equals_one_device(results, flavor, case, record_property):
  r = results[f"{flavor}/{case}"]
  record_property("max_abs_diff_weights", r["weights"])
  record_property("max_abs_diff_state", r["state"])
  assert results["replicas"] == 2
  assert r["iterations"] == [STEPS, STEPS]
  assert r["names"][0] == r["names"][1]
  assert r["trained"] > 1e-3
  assert r["unused_rows_changed"] == 0.0
  assert r["weights"] <= 1e-6
  assert r["state"] <= 1e-6
  one, multi = r["factors"]
  if case == "LazyAdam":
    assert one == multi == []
  else:
    assert len(one) == len(multi) > 0  # one per model variable
    assert min(one) < 1.0  # clipping was active
    assert max(abs(a - b) for a, b in zip(one, multi)) <= 1e-6


if __name__ == "__main__":
  worker()
