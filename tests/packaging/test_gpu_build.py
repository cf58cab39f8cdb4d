"""Checks of a CUDA-enabled _tf_opt_ops.so that need no GPU.

- GPU kernels are registered for every op x T x Tindices the CPU registers,
  with the scalar hyperparameters in host memory;
- the kernels are built for CUDA 12 (the toolkit of build_deps/cuda/, 12.2):
  the build records the CUDA version and the oldest driver, and both fit the
  running TensorFlow's own CUDA build (same major version, ours no newer), as
  do the GPU architectures;
- the .so needs no CUDA library: its CUDA runtime calls go through a hidden
  stub (tf_opt_ops/platform/cuda_runtime_stub.cc; tests/packaging/test_cuda_runtime_stub.py runs
  it) that forwards them to the process's libcudart.so.12: no undefined CUDA
  symbol, nothing CUDA exported, NEEDED only libtensorflow_framework.so.2 and
  the C/C++ runtime, every forwarded function present in the CUDA 12.2
  runtime, and every TensorFlow symbol it imports defined by
  libtensorflow_framework.so.2 (none from libtensorflow_cc.so.2, which
  tensorflow-cpu does not export to custom ops);
- the device code does float32/float64 math as the CPU does (correctly
  rounded sqrt and division, no FMA contraction), checked in the PTX;
- `make gpu-check-build` compiles the kernels with the Bazel build's clang
  flags (tf_opt_ops/cuda_copts.bzl) and GPU architectures, read, not copied;
- with it loaded, the CPU kernels still compute what tf_opt_ops/reference.py
  (the NumPy references the GPU check holds the CUDA kernels to) computes, so
  the references are themselves checked against the CPU kernels here.

The CUDA groups skip on a CPU-only build (the build info's CUDA_VERSION is None)
unless TF_OPT_OPS_EXPECT_CUDA=1, which makes them fail instead.
"""

import os
import re
import shlex
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import tf_opt_ops
from tf_opt_ops import _loader
from tf_opt_ops import ops
from tf_opt_ops import reference

import common

ROOT = common.ROOT

BUILD_INFO = _loader.build_info()
CUDA_VERSION = BUILD_INFO.get("CUDA_VERSION")
EXPECT_CUDA = os.environ.get("TF_OPT_OPS_EXPECT_CUDA") == "1"

needs_cuda_build = pytest.mark.skipif(
    CUDA_VERSION is None and not EXPECT_CUDA,
    reason="CPU-only build of _tf_opt_ops.so (./configure.sh found no clang + CUDA 12 toolkit, "
    "or TF_NEED_CUDA=0)")


def bazelrc_value(name):
  """The --repo_env value configure.sh wrote for `name`, or None."""
  try:
    with open(os.path.join(ROOT, ".bazelrc"), encoding="utf-8") as f:
      for line in f:
        words = shlex.split(line, comments=True)  # as Bazel reads it: paths are quoted
        if len(words) == 2 and words[0] == "build" and words[1].startswith(f"--repo_env={name}="):
          return words[1].split("=", 2)[2]
  except FileNotFoundError:
    pass
  return None


def cuda_toolchain():
  """(clang, toolkit directory) of the configured CUDA build: fails when there is none."""
  clang, toolkit = bazelrc_value("CUDA_CLANG"), bazelrc_value("CUDA_TOOLKIT_PATH")
  assert clang and toolkit, "no CUDA build configured (.bazelrc): run make build"
  return clang, toolkit


def cuda_copts():
  """CUDA_COPTS as tf_opt_ops/BUILD loads it (the .bzl is a Python literal too)."""
  namespace = {}
  with open(os.path.join(ROOT, "tf_opt_ops", "cuda_copts.bzl"), encoding="utf-8") as f:
    exec(f.read(), namespace)
  return namespace["CUDA_COPTS"]


TYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
INDEX_TYPES = (tf.int32, tf.int64)
# op -> (scalar inputs, has Tindices)
OPS = {
    "TfOptOps>ResourceSparseApplyLazyAdam": (
        ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"), True),
    "TfOptOps>ResourceSparseApplyLazyAdamW": (
        ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "weight_decay"), True),
    "TfOptOps>ResourceApplyClippyAdagrad": (
        ("lr", "epsilon", "variable_relative_threshold", "accumulator_relative_threshold",
         "absolute_threshold"), False),
    "TfOptOps>ResourceSparseApplyClippyAdagrad": (
        ("lr", "epsilon", "variable_relative_threshold", "accumulator_relative_threshold",
         "absolute_threshold"), True),
    "TfOptOps>ResourceSparseApplyClippyAdagradW": (
        ("lr", "epsilon", "variable_relative_threshold", "accumulator_relative_threshold",
         "absolute_threshold", "weight_decay"), True),
    "TfOptOps>ResourceSparseApplyRowwiseAdagrad": (("lr", "epsilon", "weight_decay"), True),
    "TfOptOps>ResourceSparseApplyLazyMovingAverage": (("count", "ema_momentum"), True),
}


def _registered(op, device):
  """{(T, Tindices or None): KernelDef} of `op` on `device`."""
  ops.load_library()
  found = {}
  for k in kernels.get_registered_kernels_for_op(op).kernel:
    if k.device_type != device:
      continue
    attrs = {c.name: [tf.as_dtype(t) for t in c.allowed_values.list.type] for c in k.constraint}
    for t in attrs["T"]:
      for i in attrs.get("Tindices", [None]):
        found[(t, i)] = k
  return found


# The oldest Linux drivers: any CUDA 12 toolkit's SASS from the 12.0 driver on
# (minor version compatibility); PTX of CUDA 12.2 from the 12.2 driver on.
CUDA_12_DRIVER = "525.60.13"
CUDA_12_2_DRIVER = "535.54.03"


def _version_key(version):
  return tuple(int(part) for part in version.split("."))


@needs_cuda_build
def test_build_info_records_cuda_12_and_the_minimum_driver():
  assert CUDA_VERSION is not None, "CUDA_VERSION is None: not a CUDA build"
  assert CUDA_VERSION.split(".")[0] == "12", CUDA_VERSION
  if bazelrc_value("CUDA_TOOLKIT_PATH").endswith("/.toolchains/cuda-12.2"):
    assert CUDA_VERSION == "12.2"  # the toolkit build_deps/cuda/toolchain.sh assembles
  assert list(BUILD_INFO["CUDA_ARCHS"]), "no GPU architectures recorded"
  assert BUILD_INFO["CUDA_MIN_DRIVER"] == CUDA_12_DRIVER
  if CUDA_VERSION == "12.2":
    assert BUILD_INFO["CUDA_PTX_MIN_DRIVER"] == CUDA_12_2_DRIVER
  assert _version_key(BUILD_INFO["CUDA_PTX_MIN_DRIVER"]) >= _version_key(CUDA_12_DRIVER)
  assert BUILD_INFO["CUDA_COMPILER"].startswith("clang "), BUILD_INFO["CUDA_COMPILER"]


def _tensorflow_cuda():
  # The test venv installs the `tensorflow` wheel (requirements-dev.txt), a CUDA build: its
  # CUDA version and architectures are what the GPU kernels are checked against.
  info = tf.sysconfig.get_build_info()
  assert info.get("is_cuda_build") and info.get("cuda_version"), (
      f"TensorFlow {tf.__version__} here is not a CUDA build (tensorflow-cpu?): install the "
      f"`tensorflow` wheel, whose CUDA these tests compare the library's with ({info})")
  return info


