"""The CPU kernels' instruction-set levels: the level in use, and the same bits on every level.

Each level this machine runs (avx, and avx2 / avx512 where the CPU has them) computes every op x
dtype x light-state layout (row-wise Adagrad's tables and weight decay modes too, the lazy moving
average on every table type), a few of them inside XLA (whose custom calls run the same
dispatched loops), random cases with special values, and every float16 conversion in a fresh
process forced to it with TF_OPT_OPS_CPU_ISA; the
outputs must be identical bit for bit across levels, equal `reference.py`'s, and convert float16
as Eigen's software conversion does.
Why: see docs/design.md, "Instruction sets".
"""

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

LEVELS = ("avx", "avx2", "avx512")
LIGHT_DTYPES = ("float16", "bfloat16", "float32")
ROWS, DIM = 50, 37  # a row wider than the 32 lanes of the row-wise mean, and not a multiple of 8
INDICES = [[3, 0, 3, 7, 3, 49, 12, 12], [11, 5, 0, 30, 31, 32]]
ADAM = dict(lr=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
CLIPPY = dict(lr=0.1, epsilon=1e-7, variable_relative_threshold=0.1,
              accumulator_relative_threshold=0.01, absolute_threshold=1e-4)
ROWWISE = dict(lr=0.05, epsilon=1e-8, weight_decay=0.01)
EMA_MOMENTUM = 0.99
# Lazy Adam's fused weight decay (the W ops): every Adam case runs without and with it.
ADAM_WEIGHT_DECAYS = {"": None, "wd_": 0.3}
# Sparse Clippy's fused weight decay (the W ops): every sparse Clippy case runs without and with it.
CLIPPY_WEIGHT_DECAYS = ADAM_WEIGHT_DECAYS

# (slot dtype, stochastic rounding) of the float32-table cases also run inside XLA.
XLA_LAYOUTS = (("float32", False), ("bfloat16", True), ("float16", False))
PYTHON_DIR = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "python")


def best_level():
  """The level the CPU's flags allow (what cpu_isa.cc reads from CPUID)."""
  with open("/proc/cpuinfo") as f:
    flags = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
  if not {"avx2", "fma", "f16c"} <= flags:
    return "avx"
  return "avx512" if {"avx512f", "avx512bw", "avx512vl"} <= flags else "avx2"


def levels_here():
  return LEVELS[:LEVELS.index(best_level()) + 1]


