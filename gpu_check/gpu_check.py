#!/usr/bin/env python3
"""GPU check of the CUDA kernels of _tf_opt_ops.so, without TensorFlow.

Drives libtfo_gpu_check.so (the .so's own .cu.cc kernels and launchers and its
lazy CUDA runtime, built with the same clang and CUDA 12 toolkit: `make
gpu-check-build`) through ctypes and compares every
result with the NumPy references of python/tf_opt_ops/reference.py (docs/design.md,
"The math" and "GPU boundary"): all four variable
types, int32 and int64 indices, duplicate indices, a heavy-hitter row, bad
indices (rejected, nothing written), lazy Adam's light slots, the fused
weight decay of lazy Adam and sparse Clippy (the W ops), Clippy's flags, NaN gradients, and a
table past 2^31 elements (64-bit offsets) when the GPU has the memory. Then it
times the kernels against a device-to-device copy in the same run and against
torch.optim.SparseAdam when torch with CUDA is importable.

Exit status: 0 when every check passed, or when there is no usable GPU (it
says so: "NO GPU"); 1 when a check failed; 3 when there is no usable GPU and
--require-gpu was given. Performance targets are reported (MET/MISSED), and
only fail the run with --strict-perf.

`--backend tf-cpu` runs the same correctness cases against TensorFlow's CPU
kernels of the op library instead (needs TensorFlow and tf_opt_ops): it checks
the harness and the references on a machine without a GPU.
"""