@needs_cuda_build
def test_cuda_version_runs_where_tensorflow_runs():
  # TensorFlow's CUDA runtime is the one our kernels call, on TensorFlow's
  # driver: the same major version (libcudart.so.12) and no newer minor one,
  # so any driver that runs TensorFlow runs the kernels.
  theirs = _tensorflow_cuda()["cuda_version"]  # e.g. "12.5.1"
  ours = CUDA_VERSION
  assert ours.split(".")[0] == theirs.split(".")[0], (ours, theirs)
  assert _version_key(ours)[:2] <= _version_key(theirs)[:2], (ours, theirs)


@needs_cuda_build
def test_gpu_architectures_cover_tensorflows():
  # e.g. ['sm_60', 'sm_70', 'sm_80', 'sm_89', 'compute_90'] for TensorFlow 2.21.
  theirs = _tensorflow_cuda().get("cuda_compute_capabilities") or []
  assert theirs, f"TensorFlow {tf.__version__} reports no cuda_compute_capabilities"
  ours = [int(a) for a in BUILD_INFO["CUDA_ARCHS"]]
  for arch in theirs:
    number = int(re.fullmatch(r"(?:sm|compute)_(\d+)", arch).group(1))
    # SASS for it, or PTX (of our last architecture) it can JIT-compile.
    assert number in ours or number >= ours[-1], (arch, ours)
  assert ours[-1] >= max(int(re.sub(r"\D", "", a)) for a in theirs), (ours, theirs)


@needs_cuda_build
@pytest.mark.parametrize("op", sorted(OPS))
def test_gpu_kernels_registered_for_every_type(op):
  scalars, sparse = OPS[op]
  cpu, gpu = _registered(op, "CPU"), _registered(op, "GPU")
  want = {(t, i) for t in TYPES for i in (INDEX_TYPES if sparse else (None,))}
  assert set(cpu) == want
  missing = sorted(str(k) for k in want - set(gpu))
  assert not missing, f"{op}: no GPU kernel for {missing}"
  for key in want:
    # Hyperparameters are read on the host; everything else stays on the GPU.
    assert sorted(gpu[key].host_memory_arg) == sorted(scalars), (op, key)


def _tool(name):
  path = shutil.which(name)
  # binutils comes with the compiler the build needs: missing means a broken setup.
  assert path is not None, f"{name} (binutils) not installed: apt-get install binutils"
  return path


def _dynamic_symbols(path, flag, strong_only=False):
  out = subprocess.run([_tool("nm"), "-D", flag, path], check=True, capture_output=True,
                       text=True).stdout
  symbols = set()
  for line in out.splitlines():
    fields = line.split()
    if fields and not (strong_only and fields[-2] in ("w", "v")):  # weak: crt hooks
      symbols.add(fields[-1])
  return symbols


@needs_cuda_build
def test_so_needs_only_tensorflow_framework_and_libc():
  out = subprocess.run([_tool("readelf"), "-d", _loader.LIBRARY_PATH], check=True,
                       capture_output=True, text=True).stdout
  needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out))
  allowed = {
      "libtensorflow_framework.so.2", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6",
      "ld-linux-x86-64.so.2", "libdl.so.2", "libpthread.so.0"
  }
  assert needed <= allowed, f"unexpected NEEDED: {sorted(needed - allowed)}"
  assert "libtensorflow_framework.so.2" in needed
  assert not any("cuda" in n or "cudart" in n for n in needed)


CUDA_SYMBOL = re.compile(r"^(__)?cu(da)?[A-Z_]")


def _local_cuda_functions(path):
  """The CUDA runtime functions `path` defines itself (the stub's)."""
  out = subprocess.run([_tool("nm"), path], check=True, capture_output=True, text=True).stdout
  functions = set()
  for line in out.splitlines():
    fields = line.split()
    # Named as the runtime's functions: not clang's __cuda_module_ctor, nor .cold parts.
    if len(fields) == 3 and fields[1] in "tTwW" and re.fullmatch(r"(__)?cuda[A-Z]\w*", fields[2]):
      functions.add(fields[2])
  return functions