def run_worker(level, *args):
  """Runs this file's worker in a fresh process with TF_OPT_OPS_CPU_ISA=level (None: unset)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env.pop("TF_OPT_OPS_CPU_ISA", None)
  if level is not None:
    env["TF_OPT_OPS_CPU_ISA"] = level
  env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR, env.get("PYTHONPATH", "")])
  return subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True,
                        timeout=600, check=False)


# ------------------------------------------------------------ the cases (shared by both sides)
def adam_cases():
  """(name, dtype, slot dtype, row-wise v, stochastic rounding): every op x dtype x layout."""
  cases = [(d, d, False, False) for d in ("float16", "bfloat16", "float32", "float64")]
  cases += [(t, s, rowwise, stochastic)
            for t, s in itertools.product(LIGHT_DTYPES, LIGHT_DTYPES)
            for rowwise, stochastic in itertools.product((False, True), (False, True))
            if t != s or rowwise or stochastic]
  return [(f"adam_{t}_{s}_rowwise{int(r)}_sr{int(sr)}", t, s, r, sr) for t, s, r, sr in cases]


def clippy_cases():
  """(name, sparse, dtype, accumulator dtype, stochastic, standard update, clip accumulator)."""
  cases = []
  pairs = [(d, d) for d in ("float16", "bfloat16", "float32", "float64")]
  pairs += [(t, a) for t, a in itertools.product(LIGHT_DTYPES, LIGHT_DTYPES) if t != a]
  for sparse, (t, a) in itertools.product((False, True), pairs):
    stochastic_options = (False, True) if a in ("float16", "bfloat16") else (False,)
    for stochastic, standard in itertools.product(stochastic_options, (False, True)):
      kind = "sparse" if sparse else "dense"
      name = f"clippy_{kind}_{t}_{a}_sr{int(stochastic)}_std{int(standard)}"
      cases.append((name, sparse, t, a, stochastic, standard, not standard))
  return cases


def clippy_decay_cases():
  """(name prefix, weight decay or None, clippy case): the Clippy cases, the sparse ones also
  with the fused weight decay."""
  return [(prefix, decay, case)
          for (prefix,
               decay), case in itertools.product(CLIPPY_WEIGHT_DECAYS.items(), clippy_cases())
          if decay is None or case[1]]


def rowwise_cases():
  """(name, table dtype, weight decay mode, stochastic rounding): row-wise Adagrad's every table
  type and mode, the 16-bit tables also rounded stochastically."""
  return [(f"rowwise_{t}_{mode}" + ("_sr" if stochastic else ""), t, mode, stochastic)
          for t in ("float16", "bfloat16", "float32", "float64")
          for mode in ("none", "l2", "decoupled")
          for stochastic in ((False, True) if t in ("float16", "bfloat16") else (False,))]


def rowwise_state(rng, reference, t):
  """(table, accumulator of the compute type: float64 for a float64 table, else float32)."""
  return [
      reference.random_values(rng, (ROWS, DIM), t),
      reference.random_values(rng, (ROWS,), "float64" if t == "float64" else "float32", 0, 0.1)
  ]


def moving_average_cases():
  """(name, table dtype, special values): the lazy moving average op on every table type, with
  random values and with special ones (NaN, infinities, subnormals)."""
  return [(f"ema_{t}" + ("_special" if special else ""), t, special)
          for t in ("float16", "bfloat16", "float32", "float64")
          for special in (False, True)]


def moving_average_state(rng, reference, t, special):
  """(table, its average, each row's synced count: 0 to 4 of the EMA steps before the first
  count, 5)."""
  if special:
    table = [special_values(rng, (ROWS, DIM), t) for _ in range(2)]
    table = [reference.store(x, t) if t == "bfloat16" else x for x in table]
  else:
    table = [reference.random_values(rng, (ROWS, DIM), t) for _ in range(2)]
  return [*table, rng.integers(0, 5, ROWS).astype(np.int32)]


def adam_state(rng, reference, t, s, rowwise):
  return [
      reference.random_values(rng, (ROWS, DIM), t),
      reference.random_values(rng, (ROWS, DIM), s, -0.01, 0.01),
      reference.random_values(rng, (ROWS,) if rowwise else (ROWS, DIM), s, 0, 1e-4),
  ]


def clippy_state(rng, reference, t, a):
  return [
      reference.random_values(rng, (ROWS, DIM), t),
      reference.random_values(rng, (ROWS, DIM), a, 0.01, 0.1),
  ]


def grads(rng, reference, t):
  return [reference.random_values(rng, (len(i), DIM), t, -0.5, 0.5) for i in INDICES]


def special_values(rng, shape, dtype):
  """Random values over many magnitudes, with NaN, infinities, zeros of both signs, subnormals."""
  x = (rng.standard_normal(shape) * 10.0**rng.integers(-45, 39, shape)).astype(np.float32)
  picks = rng.random(shape)
  specials = np.array(
      [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -3e-42, 65504.0, 65520.0, 6.1e-5, 3e38],
      np.float32)
  x = np.where(picks < 0.15, specials[rng.integers(0, len(specials), shape)], x)
  if dtype == "float64":
    return x.astype(np.float64)
  if dtype == "float16":
    with np.errstate(over="ignore"):
      return x.astype(np.float16)
  return x


def fuzz_cases(count=24, seed=7):
  rng = np.random.default_rng(seed)
  for k in range(count):
    yield (f"fuzz_{k}", ("adam", "clippy_dense", "clippy_sparse")[k % 3],
           LIGHT_DTYPES[rng.integers(0, 3)], LIGHT_DTYPES[rng.integers(0, 3)],
           int(rng.integers(1, 70)), int(rng.integers(1, 140)), bool(rng.integers(0, 2)),
           bool(rng.integers(0, 2)), int(rng.integers(0, 2**31)))


# ---------------------------------------------------------------------------- the worker
def worker(out_path):
  """Computes every case's outputs at the level this process runs; saves them to `out_path`."""
  import ml_dtypes
  import tensorflow as tf

  import tf_opt_ops
  from tf_opt_ops import ops
  from tf_opt_ops import reference

  def tensor(x, dtype):
    x = np.asarray(x)
    return tf.constant(x.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else x)

  def stored(variable, dtype):
    value = np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)
    return value.view(np.uint16) if dtype == "bfloat16" else value

  out = {}

  def lazy_adam(name, state, dtypes, grad_list, indices_list, jit_compile=False, **light):
    var, m, v = (tf.Variable(tensor(x, d)) for x, d in zip(state, dtypes))

    def apply(g, i, t):
      ops.sparse_lazy_adam(var, m, v, g, i, beta_1_power=0.9**t, beta_2_power=0.999**t, step=t,
                           **{**ADAM, **light})

    if jit_compile:  # the XLA kernel's custom call, which runs the same dispatched loops
      apply = tf.function(apply, jit_compile=True)
    for t, (g, i) in enumerate(zip(grad_list, indices_list), start=1):
      index_dtype = tf.int32 if t % 2 else tf.int64
      apply(tensor(g, dtypes[0]), tf.constant(i, index_dtype), t)
    for part, x, d in zip(("var", "m", "v"), (var, m, v), dtypes):
      out[f"{name}/{part}"] = stored(x, d)

  def clippy(name, sparse, state, dtypes, grad_list, indices_list, **options):
    var, accum = (tf.Variable(tensor(x, d)) for x, d in zip(state, dtypes))
    for t, (g, i) in enumerate(zip(grad_list, indices_list), start=1):
      if sparse:
        scale = ops.sparse_clippy_adagrad(var, accum, tensor(g, dtypes[0]),
                                          tf.constant(i, tf.int32 if t % 2 else tf.int64), step=t,
                                          seed=5, **options)
      else:
        scale = ops.clippy_adagrad(var, accum, tensor(g, dtypes[0]), step=t, seed=5, **options)
      out[f"{name}/scale{t}"] = np.asarray(scale.numpy())
    for part, x, d in zip(("var", "accum"), (var, accum), dtypes):
      out[f"{name}/{part}"] = stored(x, d)

  for name, t, mode, stochastic in rowwise_cases():
    rng = np.random.default_rng(4)
    state = rowwise_state(rng, reference, t)
    accum_dtype = "float64" if t == "float64" else "float32"
    var, accum = tf.Variable(tensor(state[0], t)), tf.Variable(tensor(state[1], accum_dtype))
    for step, (g, i) in enumerate(zip(grads(rng, reference, t), INDICES), start=1):
      ops.sparse_rowwise_adagrad(var, accum, tensor(g, t),
                                 tf.constant(i, tf.int32 if step % 2 else tf.int64),
                                 weight_decay_mode=mode, stochastic_rounding=stochastic, seed=77,
                                 **ROWWISE)
    out[f"{name}/var"], out[f"{name}/accum"] = stored(var, t), stored(accum, accum_dtype)
  for name, t, special in moving_average_cases():
    rng = np.random.default_rng(6)
    table, average0, synced0 = moving_average_state(rng, reference, t, special)
    var, average = tf.Variable(tensor(table, t)), tf.Variable(tensor(average0, t))
    synced = tf.Variable(synced0)
    for count, i in enumerate(INDICES, start=5):
      ops.sparse_moving_average(average, synced, var,
                                tf.constant(i, tf.int32 if count % 2 else tf.int64), count=count,
                                ema_momentum=EMA_MOMENTUM)
    out[f"{name}/average"], out[f"{name}/synced"] = stored(average, t), synced.numpy()
  for (prefix, decay), (name, t, s, rowwise,
                        stochastic) in itertools.product(ADAM_WEIGHT_DECAYS.items(), adam_cases()):
    rng = np.random.default_rng(1)
    lazy_adam(prefix + name, adam_state(rng, reference, t, s, rowwise), (t, s, s),
              grads(rng, reference, t), INDICES, slot_dtype=s, rowwise_second_moment=rowwise,
              stochastic_rounding=stochastic, seed=1234, weight_decay=decay)
  for s, stochastic in XLA_LAYOUTS:
    rng = np.random.default_rng(1)
    lazy_adam(f"xla_adam_float32_{s}_sr{int(stochastic)}",
              adam_state(rng, reference, "float32", s, False), ("float32", s, s),
              grads(rng, reference, "float32"), INDICES, jit_compile=True, slot_dtype=s,
              stochastic_rounding=stochastic, seed=1234)
  for prefix, decay, (name, sparse, t, a, stochastic, standard, clip) in clippy_decay_cases():
    rng = np.random.default_rng(2)
    state = clippy_state(rng, reference, t, a)
    grad_list = grads(rng, reference, t) if sparse else [
        reference.random_values(rng, (ROWS, DIM), t, -0.5, 0.5) for _ in INDICES
    ]
    clippy(prefix + name, sparse, state, (t, a), grad_list, INDICES, accumulator_dtype=a,
           stochastic_rounding=stochastic, use_standard_accumulator_update=standard,
           clip_accumulator_update=clip, **CLIPPY,
           **({} if decay is None else dict(weight_decay=decay)))
  for name, op, t, s, rows, dim, rowwise, stochastic, seed in fuzz_cases():
    rng = np.random.default_rng(seed)
    indices = [rng.integers(0, rows, rng.integers(1, 2 * rows + 1)) for _ in range(2)]
    grad_list = [special_values(rng, (len(i), dim), t) for i in indices]
    if t == "bfloat16":
      grad_list = [reference.store(g, "bfloat16") for g in grad_list]
    if op == "adam":
      v_shape = (rows,) if rowwise else (rows, dim)
      state = [
          special_values(rng, (rows, dim), t),
          special_values(rng, (rows, dim), s),
          np.abs(special_values(rng, v_shape, s))
      ]
      state = [reference.store(x, d) if d == "bfloat16" else x for x, d in zip(state, (t, s, s))]
      lazy_adam(name, state, (t, s, s), grad_list, indices, slot_dtype=s,
                rowwise_second_moment=rowwise, stochastic_rounding=stochastic, seed=seed)
    else:
      state = [special_values(rng, (rows, dim), t), np.abs(special_values(rng, (rows, dim), s))]
      state = [reference.store(x, d) if d == "bfloat16" else x for x, d in zip(state, (t, s))]
      if op == "clippy_dense":
        grad_list = [special_values(rng, (rows, dim), t) for _ in indices]
        if t == "bfloat16":
          grad_list = [reference.store(g, "bfloat16") for g in grad_list]
      clippy(name, op == "clippy_sparse", state, (t, s), grad_list, indices, accumulator_dtype=s,
             stochastic_rounding=stochastic and s != "float32",
             use_standard_accumulator_update=rowwise, **CLIPPY)

  # Every float16 value through a load and a store: lr = 0 leaves var as it was.
  every_half = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
  zeros = np.zeros((4096, 16), np.float16)
  lazy_adam("half_roundtrip", [every_half.reshape(4096, 16), zeros, zeros], ("float16",) * 3,
            [np.zeros((4096, 16), np.float16)], [np.arange(4096)], lr=0.0)
  # float32 -> float16 stores: with beta_1 = 0, m is the gradient rounded to float16. Every
  # upper half of a float32 bit pattern, with random lower bits, and random floats.
  rng = np.random.default_rng(3)
  upper = np.arange(65536, dtype=np.uint32) << np.uint32(16)
  floats = np.concatenate([
      (upper | rng.integers(0, 65536, 65536, dtype=np.uint32)).view(np.float32),
      upper.view(np.float32),
      special_values(rng, (65536,), "float32")
  ]).reshape(-1, 64)
  rows = floats.shape[0]
  zeros16 = np.zeros(floats.shape, np.float16)
  with np.errstate(over="ignore", invalid="ignore"):
    lazy_adam("half_store", [np.zeros(floats.shape, np.float32), zeros16, zeros16],
              ("float32", "float16", "float16"), [floats], [np.arange(rows)], beta_1=0.0,
              slot_dtype="float16")
  out["half_store/grad"] = floats
  out["isa"] = np.array(tf_opt_ops.cpu_isa())
  np.savez(out_path, **out)


