"""The main job: train a small recommender with tf_opt_ops against Keras Adam.

    python -m demo.recommender [--data ratings.csv] [--flavor keras|tf_keras|legacy]
        [--out demo_out] [--strategy one-device|parameter-server|multi-worker]
        [--optimizer lazy_adam|rowwise_adagrad] [--features]

Two runs on the same data, seeds and epochs: (1) `MultiOptimizer` with
`LazyAdam` (or, with --optimizer rowwise_adagrad, `RowwiseAdagrad`) on the
embedding tables and `ClippyAdagrad` on the MLP tower,
(2) Keras `Adam` on everything. Prints a table (each run's best and final
held-out AUC and log loss, with the training seconds at which each best was
reached; step time, examples per second, speedup), and writes it as JSON with
a PNG of held-out AUC and log loss against training wall-clock seconds into
--out. Held-out numbers, best and final both: the training loss would flatter
Adam, which overfits the tables after its first epoch. The final point is the
model as `fit` leaves it (with EMA, `fit` ends by writing the averages into it).

--features adds a run between the two: the same MultiOptimizer with the Keras
optimizer features most used on recommenders on LazyAdam (the embedding
tables): `global_clipnorm`, `weight_decay` and `use_ema` (FEATURE_OPTIONS).

--strategy parameter-server starts a localhost cluster (2 workers and 2
parameter servers, `python -m tf_opt_ops.server`), shards every variable over
the parameter servers and trains from this process, the chief;
--strategy multi-worker starts 2 worker processes running this demo under
`MultiWorkerMirroredStrategy`, and worker 0 reports. Both stop every process
they started. Keras 3 cannot train under either (sharded variables; its
`model.fit` under MultiWorkerMirroredStrategy), so they use --flavor tf_keras
unless told legacy.

Data: by default click logs generated with a planted ground truth (users and
items with latent vectors, popularity skewed like real catalogues, so each
batch touches few rows of large tables, many of them repeatedly). With --data,
a ratings CSV in MovieLens form (userId,movieId,rating,timestamp), ratings >= 4
as positives.
"""

import argparse
import contextlib
import csv
import dataclasses
import json
import os
import sys
import time

import numpy as np

FLAVORS = ("keras", "tf_keras", "legacy")
STRATEGIES = ("one-device", "parameter-server", "multi-worker")
CLUSTER_FLAVORS = ("tf_keras", "legacy")  # what each cluster strategy can train


# ------------------------------------------------------------------- data
@dataclasses.dataclass
class ClickData:
  users: np.ndarray  # int64 ids in [0, num_users)
  items: np.ndarray
  labels: np.ndarray  # float32 0/1
  num_users: int
  num_items: int
  source: str

  def split(self, test_fraction, seed):
    order = np.random.default_rng(seed).permutation(len(self.labels))
    cut = int(len(order) * (1 - test_fraction))

    def pick(idx):
      return self.users[idx], self.items[idx], self.labels[idx]

    return pick(order[:cut]), pick(order[cut:])


def planted_clicks(num_users, num_items, num_examples, latent_dim=8, seed=0):
  """Clicks from a known model: P(click) = sigmoid(3 * <u, v> + b_item - 1).

  Users and items are drawn with Zipf-like popularity (a few are very
  frequent), so a batch touches a small share of the table with repeats.
  """
  rng = np.random.default_rng(seed)
  user_vec = rng.standard_normal((num_users, latent_dim)) / np.sqrt(latent_dim)
  item_vec = rng.standard_normal((num_items, latent_dim)) / np.sqrt(latent_dim)
  item_bias = rng.normal(0.0, 0.5, num_items)

  def skewed(n, exponent):
    weights = 1.0 / np.arange(1, n + 1)**exponent
    ids = rng.choice(n, num_examples, p=weights / weights.sum())
    return rng.permutation(n)[ids]  # popular ids spread over the table

  users, items = skewed(num_users, 0.8), skewed(num_items, 1.05)
  logits = 3.0 * np.einsum("ij,ij->i", user_vec[users], item_vec[items]) + item_bias[items] - 1.0
  labels = (rng.random(num_examples) < 1 / (1 + np.exp(-logits))).astype(np.float32)
  return ClickData(
      users.astype(np.int64), items.astype(np.int64), labels, num_users, num_items,
      f"planted clicks: {num_users:,} users, {num_items:,} items, "
      f"{num_examples:,} examples")