@needs_cuda_build
def test_cuda_runtime_is_the_hidden_stub():
  undefined = _dynamic_symbols(_loader.LIBRARY_PATH, "--undefined-only")
  exported = _dynamic_symbols(_loader.LIBRARY_PATH, "--defined-only")
  assert not sorted(s for s in undefined if CUDA_SYMBOL.match(s)), "CUDA symbols left undefined"
  assert not sorted(s for s in exported if CUDA_SYMBOL.match(s)), "CUDA symbols exported"
  # The fat binaries were linked in and register through the stub at load time.
  local = _local_cuda_functions(_loader.LIBRARY_PATH)
  assert {"__cudaRegisterFatBinary", "__cudaRegisterFunction", "cudaLaunchKernel"} <= local, local
  with open(_loader.LIBRARY_PATH, "rb") as f:
    assert b"release 13" not in f.read(), "CUDA 13 left its mark in the library"


@needs_cuda_build
def test_every_forwarded_function_is_in_the_cuda_12_2_runtime():
  # The stub looks each function up by name in whatever libcudart.so.12 the
  # process has: all of them must exist in the oldest one the build targets.
  _, toolkit = cuda_toolchain()
  runtime = os.path.join(toolkit, "lib64", "libcudart.so.12")
  provided = {s.split("@")[0] for s in _dynamic_symbols(runtime, "--defined-only")}
  missing = sorted(_local_cuda_functions(_loader.LIBRARY_PATH) - provided)
  assert not missing, f"not in {runtime}: {missing}"


@needs_cuda_build
def test_tensorflow_symbols_come_from_the_framework_only():
  undefined = {
      s for s in _dynamic_symbols(_loader.LIBRARY_PATH, "--undefined-only", strong_only=True)
      if "@" not in s
  }  # versioned: glibc, libstdc++, libgcc
  framework = os.path.join(tf.sysconfig.get_lib(), "libtensorflow_framework.so.2")
  provided = {s.split("@")[0] for s in _dynamic_symbols(framework, "--defined-only")}
  missing = sorted(undefined - provided)
  assert not missing, f"imports not exported by libtensorflow_framework.so.2: {missing[:10]}"


# ------------------------------------------- the device code's float math


@needs_cuda_build
@pytest.mark.parametrize("source",
                         ["lazy_adam_kernels", "clippy_adagrad_kernels", "rowwise_adagrad_kernels"])
def test_ptx_float_math_is_correctly_rounded_and_not_contracted(source, tmp_path):
  # The kernels' float32/float64 results equal the CPU's bit for bit only
  # with IEEE sqrt and division and no fused multiply-adds (the CPU has none).
  clang, toolkit = cuda_toolchain()
  ptx = tmp_path / f"{source}.ptx"
  subprocess.run([
      clang, "--cuda-device-only", "-S", "-x", "cuda", f"--cuda-path={toolkit}",
      f"--cuda-gpu-arch=sm_{BUILD_INFO['CUDA_ARCHS'][-1]}", *cuda_copts(), f"-I{ROOT}", "-o",
      str(ptx),
      os.path.join(ROOT, "tf_opt_ops", "core", f"{source}.cu.cc")
  ], check=True, capture_output=True, text=True)
  text = ptx.read_text()
  float_ops = set(
      re.findall(r"\b((?:sqrt|div|rcp|rsqrt|fma|mad|mul|add|sub)(?:\.\w+)*\.f(?:32|64))\b", text))
  assert "sqrt.rn.f32" in float_ops and "sqrt.rn.f64" in float_ops, sorted(float_ops)
  assert "div.rn.f32" in float_ops and "div.rn.f64" in float_ops, sorted(float_ops)
  assert "mul.rn.f32" in float_ops and "add.rn.f32" in float_ops, sorted(float_ops)
  approximate = sorted(op for op in float_ops if ".approx" in op or ".full" in op)
  contracted = sorted(op for op in float_ops if op.startswith(("fma", "mad")))
  # Plain mul/add without .rn may be fused by ptxas.
  fusable = sorted(
      op for op in float_ops if op.split(".")[0] in ("mul", "add", "sub") and ".rn" not in op)
  assert not approximate and not contracted and not fusable, (approximate, contracted, fusable)