# ---------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
  """Each level's outputs, computed in a fresh process forced to it."""
  results = {}
  for level in levels_here():
    path = str(tmp_path_factory.mktemp("isa") / f"{level}.npz")
    done = run_worker(level, "--worker", path)
    assert done.returncode == 0, f"the {level} worker failed:\n{done.stderr[-3000:]}"
    assert "tf_opt_ops:" not in done.stderr, done.stderr
    with np.load(path) as f:
      results[level] = {k: f[k] for k in f.files}
  return results


def _assert_same_bits(got, want, what):
  np.testing.assert_array_equal(
      np.ascontiguousarray(got).view(np.uint8),
      np.ascontiguousarray(want).view(np.uint8), err_msg=what)


def _nan_mask(x):
  """NaN elements of an output (bfloat16 outputs are uint16 bits)."""
  if x.dtype == np.uint16:
    return (x & 0x7FFF) > 0x7F80
  return np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)


def _assert_same_bits_nan_as_nan(got, want, what):
  """The same bits, except that a NaN may be any NaN: which of two NaN operands an
  operation returns (its sign and payload) follows the compiler's operand order, which
  IEEE 754 leaves open and each level's code may order differently."""
  nan = _nan_mask(want)
  np.testing.assert_array_equal(_nan_mask(got), nan, err_msg=f"{what}: NaN positions")
  _assert_same_bits(np.asarray(got)[~nan], np.asarray(want)[~nan], what)


