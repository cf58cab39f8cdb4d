"""Hogwild benchmark: N concurrent appliers updating one table without `use_locking`.

    python -m benchmarks.bench_hogwild [--quick] [--seconds S] [--out bench/results]

One 1,000,000 x 64 float32 table (with Adam's m and v), sparse lazy-Adam
updates of B = 16,384 random rows, applied by N = 1, 2, 4 appliers at once:

- threads: N Python threads of one process, each calling a `tf.function` in a
  loop (TensorFlow releases the GIL while it runs);
- cluster: a localhost `ParameterServerStrategy` cluster with the table on one
  parameter server and N workers, each step scheduled by the chief's
  `ClusterCoordinator` (so N steps are in flight at once).

Each runs for our fused op and for TensorFlow's own sparse path (unique +
segment sum, gather, `ResourceScatterUpdate`: lazy Adam as TF Addons writes
it), and reports updates per second. Our op takes exclusive locks on a table
it updates in place, so concurrent updates of one table take turns (and all
land); TensorFlow's sparse ops take shared locks and overlap (and can lose
updates of the same row). Why: see docs/design.md, "Choices".
"""

import argparse
import json
import os
import threading
import time

import numpy as np

from benchmarks import bench

ROWS, DIM, BATCH = 1_000_000, 64, 16_384
LR, BETA_1, BETA_2, EPSILON = 0.001, 0.9, 0.999, 1e-7
APPLIERS = (1, 2, 4)
VARIANTS = ("fused", "tensorflow")
MARKER = "HOGWILD_JSON "


def _update_fn(variant):
  """fn(var, m, v, grad, indices): one lazy-Adam update by `variant`."""
  from tf_opt_ops import ops

  def fused(var, m, v, grad, indices):
    ops.sparse_lazy_adam(var, m, v, grad, indices, lr=LR, beta_1=BETA_1, beta_2=BETA_2,
                         epsilon=EPSILON, beta_1_power=BETA_1**10, beta_2_power=BETA_2**10)

  def tensorflow(var, m, v, grad, indices):
    bench.composite_lazy_adam(var, m, v, grad, indices, LR, BETA_1, BETA_2, EPSILON)

  return {"fused": fused, "tensorflow": tensorflow}[variant]


def _batches(n, seed=0):
  import tensorflow as tf
  rng = np.random.default_rng(seed)
  return [(tf.constant(rng.standard_normal((BATCH, DIM)).astype(np.float32)),
           tf.constant(rng.choice(ROWS, BATCH, replace=False).astype(np.int64))) for _ in range(n)]


def run_threads(variant, appliers, seconds):
  """Updates per second of `appliers` threads updating one table in one process."""
  import tensorflow as tf
  table = [tf.Variable(tf.random.normal(
      (ROWS, DIM)))] + [tf.Variable(tf.zeros((ROWS, DIM))) for _ in range(2)]
  update = tf.function(_update_fn(variant))
  batches = _batches(8)
  for grad, indices in batches[:2]:
    update(*table, grad, indices)  # trace and warm up
  counts = [0] * appliers
  start = threading.Barrier(appliers + 1)
  stop = threading.Event()

  def applier(k):
    start.wait()
    n = 0
    while not stop.is_set():
      grad, indices = batches[(k + n) % len(batches)]
      update(*table, grad, indices)
      n += 1
    counts[k] = n

  threads = [threading.Thread(target=applier, args=(k,)) for k in range(appliers)]
  for t in threads:
    t.start()
  start.wait()
  began = time.perf_counter()
  time.sleep(seconds)
  stop.set()
  for t in threads:
    t.join()
  return sum(counts) / (time.perf_counter() - began)


def run_cluster(variant, appliers, seconds):
  """Updates per second of `appliers` workers updating one table on one parameter server."""
  import tensorflow as tf

  from tf_opt_ops.server import LocalCluster

  with LocalCluster(num_workers=appliers, num_ps=1) as cluster:
    strategy = tf.distribute.experimental.ParameterServerStrategy(cluster.chief_resolver())
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
      table = [tf.Variable(tf.random.normal(
          (ROWS, DIM)))] + [tf.Variable(tf.zeros((ROWS, DIM))) for _ in range(2)]
    update = _update_fn(variant)

    @tf.function
    def step():
      # The batch is made on the worker; the update runs where the table lives.
      grad = tf.random.normal((BATCH, DIM))
      indices = tf.random.shuffle(tf.range(ROWS, dtype=tf.int64))[:BATCH]
      strategy.run(lambda: update(*table, grad, indices))

    for _ in range(2 * appliers):  # trace, connect, warm up
      coordinator.schedule(step)
    coordinator.join()
    began, scheduled = time.perf_counter(), 0
    while time.perf_counter() - began < seconds:
      # Keep a few steps queued per worker: N updates in flight at once.
      for _ in range(appliers):
        coordinator.schedule(step)
      scheduled += appliers
      if scheduled % (4 * appliers) == 0:
        coordinator.join()
    coordinator.join()
    return scheduled / (time.perf_counter() - began)


def worker(args):
  """One setting, variant and N in this process (a fresh TensorFlow per measurement)."""
  mode, variant, appliers, seconds = args
  run = {"threads": run_threads, "cluster": run_cluster}[mode]
  return {"updates_per_s": run(variant, appliers, seconds)}


def render(report):
  lines = [
      f"Hogwild: {ROWS:,}×{DIM} float32 table, lazy Adam, B = {BATCH:,} random rows per "
      f"update, no use_locking; updates per second (higher is better), {report['cores']} cores",
      "",
      "| setting | appliers | fused op | TensorFlow sparse ops | fused / TensorFlow |",
      "|---|---|---|---|---|",
  ]
  for mode in ("threads", "cluster"):
    for n in APPLIERS:
      row = report["results"].get(f"{mode}/{n}")
      if not row:
        continue
      lines.append(f"| {mode} | {n} | {row['fused']:.1f} | {row['tensorflow']:.1f} | "
                   f"{row['fused'] / row['tensorflow']:.2f}× |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = bench.argument_parser(__doc__.splitlines()[0], "1 and 2 appliers, 3 s each")
  parser.add_argument("--seconds", type=float, default=None, help="seconds per measurement")
  parser.add_argument("--worker", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    print(MARKER + json.dumps(worker(json.loads(args.worker))))
    return
  seconds = args.seconds or (3.0 if args.quick else 10.0)
  appliers = APPLIERS[:2] if args.quick else APPLIERS
  started = time.time()
  report = {"cores": os.cpu_count(), "seconds_each": seconds, "results": {}}
  for mode in ("threads", "cluster"):
    for n in appliers:
      row = {}
      for variant in VARIANTS:
        result = bench.run_json_worker(
            "benchmarks.bench_hogwild",
            ["--worker", json.dumps([mode, variant, n, seconds])], None, MARKER,
            f"{mode} {variant} N={n}")
        row[variant] = result["updates_per_s"]
        print(f"{mode} N={n} {variant}: {row[variant]:.1f} updates/s", flush=True)
      report["results"][f"{mode}/{n}"] = row
  report["seconds"] = time.time() - started
  bench.write_results(report, os.path.join(args.out, "hogwild"), render)


if __name__ == "__main__":
  main()
