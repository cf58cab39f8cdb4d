"""Benchmark: Keras 3 LazyAdam's (or ClippyAdagrad's) gradient accumulation against the bare step.

    python -m benchmarks.bench_accumulation [--optimizer lazy_adam|clippy_adagrad]
        [--rows R --dim D --batch B] [--rounds N] [--use-ema]

Three Keras 3 steps of the optimizer, each an `apply_gradients` of an IndexedSlices
of B distinct rows in a `tf.function` on its own table: the bare step, the step with
`gradient_accumulation_steps=2` as it runs (the apply step in one op on the CPU,
ResourceSparseApplyLazyAdamWindow or ResourceSparseApplyClippyAdagradWindow), and
the same with the apply step as it ran before (op ResourceSparseTakeWindowGradient,
then the update). With --use-ema both accumulating steps keep the EMA too (LazyAdam's
one op ResourceSparseApplyLazyAdamWindowAveraged, the two ops the take-window op, then
ResourceSparseApplyLazyAdamAveraged). Each round times
two windows of each, one call at a time, interleaved (bare, fused, two ops, ...);
the medians of the micro-steps and of the apply steps, and their ratios to the
bare step taken within each round, then their median.
"""

import argparse
import json
import os
import time

import numpy as np

from benchmarks import bench


def call_ms(fn, args):
  start = time.perf_counter()
  fn(*args)
  return (time.perf_counter() - start) * 1e3


OPTIMIZERS = {"lazy_adam": "LazyAdam", "clippy_adagrad": "ClippyAdagrad"}


def bench_accumulation(case, rounds, seed=0, optimizer="lazy_adam", use_ema=False):
  import keras
  import tensorflow as tf

  from tf_opt_ops import keras as ours

  optimizer_class = getattr(ours, OPTIMIZERS[optimizer])

  class TwoOps(optimizer_class):
    """The apply step as it ran before the window op: the average first."""

    def _applies_window(self, variable, accumulator):
      return False

  steps = bench.distinct_row_steps(case, seed)
  init = tf.random.normal((case.rows, case.dim), seed=seed)
  feature = dict(learning_rate=0.001, gradient_accumulation_steps=2, use_ema=use_ema)
  variants = {
      "bare": bench._apply_gradients_step(optimizer_class(learning_rate=0.001),
                                          keras.Variable(init), case),
      "fused": bench._apply_gradients_step(optimizer_class(**feature), keras.Variable(init), case),
      "two ops": bench._apply_gradients_step(TwoOps(**feature), keras.Variable(init), case),
  }
  del init
  # Trace, warm up (bench.WARMUP_CALLS, an even count) and end on a window's apply step.
  for fn in variants.values():
    for k in range(bench.WARMUP_CALLS):
      fn(*steps[k % len(steps)])
  times = {name: {"micro": [], "apply": []} for name in variants}
  for _ in range(rounds):
    for name, fn in variants.items():
      micro, apply = [], []
      for k in range(4):  # two windows: micro-step, apply step, micro-step, apply step
        (micro if k % 2 == 0 else apply).append(call_ms(fn, steps[k % len(steps)]))
      times[name]["micro"].append(np.mean(micro))
      times[name]["apply"].append(np.mean(apply))
  bare = (np.array(times["bare"]["micro"]) + np.array(times["bare"]["apply"])) / 2
  result = {
      "optimizer": optimizer, "use_ema": use_ema, "case": case.label, "rounds": rounds,
      "bare_ms": float(np.median(bare))
  }
  for name in ("fused", "two ops"):
    micro, apply = np.array(times[name]["micro"]), np.array(times[name]["apply"])
    result[name] = {
        "micro_ms": float(np.median(micro)),
        "apply_ms": float(np.median(apply)),
        "micro_over_bare": float(np.median(micro / bare)),
        "apply_over_bare": float(np.median(apply / bare)),
        "mean_over_bare": float(np.median((micro + apply) / 2 / bare)),
    }
  return result


def run_from_command_line(description, bench_fn, has_ema_option=False):
  """Parses the window benchmarks' arguments, runs bench_fn(case, rounds, optimizer=...,
  and use_ema=... where `has_ema_option`) and prints its result with the load average."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="lazy_adam")
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--dim", type=int, default=64)
  parser.add_argument("--batch", type=int, default=16_384)
  parser.add_argument("--rounds", type=int, default=100)
  if has_ema_option:
    parser.add_argument("--use-ema", action="store_true", help="with use_ema=True too")
  args = parser.parse_args()
  case = bench.AdamCase(args.rows, args.dim, args.batch)
  options = {"use_ema": args.use_ema} if has_ema_option else {}
  result = bench_fn(case, args.rounds, optimizer=args.optimizer, **options)
  result["load_average"] = os.getloadavg()
  print(json.dumps(result, indent=1))


def main():
  run_from_command_line(__doc__.splitlines()[0], bench_accumulation, has_ema_option=True)


if __name__ == "__main__":
  main()