import argparse
import ctypes
import importlib.util
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_reference():
  """python/tf_opt_ops/reference.py by file path: importing the tf_opt_ops package would
  import TensorFlow, which this check must run without."""
  path = os.path.join(os.path.dirname(HERE), "python", "tf_opt_ops", "reference.py")
  spec = importlib.util.spec_from_file_location("tf_opt_ops_reference", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


reference = _load_reference()
DEFAULT_LIB = os.path.join(HERE, "build", "libtfo_gpu_check.so")
DTYPE_CODE = {"float16": 0, "bfloat16": 1, "float32": 2, "float64": 3}
INDEX_CODE = {np.int32: 0, np.int64: 1}
# Agreement expected with the references: float32/float64 bit for bit (no FMA
# contraction on either side, same operation order); half types to their
# rounding (a compute difference may flip the last stored bit).
TOL = {"float32": 0.0, "float64": 0.0, "float16": 1e-3, "bfloat16": 1e-2}


class CudaError(RuntimeError):
  pass


# ------------------------------------------------------------------ backends


def load_cuda_runtime(lib_path):
  """Loads the libcudart.so.12 `make gpu-check-build` copies beside the library, if there.

  The library finds its CUDA runtime only when a call needs it
  (tf_opt_ops/platform/cuda_runtime_stub.cc): first one already loaded, which this
  makes the copy, then the dynamic loader's search. The lent GPU machines have
  a driver but may have no CUDA 12 runtime and no network. Returns the path
  loaded, or None.
  """
  runtime = os.path.join(os.path.dirname(os.path.abspath(lib_path)), "libcudart.so.12")
  if not os.path.exists(runtime):
    return None
  ctypes.CDLL(runtime, mode=ctypes.RTLD_GLOBAL)
  return runtime


class CudaBackend:
  """The launchers of gpu_launchers.h through gpu_check/capi.cu.cc."""

  def __init__(self, path):
    load_cuda_runtime(path)
    self.lib = ctypes.CDLL(path)
    L = self.lib
    vp, i64, sz, dbl, cint = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t, ctypes.c_double,
                              ctypes.c_int)
    L.tfo_error_string.restype = ctypes.c_char_p
    L.tfo_error_string.argtypes = [cint]
    L.tfo_device_count.argtypes = [ctypes.POINTER(cint)]
    L.tfo_device_name.argtypes = [ctypes.c_char_p, cint]
    L.tfo_mem_info.argtypes = [ctypes.POINTER(sz), ctypes.POINTER(sz)]
    L.tfo_malloc.argtypes = [ctypes.POINTER(vp), sz]
    L.tfo_free.argtypes = [vp]
    L.tfo_memset.argtypes = [vp, cint, sz]
    L.tfo_h2d.argtypes = [vp, vp, sz]
    L.tfo_d2h.argtypes = [vp, vp, sz]
    L.tfo_d2d.argtypes = [vp, vp, sz]
    L.tfo_timer_stop.argtypes = [ctypes.POINTER(ctypes.c_float)]
    L.tfo_sparse_scratch_bytes.argtypes = [cint, cint, i64, i64, i64, ctypes.POINTER(sz)]
    L.tfo_dense_scratch_bytes.restype = sz
    L.tfo_dense_scratch_bytes.argtypes = [cint]
    L.tfo_sparse_lazy_adam.argtypes = (
        [cint, cint, vp, i64, i64, i64, vp, vp, vp, vp] + [dbl] * 6 +
        [ctypes.POINTER(dbl), cint, cint, cint, ctypes.c_uint64, i64] +
        [vp, sz, ctypes.POINTER(i64), ctypes.POINTER(i64)])
    L.tfo_clippy_adagrad.argtypes = ([cint, i64, vp, vp, vp] + [dbl] * 5 + [cint, cint, vp, vp, sz])
    L.tfo_sparse_clippy_adagrad.argtypes = (
        [cint, cint, vp, i64, i64, i64, vp, vp, vp] + [dbl] * 5 +
        [cint, cint, ctypes.POINTER(dbl)] +
        [vp, vp, sz, ctypes.POINTER(i64), ctypes.POINTER(i64)])
    L.tfo_sparse_rowwise_adagrad.argtypes = (
        [cint, cint, vp, i64, i64, i64, vp, vp, vp] + [dbl] * 3 +
        [cint, cint, i64, vp, sz, ctypes.POINTER(i64),
         ctypes.POINTER(i64)])
    L.tfo_set_scale_to_one.argtypes = [cint, vp]
    self.allocations = []

  def check(self, err, what):
    if err != 0:
      raise CudaError(f"{what}: {self.lib.tfo_error_string(err).decode()} (CUDA error {err})")

  def device(self):
    """(name, free bytes) of device 0, or raise CudaError when there is none."""
    n = ctypes.c_int(0)
    self.check(self.lib.tfo_device_count(ctypes.byref(n)), "cudaGetDeviceCount")
    if n.value < 1:
      raise CudaError("no CUDA device")
    self.check(self.lib.tfo_init(), "stream/event creation")
    buf = ctypes.create_string_buffer(256)
    self.check(self.lib.tfo_device_name(buf, 256), "cudaGetDeviceProperties")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    self.check(self.lib.tfo_mem_info(ctypes.byref(free), ctypes.byref(total)), "cudaMemGetInfo")
    return buf.value.decode(), free.value

  # -- memory
  def alloc(self, nbytes):
    p = ctypes.c_void_p()
    self.check(self.lib.tfo_malloc(ctypes.byref(p), nbytes), f"cudaMalloc({nbytes})")
    return p.value

  def free(self, p):
    self.check(self.lib.tfo_free(p), "cudaFree")

  def upload(self, array):
    array = np.ascontiguousarray(array)
    p = self.alloc(array.nbytes)
    self.check(self.lib.tfo_h2d(p, array.ctypes.data, array.nbytes), "H2D copy")
    return p

  def download(self, p, like, offset_bytes=0):
    out = np.empty_like(like)
    self.check(self.lib.tfo_d2h(out.ctypes.data, p + offset_bytes, out.nbytes), "D2H copy")
    return out

  def sync(self):
    self.check(self.lib.tfo_sync(), "cudaStreamSynchronize")

  def timed(self, fn, iters):
    """Median milliseconds of fn() over iters runs (CUDA events, 2 warm-ups)."""
    for _ in range(2):
      fn()
    self.sync()
    times = []
    ms = ctypes.c_float()
    for _ in range(iters):
      self.check(self.lib.tfo_timer_start(), "cudaEventRecord")
      fn()
      self.check(self.lib.tfo_timer_stop(ctypes.byref(ms)), "cudaEventElapsedTime")
      times.append(ms.value)
    return float(np.median(times))

  # -- ops on device pointers
  def scratch_bytes(self, dtype, index_dtype, n, num_rows, dim):
    b = ctypes.c_size_t()
    self.check(
        self.lib.tfo_sparse_scratch_bytes(DTYPE_CODE[dtype], INDEX_CODE[index_dtype], n, num_rows,
                                          dim, ctypes.byref(b)), "SparseScratchBytes")
    return b.value

  def lazy_adam_ptr(self, dtype, index_dtype, d_idx, n, num_rows, dim, d_grad, d_var, d_m, d_v,
                    hyper, d_scratch, scratch_bytes, layout=None):
    """`layout`: the light slot state (reference.AdamStateLayout keys), or None. A
    "weight_decay" in `hyper` runs the W ops' step (the decay fused into the row pass)."""
    layout = {
        "slot_dtype": dtype, "rowwise_second_moment": False, "stochastic_rounding": False,
        "seed": 0, "step": 0, **(layout or {})
    }
    bad_pos, bad_idx = ctypes.c_int64(), ctypes.c_int64()
    self.check(
        self.lib.tfo_sparse_lazy_adam(DTYPE_CODE[dtype], INDEX_CODE[index_dtype], d_idx, n,
                                      num_rows, dim, d_grad, d_var, d_m, d_v, hyper["lr"],
                                      hyper["beta1"], hyper["beta2"], hyper["epsilon"],
                                      hyper["beta1_power"], hyper["beta2_power"],
                                      _weight_decay_arg(hyper), DTYPE_CODE[layout["slot_dtype"]],
                                      int(layout["rowwise_second_moment"]),
                                      int(layout["stochastic_rounding"]),
                                      layout["seed"], layout["step"], d_scratch, scratch_bytes,
                                      ctypes.byref(bad_pos), ctypes.byref(bad_idx)),
        "SparseApplyLazyAdam")
    return bad_pos.value, bad_idx.value

  def sparse_clippy_ptr(self, dtype, index_dtype, d_idx, n, num_rows, dim, d_grad, d_var, d_acc,
                        hyper, d_scale, d_scratch, scratch_bytes):
    """A "weight_decay" in `hyper` runs the W ops' step (each touched row decayed first)."""
    bad_pos, bad_idx = ctypes.c_int64(), ctypes.c_int64()
    self.check(
        self.lib.tfo_sparse_clippy_adagrad(DTYPE_CODE[dtype], INDEX_CODE[index_dtype], d_idx,
                                           n, num_rows, dim, d_grad, d_var, d_acc,
                                           *_clippy_args(hyper), _weight_decay_arg(hyper), d_scale,
                                           d_scratch, scratch_bytes, ctypes.byref(bad_pos),
                                           ctypes.byref(bad_idx)), "SparseApplyClippyAdagrad")
    return bad_pos.value, bad_idx.value

  # -- ops on host arrays (the correctness cases)
  def _with(self, arrays, body):
    ptrs = [self.upload(a) for a in arrays]
    try:
      return body(ptrs)
    finally:
      for p in ptrs:
        self.free(p)

  def _sparse_sizes(self, dtype, var, indices):
    """(n, num_rows, dim, scratch bytes) of a sparse update of `var`'s rows `indices`."""
    num_rows = var.shape[0]
    dim = var.size // num_rows if num_rows else 0
    n = len(indices)
    return n, num_rows, dim, self.scratch_bytes(dtype, indices.dtype.type, n, num_rows, dim)

  def lazy_adam(self, dtype, var, m, v, grad, indices, hyper, layout=None):
    n, num_rows, dim, nbytes = self._sparse_sizes(dtype, var, indices)

    def body(p):
      d_var, d_m, d_v, d_grad, d_idx, d_scratch = p
      bad = self.lazy_adam_ptr(dtype, indices.dtype.type, d_idx, n, num_rows, dim, d_grad, d_var,
                               d_m, d_v, hyper, d_scratch, nbytes, layout)
      self.sync()
      return (self.download(d_var, var), self.download(d_m, m), self.download(d_v, v), bad)

    return self._with([var, m, v, grad, indices, np.zeros(nbytes, np.uint8)], body)

  def clippy(self, dtype, var, accum, grad, indices, hyper):
    """Dense when indices is None. Returns (var, accum, scale, bad)."""
    scale_like = np.zeros((), reference.compute_type(dtype))

    def results(d_var, d_acc, d_scale, bad):
      self.sync()
      new_var, new_accum = self.download(d_var, var), self.download(d_acc, accum)
      return new_var, new_accum, self.download(d_scale, scale_like)[()], bad

    if indices is None:
      code = DTYPE_CODE[dtype]
      nbytes = self.lib.tfo_dense_scratch_bytes(code)

      def body(p):
        d_var, d_acc, d_grad, d_scale, d_scratch = p
        self.check(
            self.lib.tfo_clippy_adagrad(code, var.size, d_grad, d_var, d_acc, *_clippy_args(hyper),
                                        d_scale, d_scratch, nbytes), "ApplyClippyAdagrad")
        return results(d_var, d_acc, d_scale, (-1, 0))

      return self._with([var, accum, grad, scale_like, np.zeros(nbytes, np.uint8)], body)
    n, num_rows, dim, nbytes = self._sparse_sizes(dtype, var, indices)

    def sparse_body(p):
      d_var, d_acc, d_grad, d_idx, d_scale, d_scratch = p
      bad = self.sparse_clippy_ptr(dtype, indices.dtype.type, d_idx, n, num_rows, dim, d_grad,
                                   d_var, d_acc, hyper, d_scale, d_scratch, nbytes)
      return results(d_var, d_acc, d_scale, bad)

    # The scale starts at 7, outside [0, 1]: a scale the kernels leave unwritten shows.
    return self._with(
        [var, accum, grad, indices,
         np.full((), 7, scale_like.dtype),
         np.zeros(nbytes, np.uint8)], sparse_body)

  def rowwise_adagrad(self, dtype, var, accum, grad, indices, hyper):
    """Returns (var, accum, bad); `accum` holds one compute-type value per row."""
    n, num_rows, dim, nbytes = self._sparse_sizes(dtype, var, indices)

    def body(p):
      d_var, d_acc, d_grad, d_idx, d_scratch = p
      bad_pos, bad_idx = ctypes.c_int64(), ctypes.c_int64()
      self.check(
          self.lib.tfo_sparse_rowwise_adagrad(
              DTYPE_CODE[dtype], INDEX_CODE[indices.dtype.type], d_idx, n, num_rows, dim, d_grad,
              d_var, d_acc, hyper["lr"], hyper["epsilon"], hyper["weight_decay"],
              reference.WEIGHT_DECAY_MODES.index(hyper["weight_decay_mode"]),
              int(hyper.get("stochastic_rounding", False)), hyper.get("seed", 0), d_scratch, nbytes,
              ctypes.byref(bad_pos), ctypes.byref(bad_idx)), "SparseApplyRowwiseAdagrad")
      self.sync()
      return self.download(d_var, var), self.download(d_acc, accum), (bad_pos.value, bad_idx.value)

    return self._with([var, accum, grad, indices, np.zeros(nbytes, np.uint8)], body)

  def set_scale_to_one(self, dtype):
    like = np.zeros((), reference.compute_type(dtype))

    def body(p):
      self.check(self.lib.tfo_set_scale_to_one(DTYPE_CODE[dtype], p[0]), "SetScaleToOne")
      self.sync()
      return self.download(p[0], like)[()]

    return self._with([like], body)


