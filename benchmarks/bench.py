"""Benchmark: the fused ops against what users run today, and against memory bandwidth.

    python -m benchmarks.bench [--quick] [--rounds N] [--out bench/results]
    python -m benchmarks.bench --xla     # only Keras 3 LazyAdam with and without XLA
    python -m benchmarks.bench --light   # only sparse lazy Adam by slot layout
    python -m benchmarks.bench --features  # LazyAdam, ClippyAdagrad with Keras' optimizer features
    python -m benchmarks.bench --rowwise   # row-wise Adagrad against FBGEMM's CPU step
    python -m benchmarks.bench --features --rows 1000000 --dim 128 --batch 131072  # one size
    python -m benchmarks.bench --features --feature use_ema  # one feature (repeatable)

Every variant of a case runs inside a `tf.function`, in interleaved rounds
(A B C A B C ...), each round timing enough steps for >= 20 ms; times are
median (min-max) over rounds, and ratios are taken within one run, since this
kind of shared machine drifts by tens of percent between runs. The Clippy
comparison with TensorFlow Recommenders runs in a `TF_USE_LEGACY_KERAS=1`
subprocess (TFRS refuses Keras 3), with our op timed in the same rounds there.
Keras 3 LazyAdam runs in a `tf.function` without and with `jit_compile` (the
op's XLA kernel), and with `jit_compile` as it ran before XLA kernels (the
standard-ops fallback), all in the same rounds. A whole recommender train
step is `benchmarks.bench_e2e`'s.
"""

import argparse
import dataclasses
import functools
import gc
import json
import os
import platform
import subprocess
import sys
import threading
import time

import numpy as np

ROUND_SECONDS = 0.02
# Untimed calls of each variant first: tracing, and the library's one-time copy of a large table
# into huge pages on its 4th sparse update (MADV_COLLAPSE, seconds at 1,000,000x128), which with
# gradient accumulation (an update every 2nd call) comes on the 8th call.
WARMUP_CALLS = 12


# ---------------------------------------------------------------- timing
def time_interleaved(variants, step_args, rounds):
  """{name: [ms per step per round]} for `variants` ({name: fn(*args)})."""
  for fn in variants.values():
    for k in range(max(WARMUP_CALLS, len(step_args))):
      fn(*step_args[k % len(step_args)])
  reps = {}
  for name, fn in variants.items():
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < ROUND_SECONDS or n < 2:
      fn(*step_args[n % len(step_args)])
      n += 1
    reps[name] = n
  times = {name: [] for name in variants}
  for _ in range(rounds):
    for name, fn in variants.items():
      start = time.perf_counter()
      for k in range(reps[name]):
        fn(*step_args[k % len(step_args)])
      times[name].append((time.perf_counter() - start) / reps[name] * 1e3)
  return times


def summary(samples):
  return {
      "median_ms": float(np.median(samples)), "min_ms": float(np.min(samples)),
      "max_ms": float(np.max(samples))
  }


def fmt(s):
  return f"{s['median_ms']:.3g} ({s['min_ms']:.3g}–{s['max_ms']:.3g})"


# ------------------------------------------------------------- bandwidth
def machine():
  """The CPU model, its cores and the instruction-set level the CPU kernels run."""
  import tf_opt_ops
  model = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration):
    pass
  return f"{model}, {os.cpu_count()} cores, CPU kernels {tf_opt_ops.cpu_isa()}"


def bandwidth_limit(megabytes, rounds):
  """In-place a += b on arrays far larger than cache, 1 and 2 threads: GB/s.

  Counted as 3 streams (read a, read b, write a), the byte count of an
  optimizer's in-place row update. NumPy releases the GIL in ufuncs, so two
  Python threads on two halves run on two cores.
  """
  n = megabytes * 2**20 // 4
  a = np.ones(n, np.float32)
  b = np.ones(n, np.float32)
  results = {}
  for threads in (1, 2):
    chunks = np.array_split(np.arange(n), threads)
    bounds = [(c[0], c[-1] + 1) for c in chunks]

    def work(lo, hi):
      np.add(a[lo:hi], b[lo:hi], out=a[lo:hi])

    samples = []
    for _ in range(rounds):
      pool = [threading.Thread(target=work, args=bound) for bound in bounds]
      start = time.perf_counter()
      for t in pool:
        t.start()
      for t in pool:
        t.join()
      samples.append(3 * 4 * n / (time.perf_counter() - start) / 1e9)
    results[threads] = {"median_gbs": float(np.median(samples)), "max_gbs": float(np.max(samples))}
  return results


# ------------------------------------------------------------- lazy Adam
@dataclasses.dataclass
class AdamCase:
  rows: int
  dim: int
  batch: int
  duplicates: bool = False  # each touched row appears ~4 times in the batch

  @property
  def label(self):
    return f"{self.rows:,}×{self.dim}, B={self.batch:,}" + (" dup×4" if self.duplicates else "")


def composite_lazy_adam(var, m, v, grad, indices, lr_t, beta_1, beta_2, epsilon):
  """Lazy Adam as Python optimizers write it today (TF Addons / Merlin): unique +
  segment sum, gather, scatter back; `lr_t` is the step's bias-corrected rate.
  The same code is the optimizers' XLA fallback."""
  from tf_opt_ops import _standard_ops
  return _standard_ops.sparse_lazy_adam(var, m, v, grad, indices, lr=lr_t, beta_1=beta_1,
                                        beta_2=beta_2, epsilon=epsilon, step=None)


def keras3_composite_lazy_adam(**kwargs):
  """TF Addons' LazyAdam written on Keras 3's Adam (TF Addons has no Keras 3 version): a
  sparse gradient updates its rows with the composite above, at the step's corrected rate."""
  import keras
  import tensorflow as tf

  from tf_opt_ops import _standard_ops

  class CompositeLazyAdam(keras.optimizers.Adam):

    def update_step(self, gradient, variable, learning_rate):
      if not isinstance(gradient, tf.IndexedSlices):
        return super().update_step(gradient, variable, learning_rate)
      i = self._get_variable_index(variable)
      _standard_ops.sparse_lazy_adam(variable, self._momentums[i], self._velocities[i],
                                     gradient.values, gradient.indices, lr=learning_rate,
                                     beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
                                     step=self.iterations + 1)

  return CompositeLazyAdam(**kwargs)


def optimizer_level(case):
  """Whether `case` is also timed through the Keras 3 optimizers (the sizes users train)."""
  return case.rows >= 1_000_000 and case.dim >= 64 and case.batch >= 16_384 and not case.duplicates


def count_ops(fn, *args):
  graph = fn.get_concrete_function(*args).graph
  return len(graph.get_operations())


