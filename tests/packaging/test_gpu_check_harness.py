"""Runs gpu_check.py's CUDA backend end to end against a host-memory stand-in.

No GPU here, so libtfo_gpu_check.so cannot run; this fake implements its C API
(gpu_check/capi.cu.cc) on host memory with the NumPy references, following the
C signatures argument by argument. It exercises every code path of the harness
(uploads, downloads at offsets, scratch sizes, index errors, the benchmark
table and targets) so the first run on a GPU fails only if the kernels do.
"""

import ctypes
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tf_opt_ops import reference

import common

GPU_CHECK_DIR = os.path.join(common.ROOT, "gpu_check")


def _load_gpu_check():
  spec = importlib.util.spec_from_file_location("gpu_check",
                                                os.path.join(GPU_CHECK_DIR, "gpu_check.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


gpu_check = _load_gpu_check()

DTYPES = {0: "float16", 1: "bfloat16", 2: "float32", 3: "float64"}
INDEX = {0: np.int32, 1: np.int64}


def _ref(p):
  """The Python object behind ctypes.byref(x)."""
  return p._obj


class FakeLib:
  """capi.cu.cc on host memory. Each tfo_* takes the C arguments in order."""

  def __init__(self, free_bytes=4 << 30):
    self.buffers = {}
    self.free_bytes = free_bytes
    self.weight_decays = []  # the weight decay of each lazy Adam call given one
    self.clippy_weight_decays = []  # the weight decay of each sparse Clippy call given one
    names = [n for n in dir(self) if n.startswith("_tfo_")]
    for n in names:
      method = getattr(self, n)
      setattr(self, n[1:], lambda *a, _m=method: _m(*a))  # settable argtypes/restype

  def _view(self, addr, count, dtype):
    dtype = np.dtype(reference.storage_type(dtype) if isinstance(dtype, str) else dtype)
    buf = (ctypes.c_char * (count * dtype.itemsize)).from_address(addr)
    return np.frombuffer(buf, dtype=dtype, count=count)

  def _tfo_error_string(self, err):
    return f"fake error {err}".encode()

  def _tfo_device_count(self, count):
    _ref(count).value = 1
    return 0

  def _tfo_init(self):
    return 0

  def _tfo_device_name(self, buf, n):
    ctypes.memmove(buf, b"FakeGPU\0", 8)
    return 0

  def _tfo_mem_info(self, free, total):
    _ref(free).value = self.free_bytes
    _ref(total).value = self.free_bytes
    return 0

  def _tfo_malloc(self, ptr, nbytes):
    buf = ctypes.create_string_buffer(max(nbytes, 1))
    addr = ctypes.addressof(buf)
    self.buffers[addr] = buf
    _ref(ptr).value = addr
    return 0

  def _tfo_free(self, addr):
    del self.buffers[addr]
    return 0

  def _tfo_memset(self, addr, value, nbytes):
    ctypes.memset(addr, value, nbytes)
    return 0

  def _tfo_h2d(self, dst, src, nbytes):
    ctypes.memmove(dst, src, nbytes)
    return 0

  _tfo_d2h = _tfo_h2d
  _tfo_d2d = _tfo_h2d

  def _tfo_sync(self):
    return 0

  def _tfo_timer_start(self):
    return 0

  def _tfo_timer_stop(self, ms):
    _ref(ms).value = 0.5
    return 0

  def _tfo_sparse_scratch_bytes(self, dtype, itype, n, num_rows, dim, out):
    _ref(out).value = 64 * n + 4096 * 8
    return 0

  def _tfo_dense_scratch_bytes(self, dtype):
    return 4096 * 8

  def _indices(self, itype, addr, n, num_rows, bad_pos, bad_idx):
    idx = self._view(addr, n, INDEX[itype]).copy()
    bad = np.nonzero((idx < 0) | (idx >= num_rows))[0]
    _ref(bad_pos).value = int(bad[0]) if bad.size else -1
    _ref(bad_idx).value = int(idx[bad[0]]) if bad.size else 0
    return idx, bad.size == 0

  def _tfo_sparse_lazy_adam(self, dtype, itype, d_idx, n, num_rows, dim, d_grad, d_var, d_m, d_v,
                            lr, beta1, beta2, eps, b1p, b2p, weight_decay, slot_dtype, rowwise,
                            stochastic, seed, step, scratch, sbytes, bad_pos, bad_idx):
    dt, st = DTYPES[dtype], DTYPES[slot_dtype]
    # const double*: null (None) for the ops without decay, else ctypes.byref(c_double).
    weight_decay = None if weight_decay is None else _ref(weight_decay).value
    if weight_decay is not None:
      self.weight_decays.append(weight_decay)
    idx, ok = self._indices(itype, d_idx, n, num_rows, bad_pos, bad_idx)
    if not ok:
      return 0
    assert sbytes >= 64 * n
    v_shape = (num_rows,) if rowwise else (num_rows, dim)
    views = [
        self._view(d_var, num_rows * dim, dt).reshape(num_rows, dim),
        self._view(d_m, num_rows * dim, st).reshape(num_rows, dim),
        self._view(d_v, int(np.prod(v_shape)), st).reshape(v_shape)
    ]
    grad = self._view(d_grad, n * dim, dt).reshape(n, dim)
    out = reference.sparse_lazy_adam(*views, grad, idx, dt, lr=lr, beta1=beta1, beta2=beta2,
                                     epsilon=eps, beta1_power=b1p, beta2_power=b2p, slot_dtype=st,
                                     rowwise_second_moment=bool(rowwise),
                                     stochastic_rounding=bool(stochastic), seed=seed, step=step,
                                     weight_decay=weight_decay)
    for view, new in zip(views, out):
      view[...] = new
    return 0

  def _hyper(self, lr, eps, vrt, art, at, clip, std):
    return dict(lr=lr, epsilon=eps, variable_relative_threshold=vrt,
                accumulator_relative_threshold=art, absolute_threshold=at,
                clip_accumulator_update=bool(clip), use_standard_accumulator_update=bool(std))

  def _tfo_clippy_adagrad(self, dtype, size, d_grad, d_var, d_acc, lr, eps, vrt, art, at, clip, std,
                          d_scale, scratch, sbytes):
    dt = DTYPES[dtype]
    var, acc = self._view(d_var, size, dt), self._view(d_acc, size, dt)
    new = reference.clippy_adagrad(var.copy(), acc.copy(), self._view(d_grad, size, dt), dt,
                                   **self._hyper(lr, eps, vrt, art, at, clip, std))
    var[:], acc[:] = new[0], new[1]
    self._view(d_scale, 1, reference.compute_type(dt))[:] = new[2]
    return 0

  def _tfo_sparse_clippy_adagrad(self, dtype, itype, d_idx, n, num_rows, dim, d_grad, d_var, d_acc,
                                 lr, eps, vrt, art, at, clip, std, weight_decay, d_scale, scratch,
                                 sbytes, bad_pos, bad_idx):
    dt = DTYPES[dtype]
    # const double*: null (None) for the ops without decay, else ctypes.byref(c_double).
    weight_decay = None if weight_decay is None else _ref(weight_decay).value
    if weight_decay is not None:
      self.clippy_weight_decays.append(weight_decay)
    idx, ok = self._indices(itype, d_idx, n, num_rows, bad_pos, bad_idx)
    if not ok:
      return 0
    var, acc = (self._view(p, num_rows * dim, dt) for p in (d_var, d_acc))
    new = reference.sparse_clippy_adagrad(var.reshape(num_rows, dim), acc.reshape(num_rows, dim),
                                          self._view(d_grad, n * dim, dt).reshape(n, dim), idx, dt,
                                          weight_decay=weight_decay,
                                          **self._hyper(lr, eps, vrt, art, at, clip, std))
    var[:], acc[:] = new[0].ravel(), new[1].ravel()
    self._view(d_scale, 1, reference.compute_type(dt))[:] = new[2]
    return 0

  def _tfo_sparse_rowwise_adagrad(self, dtype, itype, d_idx, n, num_rows, dim, d_grad, d_var, d_acc,
                                  lr, eps, weight_decay, mode, stochastic_rounding, seed, scratch,
                                  sbytes, bad_pos, bad_idx):
    dt = DTYPES[dtype]
    idx, ok = self._indices(itype, d_idx, n, num_rows, bad_pos, bad_idx)
    if not ok:
      return 0
    var = self._view(d_var, num_rows * dim, dt)
    acc = self._view(d_acc, num_rows, reference.compute_type(dt))
    new = reference.sparse_rowwise_adagrad(var.reshape(num_rows, dim), acc,
                                           self._view(d_grad, n * dim, dt).reshape(n, dim), idx, dt,
                                           lr=lr, epsilon=eps, weight_decay=weight_decay,
                                           weight_decay_mode=reference.WEIGHT_DECAY_MODES[mode],
                                           stochastic_rounding=bool(stochastic_rounding), seed=seed)
    var[:], acc[:] = new[0].ravel(), new[1]
    return 0

  def _tfo_set_scale_to_one(self, dtype, d_scale):
    self._view(d_scale, 1, reference.compute_type(DTYPES[dtype]))[:] = 1
    return 0


@pytest.mark.slow
def test_harness_runs_every_path_on_the_fake(monkeypatch, capsys, tmp_path):
  fake = FakeLib()
  monkeypatch.setattr(gpu_check.ctypes, "CDLL", lambda path, mode=0: fake)
  monkeypatch.setattr(gpu_check, "BENCH_SIZES", [(4096, 8, 512), (2048, 3, 100),
                                                 (2048, 3, 100, "zipf")])
  monkeypatch.setattr(gpu_check, "TARGET_SIZE", (2048, 3, 100))
  monkeypatch.setattr(gpu_check, "BIG_TABLE_ROWS", 3001)
  monkeypatch.setattr(gpu_check, "BIG_TABLE_DIM", 5)
  monkeypatch.setattr(gpu_check.os.path, "exists", lambda p: True)
  out_json = tmp_path / "out.json"
  rc = gpu_check.main(["--lib", "fake.so", "--no-torch", "--iters", "2", "--json", str(out_json)])
  printed = capsys.readouterr().out
  assert rc == 0, printed
  assert "gpu_check: PASSED" in printed
  assert "64-bit offsets lazy_adam var" in out_json.read_text()
  assert "light lazy_adam float32/bfloat16 rowwise=True stochastic=True" in out_json.read_text()
  results = json.loads(out_json.read_text())
  names = [c["name"] for c in results["checks"]]
  for case in ("lazy_adam_w float32 int32 50x7 n=80 uniform var",
               "lazy_adam_w float32 int64 200x16 n=3000 heavy var",
               "light lazy_adam_w bfloat16/float32 rowwise=True stochastic=True 50x7 n=80 uniform "
               "var exact", "bad index float32 int64 idx[0]=40 lazy_adam_w wrote nothing",
               "clippy sparse_w bfloat16 int32 clip=1 std=0 50x7 n=80 uniform scale",
               "clippy sparse_w float64 int64 clip=0 std=1 200x16 n=3000 heavy var",
               "clippy sparse_w float16 int64 clip=0 std=0 1000x128 n=700 uniform untouched rows "
               "unchanged", "bad index bfloat16 int32 idx[17]=-1 clippy sparse_w wrote nothing"):
    assert case in names, case
  assert set(fake.weight_decays) == {gpu_check.ADAMW["weight_decay"]}
  assert set(fake.clippy_weight_decays) == {gpu_check.CLIPPY_WEIGHT_DECAY}
  assert all(r["lazy_adam_w_ms"] > 0 for r in results["bench"]), results["bench"]
  assert all(r["clippy_sparse_w_ms"] > 0 for r in results["bench"]), results["bench"]
  assert "target" in printed and out_json.exists()
  assert not fake.buffers, "the harness leaked device buffers"


class NoDecayFakeLib(FakeLib):
  """Lazy Adam and sparse Clippy kernels that ignore the W ops' weight decay."""

  def _tfo_sparse_lazy_adam(self, *args):
    args = list(args)
    args[16] = None  # weight_decay
    return super()._tfo_sparse_lazy_adam(*args)

  def _tfo_sparse_clippy_adagrad(self, *args):
    args = list(args)
    args[16] = None  # weight_decay
    return super()._tfo_sparse_clippy_adagrad(*args)


@pytest.mark.parametrize(
    "check, failing_case, only_failures",
    [
        (gpu_check.check_lazy_adam, "lazy_adam_w float32 int64 1000x128 n=700 uniform var",
         lambda f: f.startswith("lazy_adam_w ") and f.endswith(" var")),
        # The undecayed cases (dense, sparse, NaN gradients) all pass.
        (gpu_check.check_clippy,
         "clippy sparse_w float32 int64 clip=0 std=0 1000x128 n=700 uniform var",
         lambda f: f.startswith("clippy sparse_w ")),
    ],
    ids=["lazy_adam", "clippy"])
def test_check_fails_kernels_that_skip_the_weight_decay(monkeypatch, check, failing_case,
                                                        only_failures):
  fake = NoDecayFakeLib()
  monkeypatch.setattr(gpu_check.ctypes, "CDLL", lambda path, mode=0: fake)
  backend = gpu_check.CudaBackend("fake.so")
  report = gpu_check.Report()
  check(backend, report, np.random.default_rng(0))
  failed = {f.split(":")[0] for f in report.failures}
  assert failing_case in failed, failed
  assert all(only_failures(f) for f in failed), failed


def test_gpu_check_loads_the_reference_without_tensorflow():
  # The GPU machine may have no TensorFlow: gpu_check.py takes the references
  # from python/tf_opt_ops/reference.py by file path, not through the package.
  code = (
      "import sys; sys.modules['tensorflow'] = None\n"  # `import tensorflow` now fails
      "import gpu_check\n"
      "assert gpu_check.reference.sparse_lazy_adam\n"
      "assert 'tensorflow' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
  proc = subprocess.run([sys.executable, "-c", code], cwd=GPU_CHECK_DIR, capture_output=True,
                        text=True, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert os.path.samefile(gpu_check.reference.__file__, reference.__file__)