def _weight_decay_arg(hyper):
  """The W ops' weight decay as the C API takes it: a const double*, null for none."""
  weight_decay = hyper.get("weight_decay")
  return None if weight_decay is None else ctypes.byref(ctypes.c_double(weight_decay))


def _clippy_args(h):
  return (h["lr"], h["epsilon"], h["variable_relative_threshold"],
          h["accumulator_relative_threshold"], h["absolute_threshold"],
          int(h["clip_accumulator_update"]), int(h["use_standard_accumulator_update"]))


class TfCpuBackend:
  """The same cases through TensorFlow's CPU kernels of _tf_opt_ops.so."""

  def __init__(self):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tf_opt_ops import ops
    self.tf, self.ops = tf, ops

  def device(self):
    return "TensorFlow CPU kernels", 0

  def _var(self, x, dtype):
    tf = self.tf
    c = tf.constant(reference.load(x, dtype) if dtype == "bfloat16" else x)
    return tf.Variable(tf.cast(c, tf.as_dtype(dtype)))

  def _get(self, t, dtype):
    tf = self.tf
    return reference.store(
        tf.cast(t, tf.float64 if dtype == "float64" else tf.float32).numpy(), dtype)

  def _bad(self, fn):
    try:
      fn()
      return (-1, 0)
    except self.tf.errors.InvalidArgumentError as e:
      import re
      found = re.search(r"indices\[(\d+)\] = (-?\d+) is not in", e.message)
      if not found:
        raise
      return (int(found.group(1)), int(found.group(2)))

  def lazy_adam(self, dtype, var, m, v, grad, indices, hyper, layout=None):
    layout = dict(layout or {})
    slot_dtype = layout.pop("slot_dtype", dtype)
    with self.tf.device("/CPU:0"):
      tv, g = self._var(var, dtype), self._var(grad, dtype)
      tm, tvv = self._var(m, slot_dtype), self._var(v, slot_dtype)
      op_hyper = dict(beta_1_power=hyper["beta1_power"], beta_2_power=hyper["beta2_power"],
                      lr=hyper["lr"], beta_1=hyper["beta1"], beta_2=hyper["beta2"],
                      epsilon=hyper["epsilon"], weight_decay=hyper.get("weight_decay"))
      bad = self._bad(lambda: self.ops.sparse_lazy_adam(tv, tm, tvv, g.read_value(
      ), self.tf.constant(indices), slot_dtype=self.tf.as_dtype(slot_dtype), **op_hyper, **layout))
      return (self._get(tv, dtype), self._get(tm, slot_dtype), self._get(tvv, slot_dtype), bad)

  def clippy(self, dtype, var, accum, grad, indices, hyper):
    with self.tf.device("/CPU:0"):
      tv, ta, g = (self._var(x, dtype) for x in (var, accum, grad))
      out = []
      if indices is None:
        bad = self._bad(
            lambda: out.append(self.ops.clippy_adagrad(tv, ta, g.read_value(), **hyper)))
      else:
        # A "weight_decay" in `hyper` (the W cases) runs op ResourceSparseApplyClippyAdagradW.
        bad = self._bad(lambda: out.append(
            self.ops.sparse_clippy_adagrad(tv, ta, g.read_value(), self.tf.constant(indices), **
                                           hyper)))
      scale = out[0].numpy()[()] if out else np.nan
      return self._get(tv, dtype), self._get(ta, dtype), scale, bad

  def rowwise_adagrad(self, dtype, var, accum, grad, indices, hyper):
    with self.tf.device("/CPU:0"):
      tv, g = self._var(var, dtype), self._var(grad, dtype)
      ta = self.tf.Variable(accum)
      bad = self._bad(lambda: self.ops.sparse_rowwise_adagrad(tv, ta, g.read_value(),
                                                              self.tf.constant(indices), **hyper))
      return self._get(tv, dtype), ta.numpy(), bad

  def set_scale_to_one(self, dtype):
    return 1.0