class DataError(ValueError):
  """A ratings file the demo cannot use; the message names the file and line."""


RATING_COLUMNS = ("userId", "movieId", "rating")


def load_ratings(path):
  """A MovieLens-style ratings CSV: ids remapped to 0..n-1, rating >= 4 is a click."""
  try:
    f = open(path, newline="")
  except OSError as e:
    raise DataError(f"{path}: cannot open: {e.strerror}") from e
  with f:
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None:
      raise DataError(f"{path}: the file is empty; expected a header "
                      f"userId,movieId,rating,timestamp and rating rows")
    header = [h.strip() for h in header]
    missing = [c for c in RATING_COLUMNS if c not in header]
    if missing:
      raise DataError(f"{path}:1: missing column(s) {', '.join(missing)}; the header is "
                      f"{','.join(header)!r}, expected userId,movieId,rating,timestamp")
    col = {c: header.index(c) for c in RATING_COLUMNS}
    user_ids, item_ids, labels = {}, {}, []
    users, items = [], []
    for line_number, row in enumerate(reader, start=2):
      if not row or all(not cell.strip() for cell in row):
        continue
      if len(row) < len(header):
        raise DataError(f"{path}:{line_number}: {len(row)} fields, the header has {len(header)}")
      try:
        user, item = int(row[col["userId"]]), int(row[col["movieId"]])
      except ValueError:
        raise DataError(f"{path}:{line_number}: userId and movieId must be integers, got "
                        f"{row[col['userId']]!r} and {row[col['movieId']]!r}") from None
      try:
        rating = float(row[col["rating"]])
      except ValueError:
        raise DataError(f"{path}:{line_number}: rating must be a number, got "
                        f"{row[col['rating']]!r}") from None
      users.append(user_ids.setdefault(user, len(user_ids)))
      items.append(item_ids.setdefault(item, len(item_ids)))
      labels.append(1.0 if rating >= 4.0 else 0.0)
  if not labels:
    raise DataError(f"{path}: no rating rows after the header")
  return ClickData(
      np.array(users, np.int64), np.array(items, np.int64), np.array(labels, np.float32),
      len(user_ids), len(item_ids), f"{path}: {len(user_ids):,} users, {len(item_ids):,} items, "
      f"{len(labels):,} ratings")


# ------------------------------------------------------------ model, runs
def keras_module(flavor):
  if flavor == "keras":
    import keras
    return keras
  import tf_keras
  return tf_keras


def build_model(keras, data, embedding_dim, seed):
  keras.utils.set_random_seed(seed)
  user = keras.Input(shape=(), dtype="int64", name="user")
  item = keras.Input(shape=(), dtype="int64", name="item")
  user_vec = keras.layers.Embedding(data.num_users, embedding_dim, name="user_embedding")(user)
  item_vec = keras.layers.Embedding(data.num_items, embedding_dim, name="item_embedding")(item)
  x = keras.layers.Concatenate()(
      [user_vec, item_vec, keras.layers.Multiply()([user_vec, item_vec])])
  x = keras.layers.Dense(64, activation="relu", name="tower_1")(x)
  x = keras.layers.Dense(32, activation="relu", name="tower_2")(x)
  out = keras.layers.Dense(1, activation="sigmoid", name="click")(x)
  model = keras.Model([user, item], out)
  return model


# --optimizer: the embedding tables' optimizer, as (class name, multiple of --learning-rate).
# The Adagrad kinds take 10 times Adam's rate, as ClippyAdagrad on the tower does: their step
# shrinks with the accumulated squares, Adam's does not.
EMBEDDING_OPTIMIZERS = {
    "lazy_adam": ("LazyAdam", 1),
    "rowwise_adagrad": ("RowwiseAdagrad", 10),
}


def tf_opt_ops_optimizer(flavor, model, learning_rate, embedding_optimizer="lazy_adam",
                         **lazy_adam_options):
  """MultiOptimizer: `embedding_optimizer` (EMBEDDING_OPTIMIZERS) on the embedding tables,
  ClippyAdagrad on the rest. `lazy_adam_options` go to LazyAdam."""
  import importlib
  api = importlib.import_module(f"tf_opt_ops.{flavor}")
  embeddings = [model.get_layer("user_embedding"), model.get_layer("item_embedding")]
  class_name, rate = EMBEDDING_OPTIMIZERS[embedding_optimizer]
  table_optimizer = getattr(api, class_name)(learning_rate=rate * learning_rate,
                                             **lazy_adam_options)
  return api.MultiOptimizer([api.OptimizerBlocks(table_optimizer, embeddings)],
                            default_optimizer=api.ClippyAdagrad(learning_rate=10 * learning_rate))


