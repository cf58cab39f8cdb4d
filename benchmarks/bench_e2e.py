"""End-to-end benchmark: a whole train step of a DLRM-shaped recommender.

    python -m benchmarks.bench_e2e [--quick] [--rounds N] [--out bench/results]
                                   [--memory-gib 24] [--optimizer rowwise_adagrad]

The model has the shape of DLRM on the Criteo display-advertising data: 26
embedding tables with the Kaggle set's cardinalities (3 to 10,131,227 rows),
each capped at a case's `cap` rows so the run fits the machine; 13 dense
features through a bottom MLP to the embedding dim; the pairwise dot products
of the 27 vectors, with the bottom MLP's output, through a top MLP to one
logit; binary cross-entropy. Indices are uniform over each table (nearly every
example touches its own row of a big table: the most rows an optimizer can
touch; real traffic is skewed and touches fewer).

A step is `tf.function(forward, backward, optimizer)` with:

- `lazy_adam`: our `LazyAdam` on every variable;
- `multi`: our `MultiOptimizer` with `LazyAdam` on the tables and
  `ClippyAdagrad` on the MLPs;
- `composite`: lazy Adam as TF Addons and Merlin write it (unique + segment
  sum, gather, scatter on tables; TensorFlow's fused dense Adam kernel on the
  MLPs, as their Adam base class runs it);
- `adam`: the flavor's stock `Adam`;
- `keras_sgd`: the flavor's stock `SGD` (Keras 3's multiplies the gradient's
  IndexedSlices by the learning rate, which makes it a dense whole-table
  update; tf_keras' scatters the rows into a momentum slot it keeps even at
  momentum 0, which it scales and adds to the table densely);
- `floor`: plain SGD that scatters only the touched rows, the least an
  optimizer can do.

`--optimizer rowwise_adagrad` instead times our `RowwiseAdagrad` on the tables
(`MultiOptimizer`, `LazyAdam` on the MLPs, as TorchRec pairs its fused
row-wise tables with a dense optimizer) against `lazy_adam` and the floor, in
one process per flavor (`optimizer_cases`).

Each case runs in a subprocess per Keras flavor (Keras 3, and tf_keras with
`TF_USE_LEGACY_KERAS=1`), so each has its own peak RSS. Where the contenders'
state does not fit `--memory-gib` in one process (the real table sizes on a
24 GiB machine), they run in two: ours and the composite, then the stock
optimizers, each process with its own floor. On Keras 3, our `LazyAdam` also
runs alone in a process of its own: there no TensorFlow scatter puts the tables
in copy-on-read mode, where each dense `Embedding` read copies a whole table. All contenders train
the same model, so its tables are held once; each contender's first step is
the correctness check, from the same weights, against a NumPy reference of
that optimizer's first step. Then the contenders and two partial steps
(forward; forward and backward) are timed in interleaved rounds, as in
`benchmarks.bench`; "× floor" is the median over rounds of the step time over
the floor's in the same round; the optimizer's share is the median over rounds
of the step's time less the forward-and-backward time.
"""

import argparse
import dataclasses
import importlib
import json
import os
import platform
import time

import numpy as np
import tensorflow as tf

from benchmarks import bench
from tf_opt_ops._op_inputs import handle