# ------------------------------------------------------------------- checks


class Report:

  def __init__(self):
    self.failures = []
    self.passed = 0
    self.results = {"checks": [], "bench": []}

  def check(self, ok, name, detail=""):
    self.results["checks"].append({"name": name, "ok": bool(ok), "detail": detail})
    if ok:
      self.passed += 1
    else:
      self.failures.append(f"{name}: {detail}")
      print(f"  FAIL {name}: {detail}", flush=True)


def _compare(report, name, got, want, dtype):
  got64 = reference.load(got, dtype).astype(np.float64)
  want64 = reference.load(want, dtype).astype(np.float64)
  tol = TOL[dtype]
  same_nan = np.isnan(got64) == np.isnan(want64)
  finite = ~np.isnan(want64)
  err = np.abs(got64 - want64)[finite & same_nan]
  bound = tol * (1 + np.abs(want64[finite & same_nan]))
  ok = bool(same_nan.all() and (err <= bound).all())
  exact = int(np.sum(reference.load(got, dtype) == reference.load(want, dtype)))
  report.check(ok, name, f"max abs err {err.max() if err.size else 0:.3g}, "
               f"{exact}/{got.size} exact")


def _scale_ok(got, want, dtype):
  if np.isnan(want):
    return bool(np.isnan(got))
  return abs(float(got) - float(want)) <= (0 if dtype == "float64" else 1e-6) * abs(float(want))


ADAM = dict(lr=0.01, beta1=0.9, beta2=0.999, epsilon=1e-7, beta1_power=0.9**3, beta2_power=0.999**3)
# The lazy Adam W ops' step: each touched row decayed once (DecayedWeight), then updated.
# Large, so that the decay shows in float32's bits.
ADAMW = dict(ADAM, weight_decay=0.3)
CLIPPY = dict(lr=0.5, epsilon=1e-7, variable_relative_threshold=0.1,
              accumulator_relative_threshold=0.01, absolute_threshold=1e-3)
# The sparse Clippy W ops' weight decay: each touched row decayed once (DecayedWeight, by it and
# CLIPPY's lr), then both passes, the scale's included, read the decayed rows.
CLIPPY_WEIGHT_DECAY = 0.3