def bench_lazy_adam(case, rounds, keras_adam, seed=0):
  import keras
  import tensorflow as tf

  from tf_opt_ops import ops
  from tf_opt_ops import reference

  rng = np.random.default_rng(seed)
  tables = [tf.Variable(tf.random.normal((case.rows, case.dim), seed=seed)) for _ in range(2)]
  slots = [(tf.Variable(tf.zeros(
      (case.rows, case.dim))), tf.Variable(tf.zeros((case.rows, case.dim)))) for _ in range(2)]
  unique_rows = case.batch // 4 if case.duplicates else case.batch
  steps = []
  for _ in range(4):
    rows = rng.choice(case.rows, unique_rows, replace=False)
    indices = np.resize(rows, case.batch) if case.duplicates else rows
    rng.shuffle(indices)
    steps.append((tf.constant(indices.astype(np.int64)),
                  tf.constant(rng.standard_normal((case.batch, case.dim)).astype(np.float32))))
  lr, b1, b2, eps, t = 0.001, 0.9, 0.999, 1e-7, 10
  # The composite gets the step size the fused op computes from the same inputs.
  lr_t = reference.adam_step("float32", lr, b1, b2, eps, b1**t, b2**t)["lr_t"]

  @tf.function
  def fused(indices, grad):
    ops.sparse_lazy_adam(tables[0], *slots[0], grad, indices, lr=lr, beta_1=b1, beta_2=b2,
                         epsilon=eps, beta_1_power=b1**t, beta_2_power=b2**t)

  @tf.function
  def composite(indices, grad):
    composite_lazy_adam(tables[1], *slots[1], grad, indices, lr_t, b1, b2, eps)

  variants = {"fused": fused, "composite": composite}
  if keras_adam:
    keras_table = keras.Variable(tables[1].read_value())
    adam = keras.optimizers.Adam(learning_rate=lr)
    adam.build([keras_table])

    @tf.function
    def keras3_adam(indices, grad):
      adam.apply([tf.IndexedSlices(grad, indices, tf.constant([case.rows, case.dim], tf.int64))],
                 [keras_table])

    variants["keras3_adam"] = keras3_adam
  if optimizer_level(case):
    # What users call: `apply_gradients` with an IndexedSlices, ours and the composite's.
    from tf_opt_ops import keras as k3_ops
    for name, optimizer in (("keras3_ours", k3_ops.LazyAdam(learning_rate=lr)),
                            ("keras3_composite", keras3_composite_lazy_adam(learning_rate=lr))):
      variants[name] = _apply_gradients_step(optimizer, keras.Variable(tables[1].read_value()),
                                             case)
  times = time_interleaved(variants, steps, rounds)
  result = {name: summary(samples) for name, samples in times.items()}
  result["bytes"] = 7 * unique_rows * case.dim * 4 + 8 * case.batch
  result["ops"] = {
      "fused": count_ops(fused, *steps[0]), "composite": count_ops(composite, *steps[0])
  }
  return result


def _apply_gradients_step(optimizer, table, case, unscale=None):
  """A tf.function applying an IndexedSlices of (indices, grad) to `table`, through `unscale`
  (a LossScaleOptimizer's `get_unscaled_gradients`) when given."""
  import tensorflow as tf

  if hasattr(optimizer, "build"):  # legacy OptimizerV2 makes its slots in apply_gradients
    optimizer.build([table])
  shape = tf.constant([case.rows, case.dim], tf.int64)

  @tf.function
  def step(indices, grad):
    grads = [tf.IndexedSlices(grad, indices, shape)]
    if unscale is not None:
      grads = unscale(grads)
    optimizer.apply_gradients(zip(grads, [table]))

  return step


def distinct_row_arrays(case, seed, count=4):
  """`count` steps of NumPy (int64 indices, float32 gradient rows) naming `case.batch` distinct
  rows each; the FBGEMM worker (no TensorFlow) trains on the same ones."""
  rng = np.random.default_rng(seed)
  steps = []
  for _ in range(count):
    rows = rng.choice(case.rows, case.batch, replace=False)
    steps.append((rows.astype(np.int64), rng.standard_normal(
        (case.batch, case.dim)).astype(np.float32)))
  return steps


def distinct_row_steps(case, seed, count=4):
  """`distinct_row_arrays` as TensorFlow constants."""
  import tensorflow as tf
  return [(tf.constant(indices), tf.constant(grad))
          for indices, grad in distinct_row_arrays(case, seed, count)]


# ------------------------------------------------ Keras 3 LazyAdam in XLA
def xla_cases(quick):
  if quick:
    return [AdamCase(1_000_000, 64, 16_384)]
  return [AdamCase(1_000_000, 64, 16_384), AdamCase(1_000_000, 128, 131_072)]


def bench_keras3_xla(case, rounds, seed=0):
  """Keras 3 LazyAdam's apply in a tf.function: without XLA (the fused op), with
  `jit_compile=True` (the op's XLA kernel, a custom call updating the tables in
  place) and with `jit_compile=True` where the op has no XLA kernel (the
  standard-ops fallback, what ran inside XLA before). Each on its own table."""
  import keras
  import tensorflow as tf

  from tf_opt_ops import _loader
  from tf_opt_ops import keras as k3_ops

  steps = distinct_row_steps(case, seed)
  shape = tf.constant([case.rows, case.dim], tf.int64)

  def variant(jit_compile):
    table = keras.Variable(tf.random.normal((case.rows, case.dim), seed=seed))
    opt = k3_ops.LazyAdam(learning_rate=0.001)
    opt.build([table])

    @tf.function(jit_compile=jit_compile)
    def step(indices, grad):
      opt.apply([tf.IndexedSlices(grad, indices, shape)], [table])

    return step

  variants = {"fused": variant(False), "xla": variant(True)}
  fallback = variant(True)
  saved = _loader._xla_unavailable
  _loader._xla_unavailable = "the benchmark's fallback variant"
  try:
    fallback(*steps[0])  # traced now: the core picks the fallback while tracing
  finally:
    _loader._xla_unavailable = saved
  variants["xla_fallback"] = fallback
  times = time_interleaved(variants, steps, rounds)
  return {name: summary(samples) for name, samples in times.items()}


def render_xla(results):
  lines = [
      "### Keras 3 LazyAdam (float32) with and without XLA, ms per step, median (min–max)", "",
      "| case | no XLA (fused op) | jit_compile (XLA kernel) | jit_compile, fallback "
      "(before) | XLA kernel / fused | fallback / fused |", "|---|---|---|---|---|---|"
  ]
  for label, r in results.items():
    fused = r["fused"]["median_ms"]
    lines.append(f"| {label} | {fmt(r['fused'])} | {fmt(r['xla'])} | {fmt(r['xla_fallback'])} | "
                 f"{r['xla']['median_ms'] / fused:.2f}× | "
                 f"{r['xla_fallback']['median_ms'] / fused:.1f}× |")
  return "\n".join(lines)