# The 26 categorical features of the Criteo Kaggle display-advertising data, as
# DLRM and TorchRec publish them.
CRITEO_KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                      3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                      142572)
DENSE_FEATURES = 13
FLAVORS = ("keras", "tf_keras")
CONTENDERS = {
    # name: (label, the update the table rows get, the update the MLP weights get)
    "lazy_adam": ("ours: LazyAdam", "adam", "adam"),
    "multi": ("ours: MultiOptimizer(LazyAdam, ClippyAdagrad)", "adam", "clippy"),
    "composite": ("composite lazy Adam (TF Addons / Merlin)", "adam", "adam"),
    "adam": ("stock Adam", "stock_adam", "adam"),
    "keras_sgd": ("stock SGD", "sgd", "sgd"),
    "floor": ("floor: SGD scattering the touched rows", "sgd", "sgd"),
}
# Light state (`--light`): our LazyAdam with bfloat16 m and a row-wise v.
LIGHT_CONTENDERS = {
    "lazy_adam_light": ("ours: LazyAdam, bfloat16 m + row-wise v", "adam_rowwise", "adam_rowwise"),
}
LIGHT_OPTIONS = dict(slot_dtype="bfloat16", rowwise_second_moment=True)
# `--optimizer`: another optimizer on the tables, against LazyAdam on everything.
OPTIMIZER_CONTENDERS = {
    "rowwise_adagrad":
        ("ours: MultiOptimizer(RowwiseAdagrad, LazyAdam)", "rowwise_adagrad", "adam"),
}
ROWWISE_ADAGRAD = dict(learning_rate=0.01, epsilon=1e-8)
# Each contender's state, in units of the tables' size, and those whose dense
# whole-table updates allocate table-sized temporaries (for the memory estimate).
STATE_UNITS = {
    "lazy_adam": 2, "multi": 2, "composite": 2, "adam": 2, "keras_sgd": 1, "floor": 0,
    "lazy_adam_light": 0.5, "rowwise_adagrad": 0.1
}
DENSE_TEMPORARIES = ("adam", "keras_sgd")
# Where our LazyAdam also runs alone in a process of its own. The contenders
# above share one model's tables, and the floor's and the composite's
# TensorFlow scatters put them in copy-on-read mode, where each of Keras 3's
# dense Embedding reads copies a whole table; our ops alone leave the mode off.
ALONE_FLAVORS = ("keras",)
# Where all contenders do not fit one process: ours and the composite in one,
# the stock optimizers in another, each with its own floor.
SPLIT_GROUPS = (("lazy_adam", "multi", "composite", "floor"), ("adam", "keras_sgd", "floor"))
# Keras 3's Adam never sums a sparse gradient's duplicate rows: v gets each
# one's square. tf_keras' sums them first, as lazy Adam does.
STOCK_ADAM_TABLE_RULE = {"keras": "adam_undeduplicated", "tf_keras": "adam"}
ADAM = dict(learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
# How far apart two backward passes' per-example gradients may be, relatively.
EXAMPLE_GRADIENT_ERROR = 2e-2
# Large enough that an SGD step moves the weights well past float32 rounding.
SGD_LEARNING_RATE = 0.1
CLIPPY = dict(learning_rate=1e-3, initial_accumulator_value=0.1, variable_relative_threshold=0.1,
              absolute_threshold=1e-7, epsilon=1e-7)


@dataclasses.dataclass(frozen=True)
class DlrmCase:
  cap: int | None  # the most rows a table keeps; None: the real sizes
  dim: int
  batch: int
  bottom: tuple = (512, 256)  # then `dim`
  top: tuple = (512, 256)  # then 1
  cardinalities: tuple = CRITEO_KAGGLE_ROWS

  @property
  def rows(self):
    return tuple(r if self.cap is None else min(r, self.cap) for r in self.cardinalities)

  @property
  def label(self):
    cap = "uncapped" if self.cap is None else f"cap {self.cap:,}"
    return f"{cap}, d={self.dim}, B={self.batch:,}"

  def memory_estimate_gib(self, contenders=tuple(CONTENDERS)):
    """Peak GiB of one process running `contenders` on this case.

    In units of the tables' size: the model, each contender's state (2 slots for
    Adam, 1 for tf_keras' SGD momentum) and one more for the gradients and the
    allocator's slack; the stock optimizers' dense temporaries add 4 of the
    largest table; TensorFlow itself about 1 GiB.
    """
    table_bytes = 4 * self.dim * np.array(self.rows, np.int64)
    units = 2 + sum(STATE_UNITS[name] for name in contenders)
    dense = any(name in DENSE_TEMPORARIES for name in contenders)
    return float(units * table_bytes.sum() + 4 * dense * table_bytes.max()) / 2**30 + 1.0

  def contender_groups(self, memory_gib):
    """The contenders in as few processes as fit `memory_gib`, each with the floor; or None."""
    for groups in ((tuple(CONTENDERS),), SPLIT_GROUPS):
      if all(self.memory_estimate_gib(group) <= memory_gib for group in groups):
        return groups
    return None


def case_from_json(fields):
  """The `DlrmCase` of `dataclasses.asdict(case)` after a JSON round trip."""
  return DlrmCase(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def quick_cases():
  return [DlrmCase(cap=20_000, dim=16, batch=4_096)]


def full_cases():
  # How the picture changes with the cap (d=16), then d=64 at both batches.
  cases = [DlrmCase(cap, 16, 4_096) for cap in (200_000, 1_000_000, 3_000_000, 5_000_000, None)]
  cases += [DlrmCase(1_000_000, 16, 16_384)]
  cases += [DlrmCase(cap, 64, b) for cap in (200_000, 1_000_000) for b in (4_096, 16_384)]
  return cases


# ------------------------------------------------------------------ memory
def _status_mib(field):
  """A `VmRSS`/`VmHWM` line of /proc/self/status in MiB, or None off Linux."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return None


def _reset_peak_rss():
  """Resets VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


# ------------------------------------------------------------------- model
def _flavor_modules(flavor):
  """(the Keras package, our optimizer module) of `flavor`."""
  keras_package = importlib.import_module("keras" if flavor == "keras" else "tf_keras")
  return keras_package, importlib.import_module(f"tf_opt_ops.{flavor}")


def build_model(keras_package, case, seed=0):
  """The DLRM of `case` as a `keras_package.Model`; built, with `.tables` and `.mlps`."""
  layers = keras_package.layers
  n = len(case.rows) + 1
  upper = np.array([i * n + j for i in range(n) for j in range(i + 1, n)], np.int32)

  class Dlrm(keras_package.Model):

    def __init__(self):
      super().__init__(name="dlrm")
      self.tables = [
          layers.Embedding(rows, case.dim, name=f"table_{i}") for i, rows in enumerate(case.rows)
      ]
      self.bottom = [
          layers.Dense(u, activation="relu", name=f"bottom_{i}")
          for i, u in enumerate(case.bottom + (case.dim,))
      ]
      self.top = [
          layers.Dense(u, activation="relu", name=f"top_{i}") for i, u in enumerate(case.top)
      ] + [layers.Dense(1, name="logit")]

    @property
    def mlps(self):
      return self.bottom + self.top

    def call(self, inputs):
      dense, categorical = inputs
      x = dense
      for layer in self.bottom:
        x = layer(x)
      vectors = tf.stack([x] + [t(categorical[:, i]) for i, t in enumerate(self.tables)], axis=1)
      dots = tf.reshape(tf.matmul(vectors, vectors, transpose_b=True), [-1, n * n])
      x = tf.concat([x, tf.gather(dots, upper, axis=1)], axis=1)
      for layer in self.top:
        x = layer(x)
      return x[:, 0]

  keras_package.utils.set_random_seed(seed)
  model = Dlrm()
  model((tf.zeros((1, DENSE_FEATURES)), tf.zeros((1, len(case.rows)), tf.int64)))
  return model


def make_batches(case, count, seed=0):
  rng = np.random.default_rng(seed)
  batches = []
  for _ in range(count):
    dense = np.log1p(rng.exponential(10.0, (case.batch, DENSE_FEATURES))).astype(np.float32)
    categorical = np.stack([rng.integers(0, r, case.batch) for r in case.rows], axis=1)
    labels = (rng.random(case.batch) < 0.25).astype(np.float32)
    batches.append((tf.constant(dense), tf.constant(categorical), tf.constant(labels)))
  return batches


def loss_fn(model, dense, categorical, labels):
  logits = model((dense, categorical))
  return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits))