# ------------------------------------------- the GPU check's build


def _expected_archs():
  """The architectures of the configured build: the .so's own when it is a
  CUDA build configured here, else the default configure.sh would use."""
  if CUDA_VERSION is not None and os.path.exists(os.path.join(ROOT, ".bazelrc")):
    return [str(a) for a in BUILD_INFO["CUDA_ARCHS"]]
  script = 'TF_CUDA_ARCHS=; eval "$(grep "^cuda_archs=" configure.sh)"; echo "$cuda_archs"'
  out = subprocess.run(["bash", "-c", script], cwd=ROOT, check=True, capture_output=True,
                       text=True).stdout.strip()
  assert out, "configure.sh has no cuda_archs default line"
  return out.split(",")


def test_default_architectures_cover_tensorflow_2_21():
  # SASS where TensorFlow 2.21's wheel has it, and then some; PTX for the last.
  script = 'TF_CUDA_ARCHS=; eval "$(grep "^cuda_archs=" configure.sh)"; echo "$cuda_archs"'
  out = subprocess.run(["bash", "-c", script], cwd=ROOT, check=True, capture_output=True,
                       text=True).stdout.strip()
  assert out == "60,70,75,80,86,89,90"


def test_gpu_check_build_uses_the_bazel_clang_flags_and_archs():
  make = shutil.which("make")
  assert make is not None, "make not installed"
  out = subprocess.run([make, "-n", "-B", "gpu-check-build", "CUDA_CLANG=cudaclang"], cwd=ROOT,
                       check=True, capture_output=True, text=True).stdout
  compiles = [
      shlex.split(line) for line in out.splitlines() if line.startswith("cudaclang -c -x cuda ")
  ]
  assert len(compiles) == 6, out  # five kernel files and the C API
  # The lazy CUDA runtime is in the library too, as in the .so.
  assert "cudaclang -c -x c++" in out and "tf_opt_ops/platform/cuda_runtime_stub.cc" in out, out
  copts = cuda_copts()
  assert "-ffp-contract=off" in copts  # CPU and GPU agree bit for bit only without FMA
  archs = _expected_archs()
  for args in compiles:
    start = args.index(copts[0])
    assert args[start:start + len(copts)] == copts, args
    assert "--cuda-path=.toolchains/cuda-12.2" in args, args
    sass = [a.split("=sm_")[1] for a in args if a.startswith("--cuda-gpu-arch=")]
    no_ptx = [a.split("=sm_")[1] for a in args if a.startswith("--no-cuda-include-ptx=")]
    assert sass == archs, args
    assert no_ptx == archs[:-1], args  # PTX of the last architecture only


# ------------------------------------------- CPU kernels vs the GPU references
# With the CUDA build loaded (or a CPU-only one), the CPU kernels match the
# NumPy references gpu_check.py uses on the GPU: this keeps those honest.


def _tf_dtype(dtype):
  return tf.as_dtype(dtype)


def _to_tf(x, dtype):
  if dtype == "bfloat16":
    return tf.constant(reference.load(x, dtype), tf.float32)  # exact: bf16 -> f32 -> bf16
  return tf.constant(x)


def _variable(x, dtype):
  return tf.Variable(tf.cast(_to_tf(x, dtype), _tf_dtype(dtype)))


def _stored(t, dtype):
  """A tf tensor of `dtype` -> the reference's storage representation."""
  values = tf.cast(t, tf.float64 if dtype == "float64" else tf.float32).numpy()
  return reference.store(values, dtype)


def _assert_close(got, want, dtype, what):
  got64 = reference.load(got, dtype).astype(np.float64)
  want64 = reference.load(want, dtype).astype(np.float64)
  rtol, atol = common.TOLERANCE[dtype]
  np.testing.assert_allclose(got64, want64, rtol=rtol, atol=atol, err_msg=f"{what} ({dtype})")