def test_each_level_ran_as_forced(outputs):
  assert {level: str(out["isa"]) for level, out in outputs.items()
         } == {level: level for level in outputs}


def test_levels_give_the_same_bits(outputs):
  # Every x86-64 server TensorFlow runs on has AVX2 beside the AVX floor.
  assert len(outputs) >= 2, f"this CPU runs only {list(outputs)}: nothing to compare against"
  first, *others = outputs
  for level in others:
    assert outputs[level].keys() == outputs[first].keys()
    for key, want in outputs[first].items():
      if key != "isa":
        _assert_same_bits_nan_as_nan(outputs[level][key], want, f"{key}: {level} against {first}")


def test_every_level_matches_the_reference(outputs):
  from tf_opt_ops import reference
  expected = {}
  for (prefix, decay), (name, t, s, rowwise,
                        stochastic) in itertools.product(ADAM_WEIGHT_DECAYS.items(), adam_cases()):
    rng = np.random.default_rng(1)
    var, m, v = adam_state(rng, reference, t, s, rowwise)
    for step, (g, i) in enumerate(zip(grads(rng, reference, t), INDICES), start=1):
      var, m, v = reference.sparse_lazy_adam(var, m, v, g, np.asarray(i), t, lr=ADAM["lr"],
                                             beta1=ADAM["beta_1"], beta2=ADAM["beta_2"],
                                             epsilon=ADAM["epsilon"], beta1_power=0.9**step,
                                             beta2_power=0.999**step, slot_dtype=s,
                                             rowwise_second_moment=rowwise,
                                             stochastic_rounding=stochastic, seed=1234, step=step,
                                             weight_decay=decay)
    name = prefix + name
    expected.update({f"{name}/var": var, f"{name}/m": m, f"{name}/v": v})
    if not prefix and t == "float32" and not rowwise and (s, stochastic) in XLA_LAYOUTS:
      xla = f"xla_adam_float32_{s}_sr{int(stochastic)}"
      expected.update({f"{xla}/var": var, f"{xla}/m": m, f"{xla}/v": v})
  for prefix, decay, (name, sparse, t, a, stochastic, standard, clip) in clippy_decay_cases():
    rng = np.random.default_rng(2)
    var, accum = clippy_state(rng, reference, t, a)
    grad_list = grads(rng, reference, t) if sparse else [
        reference.random_values(rng, (ROWS, DIM), t, -0.5, 0.5) for _ in INDICES
    ]
    for step, (g, i) in enumerate(zip(grad_list, INDICES), start=1):
      hyper = dict(CLIPPY, accumulator_dtype=a, stochastic_rounding=stochastic,
                   use_standard_accumulator_update=standard, clip_accumulator_update=clip, seed=5,
                   step=step)
      if sparse:
        var, accum, scale = reference.sparse_clippy_adagrad(var, accum, g, np.asarray(i), t,
                                                            weight_decay=decay, **hyper)
      else:
        var, accum, scale = reference.clippy_adagrad(var, accum, g, t, **hyper)
      expected[f"{prefix}{name}/scale{step}"] = np.asarray(scale, reference.compute_type(t))
    expected.update({f"{prefix}{name}/var": var, f"{prefix}{name}/accum": accum})
  for name, t, mode, _ in rowwise_cases():
    if t not in ("float32", "float64"):
      continue  # 16-bit tables: compared across levels (test_levels_give_the_same_bits)
    rng = np.random.default_rng(4)
    var, accum = rowwise_state(rng, reference, t)
    for g, i in zip(grads(rng, reference, t), INDICES):
      var, accum = reference.sparse_rowwise_adagrad(var, accum, g, np.asarray(i), t,
                                                    weight_decay_mode=mode, **ROWWISE)
    expected.update({f"{name}/var": var, f"{name}/accum": accum})
  for name, t, special in moving_average_cases():
    if special:
      continue  # TensorFlow's ops flush subnormals, NumPy does not: compared across levels only
    rng = np.random.default_rng(6)
    table, average, synced = moving_average_state(rng, reference, t, special)
    for count, i in enumerate(INDICES, start=5):
      average, synced = reference.sparse_moving_average(average, synced, table, i, t, count=count,
                                                        ema_momentum=EMA_MOMENTUM)
    expected.update({f"{name}/average": average, f"{name}/synced": synced})
  for level, out in outputs.items():
    for key, want in expected.items():
      _assert_same_bits(out[key], want, f"{key} at {level} against the reference")