# -------------------------------------------------------------- contenders
class KerasOptimizerStep:
  """A Keras optimizer of either flavor (a router included)."""

  def __init__(self, optimizer):
    self.optimizer = optimizer

  def build(self, variables):
    self.optimizer.build(variables)

  def apply(self, grads, variables):
    self.optimizer.apply_gradients(zip(grads, variables))


class CompositeLazyAdam:
  """Lazy Adam as TF Addons' and Merlin's `LazyAdam` run it.

  Sparse gradients: the standard-ops row update (`benchmarks.bench`'s
  composite baseline); dense ones: TensorFlow's fused `ResourceApplyAdam`,
  which their Adam base class runs.
  """

  def build(self, variables):
    self.slots = [(tf.Variable(tf.zeros(v.shape, v.dtype)), tf.Variable(tf.zeros(v.shape, v.dtype)))
                  for v in variables]
    self.iterations = tf.Variable(0, dtype=tf.int64)

  def apply(self, grads, variables):
    lr, b1, b2, eps = (ADAM[k] for k in ("learning_rate", "beta_1", "beta_2", "epsilon"))
    t = tf.cast(self.iterations.assign_add(1), tf.float32)
    b1_power, b2_power = tf.pow(b1, t), tf.pow(b2, t)
    lr_t = lr * tf.sqrt(1 - b2_power) / (1 - b1_power)
    for grad, var, (m, v) in zip(grads, variables, self.slots):
      if isinstance(grad, tf.IndexedSlices):
        bench.composite_lazy_adam(var, m, v, grad.values, grad.indices, lr_t, b1, b2, eps)
      else:
        tf.raw_ops.ResourceApplyAdam(var=handle(var), m=m.handle, v=v.handle, beta1_power=b1_power,
                                     beta2_power=b2_power, lr=lr, beta1=b1, beta2=b2, epsilon=eps,
                                     grad=grad)


class RowScatterSGD:
  """The floor: `var[rows] -= lr * grad` on the touched rows only; no state."""

  def build(self, variables):
    del variables

  def apply(self, grads, variables):
    for grad, var in zip(grads, variables):
      if isinstance(grad, tf.IndexedSlices):
        tf.raw_ops.ResourceScatterSub(resource=handle(var), indices=grad.indices,
                                      updates=grad.values * SGD_LEARNING_RATE)
      else:
        tf.raw_ops.AssignSubVariableOp(resource=handle(var), value=grad * SGD_LEARNING_RATE)


def make_contender(name, flavor, model):
  keras_package, ours = _flavor_modules(flavor)
  if name == "lazy_adam":
    return KerasOptimizerStep(ours.LazyAdam(**ADAM))
  if name == "multi":
    return KerasOptimizerStep(
        ours.MultiOptimizer([
            ours.OptimizerBlocks(ours.LazyAdam(**ADAM), model.tables),
            ours.OptimizerBlocks(ours.ClippyAdagrad(**CLIPPY), model.mlps)
        ]))
  if name == "composite":
    return CompositeLazyAdam()
  if name == "adam":
    return KerasOptimizerStep(keras_package.optimizers.Adam(**ADAM))
  if name == "keras_sgd":
    return KerasOptimizerStep(keras_package.optimizers.SGD(learning_rate=SGD_LEARNING_RATE))
  if name == "floor":
    return RowScatterSGD()
  if name == "lazy_adam_light":
    return KerasOptimizerStep(ours.LazyAdam(**ADAM, **LIGHT_OPTIONS))
  if name == "rowwise_adagrad":
    return KerasOptimizerStep(
        ours.MultiOptimizer([
            ours.OptimizerBlocks(ours.RowwiseAdagrad(**ROWWISE_ADAGRAD), model.tables),
            ours.OptimizerBlocks(ours.LazyAdam(**ADAM), model.mlps)
        ]))
  raise ValueError(f"unknown contender {name!r}; expected one of {sorted(CONTENDERS)}")