def _indices(rng, n, num_rows, index_dtype, kind):
  if kind == "heavy":  # one row named by most positions, as popular items are
    idx = rng.integers(0, num_rows, size=n)
    idx[rng.random(n) < 0.8] = num_rows // 2
  else:
    idx = rng.integers(0, num_rows, size=n)
    idx[:min(3, n)] = idx[n // 2]  # duplicates for sure
  return idx.astype(index_dtype)


CASES = [  # (num_rows, dim, n, kind)
    (50, 7, 80, "uniform"),  # odd row size: partial thread rows, duplicates
    (1000, 128, 700, "uniform"),
    (300, 1, 500, "uniform"),  # one element per row: 256 rows per block
    (64, 300, 40, "uniform"),  # row longer than the 128 threads of a row
    (200, 16, 3000, "heavy"),  # a run of ~2400 duplicates
    (1, 4, 1, "uniform"),
]


def _adam_name(hyper):
  """"lazy_adam", or "lazy_adam_w" for the W ops' step (ADAMW)."""
  return "lazy_adam" if hyper.get("weight_decay") is None else "lazy_adam_w"


def check_lazy_adam(backend, report, rng):
  """Ops ResourceSparseApplyLazyAdam and, with the weight decay, ...LazyAdamW: a decayed row is
  decayed once whatever its count, and an untouched row is neither decayed nor updated."""
  for hyper in (ADAM, ADAMW):
    for dtype in reference.DTYPES:
      for index_dtype in (np.int32, np.int64):
        for num_rows, dim, n, kind in CASES:
          name = (f"{_adam_name(hyper)} {dtype} {index_dtype.__name__} {num_rows}x{dim} n={n} "
                  f"{kind}")
          var = reference.random_values(rng, (num_rows, dim), dtype)
          m = reference.random_values(rng, (num_rows, dim), dtype)
          v = reference.store(rng.uniform(0, 1, (num_rows, dim)), dtype)
          grad = reference.random_values(rng, (n, dim), dtype)
          idx = _indices(rng, n, num_rows, index_dtype, kind)
          want = reference.sparse_lazy_adam(var, m, v, grad, idx, dtype, **hyper)
          got = backend.lazy_adam(dtype, var, m, v, grad, idx, hyper)
          report.check(got[3][0] == -1, name + " no index error", str(got[3]))
          for what, g, w in zip(("var", "m", "v"), got[:3], want):
            _compare(report, f"{name} {what}", g, w, dtype)
          untouched = np.setdiff1d(np.arange(num_rows), idx)
          report.check(np.array_equal(got[0][untouched], var[untouched]),
                       f"{name} untouched rows unchanged")


LIGHT_DTYPES = ("float16", "bfloat16", "float32")


def check_light_state(backend, report, rng):
  """Light slots (ops ResourceSparseApplyLazyAdamV2 and, with the weight decay, ...WV2): every
  table/slot dtype pair, row-wise v or not, rounded stochastically or to nearest, bit for bit
  against the reference (the CPU kernels are held to it in tests/ops/test_light_state_op.py and
  tests/ops/test_lazy_adam_weight_decay.py)."""
  for hyper in (ADAM, ADAMW):
    for dtype in LIGHT_DTYPES:
      for slot_dtype in LIGHT_DTYPES:
        for rowwise in (False, True):
          for stochastic in (False, True):
            layout = dict(slot_dtype=slot_dtype, rowwise_second_moment=rowwise,
                          stochastic_rounding=stochastic, seed=1234, step=3)
            for num_rows, dim, n, kind in CASES:
              name = (f"light {_adam_name(hyper)} {dtype}/{slot_dtype} rowwise={rowwise} "
                      f"stochastic={stochastic} {num_rows}x{dim} n={n} {kind}")
              var = reference.random_values(rng, (num_rows, dim), dtype)
              m = reference.random_values(rng, (num_rows, dim), slot_dtype, -0.01, 0.01)
              v_shape = (num_rows,) if rowwise else (num_rows, dim)
              v = reference.random_values(rng, v_shape, slot_dtype, 0, 1e-4)
              grad = reference.random_values(rng, (n, dim), dtype, -1e-2, 1e-2)
              idx = _indices(rng, n, num_rows, np.int64, kind)
              want = reference.sparse_lazy_adam(var, m, v, grad, idx, dtype, **hyper, **layout)
              got = backend.lazy_adam(dtype, var, m, v, grad, idx, hyper, layout)
              report.check(got[3][0] == -1, name + " no index error", str(got[3]))
              for what, g, w in zip(("var", "m", "v"), got[:3], want):
                report.check(
                    np.array_equal(np.asarray(g).view(np.uint8),
                                   np.asarray(w).view(np.uint8)), f"{name} {what} exact",
                    f"{int(np.sum(np.asarray(g) != np.asarray(w)))} elements differ")


def check_bad_indices(backend, report, rng):
  for dtype in ("float32", "bfloat16"):
    for index_dtype in (np.int32, np.int64):
      num_rows, dim, n = 40, 9, 30
      var = reference.random_values(rng, (num_rows, dim), dtype)
      m = reference.random_values(rng, (num_rows, dim), dtype)
      v = reference.store(rng.uniform(0, 1, (num_rows, dim)), dtype)
      accum = reference.store(rng.uniform(0.1, 1, (num_rows, dim)), dtype)
      grad = reference.random_values(rng, (n, dim), dtype)
      low = -(2**40) if index_dtype == np.int64 else -(2**31)
      for bad_at, bad_value in ((0, num_rows), (17, -1), (29, low), (5, num_rows + 12345)):
        idx = _indices(rng, n, num_rows, index_dtype, "uniform")
        idx[bad_at] = bad_value
        if bad_at < n - 1:
          idx[n - 1] = -3  # a later bad index: the first one is reported
        first, want_value = bad_at, int(idx[bad_at])
        name = f"bad index {dtype} {index_dtype.__name__} idx[{bad_at}]={bad_value}"
        for hyper in (ADAM, ADAMW):  # nothing decayed either
          got = backend.lazy_adam(dtype, var, m, v, grad, idx, hyper)
          report.check(got[3] == (first, want_value), f"{name} {_adam_name(hyper)} reported",
                       f"got {got[3]}, want {(first, want_value)}")
          report.check(all(np.array_equal(g, w) for g, w in zip(got[:3], (var, m, v))),
                       f"{name} {_adam_name(hyper)} wrote nothing")
        for weight_decay in (None, CLIPPY_WEIGHT_DECAY):  # nothing decayed either
          hyper = dict(CLIPPY, clip_accumulator_update=False, use_standard_accumulator_update=True,
                       **_decay(weight_decay))
          op = _clippy_sparse_name(weight_decay)
          got = backend.clippy(dtype, var, accum, grad, idx, hyper)
          report.check(got[3] == (first, want_value), f"{name} {op} reported",
                       f"got {got[3]}, want {(first, want_value)}")
          report.check(
              np.array_equal(got[0], var) and np.array_equal(got[1], accum),
              f"{name} {op} wrote nothing")
  # An empty table: every index is out of range.
  var = np.zeros((0, 4), np.float32)
  got = backend.lazy_adam("float32", var, var, var, np.ones((2, 4), np.float32),
                          np.array([0, 0], np.int64), ADAM)
  report.check(got[3] == (0, 0), "bad index: empty table", str(got[3]))


def _decay(weight_decay):
  """The hyperparameter entry of a W op's `weight_decay`: none for None."""
  return {} if weight_decay is None else dict(weight_decay=weight_decay)


def _clippy_sparse_name(weight_decay):
  """"clippy sparse", or "clippy sparse_w" for the W ops' step."""
  return "clippy sparse" if weight_decay is None else "clippy sparse_w"


def check_clippy(backend, report, rng):
  """Ops ResourceApplyClippyAdagrad, ResourceSparseApplyClippyAdagrad and, with the weight decay,
  ResourceSparseApplyClippyAdagradW: a decayed row is decayed once whatever its count, the scale
  reads the decayed rows, and an untouched row keeps its values."""
  flag_sets = [(False, False), (True, False), (False, True)]
  for dtype in reference.DTYPES:
    for clip, standard in flag_sets:
      hyper = dict(CLIPPY, clip_accumulator_update=clip, use_standard_accumulator_update=standard)
      tag = f"clip={int(clip)} std={int(standard)}"
      # dense, several sizes around the block and grid sizes
      for shape in ((37,), (64, 33), (1000, 257)):
        var = reference.random_values(rng, shape, dtype)
        accum = reference.store(rng.uniform(0.1, 1, shape), dtype)
        grad = reference.random_values(rng, shape, dtype)
        want = reference.clippy_adagrad(var, accum, grad, dtype, **hyper)
        got = backend.clippy(dtype, var, accum, grad, None, hyper)
        name = f"clippy dense {dtype} {tag} {shape}"
        report.check(_scale_ok(got[2], want[2], dtype), name + " scale",
                     f"got {got[2]!r}, want {want[2]!r}")
        _compare(report, name + " var", got[0], want[0], dtype)
        _compare(report, name + " accum", got[1], want[1], dtype)
      for weight_decay in (None, CLIPPY_WEIGHT_DECAY):
        sparse_hyper = dict(hyper, **_decay(weight_decay))
        for index_dtype in (np.int32, np.int64):
          for num_rows, dim, n, kind in CASES:
            var = reference.random_values(rng, (num_rows, dim), dtype)
            accum = reference.store(rng.uniform(0.1, 1, (num_rows, dim)), dtype)
            grad = reference.random_values(rng, (n, dim), dtype)
            idx = _indices(rng, n, num_rows, index_dtype, kind)
            want = reference.sparse_clippy_adagrad(var, accum, grad, idx, dtype, **sparse_hyper)
            got = backend.clippy(dtype, var, accum, grad, idx, sparse_hyper)
            name = (f"{_clippy_sparse_name(weight_decay)} {dtype} {index_dtype.__name__} {tag} "
                    f"{num_rows}x{dim} n={n} {kind}")
            report.check(got[3][0] == -1, name + " no index error", str(got[3]))
            report.check(_scale_ok(got[2], want[2], dtype), name + " scale",
                         f"got {got[2]!r}, want {want[2]!r}")
            _compare(report, name + " var", got[0], want[0], dtype)
            _compare(report, name + " accum", got[1], want[1], dtype)
            untouched = np.setdiff1d(np.arange(num_rows), idx)
            report.check(np.array_equal(got[0][untouched], var[untouched]),
                         f"{name} untouched rows unchanged")
  # NaN in a gradient: the scale is NaN (as tf.reduce_min gives), no crash.
  for dtype in ("float32", "float64"):
    var = reference.random_values(rng, (30, 8), dtype)
    accum = reference.store(rng.uniform(0.1, 1, (30, 8)), dtype)
    grad = reference.random_values(rng, (10, 8), dtype)
    grad[4, 3] = np.nan
    idx = np.arange(10, dtype=np.int64) * 3
    hyper = dict(CLIPPY, clip_accumulator_update=False, use_standard_accumulator_update=False)
    want = reference.sparse_clippy_adagrad(var, accum, grad, idx, dtype, **hyper)
    got = backend.clippy(dtype, var, accum, grad, idx, hyper)
    report.check(
        np.isnan(got[2]) and np.isnan(want[2]), f"clippy NaN grad {dtype} scale NaN",
        f"got {got[2]!r}")
    _compare(report, f"clippy NaN grad {dtype} var", got[0], want[0], dtype)
  for dtype in ("float32", "float64"):
    report.check(float(backend.set_scale_to_one(dtype)) == 1.0, f"set scale to one {dtype}")


# A float16 table of 2^31 + 2048 elements (13 GiB with m and v).
BIG_TABLE_ROWS, BIG_TABLE_DIM = 2**24 + 16, 128


def check_big_table(backend, report, rng, free_bytes):
  """Rows past 2^31 elements: offsets computed in 64 bits (docs/design.md, "Invariants")."""
  dim = BIG_TABLE_DIM
  num_rows = BIG_TABLE_ROWS
  elem = num_rows * dim
  need = 3 * elem * 2 + (1 << 30)
  if free_bytes < need:
    print(f"  (skipped the 64-bit offset check: needs {need / 2**30:.1f} GiB free, "
          f"{free_bytes / 2**30:.1f} GiB free)")
    return
  dtype = "float16"
  d_var, d_m, d_v = (backend.alloc(elem * 2) for _ in range(3))
  try:
    for p in (d_var, d_m, d_v):
      backend.check(backend.lib.tfo_memset(p, 0, elem * 2), "memset")
    middle = num_rows // 2
    touched = np.array([num_rows - 1, 0, num_rows - 1, num_rows - 2, middle + 1], np.int64)
    grad = reference.random_values(rng, (len(touched), dim), dtype)
    nbytes = backend.scratch_bytes(dtype, np.int64, len(touched), num_rows, dim)
    d_grad, d_idx, d_scratch = (backend.upload(grad), backend.upload(touched),
                                backend.alloc(nbytes))
    bad = backend.lazy_adam_ptr(dtype, np.int64, d_idx, len(touched), num_rows, dim, d_grad, d_var,
                                d_m, d_v, ADAM, d_scratch, nbytes)
    backend.sync()
    rows = np.unique(touched)
    local = {int(r): k for k, r in enumerate(rows)}
    zeros = np.zeros((len(rows), dim), np.float16)
    want = reference.sparse_lazy_adam(zeros, zeros, zeros, grad,
                                      np.array([local[int(r)] for r in touched]), dtype, **ADAM)
    got = [
        np.stack([backend.download(p, zeros[0],
                                   int(r) * dim * 2) for r in rows]) for p in (d_var, d_m, d_v)
    ]
    report.check(bad[0] == -1, "64-bit offsets: no index error", str(bad))
    for what, g, w in zip(("var", "m", "v"), got, want):
      _compare(report, f"64-bit offsets lazy_adam {what}", g, w, dtype)
    # An untouched row between the touched ones stays zero.
    row = backend.download(d_var, zeros[0], middle * dim * 2)
    report.check(not row.any(), "64-bit offsets: untouched row unchanged")
    for p in (d_grad, d_idx, d_scratch):
      backend.free(p)
  finally:
    for p in (d_var, d_m, d_v):
      backend.free(p)


# ---------------------------------------------------------------- benchmark


def _copy_bandwidth(backend, nbytes=1 << 30):
  src, dst = backend.alloc(nbytes), backend.alloc(nbytes)
  try:
    ms = backend.timed(lambda: backend.check(backend.lib.tfo_d2d(dst, src, nbytes), "D2D"), 10)
  finally:
    backend.free(src)
    backend.free(dst)
  return 2 * nbytes / (ms * 1e-3)  # read + write bytes per second


def _torch_sparse_adam_ms(torch, num_rows, dim, idx, grad_values, iters):
  """Median ms of torch.optim.SparseAdam.step() on the same sizes."""
  dev = torch.device("cuda")
  emb = torch.zeros(num_rows, dim, device=dev, requires_grad=True)
  opt = torch.optim.SparseAdam([emb], lr=1e-3)
  i = torch.as_tensor(idx, device=dev)
  vals = torch.as_tensor(grad_values, device=dev)
  # The sparse (uncoalesced, duplicates kept) gradient an nn.Embedding(sparse=True)
  # lookup gives; it stays in emb.grad, and every step() coalesces it again, as
  # our kernels deduplicate on every call.
  torch.nn.functional.embedding(i, emb, sparse=True).backward(vals)
  for _ in range(2):
    opt.step()
  torch.cuda.synchronize()
  times = []
  for _ in range(iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    opt.step()
    stop.record()
    stop.synchronize()
    times.append(start.elapsed_time(stop))
  del opt, emb, vals, i
  torch.cuda.empty_cache()
  return float(np.median(times))


def benchmark(backend, report, free_bytes, sizes, use_torch, iters):
  torch = None
  if use_torch:
    try:
      import torch
      if not torch.cuda.is_available():
        print("  torch is importable but sees no GPU: no SparseAdam comparison")
        torch = None
    except ImportError:
      print("  torch not importable: no SparseAdam comparison")
  copy_bw = _copy_bandwidth(backend)
  print(f"  device-to-device copy: {copy_bw / 1e9:.0f} GB/s (read + write)")
  report.results["copy_GBps"] = copy_bw / 1e9
  rng = np.random.default_rng(7)
  dtype, es = "float32", 4
  header = (f"  {'rows':>9} {'dim':>4} {'batch':>8} {'uniq':>8} | {'lazy ms':>8} {'GB/s':>6} "
            f"{'%copy':>6} | {'decay ms':>8} {'x adam':>6} | {'clippy ms':>9} {'x adam':>6} | "
            f"{'decay ms':>8} {'x clpy':>6} | {'torch ms':>8} {'x ours':>6}")
  print(header)
  for size in sizes:
    num_rows, dim, n = size[:3]
    kind = size[3] if len(size) > 3 else "uniform"
    table = num_rows * dim * es
    if 3 * table + 2 * n * dim * es + (1 << 30) > free_bytes:
      print(f"  {num_rows:>9} {dim:>4} {n:>8}: skipped (memory)")
      continue
    if kind == "zipf":  # power-law popularity, as item ids in recommender batches
      idx = ((rng.zipf(1.2, size=n) - 1) % num_rows).astype(np.int64)
    else:
      idx = rng.integers(0, num_rows, size=n).astype(np.int64)
    uniq = len(np.unique(idx))
    grad = rng.standard_normal((n, dim)).astype(np.float32) * 1e-2
    d_var, d_m, d_v = (backend.alloc(table) for _ in range(3))
    ptrs = [d_var, d_m, d_v]
    try:
      for p in ptrs:
        backend.check(backend.lib.tfo_memset(p, 0, table), "memset")
      d_grad, d_idx = backend.upload(grad), backend.upload(idx)
      nbytes = backend.scratch_bytes(dtype, np.int64, n, num_rows, dim)
      d_scratch, d_scale = backend.alloc(nbytes), backend.alloc(8)
      ptrs += [d_grad, d_idx, d_scratch, d_scale]
      lazy_ms = backend.timed(
          lambda: backend.lazy_adam_ptr(dtype, np.int64, d_idx, n, num_rows, dim, d_grad, d_var,
                                        d_m, d_v, ADAM, d_scratch, nbytes), iters)
      # The W op: the same pass with each row decayed first.
      decay_ms = backend.timed(
          lambda: backend.lazy_adam_ptr(dtype, np.int64, d_idx, n, num_rows, dim, d_grad, d_var,
                                        d_m, d_v, ADAMW, d_scratch, nbytes), iters)
      hyper = dict(CLIPPY, clip_accumulator_update=False, use_standard_accumulator_update=False)
      clippy_ms = backend.timed(
          lambda: backend.sparse_clippy_ptr(dtype, np.int64, d_idx, n, num_rows, dim, d_grad, d_var,
                                            d_m, hyper, d_scale, d_scratch, nbytes), iters)
      # The W op: the same two passes reading each row decayed.
      hyper_w = dict(hyper, weight_decay=CLIPPY_WEIGHT_DECAY)
      clippy_w_ms = backend.timed(
          lambda: backend.sparse_clippy_ptr(dtype, np.int64, d_idx, n, num_rows, dim, d_grad, d_var,
                                            d_m, hyper_w, d_scale, d_scratch, nbytes), iters)
    finally:
      for p in ptrs:
        backend.free(p)
    # Bytes the update must move: var, m, v read and written on the distinct
    # rows, the gradient read once (the sort's traffic is not counted).
    moved = (6 * uniq * dim + n * dim) * es
    bw = moved / (lazy_ms * 1e-3)
    torch_ms = None
    if torch is not None and 3 * table + (1 << 30) < free_bytes:
      try:
        torch_ms = _torch_sparse_adam_ms(torch, num_rows, dim, idx, grad, iters)
      except Exception as e:
        # The comparison is informative only: a torch problem must not hide our figures.
        print(f"  torch.optim.SparseAdam failed ({type(e).__name__}: {e}); no comparison")
        torch = None
    row = dict(rows=num_rows, dim=dim, batch=n, kind=kind, unique=uniq, lazy_adam_ms=lazy_ms,
               lazy_adam_GBps=bw / 1e9, fraction_of_copy=bw / copy_bw, lazy_adam_w_ms=decay_ms,
               lazy_adam_w_over_adam=decay_ms / lazy_ms, clippy_sparse_ms=clippy_ms,
               clippy_over_adam=clippy_ms / lazy_ms, clippy_sparse_w_ms=clippy_w_ms,
               clippy_w_over_clippy=clippy_w_ms / clippy_ms, torch_sparse_adam_ms=torch_ms)
    report.results["bench"].append(row)
    t = f"{torch_ms:8.3f} {torch_ms / lazy_ms:6.2f}" if torch_ms else f"{'-':>8} {'-':>6}"
    print(
        f"  {num_rows:>9} {dim:>4} {n:>8} {uniq:>8} | {lazy_ms:8.3f} {bw / 1e9:6.0f} "
        f"{100 * bw / copy_bw:5.0f}% | {decay_ms:8.3f} {decay_ms / lazy_ms:6.2f} | "
        f"{clippy_ms:9.3f} {clippy_ms / lazy_ms:6.2f} | "
        f"{clippy_w_ms:8.3f} {clippy_w_ms / clippy_ms:6.2f} | {t}"
        f"{'  (zipf 1.2 rows)' if kind == 'zipf' else ''}", flush=True)


# The performance goals (docs/building.md, "For GPU": the GPU check) are set at 1M rows x
# 128, batch 131072.
TARGET_SIZE = (1 << 20, 128, 131072)


def targets(report):
  """The performance targets at TARGET_SIZE (reported; enforced only with --strict-perf)."""
  rows = [
      r for r in report.results["bench"]
      if (r["rows"], r["dim"], r["batch"]) == TARGET_SIZE and r["kind"] == "uniform"
  ]
  if not rows:
    return []
  r = rows[0]
  out = [("lazy Adam >= 60% of copy bandwidth", r["fraction_of_copy"]
          >= 0.6, f"{100 * r['fraction_of_copy']:.0f}%"),
         ("Clippy sparse within 1.5x of lazy Adam", r["clippy_over_adam"]
          <= 1.5, f"{r['clippy_over_adam']:.2f}x")]
  if r["torch_sparse_adam_ms"]:
    out.append(
        ("faster than torch.optim.SparseAdam", r["lazy_adam_ms"]
         < r["torch_sparse_adam_ms"], f"{r['torch_sparse_adam_ms'] / r['lazy_adam_ms']:.2f}x"))
  return out


# (rows, dim, batch[, "zipf"]): uniform random rows unless "zipf" (a few rows
# repeated thousands of times: the duplicate-summing path under load).
BENCH_SIZES = ([(rows, dim, n)
                for rows in (1 << 20, 10 * (1 << 20))
                for dim in (64, 128, 256)
                for n in (16384, 131072, 1 << 20)] + [(1 << 20, 128, 131072, "zipf"),
                                                      (10 * (1 << 20), 128, 1 << 20, "zipf")])
QUICK_SIZES = [TARGET_SIZE, TARGET_SIZE + ("zipf",)]

ROWWISE = dict(lr=0.05, epsilon=1e-3, weight_decay=0.1)


def check_rowwise_adagrad(backend, report, rng):
  """Row-wise Adagrad (op ResourceSparseApplyRowwiseAdagrad), every weight decay mode: the table
  to the reference's rounding, the accumulator (float32, float64 for float64 tables) bit for bit
  for float32 and float64 tables, as the CPU kernels (tests/ops/test_rowwise_adagrad_op.py);
  16-bit tables rounded stochastically bit for bit (the noise is keyed by the values)."""
  for dtype, stochastic in [(d, False) for d in reference.DTYPES] + [("float16", True),
                                                                     ("bfloat16", True)]:
    for mode in reference.WEIGHT_DECAY_MODES:
      hyper = dict(ROWWISE, weight_decay_mode=mode)
      if stochastic:
        hyper.update(stochastic_rounding=True, seed=2**40 + 7)
      for num_rows, dim, n, kind in CASES:
        index_dtype = np.int32 if dim % 2 else np.int64
        name = (f"rowwise_adagrad {dtype}{' stochastic' if stochastic else ''} {mode} "
                f"{num_rows}x{dim} n={n} {kind}")
        var = reference.random_values(rng, (num_rows, dim), dtype)
        accum = rng.uniform(0, 1, num_rows).astype(reference.compute_type(dtype))
        grad = reference.random_values(rng, (n, dim), dtype)
        idx = _indices(rng, n, num_rows, index_dtype, kind)
        want = reference.sparse_rowwise_adagrad(var, accum, grad, idx, dtype, **hyper)
        got = backend.rowwise_adagrad(dtype, var, accum, grad, idx, hyper)
        report.check(got[2][0] == -1, name + " no index error", str(got[2]))
        if stochastic:
          report.check(
              np.array_equal(got[0].view(np.uint16), want[0].view(np.uint16)), f"{name} var bits",
              f"{np.count_nonzero(got[0].view(np.uint16) != want[0].view(np.uint16))} differ")
        else:
          _compare(report, f"{name} var", got[0], want[0], dtype)
        exact = dtype in ("float32", "float64")
        report.check(
            np.array_equal(got[1], want[1]) if exact else np.allclose(got[1], want[1], rtol=1e-3),
            f"{name} accum", f"max abs err {np.max(np.abs(got[1] - want[1])):.3g}")
        untouched = np.setdiff1d(np.arange(num_rows), idx)
        report.check(
            np.array_equal(got[0][untouched], var[untouched]) and
            np.array_equal(got[1][untouched], accum[untouched]), f"{name} untouched rows unchanged")
  var = reference.random_values(rng, (10, 3), "float32")
  accum = np.ones(10, np.float32)
  got = backend.rowwise_adagrad("float32", var, accum,
                                reference.random_values(rng, (3, 3), "float32"),
                                np.array([1, 10, 2], np.int64),
                                dict(ROWWISE, weight_decay_mode="none"))
  report.check(got[2] == (1, 10) and np.array_equal(got[0], var) and np.array_equal(got[1], accum),
               "rowwise_adagrad bad index: reported, nothing written", str(got[2]))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--lib", default=DEFAULT_LIB, help="libtfo_gpu_check.so (make gpu-check-build)")
  ap.add_argument("--backend", choices=("cuda", "tf-cpu"), default="cuda")
  ap.add_argument("--bench", choices=("full", "quick", "none"), default="full",
                  help="full: 1M/10M rows x 64/128/256 x batch 16k/131k/1M; quick: the target size")
  ap.add_argument("--iters", type=int, default=10)
  ap.add_argument("--no-torch", action="store_true")
  ap.add_argument("--require-gpu", action="store_true",
                  help="exit 3 (not 0) when no usable GPU is present")
  ap.add_argument("--strict-perf", action="store_true", help="a missed target fails the run")
  ap.add_argument("--json", help="write checks and timings here")
  args = ap.parse_args(argv)

  t0 = time.time()
  if args.backend == "tf-cpu":
    backend = TfCpuBackend()
  else:
    if not os.path.exists(args.lib):
      print(f"gpu_check: {args.lib} is missing: run `make gpu-check-build` first.")
      return 1
    backend = CudaBackend(args.lib)
  try:
    name, free_bytes = backend.device()
  except CudaError as e:
    print(f"gpu_check: NO GPU: {e}. The GPU kernels were built but cannot run here; "
          f"nothing was checked.")
    return 3 if args.require_gpu else 0
  print(f"gpu_check: {name}, {free_bytes / 2**30:.1f} GiB free, backend {args.backend}")
  report = Report()
  rng = np.random.default_rng(0)
  for title, fn in (("lazy Adam", check_lazy_adam), ("light state", check_light_state),
                    ("bad indices", check_bad_indices), ("Clippy Adagrad", check_clippy),
                    ("row-wise Adagrad", check_rowwise_adagrad)):
    print(f"- {title}", flush=True)
    try:
      fn(backend, report, rng)
    except CudaError as e:
      report.check(False, title, f"CUDA error: {e}")
  if args.backend == "cuda":
    print("- 64-bit offsets", flush=True)
    try:
      check_big_table(backend, report, rng, free_bytes)
    except CudaError as e:
      report.check(False, "64-bit offsets", f"CUDA error: {e}")
  print(f"checks: {report.passed} passed, {len(report.failures)} failed "
        f"({time.time() - t0:.0f} s)")
  perf_ok = True
  if args.backend == "cuda" and args.bench != "none" and not report.failures:
    print("- benchmark (float32, int64 indices)", flush=True)
    sizes = BENCH_SIZES if args.bench == "full" else QUICK_SIZES
    try:
      benchmark(backend, report, free_bytes, sizes, not args.no_torch, args.iters)
    except CudaError as e:
      report.check(False, "benchmark", f"CUDA error: {e}")
    for what, ok, value in targets(report):
      print(f"  target {'MET   ' if ok else 'MISSED'} {what}: {value}")
      report.results.setdefault("targets", []).append(dict(target=what, met=ok, value=value))
      perf_ok = perf_ok and ok
  report.results["device"] = name
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report.results, f, indent=1)
  if report.failures:
    print("FAILED:\n  " + "\n  ".join(report.failures[:30]))
    return 1
  if args.strict_perf and not perf_ok:
    print("FAILED: a performance target was missed (--strict-perf)")
    return 1
  print("gpu_check: PASSED")
  return 0


if __name__ == "__main__":
  sys.exit(main())