def test_float16_conversions_are_eigens_on_every_level(outputs):
  every_half = np.arange(65536, dtype=np.uint32).astype(np.uint16)
  nan = (every_half & 0x7FFF) > 0x7C00
  # A NaN comes back as the quiet NaN with its sign, every other value as it was.
  roundtrip = np.where(nan, (every_half & 0x8000) | 0x7E00, every_half).astype(np.uint16)
  for level, out in outputs.items():
    _assert_same_bits(out["half_roundtrip/var"].reshape(-1), roundtrip.view(np.float16),
                      f"float16 load and store at {level}")
    floats = out["half_store/grad"]
    with np.errstate(over="ignore"):
      nearest = floats.astype(np.float16).view(np.uint16)
    sign = (floats.view(np.uint32) >> 16).astype(np.uint16) & 0x8000
    want = np.where(np.isnan(floats), sign | 0x7E00, nearest).astype(np.uint16)
    # m = 0 * m + 1 * g is g itself except for zeros and float32 subnormals (+0, or flushed
    # by the thread's denormal mode): those are compared across levels only.
    normal = ~(np.abs(floats) < np.float32(2.0**-126))
    _assert_same_bits(out["half_store/m"].view(np.uint16)[normal], want[normal],
                      f"float32 to float16 at {level}")