# -------------------------------------------------------------- correctness
def reference_first_step(rule, w, g, g_squares):
  """NumPy (float64) of an optimizer's first step from fresh state.

  `w`: the weights; `g`: the gradient, duplicate rows summed; `g_squares`: the
  sum of each duplicate's squared gradient (`g * g` for a dense gradient).
  """
  w, g = w.astype(np.float64), g.astype(np.float64)
  if rule == "sgd":
    return w - SGD_LEARNING_RATE * g
  if rule in ("adam", "adam_undeduplicated"):
    lr, b1, b2, eps = (ADAM[k] for k in ("learning_rate", "beta_1", "beta_2", "epsilon"))
    alpha = lr * np.sqrt(1 - b2) / (1 - b1)
    v = (1 - b2) * (g * g if rule == "adam" else g_squares)
    return w - alpha * ((1 - b1) * g) / (np.sqrt(v) + eps)
  if rule == "adam_rowwise":  # v: the mean of each row's g^2 (a 1-D variable's rows are elements)
    lr, b1, b2, eps = (ADAM[k] for k in ("learning_rate", "beta_1", "beta_2", "epsilon"))
    alpha = lr * np.sqrt(1 - b2) / (1 - b1)
    mean_square = (g * g).reshape(len(g), -1).mean(axis=1).reshape((-1,) + (1,) * (g.ndim - 1))
    return w - alpha * ((1 - b1) * g) / (np.sqrt((1 - b2) * mean_square) + eps)
  if rule == "rowwise_adagrad":  # from a zero accumulator: each row's mean g^2
    mean_square = (g * g).reshape(len(g), -1).mean(axis=1).reshape((-1,) + (1,) * (g.ndim - 1))
    return w - ROWWISE_ADAGRAD["learning_rate"] * g / (np.sqrt(mean_square) +
                                                       ROWWISE_ADAGRAD["epsilon"])
  if rule == "clippy":
    c = CLIPPY
    p = 1 / np.sqrt(c["initial_accumulator_value"] + c["epsilon"])
    delta = c["learning_rate"] * g * p
    max_delta = c["variable_relative_threshold"] * np.abs(w) + c["absolute_threshold"]
    with np.errstate(divide="ignore"):
      per_element = np.where(delta == 0, 1.0, max_delta / np.abs(delta))
    return w - delta * min(1.0, per_element.min())
  raise ValueError(f"unknown rule {rule!r}")


class FirstStepCheck:
  """Weights and gradients at the start, to check each contender's first step.

  Holds only the rows a batch touches (plus a sample it does not) of each
  table, and the MLP weights; `restore()` puts them back between contenders.
  """

  def __init__(self, model, grads, seed=0):
    rng = np.random.default_rng(seed)
    table_vars = [t.embeddings for t in model.tables]
    mlp_vars = [v for layer in model.mlps for v in layer.trainable_weights]
    table_grads, mlp_grads = grads[:len(table_vars)], grads[len(table_vars):]
    # (variable, probe rows, weights there, summed gradient there, summed squares there)
    self.tables = []
    for var, grad in zip(table_vars, table_grads):
      indices = grad.indices.numpy()
      rows_total = int(var.shape[0])
      untouched = np.setdiff1d(rng.choice(rows_total, min(rows_total, 32), replace=False), indices)
      probe = np.union1d(indices, untouched)
      values = grad.values.numpy().astype(np.float64)
      g, g_squares, g_abs = (
          np.zeros((len(probe), int(var.shape[1])), np.float64) for _ in range(3))
      at = np.searchsorted(probe, indices)
      np.add.at(g, at, values)
      np.add.at(g_squares, at, values * values)
      np.add.at(g_abs, at, np.abs(values))
      w0 = tf.gather(tf.convert_to_tensor(var), probe).numpy()
      self.tables.append((var, probe, w0, g, g_squares, g_abs))
    self.mlps = [(var, np.array(var.numpy()), g.numpy().astype(np.float64))
                 for var, g in zip(mlp_vars, mlp_grads)]

  def restore(self):
    for var, probe, w0, *_ in self.tables:
      tf.raw_ops.ResourceScatterUpdate(resource=handle(var), indices=probe, updates=w0)
    for var, w0, _ in self.mlps:
      var.assign(w0)

  def verify(self, name, table_rule, mlp_rule):
    """Raises AssertionError unless the weights are the first step of the rules' optimizers."""
    checks = [(f"{var.name} (rows)", tf.gather(tf.convert_to_tensor(var),
                                               probe).numpy(), w0, g, g_squares, g_abs, table_rule)
              for var, probe, w0, g, g_squares, g_abs in self.tables]
    checks += [
        (var.name, var.numpy(), w0, g, g * g, np.abs(g), mlp_rule) for var, w0, g in self.mlps
    ]
    for what, after, w0, g, g_squares, g_abs, rule in checks:
      expected = reference_first_step(rule, w0, g, g_squares)
      moved = np.abs(expected - w0).max()
      # The step's graph computes each example's gradient in another order than the
      # check's own backward pass (seen: 1% apart). Where a row's examples cancel, its
      # sum is far smaller than theirs, so the slack is that of the sum of their
      # magnitudes (seen: a 24-row table at B=16,384, its update 14% off).
      slack = np.zeros_like(expected)
      for sign in (-1, 1):
        shifted = g + sign * EXAMPLE_GRADIENT_ERROR * g_abs
        slack = np.maximum(slack,
                           np.abs(reference_first_step(rule, w0, shifted, g_squares) - expected))
      excess = np.abs(after - expected) - slack
      error = excess.max()
      # 1% of the largest update, plus float32 rounding of the weights, beyond that
      # slack. A wrong rule is off by the whole update.
      tolerance = 1e-2 * moved + 4 * np.finfo(np.float32).eps * np.abs(w0).max()
      if not moved > tolerance or not error <= tolerance:
        raise AssertionError(
            f"{name}: the first step of {what} is not the {rule} reference: max error {error:.3g} "
            f"beyond the gradients' rounding slack, "
            f"update size {moved:.3g}, tolerance {tolerance:.3g}.")