def run_name(embedding_optimizer):
  return (f"tf_opt_ops MultiOptimizer ({EMBEDDING_OPTIMIZERS[embedding_optimizer][0]} "
          "+ ClippyAdagrad)")


# --features: the Keras optimizer features on the embedding tables' LazyAdam.
FEATURE_OPTIONS = dict(global_clipnorm=1.0, weight_decay=0.004, use_ema=True)
FEATURES_RUN = ("tf_opt_ops MultiOptimizer, LazyAdam with " +
                ", ".join(f"{k}={v}" for k, v in FEATURE_OPTIONS.items()))

# The light-state quality study (--light-state): LazyAdam's slot options per run.
LIGHT_STATE_RUNS = {
    "float32 slots": {},
    "bfloat16 slots, stochastic rounding": dict(slot_dtype="bfloat16"),
    "bfloat16 slots, round to nearest": dict(slot_dtype="bfloat16", stochastic_rounding=False),
    "row-wise v (float32)": dict(rowwise_second_moment=True),
    "bfloat16 m + row-wise v": dict(slot_dtype="bfloat16", rowwise_second_moment=True),
}
LIGHT_STATE_SEEDS = (0, 1, 2)


def light_state_quality(args):
  """The demo's MultiOptimizer with each LazyAdam slot layout, over 3 seeds (data and model).

  Returns Markdown: held-out best and final AUC and final log loss, mean ± half the range.
  """
  import dataclasses
  results = {name: [] for name in LIGHT_STATE_RUNS}
  for seed in LIGHT_STATE_SEEDS:
    seeded = dataclasses.replace(args, seed=seed) if dataclasses.is_dataclass(args) else (
        argparse.Namespace(**dict(vars(args), seed=seed)))
    data = planted_clicks(args.users, args.items, args.examples, seed=seed)
    for name, options in LIGHT_STATE_RUNS.items():
      run = train_run(
          name, args.flavor, data, seeded, lambda keras, model, o=options: tf_opt_ops_optimizer(
              args.flavor, model, args.learning_rate, **o), verbose=False)
      print(
          f"seed {seed}, {name}: best AUC {run['best_auc']:.4f}, final AUC {run['auc']:.4f}, "
          f"final log loss {run['log_loss']:.4f}", flush=True)
      results[name].append(run)

  def spread(values):
    values = np.asarray(values)
    return f"{values.mean():.4f} ± {(values.max() - values.min()) / 2:.4f}"

  lines = [
      "| LazyAdam slots | best AUC | final AUC | final log loss |",
      "|---|---|---|---|",
  ]
  for name, runs in results.items():
    lines.append(f"| {name} | {spread([r['best_auc'] for r in runs])} | "
                 f"{spread([r['auc'] for r in runs])} | {spread([r['log_loss'] for r in runs])} |")
  return "\n".join(lines)


def adam_optimizer(flavor, keras, learning_rate):
  if flavor == "legacy":
    return keras.optimizers.legacy.Adam(learning_rate=learning_rate)
  return keras.optimizers.Adam(learning_rate=learning_rate)


def roc_auc(labels, scores):
  """Area under the ROC curve (rank statistic, ties averaged)."""
  order = np.argsort(scores, kind="mergesort")
  ranks = np.empty(len(scores))
  sorted_scores = scores[order]
  boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
  starts = np.concatenate([[0], boundaries])
  ends = np.concatenate([boundaries, [len(scores)]])
  for s, e in zip(starts, ends):
    ranks[order[s:e]] = (s + e + 1) / 2.0
  positives = labels > 0.5
  n_pos, n_neg = positives.sum(), (~positives).sum()
  if n_pos == 0 or n_neg == 0:
    return float("nan")
  return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def log_loss(labels, scores):
  p = np.clip(scores, 1e-7, 1 - 1e-7)
  return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def held_out_scores(model, users, items, chunk=8192):
  """The model's click probabilities, computed here in chunks (under any strategy)."""
  return np.concatenate([
      np.asarray(model({"user": users[i:i + chunk], "item": items[i:i + chunk]},
                       training=False)).ravel() for i in range(0, len(users), chunk)
  ])