# ------------------------------------------------ LazyAdam's light state
# Slot layouts timed against float32 slots (`--light`): {name: LazyAdam light options}.
LIGHT_LAYOUTS = {
    "float32 m, v": {},
    "bfloat16 m, v (stochastic rounding)": dict(slot_dtype="bfloat16", stochastic_rounding=True),
    "bfloat16 m, v (round to nearest)": dict(slot_dtype="bfloat16"),
    "float16 m, v (stochastic rounding)": dict(slot_dtype="float16", stochastic_rounding=True),
    "float16 m, v (round to nearest)": dict(slot_dtype="float16"),
    "float32 m, row-wise v": dict(rowwise_second_moment=True),
    "bfloat16 m, row-wise v (stochastic rounding)": dict(slot_dtype="bfloat16",
                                                         rowwise_second_moment=True,
                                                         stochastic_rounding=True),
}
SLOT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def state_bytes(case, layout):
  """Bytes of optimizer state per table element: m, and v (one per row when row-wise)."""
  slot = SLOT_BYTES[layout.get("slot_dtype", "float32")]
  return slot + (slot / case.dim if layout.get("rowwise_second_moment") else slot)


def light_cases(quick):
  if quick:
    return [AdamCase(1_000_000, 64, 16_384)]
  return [AdamCase(1_000_000, d, b) for d in (64, 128) for b in (16_384, 131_072)]


def light_bytes(case, layout):
  """Bytes a step moves: var and the state read and written, the gradient read, the indices."""
  return case.batch * case.dim * (3 * 4 + 2 * state_bytes(case, layout)) + 8 * case.batch


def bench_light_state(case, rounds, seed=0, layouts=tuple(LIGHT_LAYOUTS)):
  """The raw op on one table per slot layout (`layouts` of `LIGHT_LAYOUTS`), in interleaved
  rounds."""
  import tensorflow as tf

  from tf_opt_ops import ops

  steps = distinct_row_steps(case, seed)

  def variant(layout):
    slot_dtype = tf.as_dtype(layout.get("slot_dtype", "float32"))
    table = tf.Variable(tf.random.normal((case.rows, case.dim), seed=seed))
    m = tf.Variable(tf.zeros((case.rows, case.dim), slot_dtype))
    v_shape = (case.rows,) if layout.get("rowwise_second_moment") else (case.rows, case.dim)
    v = tf.Variable(tf.zeros(v_shape, slot_dtype))
    options = dict(layout, slot_dtype=slot_dtype)

    @tf.function
    def step(indices, grad):
      ops.sparse_lazy_adam(table, m, v, grad, indices, beta_1_power=0.9**10, beta_2_power=0.999**10,
                           step=10, **options)

    return step

  times = time_interleaved({name: variant(LIGHT_LAYOUTS[name]) for name in layouts}, steps, rounds)
  return {name: summary(samples) for name, samples in times.items()}


def render_light(results, limit_gbs):
  lines = [
      "### Sparse lazy Adam (float32 table) by slot layout: ms per step, median (min–max), "
      "and share of the bandwidth limit", "",
      "| case | slots | state bytes/element | ms | share of limit | / float32 slots |",
      "|---|---|---|---|---|---|"
  ]
  for label, (case, r) in results.items():
    base = r["float32 m, v"]["median_ms"]
    for name, layout in LIGHT_LAYOUTS.items():
      ms = r[name]["median_ms"]
      lines.append(f"| {label} | {name} | {state_bytes(case, layout):.2f} | {fmt(r[name])} | "
                   f"{share(light_bytes(case, layout), ms, limit_gbs):.0%} | {ms / base:.2f}× |")
  return "\n".join(lines)


# ------------------------------------------------ row-wise Adagrad (`--rowwise`)
FBGEMM_PYTHON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venvs",
                             "fbgemm", "bin", "python")


def rowwise_cases(quick):
  return light_cases(quick)


def rowwise_bytes(case):
  """Bytes a step moves: each row and its float32 accumulator read and written, the gradient
  row read, the index."""
  return case.batch * (3 * 4 * case.dim + 2 * 4) + 8 * case.batch


def bench_rowwise(case, rounds, seed=0):
  """The raw row-wise Adagrad op on a float32 table and accumulator, and the lazy Adam op on
  its own table in the same rounds (a yardstick that a loaded machine slows alike)."""
  import tensorflow as tf

  from tf_opt_ops import ops

  table = tf.Variable(tf.random.normal((case.rows, case.dim), seed=seed))
  accum = tf.Variable(tf.zeros((case.rows,)))
  adam_table, m, v = (tf.Variable(tf.random.normal(
      (case.rows, case.dim), seed=seed)), tf.Variable(tf.zeros(
          (case.rows, case.dim))), tf.Variable(tf.zeros((case.rows, case.dim))))

  @tf.function
  def fused(indices, grad):
    ops.sparse_rowwise_adagrad(table, accum, grad, indices, lr=0.01, epsilon=1e-8)

  @tf.function
  def lazy_adam(indices, grad):
    ops.sparse_lazy_adam(adam_table, m, v, grad, indices, beta_1_power=0.9**10,
                         beta_2_power=0.999**10)

  times = time_interleaved({"fused": fused, "lazy_adam": lazy_adam}, distinct_row_steps(case, seed),
                           rounds)
  return {name: summary(samples) for name, samples in times.items()}


def bench_fbgemm_rowwise(cases, rounds):
  """FBGEMM's CPU step on the same cases (`benchmarks.fbgemm_rowwise`, in the FBGEMM venv):
  {"cases": {label: ...}}, or {"error": why} when that venv is absent or the worker fails."""
  if not os.path.exists(FBGEMM_PYTHON):
    return {"error": f"no FBGEMM venv ({FBGEMM_PYTHON}); make it with tools/fbgemm_venv.sh"}
  try:
    return run_json_worker("benchmarks.fbgemm_rowwise",
                           [json.dumps([dataclasses.asdict(c) for c in cases]),
                            str(rounds)], dict(os.environ), "FBGEMM_JSON ",
                           "the FBGEMM benchmark subprocess", python=FBGEMM_PYTHON)
  except RuntimeError as e:
    return {"error": str(e)}


def render_rowwise(results, fbgemm, limit_gbs):
  lines = [
      "### Row-wise Adagrad (float32 table), ms per step, median (min–max), and share of the "
      "bandwidth limit", ""
  ]
  if fbgemm.get("error"):
    lines += [f"FBGEMM not timed: {fbgemm['error']}", ""]
  else:
    lines += [
        f"FBGEMM: CPU table-batched embedding, EXACT_ROWWISE_ADAGRAD, one index per bag, sum "
        f"pooling (torch {fbgemm['torch']}, {fbgemm['threads']} threads); its optimizer runs "
        f"fused in the backward, after a forward: backward = (forward + backward) − forward, "
        f"timed in the same rounds.", ""
    ]
  lines += [
      "| case | ours (raw op) | ours % of BW | lazy Adam op | lazy Adam % of BW "
      "| FBGEMM forward + backward | FBGEMM forward | FBGEMM backward | FBGEMM backward / ours |",
      "|---|---|---|---|---|---|---|---|---|"
  ]
  for label, (case, r) in results.items():
    ours = r["fused"]["median_ms"]
    theirs = fbgemm.get("cases", {}).get(label)
    cells = ([fmt(theirs[k]) for k in ("forward_backward", "forward", "backward")] +
             [f"{theirs['backward']['median_ms'] / ours:.1f}×"] if theirs else ["—"] * 4)
    adam_bytes = light_bytes(case, LIGHT_LAYOUTS["float32 m, v"])
    lines.append(f"| {label} | {fmt(r['fused'])} | "
                 f"{share(rowwise_bytes(case), ours, limit_gbs):.0%} | {fmt(r['lazy_adam'])} | "
                 f"{share(adam_bytes, r['lazy_adam']['median_ms'], limit_gbs):.0%} | " +
                 " | ".join(cells) + " |")
  return "\n".join(lines)