# ------------------------------------------------------------------ worker
def run_case(case, flavor, rounds, contenders=tuple(CONTENDERS), batches=4):
  """Builds, checks and times every contender on `case` in `flavor`; returns a dict."""
  keras_package, _ = _flavor_modules(flavor)
  result = {"flavor": flavor, "case": dataclasses.asdict(case), "contenders": {}}
  result["rss_start_mib"] = _status_mib("VmRSS")
  model = build_model(keras_package, case)
  variables = [t.embeddings for t in model.tables]
  variables += [v for layer in model.mlps for v in layer.trainable_weights]
  steps = make_batches(case, batches)
  result["rss_model_mib"] = _status_mib("VmRSS")  # and TensorFlow, and the batches

  @tf.function
  def forward(dense, categorical, labels):
    return loss_fn(model, dense, categorical, labels)

  def gradients(dense, categorical, labels):
    with tf.GradientTape() as tape:
      loss = loss_fn(model, dense, categorical, labels)
    return tape.gradient(loss, variables)

  @tf.function
  def forward_backward(*batch):
    # A step less its optimizer. Returning the gradients would add output handling; a
    # control dependency on them lets grappler prune the backward pass (seen: faster than
    # the forward alone). One element of each keeps every gradient computed.
    grads = gradients(*batch)
    return tf.add_n(
        [tf.reduce_sum((g.values if isinstance(g, tf.IndexedSlices) else g)[:1]) for g in grads])

  def make_step(contender):

    @tf.function
    def step(*batch):
      contender.apply(gradients(*batch), variables)

    return step

  check = FirstStepCheck(model, tf.function(gradients)(*steps[0]))
  variants = {"forward": forward, "forward_backward": forward_backward}
  for name in contenders:
    label, table_rule, mlp_rule = {**CONTENDERS, **LIGHT_CONTENDERS, **OPTIMIZER_CONTENDERS}[name]
    table_rule = STOCK_ADAM_TABLE_RULE[flavor] if table_rule == "stock_adam" else table_rule
    peak_known = _reset_peak_rss()
    before = _status_mib("VmRSS")
    contender = make_contender(name, flavor, model)
    contender.build(variables)
    variants[name] = make_step(contender)
    variants[name](*steps[0])
    check.verify(name, table_rule, mlp_rule)
    variants[name](*steps[1 % len(steps)])
    if len(contenders) > 1:
      # The next contender starts from the same weights. (Restoring scatters rows,
      # which puts the tables in copy-on-read mode: a contender alone is spared.)
      check.restore()
    result["contenders"][name] = {
        "label": label,
        # What building it and its first two steps added to the process at their peak.
        "added_peak_mib": _status_mib("VmHWM") - before if peak_known and before else None,
    }
  result["checked"] = True
  times = bench.time_interleaved(variants, steps, rounds)
  result["peak_rss_mib"] = _status_mib("VmHWM")
  result["forward"] = bench.summary(times["forward"])
  result["forward_backward"] = bench.summary(times["forward_backward"])
  floor = times.get("floor")
  for name in contenders:
    r = result["contenders"][name]
    r["step"] = bench.summary(times[name])
    r["examples_per_s"] = case.batch / (r["step"]["median_ms"] * 1e-3)
    r["optimizer_ms"] = float(
        np.median([a - b for a, b in zip(times[name], times["forward_backward"])]))
    if floor is not None:
      r["x_floor"] = bench.summary([a / b for a, b in zip(times[name], floor)])
  return result


