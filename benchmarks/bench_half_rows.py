"""Benchmark: the raw sparse ops on a 16-bit (or any) table, each against the bare lazy Adam step.

    python -m benchmarks.bench_half_rows [--dtype float16|bfloat16|float32]
        [--rows R --dim D --batch B] [--rounds N]

On tables of `--dtype` with the rows of `bench.distinct_row_steps` (gradients cast to the
dtype): the bare ResourceSparseApplyLazyAdam, lazy Adam with its moving average in the same
pass (`moving_average=`), the moving average op alone (ResourceSparseApplyLazyMovingAverage),
row-wise Adagrad rounded to nearest and stochastically, and lazy Adam reading its gradient
unscaled by a loss scale (`grad_scale=`, as the LossScaleOptimizers' steps call it), each in
its own `tf.function`. Each round calls every op once per step, one call at a time,
interleaved; the ratios to the round's bare step, then their medians.
"""

import argparse
import json
import os

import numpy as np

from benchmarks import bench
from benchmarks import bench_accumulation

CASES = ("bare", "averaged", "moving_average", "rowwise", "rowwise_stochastic", "loss_scaled")


def bench_half_rows(case, rounds, dtype="float16", seed=0):
  import tensorflow as tf

  from tf_opt_ops import ops

  def table(stddev, seed):
    return tf.Variable(
        tf.cast(tf.random.normal((case.rows, case.dim), stddev=stddev, seed=seed), dtype))

  var, m, average = table(0.01, seed), table(0.001, seed + 1), table(0.01, seed + 2)
  v = tf.Variable(tf.fill((case.rows, case.dim), tf.constant(1e-4, dtype)))
  accum = tf.Variable(tf.fill((case.rows,), 0.1))
  synced = tf.Variable(tf.zeros((case.rows,), tf.int32))
  count = tf.Variable(0, dtype=tf.int32)
  steps = [(indices, tf.cast(grad * 0.01, dtype))
           for indices, grad in bench.distinct_row_steps(case, seed)]
  adam = dict(beta_1_power=0.9, beta_2_power=0.999)
  unscale = (tf.constant(1.0, dtype), tf.constant(2.0, dtype))  # a loss scale of 2

  def ema_step():
    count.assign_add(1)
    return count.read_value()

  @tf.function
  def bare(indices, grad):
    ops.sparse_lazy_adam(var, m, v, grad, indices, **adam)

  @tf.function
  def averaged(indices, grad):
    ops.sparse_lazy_adam(var, m, v, grad, indices,
                         moving_average=(average, synced, ema_step(), 0.99), **adam)

  @tf.function
  def moving_average(indices, grad):
    del grad
    ops.sparse_moving_average(average, synced, var, indices, count=ema_step(), ema_momentum=0.99)

  @tf.function
  def rowwise(indices, grad):
    ops.sparse_rowwise_adagrad(var, accum, grad, indices)

  @tf.function
  def rowwise_stochastic(indices, grad):
    ops.sparse_rowwise_adagrad(var, accum, grad, indices, stochastic_rounding=True, seed=seed)

  @tf.function
  def loss_scaled(indices, grad):
    ops.sparse_lazy_adam(var, m, v, grad, indices, grad_scale=unscale, **adam)

  calls = dict(bare=bare, averaged=averaged, moving_average=moving_average, rowwise=rowwise,
               rowwise_stochastic=rowwise_stochastic, loss_scaled=loss_scaled)
  for k in range(bench.WARMUP_CALLS):
    for fn in calls.values():
      fn(*steps[k % len(steps)])
  times = {name: [] for name in CASES}
  for _ in range(rounds):
    for args in steps:
      for name in CASES:
        times[name].append(bench_accumulation.call_ms(calls[name], args))
  ms = {name: np.array(times[name]) for name in CASES}
  return {
      "dtype": dtype,
      "case": case.label,
      "rounds": rounds,
      **{f"{name}_ms": float(np.median(ms[name])) for name in CASES},
      **{f"{name}_over_bare": float(np.median(ms[name] / ms["bare"])) for name in CASES[1:]},
  }


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default="float16")
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--dim", type=int, default=128)
  parser.add_argument("--batch", type=int, default=131_072)
  parser.add_argument("--rounds", type=int, default=5)
  args = parser.parse_args()
  case = bench.AdamCase(args.rows, args.dim, args.batch)
  result = bench_half_rows(case, args.rounds, dtype=args.dtype)
  result["load_average"] = os.getloadavg()
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main()