# ------------------------------------------ CPU instruction-set levels (`--isa`)
ISA_CASES = [AdamCase(1_000_000, 64, 16_384), AdamCase(1_000_000, 128, 131_072)]
# A subset of the slot layouts, so that one process's tables stay under 5 GB at 1M x 128.
ISA_LAYOUTS = ("float32 m, v", "bfloat16 m, v (stochastic rounding)",
               "float16 m, v (round to nearest)", "float16 m, v (stochastic rounding)")
ISA_LEVELS = ("avx", "avx2", "avx512")


def isa_levels_here():
  """The levels this CPU runs: up to the one the library picks with no TF_OPT_OPS_CPU_ISA."""
  import tf_opt_ops
  return ISA_LEVELS[:ISA_LEVELS.index(tf_opt_ops.cpu_isa()) + 1]


def bench_isa(levels, cases, rounds):
  """{case label: (case, {level: {layout: summary of per-process medians}})}.

  Each (case, level) runs in a fresh process with TF_OPT_OPS_CPU_ISA set (the level is chosen
  at load), the levels alternating `rounds` times per case, so that a drift of the machine
  reaches every level alike.
  """
  results = {}
  for case in cases:
    medians = {level: {name: [] for name in ISA_LAYOUTS} for level in levels}
    for r in range(rounds):
      for level in levels:
        print(f"  {case.label}, {level}, round {r + 1} of {rounds} ...", flush=True)
        env = dict(os.environ, TF_OPT_OPS_CPU_ISA=level, TF_CPP_MIN_LOG_LEVEL="3")
        got = run_json_worker(
            "benchmarks.bench",
            ["--isa-worker", json.dumps(dataclasses.asdict(case)), "--rounds", "7"], env,
            "ISA_JSON ", f"the {level} benchmark subprocess")
        if got["isa"] != level:
          raise RuntimeError(f"the subprocess forced to {level} ran {got['isa']}")
        for name, ms in got["median_ms"].items():
          medians[level][name].append(ms)
    results[case.label] = (case, {
        level: {name: summary(ms) for name, ms in by_layout.items()}
        for level, by_layout in medians.items()
    })
  return results


def isa_worker(case, rounds):
  import tf_opt_ops
  times = bench_light_state(case, rounds, layouts=ISA_LAYOUTS)
  out = {"isa": tf_opt_ops.cpu_isa(), "median_ms": {k: v["median_ms"] for k, v in times.items()}}
  print("ISA_JSON " + json.dumps(out))


def render_isa(results, limit_gbs):
  levels = list(next(iter(results.values()))[1])
  first = levels[0]
  lines = [
      "### Sparse lazy Adam (float32 table) at each CPU instruction-set level: ms per step, "
      "median over processes (min–max), and share of the bandwidth limit", "",
      "| case | slots | " + " | ".join(f"{level} ms | {level} % of limit" for level in levels) +
      " | " + " | ".join(f"{level} / {first}" for level in levels[1:]) + " |",
      "|---|---|" + "---|---|" * len(levels) + "---|" * (len(levels) - 1)
  ]
  for label, (case, r) in results.items():
    for name in ISA_LAYOUTS:
      moved = light_bytes(case, LIGHT_LAYOUTS[name])
      cells = [
          f"{fmt(r[level][name])} | {share(moved, r[level][name]['median_ms'], limit_gbs):.0%}"
          for level in levels
      ]
      ratios = [
          f"{r[level][name]['median_ms'] / r[first][name]['median_ms']:.2f}×"
          for level in levels[1:]
      ]
      lines.append(f"| {label} | {name} | " + " | ".join(cells + ratios) + " |")
  return "\n".join(lines)


# ------------------------------------------ Keras optimizer features (`--features`)
# {name: (optimizer options, the APIs that offer them, our optimizer)}; each is timed against our
# bare optimizer and against the stock optimizer it replaces (Adam for LazyAdam, Adagrad for
# ClippyAdagrad) with the same options. `loss_scale_optimizer=True` wraps both in the API's
# LossScaleOptimizer (a fixed scale of LOSS_SCALE; tf_keras' and legacy's unscale by
# `get_unscaled_gradients` in the step, as their custom training loops do).
LOSS_SCALE = 128.0
FEATURES = {
    "clipnorm": (dict(clipnorm=1.0), ("keras3", "tf_keras", "legacy"), "LazyAdam"),
    "clipvalue": (dict(clipvalue=1.0), ("keras3", "tf_keras", "legacy"), "LazyAdam"),
    "global_clipnorm": (dict(global_clipnorm=1.0), ("keras3", "tf_keras", "legacy"), "LazyAdam"),
    "weight_decay": (dict(weight_decay=0.004), ("keras3", "tf_keras"), "LazyAdam"),
    "use_ema": (dict(use_ema=True), ("keras3", "tf_keras"), "LazyAdam"),
    "gradient_accumulation_steps=2": (dict(gradient_accumulation_steps=2), ("keras3",), "LazyAdam"),
    "LossScaleOptimizer":
        (dict(loss_scale_optimizer=True), ("keras3", "tf_keras", "legacy"), "LazyAdam"),
    "loss_scale_factor": (dict(loss_scale_factor=LOSS_SCALE), ("keras3",), "LazyAdam"),
    "LossScaleOptimizer + clipvalue":
        (dict(loss_scale_optimizer=True,
              clipvalue=1.0), ("keras3", "tf_keras", "legacy"), "LazyAdam"),
    "global_clipnorm + weight_decay":
        (dict(global_clipnorm=1.0, weight_decay=0.004), ("keras3", "tf_keras"), "LazyAdam"),
    "use_ema + gradient_accumulation_steps=2":
        (dict(use_ema=True, gradient_accumulation_steps=2), ("keras3",), "LazyAdam"),
    "ClippyAdagrad weight_decay":
        (dict(weight_decay=0.004), ("keras3", "tf_keras"), "ClippyAdagrad"),
    "ClippyAdagrad use_ema": (dict(use_ema=True), ("keras3", "tf_keras"), "ClippyAdagrad"),
    "ClippyAdagrad gradient_accumulation_steps=2":
        (dict(gradient_accumulation_steps=2), ("keras3",), "ClippyAdagrad"),
    "ClippyAdagrad global_clipnorm + weight_decay":
        (dict(global_clipnorm=1.0, weight_decay=0.004), ("keras3", "tf_keras"), "ClippyAdagrad"),
}
FEATURE_APIS = ("keras3", "tf_keras", "legacy")
# Stock Keras optimizer each of ours is timed against.
STOCK_OF = {"LazyAdam": "Adam", "ClippyAdagrad": "Adagrad"}


