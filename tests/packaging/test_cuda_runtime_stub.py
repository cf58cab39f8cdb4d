"""The lazy CUDA runtime (tf_opt_ops/platform/cuda_runtime_stub.cc) at work, on a CPU.

A small probe library is built from the stub and a one-kernel .cu file with
the configured clang, CUDA toolkit and the kernels' flags; each check loads
it in a fresh process (the stub looks for the runtime once per process):

- no libcudart.so.12 anywhere: a CUDA call returns the stub's own error
  (cudaErrorSharedObjectInitFailed) with a message, nothing aborts;
- the toolkit's real libcudart.so.12 loaded first: the call reaches it, and
  the runtime answers for itself (no driver here: cudaErrorInsufficientDriver
  or cudaErrorNoDevice; success on a GPU machine);
- a runtime loaded after the library (as TensorFlow loads its own): the fat
  binary registrations made at load time are replayed into it at the first
  call, and a kernel launch reaches it with the very host function it had
  registered (a stand-in libcudart.so.12 that records the calls says so);
- a runtime only in pip's place next to TensorFlow's library
  (site-packages/nvidia/cuda_runtime/lib) is found there;
- the op library itself loads with this TensorFlow (no NVIDIA pip packages
  here) and runs its CPU ops without loading any CUDA runtime.

Skips on a CPU-only build unless TF_OPT_OPS_EXPECT_CUDA=1 (test_gpu_build.py).
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import common
from test_gpu_build import CUDA_VERSION
from test_gpu_build import cuda_copts
from test_gpu_build import cuda_toolchain
from test_gpu_build import needs_cuda_build

ROOT = common.ROOT
pytestmark = [needs_cuda_build, pytest.mark.slow]

# cudaError_t values (driver_types.h).
SHARED_OBJECT_INIT_FAILED = 303
INSUFFICIENT_DRIVER = 35
NO_DEVICE = 100

PROBE_CU = r"""
#include <cuda_runtime.h>

#define PROBE_API extern "C" __attribute__((visibility("default")))

__global__ void ProbeKernel(int* x) {
  if (x != nullptr) x[0] = 1;
}

PROBE_API int probe_device_count(int* count) {
  *count = -1;
  return static_cast<int>(cudaGetDeviceCount(count));
}

PROBE_API int probe_launch() {
  ProbeKernel<<<1, 1>>>(nullptr);
  return static_cast<int>(cudaGetLastError());
}

PROBE_API const char* probe_error_string(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}
"""

# A stand-in libcudart.so.12 that records what it is given.
FAKE_CUDART_C = r"""
#include <stddef.h>

typedef struct { unsigned x, y, z; } dim3;

static void* handles[8];
static const void* functions[64];
static int binaries, function_count, ends, bad;

void** __cudaRegisterFatBinary(void* wrapper) {
  /* clang's and nvcc's wrapper: {int magic, int version, const void* data, void*} */
  const unsigned* w = (const unsigned*)wrapper;
  const unsigned* data = *(const unsigned* const*)((const char*)wrapper + 8);
  if (w[0] != 0x466243b1u || data[0] != 0xba55ed50u || binaries >= 8) bad = 1;
  return &handles[binaries++];
}
void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun,
                            const char* device_name, int thread_limit, void* tid, void* bid,
                            void* block_dim, void* grid_dim, int* warp_size) {
  if (binaries == 0 || handle != &handles[binaries - 1] || function_count >= 64) bad = 1;
  else functions[function_count++] = host_fun;
}
void __cudaRegisterVar(void** handle, char* host_var, char* device_address,
                       const char* device_name, int ext, size_t size, int constant, int global) {}