def run_worker_subprocess(case, flavor, rounds, contenders=tuple(CONTENDERS)):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  if flavor == "tf_keras":
    env["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is tf_keras there, as for a tf_keras user
  spec = {"case": dataclasses.asdict(case), "flavor": flavor, "contenders": list(contenders)}
  return bench.run_json_worker("benchmarks.bench_e2e",
                               ["--worker", json.dumps(spec), "--rounds",
                                str(rounds)], env, "E2E_JSON ",
                               f"the end-to-end benchmark of {case.label} in {flavor}")


def run_in_groups(case, flavor, rounds, groups):
  """`run_case`'s result for `groups` of contenders, each group in a process of its own.

  Each contender's × floor is against the floor of its own process; the
  forward and backward times, and the floor's row, are the first process's.
  """
  results = [run_worker_subprocess(case, flavor, rounds, group) for group in groups]
  merged = results[0]
  for result in results[1:]:
    merged["contenders"].update(
        {name: c for name, c in result["contenders"].items() if name not in merged["contenders"]})
  merged["contenders"] = {name: merged["contenders"][name] for name in CONTENDERS}
  merged["peak_rss_mib"] = max(r["peak_rss_mib"] or 0 for r in results) or None
  merged["groups"] = [list(group) for group in groups]
  if flavor in ALONE_FLAVORS:
    alone = run_worker_subprocess(case, flavor, rounds, ("lazy_adam",))["contenders"]["lazy_adam"]
    floor_ms = merged["contenders"]["floor"]["step"]["median_ms"]
    alone["x_floor_across"] = alone["step"]["median_ms"] / floor_ms
    merged["alone"] = alone
  return merged


def light_cases(memory_gib, dim=64, batch=4_096):
  """[(case, contenders)]: the uncapped tables with light state alone (and the floor); then
  float32 slots and light state at the largest cap whose estimate fits `memory_gib`."""
  uncapped = DlrmCase(None, dim, batch)
  light = ("lazy_adam_light", "floor")
  both = ("lazy_adam", "lazy_adam_light", "floor")
  caps = [
      c for c in (1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000, 6_000_000)
      if DlrmCase(c, dim, batch).memory_estimate_gib(both) <= memory_gib
  ]
  cases = [(uncapped, light)]
  if caps:
    cases.append((DlrmCase(caps[-1], dim, batch), both))
  return cases


def run_light(args, rounds, flavor="tf_keras"):
  """The light-state run (`--light`): each case in a process of its own; a table of results."""
  rows = []
  for case, contenders in light_cases(args.memory_gib):
    estimate = case.memory_estimate_gib(contenders)
    print(f"DLRM {case.label}, {flavor}: {', '.join(contenders)} (estimate {estimate:.1f} GiB)",
          flush=True)
    result = run_worker_subprocess(case, flavor, rounds, contenders)
    table_gib = 4 * case.dim * sum(case.rows) / 2**30
    for name in contenders:
      if name == "floor":
        continue
      r = result["contenders"][name]
      rows.append(f"| {case.label} | {table_gib:.2f} | {r['label']} | {_fmt_ms(r['step'])} | "
                  f"{1e3 / r['step']['median_ms']:.1f} | {r['x_floor']['median_ms']:.2f}× | "
                  f"{result['peak_rss_mib'] / 1024:.1f} |")
  table = "\n".join([
      f"Light state end to end ({flavor}, {platform.processor() or platform.machine()}, "
      f"{os.cpu_count()} cores, TensorFlow {tf.__version__}, {rounds} rounds):", "",
      "| case | tables (GiB) | optimizer | step ms (min–max) | steps/s | × floor | "
      "process peak RSS (GiB) |", "|---|---|---|---|---|---|---|", *rows
  ])
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "e2e_light.md"), "w") as f:
    f.write(table + "\n")
  print(table, flush=True)


def optimizer_cases(quick):
  """The `--optimizer` cases: the issue's table width (d=64) at the cap and batch of the full
  run's largest d=64 case, or the quick case."""
  return quick_cases() if quick else [DlrmCase(1_000_000, 64, 16_384)]


def run_optimizer(args, rounds):
  """The `--optimizer` run: `lazy_adam`, the optimizer's contender and the floor in one process
  per flavor and case; a table of results."""
  contenders = ("lazy_adam", args.optimizer, "floor")
  rows = []
  for case in optimizer_cases(args.quick):
    estimate = case.memory_estimate_gib(contenders)
    if estimate > args.memory_gib:
      print(
          f"DLRM {case.label}: skipped, needs about {estimate:.0f} GiB "
          f"(--memory-gib {args.memory_gib:g})", flush=True)
      continue
    for flavor in FLAVORS:
      print(f"DLRM {case.label}, {flavor}: {', '.join(contenders)}", flush=True)
      result = run_worker_subprocess(case, flavor, rounds, contenders)
      for name in contenders[:-1]:
        r = result["contenders"][name]
        rows.append(f"| {case.label} | {flavor} | {r['label']} | {_fmt_ms(r['step'])} | "
                    f"{r['examples_per_s']:,.0f} | {r['optimizer_ms']:.3g} | "
                    f"{r['x_floor']['median_ms']:.2f}× |")
        print(rows[-1], flush=True)  # as it comes: a long run's flavors finish far apart
  table = "\n".join([
      f"DLRM step by the tables' optimizer ({platform.processor() or platform.machine()}, "
      f"{os.cpu_count()} cores, TensorFlow {tf.__version__}, {rounds} rounds):", "",
      "| case | flavor | optimizer | step ms (min–max) | examples/s | optimizer ms | × floor |",
      "|---|---|---|---|---|---|---|", *rows
  ])
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, f"e2e_{args.optimizer}.md"), "w") as f:
    f.write(table + "\n")
  print(table, flush=True)