def feature_cases(quick):
  if quick:
    return [AdamCase(10_000, 16, 512)]
  return [AdamCase(1_000_000, 64, 16_384), AdamCase(1_000_000, 128, 131_072)]


def _feature_optimizers(api, optimizer):
  """(our `optimizer`, the stock one it replaces, a variable factory, the API's
  LossScaleOptimizer) for `api`."""
  if api == "keras3":
    import keras

    from tf_opt_ops import keras as ours
    stock, variable = keras.optimizers, keras.Variable
    loss_scale_optimizer = keras.optimizers.LossScaleOptimizer
  else:
    import tensorflow as tf
    import tf_keras

    from tf_opt_ops import legacy
    from tf_opt_ops import tf_keras as ours
    if api == "legacy":
      ours, stock = legacy, tf_keras.optimizers.legacy
    else:
      stock = tf_keras.optimizers
    variable = tf.Variable
    loss_scale_optimizer = functools.partial(tf_keras.mixed_precision.LossScaleOptimizer,
                                             dynamic=False)
  return (getattr(ours, optimizer), getattr(stock, STOCK_OF[optimizer]), variable,
          functools.partial(loss_scale_optimizer, initial_scale=LOSS_SCALE))


def _feature_step(api, make, options, table, case, wrap=None):
  """`_apply_gradients_step` of `make(learning_rate=0.001, **options)`, wrapped in `wrap` (the
  API's LossScaleOptimizer) when given."""
  optimizer = make(learning_rate=0.001, **options)
  if wrap is None:
    return _apply_gradients_step(optimizer, table, case)
  optimizer = wrap(optimizer)
  # Keras 3's apply unscales; tf_keras' and legacy's leave it to the loop.
  unscale = None if api == "keras3" else optimizer.get_unscaled_gradients
  return _apply_gradients_step(optimizer, table, case, unscale)


def bench_feature(case, api, options, rounds, optimizer="LazyAdam", seed=0):
  """One feature on one API: our bare `optimizer`'s step, ours with `options` and the stock one
  with `options`, each `apply_gradients` of an IndexedSlices in a tf.function on its own table,
  in interleaved rounds."""
  import tensorflow as tf

  ours, stock, variable, loss_scale_optimizer = _feature_optimizers(api, optimizer)
  options = dict(options)
  wrap = loss_scale_optimizer if options.pop("loss_scale_optimizer", False) else None
  steps = distinct_row_steps(case, seed)
  init = tf.random.normal((case.rows, case.dim), seed=seed)
  variants = {
      "bare": _feature_step(api, ours, {}, variable(init), case),
      "ours": _feature_step(api, ours, options, variable(init), case, wrap),
  }
  stock_step = _feature_step(api, stock, options, variable(init), case, wrap)
  del init  # a table's worth of memory
  stock_error = None
  try:
    stock_step(*steps[0])
    variants["stock"] = stock_step
  except (TypeError, ValueError) as e:
    # Keras 3's loss_scale_factor divides an IndexedSlices: the stock step cannot run.
    stock_error = f"stock fails: {str(e).strip().splitlines()[-1].strip()}"
    del stock_step
  times = time_interleaved(variants, steps, rounds)
  result = {name: summary(samples) for name, samples in times.items()}
  # Ratios within each round (the rounds alternate the variants), then their median: a round's
  # contenders share that round's load.
  result["ours_over_bare"] = float(np.median(np.array(times["ours"]) / np.array(times["bare"])))
  if stock_error:
    result["stock_error"] = stock_error
  else:
    result["stock_over_ours"] = float(np.median(np.array(times["stock"]) / np.array(times["ours"])))
  return result


def bench_features(cases, rounds, names=None):
  """{case label: {api: {feature: bench_feature's result}}}, each configuration in a process of
  its own: one process does not give the earlier configurations' tables back (at 1,000,000×128
  they filled the machine's memory)."""
  results = {}
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  for case in cases:
    for api in FEATURE_APIS:
      for name, (_, apis, _) in FEATURES.items():
        if api not in apis or (names and name not in names):
          continue
        print(f"{name} on {api}, {case.label} ...", flush=True)
        job = dict(case=dataclasses.asdict(case), api=api, feature=name, rounds=rounds)
        try:
          result = run_json_worker(
              "benchmarks.bench", ["--features-worker", json.dumps(job)], env, "FEATURES_JSON ",
              f"the features benchmark subprocess ({name} on {api}, {case.label})")
        except RuntimeError as e:
          # One configuration out of memory leaves the others' results standing.
          print(e, flush=True)
          result = {"failed": str(e).splitlines()[0]}
        results.setdefault(case.label, {}).setdefault(api, {})[name] = result
        print(render_features({case.label: {api: {name: result}}}).splitlines()[-1], flush=True)
  return results


def features_worker(job):
  """Runs in a subprocess of `bench_features`: one configuration; prints JSON results."""
  options, _, optimizer = FEATURES[job["feature"]]
  result = bench_feature(AdamCase(**job["case"]), job["api"], options, job["rounds"], optimizer)
  print("FEATURES_JSON " + json.dumps(result))


def render_features(results):
  lines = [
      "### Each Keras optimizer feature: ms per step, median (min–max), and ratios (median over "
      "rounds); LazyAdam against stock Adam, the rows named ClippyAdagrad against stock Adagrad",
      "", "| case | API | feature | bare step | with feature | stock with feature | / bare step | "
      "stock / ours |", "|---|---|---|---|---|---|---|---|"
  ]
  for label, by_api in results.items():
    for api, by_feature in by_api.items():
      for name, r in by_feature.items():
        if "failed" in r:
          lines.append(f"| {label} | {api} | {name} | {r['failed']} | | | | |")
          continue
        if "stock_error" in r:
          stock, stock_over_ours = r["stock_error"], "—"
        else:
          stock, stock_over_ours = fmt(r["stock"]), f"{r['stock_over_ours']:.1f}×"
        lines.append(f"| {label} | {api} | {name} | {fmt(r['bare'])} | {fmt(r['ours'])} | "
                     f"{stock} | {r['ours_over_bare']:.2f}× | {stock_over_ours} |")
  return "\n".join(lines)


# --------------------------------------------------------- Clippy (worker)
CLIPPY_CASES = {
    "dense 1024×1024": dict(shape=(1024, 1024)),
    "dense 4096×1024": dict(shape=(4096, 1024)),
    "sparse 100,000×64, B=16,384": dict(shape=(100_000, 64), batch=16_384),
    "sparse 1,000,000×64, B=16,384": dict(shape=(1_000_000, 64), batch=16_384),
    "sparse 1,000,000×128, B=131,072": dict(shape=(1_000_000, 128), batch=131_072),
}
QUICK_CLIPPY = ["dense 1024×1024", "sparse 1,000,000×64, B=16,384"]