def test_level_is_reported_and_the_variable_lowers_it():
  best = best_level()
  for level, want in [(None, best)] + [(level, level) for level in levels_here()]:
    done = run_worker(level, "--print-isa")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [want], (level, done.stdout)
    assert "tf_opt_ops:" not in done.stderr, done.stderr


# The levels above this CPU's best, and a name no level has.
@pytest.mark.parametrize("requested",
                         [level for level in LEVELS if level not in levels_here()] + ["sse4"])
def test_a_level_the_cpu_lacks_runs_the_best_with_one_warning(requested):
  best = best_level()
  done = run_worker(requested, "--print-isa")
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.split() == [best]
  warnings = [line for line in done.stderr.splitlines() if line.startswith("tf_opt_ops:")]
  assert len(warnings) == 1, done.stderr
  assert f"TF_OPT_OPS_CPU_ISA={requested}" in warnings[0] and best in warnings[0], warnings


# The fused ops' loops (a window's average, a moving average's catch-up, or a clip factor applied
# as each gradient value is read, and the update in one pass) are compiled per level as well;
# their own files compare them with the unfused ops bit for bit, which the cases above compare
# across levels. So those files, run at each lower level, carry the same-bits promise to them.
FUSED_OP_TESTS = ("test_lazy_adam_window_op.py", "test_clippy_adagrad_window_op.py",
                  "test_lazy_adam_averaged_op.py", "test_clippy_adagrad_averaged_op.py",
                  "test_lazy_adam_window_averaged_op.py", "test_scaled_ops.py")


@pytest.mark.parametrize("level", levels_here()[:-1])
def test_fused_ops_equal_the_two_ops_on_every_lower_level(level):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_OPT_OPS_CPU_ISA=level)
  env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR, env.get("PYTHONPATH", "")])
  here = os.path.dirname(os.path.abspath(__file__))
  done = subprocess.run([
      sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
      *(os.path.join(here, name) for name in FUSED_OP_TESTS)
  ], env=env, capture_output=True, text=True, timeout=900, check=False)
  assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
  assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout[-2000:]


if __name__ == "__main__":
  if sys.argv[1] == "--print-isa":
    import tf_opt_ops
    print(tf_opt_ops.cpu_isa())
  else:
    worker(sys.argv[2])