# ------------------------------------------------------------------ report
def _fmt_ms(s):
  return f"{s['median_ms']:.3g} ({s['min_ms']:.3g}–{s['max_ms']:.3g})"


def _fmt_ratio(s):
  return f"{s['median_ms']:.2f}× ({s['min_ms']:.2f}–{s['max_ms']:.2f})"


def _mib(value):
  return "—" if value is None else f"{value:,.0f}"


def render(report):
  lines = [
      f"Machine: {report['machine']}; TensorFlow {report['tf_version']}.", "",
      "### Whole DLRM train step (Criteo Kaggle table sizes, capped)", "",
      "Step: forward, backward, optimizer in one `tf.function`; ms median (min–max) over "
      "interleaved rounds. × floor: per-round ratio to the floor's step. Optimizer: step − "
      "(forward + backward), median over rounds. Memory added: the process's peak RSS while the "
      "contender was built and ran its first two steps, less its RSS before (every contender "
      "trains the same model, whose tables are held once). Keras 3's stock SGD multiplies the "
      "sparse gradient by the learning rate, which makes it a whole-table update; tf_keras' "
      "keeps a momentum slot even at momentum 0 and scales it, then adds it to the table, "
      "densely every step. The floor scatters only the touched rows."
  ]
  lines += ["", *render_summary(report)]
  for label, error in report.get("failed", {}).items():
    lines.append(f"\nFailed: {label}: {error.strip().splitlines()[-1]}")
  for label, estimate in report.get("skipped", {}).items():
    lines.append(f"\nNot run: {label}, needs about {estimate:.0f} GiB (--memory-gib "
                 f"{report.get('memory_gib', 0):g}).")
  for label, flavors in report["cases"].items():
    lines += ["", f"#### {label}", ""]
    lines += [
        "| flavor | optimizer | step ms | examples/s | × floor | forward ms | backward ms | "
        "optimizer ms | memory added MiB |", "|---|---|---|---|---|---|---|---|---|"
    ]
    for flavor, r in flavors.items():
      fwd = r["forward"]["median_ms"]
      bwd = r["forward_backward"]["median_ms"] - fwd
      for c in r["contenders"].values():
        ratio = _fmt_ratio(c["x_floor"]) if "x_floor" in c else "—"
        lines.append(f"| {flavor} | {c['label']} | {_fmt_ms(c['step'])} | "
                     f"{c['examples_per_s']:,.0f} | {ratio} | {fwd:.3g} | {bwd:.3g} | "
                     f"{c['optimizer_ms']:.3g} | {_mib(c['added_peak_mib'])} |")
    first = next(iter(flavors.values()))
    if "groups" in first and len(first["groups"]) > 1:
      lines.append("\nRun as " +
                   " and ".join("(" + ", ".join(group) + ")" for group in first["groups"]) +
                   ", a process each, for memory: each × floor is against the floor in the "
                   "contender's own process; forward and backward are the first process's.")
    for flavor, r in flavors.items():
      if "alone" in r:
        a = r["alone"]
        lines.append(f"\n{flavor}, ours: LazyAdam alone in its process (no TensorFlow scatter "
                     f"puts the tables in copy-on-read mode): {_fmt_ms(a['step'])} ms, "
                     f"{a['examples_per_s']:,.0f} examples/s, {a['x_floor_across']:.2f}× the "
                     f"floor above (a ratio across processes).")
    case = case_from_json(first["case"])
    table_mib = sum(case.rows) * case.dim * 4 / 2**20
    lines.append(f"\nTables: {sum(case.rows):,} rows of {sum(case.cardinalities):,} "
                 f"({table_mib:,.0f} MiB); RSS with the model built, then process peak: " +
                 ", ".join(f"{f} {_mib(r['rss_model_mib'])}, {_mib(r['peak_rss_mib'])} MiB"
                           for f, r in flavors.items()) + ".")
  return "\n".join(lines)


def render_summary(report):
  """One line per case and flavor: each contender's × floor, and how far ahead ours is."""
  short = {
      "lazy_adam": "ours: LazyAdam", "multi": "ours: MultiOptimizer", "composite": "composite",
      "adam": "stock Adam", "keras_sgd": "stock SGD"
  }
  names = list(short)
  lines = [
      "| case | flavor | " + " | ".join(f"{short[n]} × floor" for n in names) +
      " | stock Adam / ours | composite / ours | ours, examples/s | ours alone, examples/s "
      "(× floor) |", "|---|---|" + "---|" * (len(names) + 4)
  ]
  for label, flavors in report["cases"].items():
    for flavor, r in flavors.items():
      x = {n: _x_floor(flavors, flavor, n) for n in names}
      ours = r["contenders"]["lazy_adam"]
      lines.append(f"| {label} | {flavor} | " + " | ".join(f"{x[n]:.2f}×" for n in names) +
                   f" | {x['adam'] / x['lazy_adam']:.2f}× | {x['composite'] / x['lazy_adam']:.2f}× "
                   f"| {ours['examples_per_s']:,.0f} | {_alone(r)} |")
  return lines