def clippy_worker(names, rounds):
  """Runs in the TF_USE_LEGACY_KERAS=1 subprocess; prints JSON results."""
  import tensorflow as tf

  from tf_opt_ops import ops
  try:
    import tensorflow_recommenders as tfrs
    tfrs_error = None
  except ImportError as e:
    tfrs, tfrs_error = None, str(e)
  rng = np.random.default_rng(0)
  out = {"tfrs_error": tfrs_error, "cases": {}}
  for name in names:
    spec = CLIPPY_CASES[name]
    shape, batch = spec["shape"], spec.get("batch")
    variables = {}

    def fresh(key):
      variables[key] = (tf.Variable(tf.random.normal(shape,
                                                     seed=1)), tf.Variable(tf.fill(shape, 0.1)))
      return variables[key]

    if batch:
      steps = []
      for _ in range(4):
        idx = rng.choice(shape[0], batch, replace=False).astype(np.int64)
        steps.append(
            (tf.constant(idx), tf.constant(rng.standard_normal((batch,) + shape[1:]), tf.float32)))
      bytes_moved = 8 * batch * shape[
          1] * 4 + 8 * batch  # two passes: 3 reads, then 3 reads + 2 writes
    else:
      steps = [(tf.constant(rng.standard_normal(shape), tf.float32),) for _ in range(2)]
      bytes_moved = 8 * int(np.prod(shape)) * 4
    var, accum = fresh("fused")

    if batch:

      @tf.function
      def fused(indices, grad, var=var, accum=accum):
        ops.sparse_clippy_adagrad(var, accum, grad, indices)
    else:

      @tf.function
      def fused(grad, var=var, accum=accum):
        ops.clippy_adagrad(var, accum, grad)

    variants = {"fused": fused}

    tf_var, tf_accum = fresh("tf_adagrad")
    lr, eps = tf.constant(0.001), tf.constant(1e-7)
    if batch:

      @tf.function
      def tf_adagrad(indices, grad):
        tf.raw_ops.ResourceSparseApplyAdagradV2(var=tf_var.handle, accum=tf_accum.handle, lr=lr,
                                                epsilon=eps, grad=grad, indices=indices)
    else:

      @tf.function
      def tf_adagrad(grad):
        tf.raw_ops.ResourceApplyAdagradV2(var=tf_var.handle, accum=tf_accum.handle, lr=lr,
                                          epsilon=eps, grad=grad)

    variants["tf_fused_adagrad"] = tf_adagrad

    if tfrs is not None:
      for label, kwargs in (("tfrs_default", {}), ("tfrs_weight_decay_none", {"weight_decay": None
                                                                             })):
        tfrs_var = tf.Variable(tf.random.normal(shape, seed=1))
        opt = tfrs.experimental.optimizers.ClippyAdagrad(learning_rate=0.001, **kwargs)
        opt.build([tfrs_var])

        if batch:

          def make(opt=opt, tfrs_var=tfrs_var):

            @tf.function
            def step(indices, grad):
              opt.apply_gradients([(tf.IndexedSlices(grad, indices,
                                                     tf.constant(shape, tf.int64)), tfrs_var)])

            return step
        else:

          def make(opt=opt, tfrs_var=tfrs_var):

            @tf.function
            def step(grad):
              opt.apply_gradients([(grad, tfrs_var)])

            return step

        variants[label] = make()
    times = time_interleaved(variants, steps, rounds)
    result = {key: summary(samples) for key, samples in times.items()}
    result["bytes"] = bytes_moved
    out["cases"][name] = result
  print("CLIPPY_JSON " + json.dumps(out))


def run_json_worker(module, args, env, marker, what, python=sys.executable):
  """Runs `python -m module *args` with `env`; the JSON its stdout prints after `marker`.

  The folders that hold this package and the tf_opt_ops this process runs go first on the
  worker's PYTHONPATH, so that `module` and the same library import wherever this process
  was started (the repository root alone would find its C++ folder `tf_opt_ops/`, not the
  package). Raises RuntimeError, with the end of its stderr, when it prints none.
  """
  import tf_opt_ops  # the package this process runs, wherever it is installed
  roots = [
      os.path.dirname(os.path.dirname(os.path.abspath(f))) for f in (__file__, tf_opt_ops.__file__)
  ]
  env = dict(env, PYTHONPATH=os.pathsep.join(p for p in (*roots, env.get("PYTHONPATH")) if p))
  proc = subprocess.run([python, "-m", module, *args], env=env, capture_output=True, text=True,
                        check=False)
  for line in proc.stdout.splitlines():
    if line.startswith(marker):
      return json.loads(line[len(marker):])
  raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


def bench_clippy(names, rounds):
  env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
  return run_json_worker(
      "benchmarks.bench",
      ["--clippy-worker", json.dumps(names), "--rounds",
       str(rounds)], env, "CLIPPY_JSON ", "the Clippy benchmark subprocess")


# ----------------------------------------------------------------- report
def fixed_cost(rounds):
  """The cost of one tf.function call with nothing in it, per step."""
  import tensorflow as tf
  counter = tf.Variable(0, dtype=tf.int64)

  @tf.function
  def empty():
    counter.assign_add(1)

  return summary(time_interleaved({"empty": empty}, [()], rounds)["empty"])


def share(bytes_moved, ms, limit_gbs):
  return bytes_moved / (ms * 1e-3) / 1e9 / limit_gbs


