"""Benchmark: a gradient accumulation window's raw ops against the bare sparse step, no Keras.

    python -m benchmarks.bench_window_ops [--optimizer lazy_adam|clippy_adagrad]
        [--rows R --dim D --batch B] [--rounds N]

On one table with the rows of `bench.distinct_row_steps`: the bare sparse op
(ResourceSparseApplyLazyAdam or ResourceSparseApplyClippyAdagrad), the micro-step's
ResourceSparseAccumulateRows and the window's apply step in one op
(ResourceSparseApplyLazyAdamWindow or ResourceSparseApplyClippyAdagradWindow), each in
its own `tf.function`. Each round times two windows (micro-step, apply step, twice) and
four bare steps, one call at a time, interleaved; the ratios to the round's mean bare step,
then their medians.
"""

import numpy as np

from benchmarks import bench
from benchmarks import bench_accumulation


def bench_window_ops(case, rounds, seed=0, optimizer="lazy_adam"):
  import tensorflow as tf

  from tf_opt_ops import ops

  steps = bench.distinct_row_steps(case, seed)
  var = tf.Variable(tf.random.normal((case.rows, case.dim), seed=seed))
  if optimizer == "lazy_adam":
    m = tf.Variable(tf.zeros((case.rows, case.dim)))
    v = tf.Variable(tf.zeros((case.rows, case.dim)))

    def update(grad, indices, window=None):
      return ops.sparse_lazy_adam(var, m, v, grad, indices, beta_1_power=0.9, beta_2_power=0.999,
                                  window=window)
  else:
    accum = tf.Variable(tf.fill((case.rows, case.dim), 0.1))

    def update(grad, indices, window=None):
      return ops.sparse_clippy_adagrad(var, accum, grad, indices, window=window)

  accumulator = tf.Variable(tf.zeros((case.rows, case.dim)))
  row_ids = tf.Variable(tf.zeros((case.rows,), tf.int64))
  row_count = tf.Variable(tf.constant(0, tf.int64))

  @tf.function
  def bare(indices, grad):
    update(grad, indices)

  @tf.function
  def micro(indices, grad):
    ops.sparse_accumulate_rows(accumulator, row_ids, row_count, indices, grad)

  @tf.function
  def apply(indices, grad):
    update(grad, indices, window=(accumulator, row_ids, row_count, 2))

  def window(k):
    return micro if k % 2 == 0 else apply

  # Trace and warm up (bench.WARMUP_CALLS, an even count); ends on a window's apply step.
  for k in range(bench.WARMUP_CALLS):
    bare(*steps[k % len(steps)])
    window(k)(*steps[k % len(steps)])
  times = {"bare": [], "micro": [], "apply": []}
  for _ in range(rounds):
    calls = {"bare": [], "micro": [], "apply": []}
    for k, args in enumerate(steps):
      calls["bare"].append(bench_accumulation.call_ms(bare, args))
      calls["micro" if k % 2 == 0 else "apply"].append(bench_accumulation.call_ms(window(k), args))
    for name, ms in calls.items():
      times[name].append(np.mean(ms))
  bare_ms, micro_ms, apply_ms = (np.array(times[name]) for name in ("bare", "micro", "apply"))
  return {
      "optimizer": optimizer,
      "case": case.label,
      "rounds": rounds,
      "bare_ms": float(np.median(bare_ms)),
      "micro_ms": float(np.median(micro_ms)),
      "apply_ms": float(np.median(apply_ms)),
      "micro_over_bare": float(np.median(micro_ms / bare_ms)),
      "apply_over_bare": float(np.median(apply_ms / bare_ms)),
      "mean_over_bare": float(np.median((micro_ms + apply_ms) / 2 / bare_ms)),
  }


def main():
  bench_accumulation.run_from_command_line(__doc__.splitlines()[0], bench_window_ops)


if __name__ == "__main__":
  main()