def _alone(flavor_result):
  alone = flavor_result.get("alone")
  if alone is None:
    return "—"
  return f"{alone['examples_per_s']:,.0f} ({alone['x_floor_across']:.2f}×)"


def _x_floor(case_result, flavor, name):
  """The contender's median step time over the floor's, or NaN where not run."""
  contender = case_result.get(flavor, {}).get("contenders", {}).get(name, {})
  return contender.get("x_floor", {}).get("median_ms", np.nan)


def plot(report, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import matplotlib.ticker
  labels = list(report["cases"])
  if not labels:
    return  # every case failed or was skipped
  flavors = [f for f in FLAVORS if any(f in report["cases"][label] for label in labels)]
  fig, axes = plt.subplots(1, len(flavors), figsize=(7 * len(flavors), 5), squeeze=False)
  for ax, flavor in zip(axes[0], flavors):
    names = [n for n in CONTENDERS if n != "floor"]
    width = 0.8 / len(names)
    x = np.arange(len(labels))
    for i, name in enumerate(names):
      values = [_x_floor(report["cases"][label], flavor, name) for label in labels]
      ax.bar(x + (i - (len(names) - 1) / 2) * width, values, width, label=CONTENDERS[name][0])
    ax.axhline(1.0, color="black", linewidth=0.8)
    heights = [bar.get_height() for bar in ax.patches]
    if heights and np.nanmax(heights) > 5:
      ax.set_yscale("log")  # stock optimizers' dense updates grow with the tables
      ax.set_yticks([t for t in (0.5, 1, 2, 5, 10, 20, 50, 100) if t < 2 * np.nanmax(heights)])
      ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g×"))
      ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
      ax.set_ylim(top=np.nanmax(heights) * 4)  # room for the legend above the bars
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("train step time / floor's (×)")
    ax.set_title(f"Whole DLRM train step, {flavor}")
    ax.legend(fontsize=7, loc="upper left")
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def main(argv=None):
  parser = bench.argument_parser(__doc__, "one small case, about a minute")
  parser.add_argument("--memory-gib", type=float, default=24.0,
                      help="skip cases whose estimated peak memory is above this")
  parser.add_argument(
      "--only", default=None, help="run only the full-mode cases whose label contains one of these "
      "';'-separated strings (e.g. 'cap 200,000, d=16, B=4,096;cap 1,000,000, d=16')")
  parser.add_argument(
      "--light", action="store_true",
      help="light state: uncapped tables at d=64 with bfloat16 m + row-wise v, against float32 "
      "slots at the largest cap that fits (tf_keras)")
  parser.add_argument(
      "--optimizer", choices=tuple(OPTIMIZER_CONTENDERS), default=None,
      help="instead: this optimizer on the tables against LazyAdam, d=64 (both flavors)")
  parser.add_argument("--worker", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  rounds = args.rounds or (3 if args.quick else 7)
  if args.worker:
    spec = json.loads(args.worker)
    case = case_from_json(spec["case"])
    result = run_case(case, spec["flavor"], rounds, tuple(spec["contenders"]))
    print("E2E_JSON " + json.dumps(result), flush=True)
    return

  if args.light:
    run_light(args, rounds)
    return
  if args.optimizer:
    run_optimizer(args, rounds)
    return
  started = time.time()
  report = {
      "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
      "tf_version": tf.__version__, "quick": args.quick, "memory_gib": args.memory_gib, "cases": {},
      "skipped": {}, "failed": {}
  }
  stem = os.path.join(args.out, "e2e_quick" if args.quick else "e2e_full")
  cases = quick_cases() if args.quick else full_cases()
  if args.only:
    wanted = [part.strip() for part in args.only.split(";")]
    cases = [case for case in cases if any(w in case.label for w in wanted)]
  for case in cases:
    groups = case.contender_groups(args.memory_gib)
    if groups is None:
      estimate = max(case.memory_estimate_gib(group) for group in SPLIT_GROUPS)
      print(
          f"DLRM {case.label}: skipped, needs about {estimate:.0f} GiB "
          f"(--memory-gib {args.memory_gib:g})", flush=True)
      report["skipped"][case.label] = estimate
      continue
    try:
      results = {}
      for flavor in FLAVORS:
        print(f"DLRM {case.label}, {flavor}, {len(groups)} process(es) ...", flush=True)
        results[flavor] = run_in_groups(case, flavor, rounds, groups)
      report["cases"][case.label] = results
    except RuntimeError as e:  # one case's failure does not lose the others'
      print(e, flush=True)
      report["failed"][case.label] = str(e)[-2000:]
    report["seconds"] = time.time() - started
    # After every case: a long run's results survive a later case's failure.
    bench.write_results(report, stem, render, plot)
  if report["failed"]:
    raise SystemExit(f"failed: {', '.join(report['failed'])} (see {stem}.json)")


if __name__ == "__main__":
  main()
