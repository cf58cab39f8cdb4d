"""Loads `_tf_opt_ops.so` once, turning every failure into an ImportError that says what to do."""

import ctypes
import functools
import importlib.machinery
import importlib.util
import os
import sys

import tensorflow as tf
from tensorflow.core.framework import op_def_pb2

import tf_opt_ops_sysconfig
from tf_opt_ops import _tf_private

OP_PREFIX = "TfOptOps>"
BUILD_ID_OP = OP_PREFIX + "BuildId"
# The library built for the running TensorFlow (the wheel holds one per supported minor).
LIBRARY_PATH = tf_opt_ops_sysconfig.get_library_path(tf.__version__)
# The XLA kernels of its ops, beside it (see docs/design.md, "XLA").
XLA_LIBRARY_NAME = "_tf_opt_ops_xla.so"
XLA_LIBRARY_PATH = os.path.join(os.path.dirname(LIBRARY_PATH), XLA_LIBRARY_NAME)

_BUILD_FROM_SOURCE = (
    "To build it for this TensorFlow from a source tree: `make build` (or `./configure.sh && "
    "bazel build //tf_opt_ops:_tf_opt_ops.so`); see docs/building.md.")


def build_info():
  """What the library for the running TensorFlow was built against (its _build_info.py)."""
  return tf_opt_ops_sysconfig.get_build_info(tf.__version__)


def built_against_tf_version():
  """The TensorFlow version the library for the running TensorFlow was built against."""
  return build_info()["TF_VERSION"]


def built_id():
  """The build id of that library (a hash of what it was built from)."""
  return build_info().get("BUILD_ID")


def check_tf_version(built, running):
  """Raises ImportError when the library's TensorFlow minor differs from the running one.

  TensorFlow's C++ kernel API has no stable ABI across minor releases, so a
  mismatch crashes at the first op call instead of failing cleanly: refuse it.
  """
  if tf_opt_ops_sysconfig.tf_minor(built) != tf_opt_ops_sysconfig.tf_minor(running):
    raise ImportError(f"tf_opt_ops: {LIBRARY_PATH} was built against TensorFlow {built}, but this "
                      f"process runs TensorFlow {running}. Reinstall the tf_opt_ops wheel. "
                      f"{_BUILD_FROM_SOURCE}")


def missing_library_message(running, built):
  """Why there is no library for TensorFlow `running` here, and what to do."""
  minor = tf_opt_ops_sysconfig.tf_minor(running)
  supported = ", ".join(tf_opt_ops_sysconfig.SUPPORTED_TF_VERSIONS)
  has = f"it holds libraries for TensorFlow {', '.join(built)}" if built else "it holds none"
  if minor not in tf_opt_ops_sysconfig.SUPPORTED_TF_VERSIONS:
    return (f"tf_opt_ops: this process runs TensorFlow {running}, which tf_opt_ops does not "
            f"support; the supported versions are TensorFlow {supported} ({has}). Install one "
            f"of those, or build tf_opt_ops for this TensorFlow from source at your own risk. "
            f"{_BUILD_FROM_SOURCE}")
  return (f"tf_opt_ops: no op library for TensorFlow {minor} at {LIBRARY_PATH}: this "
          f"installation was built for part of the supported versions ({has}). Install the "
          f"release wheel, which holds one for each of TensorFlow {supported} (`make "
          f"wheel-all`). {_BUILD_FROM_SOURCE}")


def registered_ops():
  """Our ops already in TensorFlow's op registry, by name (OpDef protos)."""
  return {
      op.name: op for op in _tf_private.all_registered_ops().op if op.name.startswith(OP_PREFIX)
  }


def registered_build_id(ops):
  """The build id of the library that registered `ops`, or None when it has none."""
  build_id_op = ops.get(BUILD_ID_OP)
  if build_id_op is None:
    return None
  return next(attr.default_value.s.decode() for attr in build_id_op.attr if attr.name == "build_id")


def check_registered_build(registered, ours):
  """Raises ImportError unless the ops in the registry come from a copy of our build.

  Two paths to the same .so are two libraries to the dynamic loader; a copy of
  the same build shares the ops and kernels the first copy registered (see
  tf_opt_ops/platform/load_guard.cc), another build cannot. Why: see docs/design.md,
  "Production".
  """
  if registered is None or registered != ours:
    raise ImportError(
        f"tf_opt_ops: this process already registered the tf_opt_ops ops from another build "
        f"(build id {registered or 'unknown: a build without an id'}), probably by "
        f"tf.load_op_library of a vendored copy; this package's library is build {ours} at "
        f"{LIBRARY_PATH}. Load one build only: vendor this package's library "
        f"(tf_opt_ops_sysconfig.get_library_path()), or install the package version that "
        f"the vendored library came from.")