def render(report):
  lim = report["bandwidth"]["2"]["median_gbs"]
  lines = [
      f"Machine: {report['machine']}; TensorFlow {report['tf_version']}; "
      f"bandwidth limit (in-place a += b): {report['bandwidth']['1']['median_gbs']:.1f} GB/s "
      f"with 1 thread, {lim:.1f} GB/s with 2.", "",
      "### Sparse lazy Adam (float32), ms per step, median (min–max)", "",
      "| case | fused | composite | Keras 3 Adam | composite / fused | Keras Adam / fused "
      "| fused % of BW | ops in graph (fused / composite) |", "|---|---|---|---|---|---|---|---|"
  ]
  for label, r in report["lazy_adam"].items():
    keras_cell = fmt(r["keras3_adam"]) if "keras3_adam" in r else "—"
    keras_ratio = (f"{r['keras3_adam']['median_ms'] / r['fused']['median_ms']:.1f}×" if
                   "keras3_adam" in r else "—")
    lines.append(f"| {label} | {fmt(r['fused'])} | {fmt(r['composite'])} | {keras_cell} | "
                 f"{r['composite']['median_ms'] / r['fused']['median_ms']:.1f}× | {keras_ratio} | "
                 f"{100 * share(r['bytes'], r['fused']['median_ms'], lim):.0f}% | "
                 f"{r['ops']['fused']} / {r['ops']['composite']} |")
  levels = {k: r for k, r in report["lazy_adam"].items() if "keras3_ours" in r}
  if levels:
    lines += [
        "", "### Through the Keras 3 optimizer: `apply_gradients` with an IndexedSlices, "
        "ms per step, median (min–max)", "",
        "| case | ours (`LazyAdam`) | composite (TF Addons' way on Keras `Adam`) "
        "| composite / ours | ours % of BW | raw op % of BW | ours / raw op |",
        "|---|---|---|---|---|---|---|"
    ]
    for label, r in levels.items():
      ours = r["keras3_ours"]["median_ms"]
      lines.append(f"| {label} | {fmt(r['keras3_ours'])} | {fmt(r['keras3_composite'])} | "
                   f"{r['keras3_composite']['median_ms'] / ours:.2f}× | "
                   f"{100 * share(r['bytes'], ours, lim):.0f}% | "
                   f"{100 * share(r['bytes'], r['fused']['median_ms'], lim):.0f}% | "
                   f"{ours / r['fused']['median_ms']:.2f}× |")
  clippy = report.get("clippy")
  if clippy:
    lines += ["", "### Clippy Adagrad (float32), ms per step, median (min–max)", ""]
    if clippy.get("tfrs_error"):
      lines.append(f"TensorFlow Recommenders not importable: {clippy['tfrs_error']}")
    lines += [
        "| case | fused | TFRS default | TFRS weight_decay=None | TF fused Adagrad (no clipping) "
        "| TFRS default / fused | TFRS wd=None / fused | fused % of BW |",
        "|---|---|---|---|---|---|---|---|"
    ]
    for label, r in clippy["cases"].items():
      cells = [
          fmt(r[k]) if k in r else "—"
          for k in ("fused", "tfrs_default", "tfrs_weight_decay_none", "tf_fused_adagrad")
      ]
      ratios = [
          f"{r[k]['median_ms'] / r['fused']['median_ms']:.1f}×" if k in r else "—"
          for k in ("tfrs_default", "tfrs_weight_decay_none")
      ]
      lines.append(f"| {label} | " + " | ".join(cells + ratios) +
                   f" | {100 * share(r['bytes'], r['fused']['median_ms'], lim):.0f}% |")
  if report.get("keras3_xla"):
    lines += ["", render_xla(report["keras3_xla"])]
  if report.get("fixed_cost"):
    lines += [
        "", f"Fixed cost of a tf.function call (one scalar assign): {fmt(report['fixed_cost'])}."
    ]
  return "\n".join(lines)


def plot(report, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  lim = report["bandwidth"]["2"]["median_gbs"]
  labels = list(report["lazy_adam"])
  rs = [report["lazy_adam"][k] for k in labels]
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
  x = np.arange(len(labels))
  ax1.bar(x, [r["composite"]["median_ms"] / r["fused"]["median_ms"] for r in rs])
  ax1.set_xticks(x, labels, rotation=40, ha="right", fontsize=8)
  ax1.set_ylabel("speedup of fused over composite (×)")
  ax1.set_title("Sparse lazy Adam: speedup by case")
  ax2.bar(x - 0.2, [100 * share(r["bytes"], r["fused"]["median_ms"], lim) for r in rs], 0.4,
          label="fused")
  ax2.bar(x + 0.2, [100 * share(r["bytes"], r["composite"]["median_ms"], lim) for r in rs], 0.4,
          label="composite")
  ax2.set_xticks(x, labels, rotation=40, ha="right", fontsize=8)
  ax2.set_ylabel(f"% of bandwidth limit ({lim:.0f} GB/s)")
  ax2.set_title("Share of memory bandwidth")
  ax2.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def adam_cases(quick):
  if quick:
    return [
        AdamCase(100_000, 64, 1_024),
        AdamCase(1_000_000, 64, 16_384),
        AdamCase(1_000_000, 64, 16_384, duplicates=True)
    ]
  cases = [
      AdamCase(n, d, b)
      for n in (100_000, 1_000_000)
      for d in (16, 64, 128)
      for b in (1_024, 16_384, 131_072)
      if b < n // 2
  ]
  return cases + [
      AdamCase(1_000_000, 64, 16_384, duplicates=True),
      AdamCase(1_000_000, 128, 131_072, duplicates=True)
  ]


def measured_bandwidth_limits(quick, rounds):
  """`bandwidth_limit` on arrays of 256 MiB with --quick, else 512 MiB."""
  print("bandwidth limit ...", flush=True)
  return bandwidth_limit(256 if quick else 512, rounds)


def write_table(out, name, table):
  """Writes the Markdown table as out/name.md and prints it."""
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, name + ".md"), "w") as f:
    f.write(table + "\n")
  print()
  print(table)


def write_results(report, stem, render, plot=None):
  """Writes the report as JSON, its table as Markdown and its plot (if any) as PNG; prints the
  table."""
  os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
  table = render(report)
  with open(stem + ".json", "w") as f:
    json.dump(report, f, indent=1)
  with open(stem + ".md", "w") as f:
    f.write(table + "\n")
  written = [stem + ".json", stem + ".md"]
  if plot is not None:
    plot(report, stem + ".png")
    written.append(stem + ".png")
  print()
  print(table)
  print(f"\nwrote {', '.join(written)} in {report['seconds']:.0f} s")