void __cudaRegisterFatBinaryEnd(void** handle) {
  if (binaries == 0 || handle != &handles[binaries - 1]) bad = 1;
  ++ends;
}
void __cudaUnregisterFatBinary(void** handle) {}
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, void* stream) {
  return 0;
}
int __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream) {
  grid->x = grid->y = grid->z = block->x = block->y = block->z = 1;
  *shared = 0;
  *(void**)stream = 0;
  return 0;
}
int cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                     void* stream) {
  for (int i = 0; i < function_count; ++i) {
    if (functions[i] == func) return 0;
  }
  return 98; /* cudaErrorInvalidDeviceFunction: never registered */
}
int cudaGetLastError(void) { return 0; }
int cudaGetDeviceCount(int* count) {
  *count = 7;
  return 0;
}
void fake_state(int* out) {
  out[0] = binaries;
  out[1] = function_count;
  out[2] = ends;
  out[3] = bad;
}
"""


def _run(args, **kwargs):
  return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


def _compiler(name):
  path = shutil.which(name)
  assert path is not None, f"{name} not installed (the Bazel build needs it too)"
  return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """Paths of the probe library, the fake runtime and the toolkit's real one."""
  clang, toolkit = cuda_toolchain()
  out = tmp_path_factory.mktemp("stub")
  (out / "probe.cu.cc").write_text(PROBE_CU)
  (out / "fake_cudart.c").write_text(FAKE_CUDART_C)
  _run([
      clang, "-c", "-x", "cuda", f"--cuda-path={toolkit}", *cuda_copts(), "--cuda-gpu-arch=sm_75",
      "-o",
      str(out / "probe.o"),
      str(out / "probe.cu.cc")
  ])
  _run([
      clang, "-c", "-x", "c++", "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-isystem",
      os.path.join(toolkit, "include"), "-o",
      str(out / "stub.o"),
      os.path.join(ROOT, "tf_opt_ops", "platform", "cuda_runtime_stub.cc")
  ])
  _run([
      _compiler("c++"), "-shared", "-o",
      str(out / "libprobe.so"),
      str(out / "probe.o"),
      str(out / "stub.o"), "-ldl"
  ])
  (out / "fake").mkdir()
  _run([
      _compiler("cc"), "-shared", "-fPIC", "-Wl,-soname,libcudart.so.12", "-o",
      str(out / "fake" / "libcudart.so.12"),
      str(out / "fake_cudart.c")
  ])
  return {
      "probe": str(out / "libprobe.so"),
      "fake": str(out / "fake" / "libcudart.so.12"),
      "real": os.path.join(toolkit, "lib64", "libcudart.so.12"),
  }


def _python(code, loader=(), **env):
  """Runs `code` in a fresh interpreter, with no CUDA runtime on the loader's path; `loader`
  runs the interpreter through the dynamic loader with options (see `no_system_runtime`)."""
  environment = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
  environment.update(env)
  result = subprocess.run(
      [*loader, sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
      env=environment, timeout=300)
  assert result.returncode == 0, result.stdout + result.stderr
  return result


# Where glibc's loader looks without its cache (x86_64 Debian's multiarch and plain dirs).
_LOADER_DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                        "/usr/lib64", "/lib", "/usr/lib")


@pytest.fixture(scope="module")
def no_system_runtime():
  """The loader options that make `_python` see no libcudart.so.12 by soname.

  A CUDA toolkit registers its runtime in ld.so.cache (from /usr/local/cuda/...):
  the interpreter runs through the dynamic loader with `--inhibit-cache`, so
  only the loader's default directories are searched, and none of those may
  hold one (else this machine cannot show a process without a CUDA runtime).
  """
  interpreter = re.search(
      r"Requesting program interpreter: ([^\]]+)\]",
      subprocess.run(["readelf", "-l", os.path.realpath(sys.executable)], check=True,
                     capture_output=True, text=True).stdout)
  assert interpreter, f"no program interpreter in {sys.executable}"
  in_default_dirs = [d for d in _LOADER_DEFAULT_DIRS if os.path.exists(f"{d}/libcudart.so.12")]
  assert not in_default_dirs, (
      f"libcudart.so.12 in the loader's default directories {in_default_dirs}: no process on "
      f"this machine is without a CUDA runtime, which these tests need")
  return (interpreter.group(1), "--inhibit-cache")


PROBE = """
import ctypes
probe = ctypes.CDLL({probe!r})
probe.probe_error_string.restype = ctypes.c_char_p
count = ctypes.c_int()
err = probe.probe_device_count(ctypes.byref(count))
launch = probe.probe_launch()
print(err, count.value, launch, probe.probe_error_string(err).decode())
print([line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line][:1])
"""