def _case(dtype, rows=20, dim=7, n=30, seed=0):
  rng = np.random.default_rng(seed)
  indices = rng.integers(0, rows, size=n)
  indices[:3] = indices[5]  # duplicates for sure
  return (rng, indices, reference.random_values(rng, (rows, dim), dtype),
          reference.random_values(rng, (n, dim), dtype))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_cpu_lazy_adam_matches_gpu_reference(dtype, index_dtype):
  rng, indices, var0, grad = _case(dtype)
  m0 = reference.random_values(rng, var0.shape, dtype)
  v0 = reference.store(rng.uniform(0, 1, var0.shape), dtype)
  hyper = dict(lr=0.01, beta1=0.9, beta2=0.999, epsilon=1e-7, beta1_power=0.9**3,
               beta2_power=0.999**3)
  var, m, v = (_variable(x, dtype) for x in (var0, m0, v0))
  g = tf.cast(_to_tf(grad, dtype), _tf_dtype(dtype))
  ops.sparse_lazy_adam(var, m, v, g, tf.constant(indices.astype(index_dtype)),
                       beta_1_power=hyper["beta1_power"], beta_2_power=hyper["beta2_power"],
                       lr=hyper["lr"], beta_1=hyper["beta1"], beta_2=hyper["beta2"],
                       epsilon=hyper["epsilon"])
  want = reference.sparse_lazy_adam(var0, m0, v0, grad, indices, dtype, **hyper)
  for name, got, w in zip(("var", "m", "v"), (var, m, v), want):
    _assert_close(_stored(got, dtype), w, dtype, name)


CLIPPY = dict(lr=0.5, epsilon=1e-7, variable_relative_threshold=0.1,
              accumulator_relative_threshold=0.01, absolute_threshold=1e-3)


@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_cpu_clippy_matches_gpu_reference(dtype, sparse, flags):
  clip, standard = flags
  rng, indices, var0, grad = _case(dtype, seed=1)
  accum0 = reference.store(rng.uniform(0.1, 1, var0.shape), dtype)
  if not sparse:
    grad = reference.random_values(rng, var0.shape, dtype)
  hyper = dict(CLIPPY, clip_accumulator_update=clip, use_standard_accumulator_update=standard)
  var, accum = _variable(var0, dtype), _variable(accum0, dtype)
  g = tf.cast(_to_tf(grad, dtype), _tf_dtype(dtype))
  if sparse:
    scale = ops.sparse_clippy_adagrad(var, accum, g, tf.constant(indices), **hyper)
    want = reference.sparse_clippy_adagrad(var0, accum0, grad, indices, dtype, **hyper)
  else:
    scale = ops.clippy_adagrad(var, accum, g, **hyper)
    want = reference.clippy_adagrad(var0, accum0, grad, dtype, **hyper)
  assert 0 < float(want[2]) < 1, "the case should clip"
  np.testing.assert_allclose(float(scale), float(want[2]), rtol=1e-6 if dtype != "float64" else 0)
  _assert_close(_stored(var, dtype), want[0], dtype, "var")
  _assert_close(_stored(accum, dtype), want[1], dtype, "accum")


def test_cpu_bad_index_still_rejected_with_cuda_build_loaded():
  var = tf.Variable(tf.ones([4, 3]))
  m, v = tf.Variable(tf.zeros([4, 3])), tf.Variable(tf.zeros([4, 3]))
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[1\] = 4 is not in \[0, 4\)"):
    ops.sparse_lazy_adam(var, m, v, tf.ones([2, 3]), tf.constant([0, 4]), beta_1_power=0.9,
                         beta_2_power=0.999)
  np.testing.assert_array_equal(var.numpy(), np.ones([4, 3], np.float32))
  assert tf_opt_ops.ops is ops