def argument_parser(description, quick_help):
  """The options every benchmark of this package takes: --quick, --rounds, --out."""
  parser = argparse.ArgumentParser(description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--quick", action="store_true", help=quick_help)
  parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds per case")
  parser.add_argument("--out", default="bench/results", help="folder for JSON, Markdown and PNG")
  return parser


# The modes that run one part of the benchmark alone, and what each runs.
ONLY_MODES = {
    "xla": "Keras 3 LazyAdam with and without XLA (out/xla.md)",
    "optimizer": "the lazy Adam cases timed through the Keras 3 optimizers (out/optimizer.md)",
    "light": "sparse lazy Adam by slot layout (out/light.md)",
    "features":
        "LazyAdam and ClippyAdagrad with each Keras optimizer feature, against the bare step and "
        "the stock optimizer "
        "(out/features.md; with --rows, --dim, --batch: out/features_<rows>x<dim>_b<batch>.md)",
    "rowwise": "row-wise Adagrad, our op against FBGEMM's CPU step (out/rowwise.md)",
    "isa": "sparse lazy Adam by slot layout at each CPU instruction-set level this machine runs, "
           "each level in its own processes, alternating (out/isa.md)",
}


def main(argv=None):
  parser = argument_parser(__doc__, "a few cases, under 3 minutes")
  parser.add_argument("--no-clippy", action="store_true", help="skip the TFRS subprocess")
  for flag, what in ONLY_MODES.items():
    parser.add_argument(f"--{flag}", action="store_true", help=f"only {what}")
  size = parser.add_argument_group("--features at one size (all three, else its usual cases)")
  size.add_argument("--rows", type=int, help="table rows")
  size.add_argument("--dim", type=int, help="table width")
  size.add_argument("--batch", type=int, help="distinct rows per step")
  parser.add_argument(
      "--feature", action="append", choices=list(FEATURES), metavar="NAME",
      help="with --features: only this feature (repeatable); one of "
      f"{', '.join(repr(n) for n in FEATURES)}")
  parser.add_argument("--clippy-worker", help=argparse.SUPPRESS)
  parser.add_argument("--isa-worker", help=argparse.SUPPRESS)
  parser.add_argument("--features-worker", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  rounds = args.rounds or (5 if args.quick else 9)
  if args.clippy_worker:
    clippy_worker(json.loads(args.clippy_worker), rounds)
    return
  if args.isa_worker:
    isa_worker(AdamCase(**json.loads(args.isa_worker)), rounds)
    return
  if args.features_worker:
    features_worker(json.loads(args.features_worker))
    return
  sized = (args.rows, args.dim, args.batch)
  if any(sized) and not (all(sized) and args.features):
    parser.error("--rows, --dim and --batch go together, with --features")
  if args.feature and not args.features:
    parser.error("--feature goes with --features")
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  import tensorflow as tf

  started = time.time()
  if args.xla:
    xla = {}
    for case in xla_cases(args.quick):
      print(f"Keras 3 LazyAdam with and without XLA, {case.label} ...", flush=True)
      xla[case.label] = bench_keras3_xla(case, rounds)
      gc.collect()
    table = (f"TensorFlow {tf.__version__}, {os.cpu_count()} cores.\n\n" + render_xla(xla))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "xla.json"), "w") as f:
      json.dump({"tf_version": tf.__version__, "keras3_xla": xla}, f, indent=1)
    write_table(args.out, "xla", table)
    print(f"\nwrote {os.path.join(args.out, 'xla')}.json, .md in {time.time() - started:.0f} s")
    return
  if args.light:
    limit = measured_bandwidth_limits(args.quick, rounds)[2]["median_gbs"]
    light = {}
    for case in light_cases(args.quick):
      print(f"lazy Adam by slot layout, {case.label} ...", flush=True)
      light[case.label] = (case, bench_light_state(case, rounds))
      gc.collect()
    table = (f"{machine()}, TensorFlow {tf.__version__}; bandwidth limit {limit:.1f} GB/s.\n\n" +
             render_light(light, limit))
    write_table(args.out, "light", table)
    return
  if args.rowwise:
    limit = measured_bandwidth_limits(args.quick, rounds)[2]["median_gbs"]
    report = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average": os.getloadavg()[0], "tf_version": tf.__version__,
        "bandwidth_limit_gbs": limit
    }
    rowwise = {}
    for case in rowwise_cases(args.quick):
      print(f"row-wise Adagrad, {case.label} ...", flush=True)
      rowwise[case.label] = bench_rowwise(case, rounds)
      gc.collect()
    print("FBGEMM's row-wise Adagrad (FBGEMM venv subprocess) ...", flush=True)
    report["fbgemm"] = bench_fbgemm_rowwise(rowwise_cases(args.quick), rounds)
    report["rowwise"] = rowwise
    report["seconds"] = time.time() - started
    cases = {case.label: case for case in rowwise_cases(args.quick)}
    write_results(
        report, os.path.join(args.out, "rowwise"), lambda r:
        (f"{r['machine']}, TensorFlow {r['tf_version']}; bandwidth limit "
         f"{r['bandwidth_limit_gbs']:.1f} GB/s; load average {r['load_average']:.1f} at the "
         f"start.\n\n" + render_rowwise({k: (cases[k], v) for k, v in r["rowwise"].items()}, r[
             "fbgemm"], r["bandwidth_limit_gbs"])))
    return
  if args.isa:
    limit = measured_bandwidth_limits(args.quick, rounds)[2]["median_gbs"]
    levels = isa_levels_here()
    results = bench_isa(levels, ISA_CASES[:1] if args.quick else ISA_CASES, args.rounds or
                        (2 if args.quick else 4))
    table = (f"{machine()} (the best level here), TensorFlow {tf.__version__}; bandwidth limit "
             f"{limit:.1f} GB/s; load average {os.getloadavg()[0]:.1f} at the end.\n\n" +
             render_isa(results, limit))
    write_table(args.out, "isa", table)
    print(f"\nwrote {os.path.join(args.out, 'isa.md')} in {time.time() - started:.0f} s")
    return
  if args.features:
    limit = measured_bandwidth_limits(args.quick, rounds)[2]["median_gbs"]
    report = {
        "machine": machine(), "load_average": os.getloadavg()[0], "tf_version": tf.__version__,
        "bandwidth_limit_gbs": limit,
        "features": bench_features([AdamCase(*sized)] if all(sized) else feature_cases(args.quick),
                                   rounds, args.feature)
    }
    report["seconds"] = time.time() - started
    write_results(
        report,
        os.path.join(
            args.out,
            f"features_{args.rows}x{args.dim}_b{args.batch}" if all(sized) else "features"),
        lambda r:
        (f"{r['machine']}, TensorFlow {r['tf_version']}; bandwidth limit "
         f"{r['bandwidth_limit_gbs']:.1f} GB/s; load average {r['load_average']:.1f} at the "
         f"start.\n\n" + render_features(r["features"])))
    return
  report = {"machine": machine(), "tf_version": tf.__version__, "quick": args.quick}
  report["bandwidth"] = {
      str(k): v for k, v in measured_bandwidth_limits(args.quick, rounds).items()
  }
  cases = adam_cases(args.quick)
  if args.optimizer:
    cases = [case for case in adam_cases(False) if optimizer_level(case)]
  else:
    report["fixed_cost"] = fixed_cost(rounds)
  report["lazy_adam"] = {}
  for case in cases:
    print(f"lazy Adam {case.label} ...", flush=True)
    # Keras 3 Adam is dense: O(table) per step. Time it where that stays affordable.
    keras_adam = case.rows * case.dim <= 64_000_000 and not case.duplicates
    report["lazy_adam"][case.label] = bench_lazy_adam(case, rounds, keras_adam)
    # The case's tables are held in reference cycles (tf.functions and their
    # captures): free them before the next case allocates its own.
    gc.collect()
  if args.optimizer:
    report["seconds"] = time.time() - started
    write_results(report, os.path.join(args.out, "optimizer"), render)
    return
  report["keras3_xla"] = {}
  for case in xla_cases(args.quick):
    print(f"Keras 3 LazyAdam with and without XLA, {case.label} ...", flush=True)
    report["keras3_xla"][case.label] = bench_keras3_xla(case, rounds)
    gc.collect()
  if not args.no_clippy:
    print("Clippy Adagrad (TF_USE_LEGACY_KERAS=1 subprocess) ...", flush=True)
    report["clippy"] = bench_clippy(QUICK_CLIPPY if args.quick else list(CLIPPY_CASES), rounds)
  report["seconds"] = time.time() - started
  write_results(report, os.path.join(args.out, "quick" if args.quick else "full"), render, plot)


if __name__ == "__main__":
  main()