def test_without_a_runtime_calls_fail_with_the_stubs_error(built, no_system_runtime):
  out = _python(PROBE.format(probe=built["probe"]), loader=no_system_runtime).stdout.splitlines()
  err, _, launch, message = out[0].split(" ", 3)
  assert int(err) == SHARED_OBJECT_INIT_FAILED, out
  assert int(launch) == SHARED_OBJECT_INIT_FAILED, out  # the launch was skipped, not crashed
  assert "no CUDA runtime" in message and "libcudart.so.12" in message, message
  assert out[1] == "[]", out  # and nothing was loaded


def test_a_preloaded_runtime_gets_the_calls(built):
  code = f"import ctypes; ctypes.CDLL({built['real']!r}, mode=ctypes.RTLD_GLOBAL)\n"
  out = _python(code + PROBE.format(probe=built["probe"])).stdout.splitlines()
  err, _, _, message = out[0].split(" ", 3)
  # The toolkit's runtime answers, not the stub: no driver here (or a GPU).
  assert int(err) in (INSUFFICIENT_DRIVER, NO_DEVICE, 0), out
  assert "no CUDA runtime" not in message, message
  assert out[1] == repr([built["real"]]), out


def test_a_runtime_loaded_later_gets_the_load_time_registrations(built):
  code = f"""
      import ctypes
      probe = ctypes.CDLL({built['probe']!r})  # registers its fat binary (recorded)
      fake = ctypes.CDLL({built['fake']!r})    # the runtime arrives afterwards
      count = ctypes.c_int()
      assert probe.probe_device_count(ctypes.byref(count)) == 0 and count.value == 7
      assert probe.probe_launch() == 0  # the registered host function was launched
      state = (ctypes.c_int * 4)()
      fake.fake_state(state)
      print(list(state))
  """
  out = _python(code).stdout.split()
  # One fat binary with one kernel, its registration ended, nothing malformed.
  assert "".join(out) == "[1,1,1,0]", out


def test_the_runtime_next_to_tensorflow_is_found(built, no_system_runtime, tmp_path):
  site = tmp_path / "site-packages"
  (site / "tensorflow").mkdir(parents=True)
  (site / "nvidia" / "cuda_runtime" / "lib").mkdir(parents=True)
  shutil.copy(built["fake"], site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12")
  (tmp_path / "empty.c").write_text("int tf_stand_in;\n")
  framework = site / "tensorflow" / "libtensorflow_framework.so.2"
  _run([
      _compiler("cc"), "-shared", "-fPIC", "-Wl,-soname,libtensorflow_framework.so.2", "-o",
      str(framework),
      str(tmp_path / "empty.c")
  ])
  code = f"""
      import ctypes
      ctypes.CDLL({str(framework)!r})
      probe = ctypes.CDLL({built['probe']!r})
      count = ctypes.c_int()
      print(probe.probe_device_count(ctypes.byref(count)), count.value)
      print([line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line][:1])
  """
  out = _python(code, loader=no_system_runtime).stdout.splitlines()
  assert out[0] == "0 7", out
  assert out[1] == repr([str(site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12")]), out


def test_the_library_loads_and_runs_cpu_ops_without_a_cuda_runtime():
  # This TensorFlow (the GPU `tensorflow` wheel) without NVIDIA's pip
  # packages, as a CPU-only machine has it: the CUDA build loads, its CPU
  # kernels run, and no CUDA runtime is looked for.
  assert CUDA_VERSION is not None
  code = """
      import numpy as np, tensorflow as tf
      from tf_opt_ops import ops
      var, m, v = (tf.Variable(tf.zeros((3, 2))) for _ in range(3))
      with tf.device("/CPU:0"):
        ops.sparse_lazy_adam(var, m, v, tf.constant([[1.0, -2.0]]), tf.constant([1]),
                             beta_1_power=0.9, beta_2_power=0.999, lr=0.1)
      np.testing.assert_allclose(var.numpy(), [[0, 0], [-0.1, 0.1], [0, 0]], rtol=1e-5)
      try:
        import nvidia.cuda_runtime  # noqa: F401  (TensorFlow may load it itself)
        pip_runtime = True
      except ImportError:
        pip_runtime = False
      loaded = [line for line in open("/proc/self/maps") if "libcudart" in line]
      assert pip_runtime or not loaded, loaded
      print("ran")
  """
  result = _python(code, PYTHONPATH=os.path.join(ROOT, "python"), TF_CPP_MIN_LOG_LEVEL="3")
  assert "ran" in result.stdout