def held_out_curve(keras, model, test):
  """A callback: after each (short) epoch, the training seconds so far, held-out AUC, log loss.

  Training time is summed over the epochs only, so evaluating costs nothing
  on the curve's time axis.
  """
  users, items, labels = test

  class HeldOutCurve(keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self.points, self.epoch_seconds = [], []
      self._start = 0.0

    def on_train_begin(self, logs=None):
      self._evaluate()  # the starting point, at 0 seconds

    def on_epoch_begin(self, epoch, logs=None):
      self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
      self.epoch_seconds.append(time.perf_counter() - self._start)
      self._evaluate()

    def _evaluate(self):
      self.points.append((sum(self.epoch_seconds), *self.evaluate()))

    def evaluate(self):
      """Held-out (AUC, log loss) of the model now."""
      scores = held_out_scores(model, users, items)
      return roc_auc(labels, scores), log_loss(labels, scores)

  return HeldOutCurve()


def training_data(train, args, flavor, strategy):
  """Shuffled batches, repeated; for a parameter-server strategy a `DatasetCreator`."""
  import tensorflow as tf
  users, items, labels = train

  def dataset(input_context=None):
    del input_context  # the coordinator gives each worker the same stream
    return tf.data.Dataset.from_tensor_slices(
        ({"user": users,
          "item": items}, labels)).shuffle(len(labels),
                                           seed=args.seed).batch(args.batch_size,
                                                                 drop_remainder=True).repeat()

  if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
    return keras_module(flavor).utils.experimental.DatasetCreator(dataset)
  return dataset()


def train_run(name, flavor, data, args, make_optimizer, strategy=None, verbose=True):
  keras = keras_module(flavor)
  train, test = data.split(0.1, args.seed)
  test = tuple(a[:args.eval_examples] for a in test)
  with strategy.scope() if strategy is not None else contextlib.nullcontext():
    model = build_model(keras, data, args.embedding_dim, args.seed)
    model.compile(optimizer=make_optimizer(keras, model), loss="binary_crossentropy")
  # Each epoch in `evals_per_epoch` parts, each ending in a held-out evaluation.
  steps = max(1, len(train[2]) // args.batch_size // args.evals_per_epoch)
  curve = held_out_curve(keras, model, test)
  if verbose:
    print(f"\n== {name} ({flavor}) ==", flush=True)
  model.fit(training_data(train, args, flavor, strategy), epochs=args.epochs * args.evals_per_epoch,
            steps_per_epoch=steps, verbose=(1 if sys.stdout.isatty() else 2) if verbose else 0,
            callbacks=[curve])
  # The model as fit leaves it: with EMA, fit ends by writing the averages into the model.
  curve.points[-1] = (curve.points[-1][0], *curve.evaluate())
  # The first part traces the graph: leave it out of the step time.
  timed = curve.epoch_seconds[1:] or curve.epoch_seconds
  step_seconds = sum(timed) / (len(timed) * steps)
  return dict(
      {
          "name": name,
          "mean_step_ms": float(1e3 * step_seconds),
          "examples_per_second": float(args.batch_size / step_seconds),
          "curve": [list(p) for p in curve.points],
      }, **best_and_final(curve.points))


def best_and_final(points):
  """Best and final held-out AUC and log loss of a curve [(seconds, auc, loss)], and when
  (training seconds) each best was reached. The starting point (before training) is left out."""
  trained = points[1:] or points
  best_auc = max(trained, key=lambda p: p[1])
  best_loss = min(trained, key=lambda p: p[2])
  return {
      "auc": trained[-1][1],
      "log_loss": trained[-1][2],
      "best_auc": best_auc[1],
      "best_auc_seconds": best_auc[0],
      "best_log_loss": best_loss[2],
      "best_log_loss_seconds": best_loss[0],
  }


def render_table(runs):
  base = runs[-1]["mean_step_ms"]
  lines = [
      "| run | best AUC (at s) | final AUC | best log loss (at s) | final log loss "
      "| mean step (ms) | examples/s | speedup vs Adam |", "|---|---|---|---|---|---|---|---|"
  ]
  for r in runs:
    lines.append(f"| {r['name']} | {r['best_auc']:.4f} ({r['best_auc_seconds']:.1f}) "
                 f"| {r['auc']:.4f} | {r['best_log_loss']:.4f} ({r['best_log_loss_seconds']:.1f}) "
                 f"| {r['log_loss']:.4f} | {r['mean_step_ms']:.2f} "
                 f"| {r['examples_per_second']:,.0f} | {base / r['mean_step_ms']:.2f}× |")
  return "\n".join(lines)


def plot(runs, path, title):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
  for r in runs:
    seconds, auc, loss = np.array(r["curve"]).T
    ax1.plot(seconds, auc, marker="o", label=r["name"])
    ax2.plot(seconds, loss, marker="o", label=r["name"])
  ax1.set_ylabel("held-out AUC (higher is better)")
  ax2.set_ylabel("held-out log loss (lower is better)")
  for ax, what in ((ax1, "AUC"), (ax2, "Log loss")):
    ax.set_xlabel("training wall-clock seconds")
    ax.set_title(f"Held-out {what}")
    ax.legend()
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument(
      "--data", help="ratings CSV (userId,movieId,rating,timestamp); "
      "default: generated clicks with a planted ground truth")
  parser.add_argument(
      "--flavor", choices=FLAVORS, default=None,
      help="Keras API: keras (Keras 3), tf_keras, legacy (tf_keras OptimizerV2); default keras, "
      "tf_keras for the cluster strategies")
  parser.add_argument("--strategy", choices=STRATEGIES, default="one-device",
                      help="where to train: this process, or a localhost cluster it starts")
  parser.add_argument("--epochs", type=int, default=3,
                      help="3 lets LazyAdam reach its held-out plateau on the generated data")
  parser.add_argument("--batch-size", type=int, default=1024)
  parser.add_argument("--embedding-dim", type=int, default=32)
  parser.add_argument("--learning-rate", type=float, default=0.002)
  parser.add_argument("--users", type=int, default=200_000, help="generated data only")
  parser.add_argument("--items", type=int, default=50_000, help="generated data only")
  parser.add_argument("--examples", type=int, default=600_000, help="generated data only")
  parser.add_argument("--evals-per-epoch", type=int, default=4,
                      help="held-out evaluations per epoch (the points of the curves)")
  parser.add_argument("--eval-examples", type=int, default=20_000,
                      help="held-out examples evaluated at each point")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
      "--optimizer", choices=tuple(EMBEDDING_OPTIMIZERS), default="lazy_adam",
      help="the embedding tables' optimizer: LazyAdam, or RowwiseAdagrad (FBGEMM's "
      "EXACT_ROWWISE_ADAGRAD, one float of state per row) at 10 times --learning-rate")
  parser.add_argument("--out", default="demo_out")
  parser.add_argument(
      "--light-state", action="store_true",
      help="instead: LazyAdam's slot layouts (float32, bfloat16 with and without stochastic "
      "rounding, row-wise v) over 3 seeds, one device; prints a quality table")
  parser.add_argument(
      "--features", action="store_true",
      help="also a run with global_clipnorm, weight_decay and use_ema on the tables' LazyAdam "
      "(Keras 3 or tf_keras, one device)")
  parser.add_argument("--multi-worker-task", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.flavor is None:
    args.flavor = "keras" if args.strategy == "one-device" else "tf_keras"
  if args.features and (args.flavor == "legacy" or args.strategy != "one-device"):
    parser.error("--features needs --flavor keras or tf_keras on one device: the legacy "
                 "optimizers have no weight decay or EMA, and under a distribution strategy "
                 "Keras' own EMA runs")
  if args.strategy != "one-device" and args.flavor not in CLUSTER_FLAVORS:
    parser.error(f"--strategy {args.strategy} needs --flavor tf_keras or legacy: Keras 3 cannot "
                 "train sharded variables, nor run model.fit under MultiWorkerMirroredStrategy")
  return args


@contextlib.contextmanager
def training_strategy(args):
  """None on one device; else the strategy, and for a parameter-server one its cluster."""
  if args.strategy == "one-device":
    yield None
    return
  import tensorflow as tf
  if args.strategy == "multi-worker":
    yield tf.distribute.MultiWorkerMirroredStrategy()  # this is one of its worker tasks
    return
  from tf_opt_ops.server import LocalCluster
  with LocalCluster(num_workers=2, num_ps=2) as cluster:
    print(
        f"cluster: {json.dumps(cluster.spec)}; task PIDs "
        f"{', '.join(str(p.pid) for p in cluster.procs)}", flush=True)
    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(
        len(cluster.spec["ps"]))
    yield tf.distribute.experimental.ParameterServerStrategy(cluster.chief_resolver(),
                                                             variable_partitioner=partitioner)
    cluster.check_running()
  print("cluster: stopped", flush=True)


def launch_multi_worker(argv):
  """Runs this demo as 2 MultiWorkerMirroredStrategy workers; worker 0 prints the report."""
  import tf_opt_ops
  from tf_opt_ops.server import LocalCluster
  argv = list(sys.argv[1:] if argv is None else argv) + ["--multi-worker-task"]
  sys.stdout.flush()
  # The workers import this demo and the tf_opt_ops this process runs, wherever it started.
  roots = [
      os.path.dirname(os.path.dirname(os.path.abspath(f))) for f in (__file__, tf_opt_ops.__file__)
  ]
  env = dict(os.environ,
             PYTHONPATH=os.pathsep.join(p for p in (*roots, os.environ.get("PYTHONPATH")) if p))
  with LocalCluster(
      num_workers=2, num_ps=0, chief=False, stdout=None, env=env,
      task_command=lambda job, index: [sys.executable, "-m", "demo.recommender", *argv]) as cluster:
    print(
        f"workers: {json.dumps(cluster.spec)}; PIDs "
        f"{', '.join(str(p.pid) for p in cluster.procs)}", flush=True)
    codes = cluster.wait()
    for proc, code in zip(cluster.procs, codes):
      if code != 0:
        print(f"demo: worker {proc.pid} failed ({code}):\n{cluster.error_output(proc)[-3000:]}",
              file=sys.stderr)
  print("workers: stopped", flush=True)
  return 0 if all(code == 0 for code in codes) else 1


def main(argv=None):
  args = parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if args.strategy == "multi-worker" and not args.multi_worker_task:
    return launch_multi_worker(argv)
  try:
    data = load_ratings(args.data) if args.data else planted_clicks(args.users, args.items,
                                                                    args.examples, seed=args.seed)
  except DataError as e:
    print(f"demo: {e}", file=sys.stderr)
    return 2
  if args.light_state:
    table = light_state_quality(args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "light_state.md"), "w") as f:
      f.write(table + "\n")
    print("\n" + table, flush=True)
    return 0
  lr = args.learning_rate
  with training_strategy(args) as strategy:
    # Under MultiWorkerMirroredStrategy every worker trains; worker 0 reports.
    report = args.strategy != "multi-worker" or strategy.cluster_resolver.task_id == 0
    if report:
      print(f"data: {data.source}; click rate {data.labels.mean():.3f}; strategy {args.strategy}",
            flush=True)
    runs = [
        train_run(run_name(args.optimizer), args.flavor, data, args,
                  lambda keras, model: tf_opt_ops_optimizer(args.flavor, model, lr, args.optimizer),
                  strategy, verbose=report),
    ]
    if args.features:
      runs.append(
          train_run(
              FEATURES_RUN, args.flavor, data, args,
              lambda keras, model: tf_opt_ops_optimizer(args.flavor, model, lr, **FEATURE_OPTIONS),
              strategy, verbose=report))
    runs += [
        train_run("Keras Adam", args.flavor, data, args,
                  lambda keras, model: adam_optimizer(args.flavor, keras, lr), strategy,
                  verbose=report),
    ]
    # Before the cluster stops: this process's TensorFlow context is connected to it.
    if report:
      write_report(args, data, runs)
  return 0


def write_report(args, data, runs):
  """Prints the table and writes results.json and the plot into --out."""
  os.makedirs(args.out, exist_ok=True)
  table = render_table(runs)
  result = {
      "data": data.source, "flavor": args.flavor, "strategy": args.strategy, "epochs": args.epochs,
      "batch_size": args.batch_size, "embedding_dim": args.embedding_dim,
      "optimizer": args.optimizer, "runs": runs
  }
  with open(os.path.join(args.out, "results.json"), "w") as f:
    json.dump(result, f, indent=1)
  plot_path = os.path.join(args.out, "demo.png")
  plot(runs, plot_path,
       f"{data.source}; flavor {args.flavor}; {args.strategy}; batch {args.batch_size}")
  print("\n" + table)
  print(f"\nresults: {os.path.join(args.out, 'results.json')}")
  print(f"plot: {plot_path}", flush=True)


if __name__ == "__main__":
  sys.exit(main())
