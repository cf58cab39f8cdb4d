"""The main job: train a small recommender with tf_opt_ops against Keras Adam.

    python -m tf_opt_ops.demo [--data ratings.csv] [--flavor keras|tf_keras|legacy] [--out demo_out]

Two runs on the same data, seeds and epochs: (1) `MultiOptimizer` with
`LazyAdam` on the embedding tables and `ClippyAdagrad` on the MLP tower,
(2) Keras `Adam` on everything. Prints a table (AUC, log loss, step time,
examples per second, speedup), and writes it as JSON with a PNG of loss curves
and throughput into --out.

Data: by default click logs generated with a planted ground truth (users and
items with latent vectors, popularity skewed like real catalogues, so each
batch touches few rows of large tables, many of them repeatedly). With --data,
a ratings CSV in MovieLens form (userId,movieId,rating,timestamp), ratings >= 4
as positives.
"""

import argparse
import csv
import dataclasses
import json
import os
import sys
import time

import numpy as np

FLAVORS = ("keras", "tf_keras", "legacy")


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
    f = open(path, newline="")  # pylint: disable=consider-using-with
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
    import keras  # pylint: disable=g-import-not-at-top
    return keras
  import tf_keras  # pylint: disable=g-import-not-at-top
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


def tf_opt_ops_optimizer(flavor, model, learning_rate):
  """MultiOptimizer: LazyAdam on the embedding tables, ClippyAdagrad on the rest."""
  import importlib  # pylint: disable=g-import-not-at-top
  api = importlib.import_module(f"tf_opt_ops.{flavor}")
  embeddings = [model.get_layer("user_embedding"), model.get_layer("item_embedding")]
  return api.MultiOptimizer(
      [api.OptimizerBlocks(api.LazyAdam(learning_rate=learning_rate), embeddings)],
      default_optimizer=api.ClippyAdagrad(learning_rate=10 * learning_rate))


def adam_optimizer(flavor, keras, learning_rate):
  if flavor == "legacy":
    return keras.optimizers.legacy.Adam(learning_rate=learning_rate)
  return keras.optimizers.Adam(learning_rate=learning_rate)


def step_timer(keras):
  """A callback recording each training step's wall time and loss."""

  class StepTimer(keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self.step_seconds, self.losses = [], []
      self._start = 0.0

    def on_train_batch_begin(self, batch, logs=None):
      self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
      self.step_seconds.append(time.perf_counter() - self._start)
      self.losses.append(float((logs or {}).get("loss", np.nan)))

  return StepTimer()


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


def train_run(name, flavor, data, args, make_optimizer):
  keras = keras_module(flavor)
  (train_u, train_i, train_y), (test_u, test_i, test_y) = data.split(0.1, args.seed)
  model = build_model(keras, data, args.embedding_dim, args.seed)
  model.compile(optimizer=make_optimizer(keras, model), loss="binary_crossentropy")
  timer = step_timer(keras)
  print(f"\n== {name} ({flavor}) ==", flush=True)
  model.fit({"user": train_u, "item": train_i}, train_y, batch_size=args.batch_size,
            epochs=args.epochs, shuffle=True, verbose=1 if sys.stdout.isatty() else 2,
            callbacks=[timer])
  scores = model.predict({"user": test_u, "item": test_i}, batch_size=8192, verbose=0).ravel()
  # The first step of each run traces the graph: leave it out of the step time.
  steps = np.array(timer.step_seconds[1:] or timer.step_seconds)
  return {
      "name": name,
      "auc": roc_auc(test_y, scores),
      "log_loss": log_loss(test_y, scores),
      "mean_step_ms": float(1e3 * steps.mean()),
      "examples_per_second": float(args.batch_size / steps.mean()),
      "losses": timer.losses,
  }


def render_table(runs):
  base = runs[-1]["mean_step_ms"]
  lines = [
      "| run | AUC | log loss | mean step (ms) | examples/s | speedup vs Adam |",
      "|---|---|---|---|---|---|"
  ]
  for r in runs:
    lines.append(f"| {r['name']} | {r['auc']:.4f} | {r['log_loss']:.4f} | {r['mean_step_ms']:.2f} "
                 f"| {r['examples_per_second']:,.0f} | {base / r['mean_step_ms']:.2f}× |")
  return "\n".join(lines)


def plot(runs, path, title):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
  for r in runs:
    ax1.plot(np.arange(1, len(r["losses"]) + 1), r["losses"], label=r["name"])
  ax1.set_xlabel("training step")
  ax1.set_ylabel("training loss (running mean per epoch)")
  ax1.set_title("Loss")
  ax1.legend()
  names = [r["name"] for r in runs]
  ax2.bar(names, [r["examples_per_second"] for r in runs], color=["tab:blue", "tab:orange"])
  ax2.set_ylabel("examples per second")
  ax2.set_title("Training throughput")
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
  parser.add_argument("--flavor", choices=FLAVORS, default="keras",
                      help="Keras API: keras (Keras 3), tf_keras, legacy (tf_keras OptimizerV2)")
  parser.add_argument("--epochs", type=int, default=2)
  parser.add_argument("--batch-size", type=int, default=1024)
  parser.add_argument("--embedding-dim", type=int, default=32)
  parser.add_argument("--learning-rate", type=float, default=0.002)
  parser.add_argument("--users", type=int, default=200_000, help="generated data only")
  parser.add_argument("--items", type=int, default=50_000, help="generated data only")
  parser.add_argument("--examples", type=int, default=600_000, help="generated data only")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default="demo_out")
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  try:
    data = load_ratings(args.data) if args.data else planted_clicks(args.users, args.items,
                                                                    args.examples, seed=args.seed)
  except DataError as e:
    print(f"demo: {e}", file=sys.stderr)
    return 2
  print(f"data: {data.source}; click rate {data.labels.mean():.3f}", flush=True)
  lr = args.learning_rate
  runs = [
      train_run("tf_opt_ops MultiOptimizer (LazyAdam + ClippyAdagrad)", args.flavor, data, args,
                lambda keras, model: tf_opt_ops_optimizer(args.flavor, model, lr)),
      train_run("Keras Adam", args.flavor, data, args,
                lambda keras, model: adam_optimizer(args.flavor, keras, lr)),
  ]
  os.makedirs(args.out, exist_ok=True)
  table = render_table(runs)
  result = {
      "data": data.source, "flavor": args.flavor, "epochs": args.epochs,
      "batch_size": args.batch_size, "embedding_dim": args.embedding_dim,
      "runs": [{k: v for k, v in r.items() if k != "losses"} for r in runs]
  }
  with open(os.path.join(args.out, "results.json"), "w") as f:
    json.dump(result, f, indent=1)
  plot_path = os.path.join(args.out, "demo.png")
  plot(runs, plot_path, f"{data.source}; flavor {args.flavor}; batch {args.batch_size}")
  print("\n" + table)
  print(f"\nresults: {os.path.join(args.out, 'results.json')}")
  print(f"plot: {plot_path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