def module_from_registry(ops):
  """The wrappers tf.load_op_library would return, made from already registered ops."""
  op_list = op_def_pb2.OpList(op=[ops[name] for name in sorted(ops)])
  wrappers = _tf_private.python_op_wrappers(op_list)
  module = importlib.util.module_from_spec(
      importlib.machinery.ModuleSpec("tf_opt_ops._registered_ops", None))
  exec(wrappers, module.__dict__)
  _tf_private.mark_as_plugin(module)
  sys.modules[module.__name__] = module
  return module


@functools.lru_cache(maxsize=None)
def load_library():
  """Returns the loaded op module (generated Python wrappers of the custom ops)."""
  if not os.path.exists(LIBRARY_PATH):
    raise ImportError(
        missing_library_message(tf.__version__, tf_opt_ops_sysconfig.built_tf_versions()))
  try:
    built = built_against_tf_version()
  except (OSError, KeyError) as e:
    raise ImportError(f"tf_opt_ops: {LIBRARY_PATH} has no build record "
                      f"({tf_opt_ops_sysconfig.BUILD_INFO_NAME} beside it). Reinstall the "
                      f"tf_opt_ops wheel. {_BUILD_FROM_SOURCE}") from e
  check_tf_version(built, tf.__version__)
  registered = registered_ops()
  if registered:
    # Another path (a vendored copy) loaded the ops first: loading ours as well
    # would add nothing, and wrappers come only with newly registered ops.
    check_registered_build(registered_build_id(registered), built_id())
    module = module_from_registry(registered)
  else:
    module = _load_op_library()
  # Before any XLA compilation the process may run, as TensorFlow's own XLA
  # kernels are (a later registration works too, but only this one is usual).
  global _xla_unavailable, _xla_gpu_unavailable
  _xla_unavailable, _xla_gpu_unavailable = _register_xla_kernels()
  return module


def _load_op_library():
  try:
    return tf.load_op_library(LIBRARY_PATH)
  except (tf.errors.OpError, OSError) as e:
    message = str(e)
    if "undefined symbol" in message:
      raise ImportError(
          f"tf_opt_ops: {LIBRARY_PATH} needs a symbol this TensorFlow does not export "
          f"({message.strip()}). It was built against a different TensorFlow build or "
          f"compiler ABI. {_BUILD_FROM_SOURCE}") from e
    raise ImportError(
        f"tf_opt_ops: loading {LIBRARY_PATH} failed: {message.strip()}. {_BUILD_FROM_SOURCE}"
    ) from e


def cpu_isa():
  """The instruction-set level the CPU kernels run: "avx", "avx2" or "avx512".

  The best this CPU has, chosen when the library loads, or a lower one that the
  TF_OPT_OPS_CPU_ISA variable names (a level the CPU lacks runs its best, with a
  warning on stderr). Every level computes the same bits (see docs/design.md,
  "Instruction sets").
  """
  load_library()
  function = ctypes.CDLL(LIBRARY_PATH).TfOptOpsCpuIsa
  function.restype = ctypes.c_char_p
  function.argtypes = []
  return function().decode()


_xla_unavailable = "the op library is not loaded"
_xla_gpu_unavailable = _xla_unavailable


def xla_unavailable(gpu=False):
  """None when the ops have XLA kernels in this process (on GPUs with `gpu`), else why not.

  `load_library` loads _tf_opt_ops_xla.so after the op library (whose ops its
  kernels lower) and registers its kernels and custom call targets: for the
  CPU, and for GPUs in a CUDA build. Where they are missing the optimizers run
  their standard-ops fallback inside XLA (see `_core`).
  """
  load_library()
  return _xla_gpu_unavailable if gpu else _xla_unavailable


def _register_xla_kernels():
  """Loads _tf_opt_ops_xla.so and registers its XLA kernels; never raises.

  Returns (why the CPU has none, why GPUs have none), each None when they do.
  """
  if not os.path.exists(XLA_LIBRARY_PATH):
    reason = (f"this installation has no {XLA_LIBRARY_NAME} for TensorFlow "
              f"{tf_opt_ops_sysconfig.tf_minor(tf.__version__)} beside {LIBRARY_PATH}")
    return reason, reason
  try:
    library = ctypes.CDLL(XLA_LIBRARY_PATH)
    register = library.TfOptOpsXlaRegister
  except (OSError, AttributeError) as e:
    reason = f"loading {XLA_LIBRARY_PATH} failed ({str(e).strip()})"
    return reason, reason
  register.restype = ctypes.c_int
  register.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
  message = ctypes.create_string_buffer(4096)
  devices = register((built_id() or "").encode(), message, len(message))
  note = message.value.decode(errors="replace")
  if devices < 0:
    reason = f"{XLA_LIBRARY_PATH} did not register its XLA kernels: {note}"
    return reason, reason
  return None, (None if devices & 2 else note or "no XLA kernels on GPUs")
