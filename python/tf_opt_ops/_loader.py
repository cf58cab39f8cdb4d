"""Loads `_tf_opt_ops.so` once, turning every failure into an ImportError that says what to do."""

import functools
import os

import tensorflow as tf

LIBRARY_NAME = "_tf_opt_ops.so"
LIBRARY_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)

_REBUILD = (
    "Rebuild it for this TensorFlow from the source tree with `./configure.sh && make build`, "
    "or install a tf_opt_ops wheel built for this TensorFlow (`make wheel`).")


def _major_minor(version):
  return tuple(version.split(".")[:2])


def built_against_tf_version():
  """The TensorFlow version the library beside this file was built against."""
  from tf_opt_ops import _build_info  # pylint: disable=g-import-not-at-top

  return _build_info.TF_VERSION


def check_tf_version(built, running):
  """Raises ImportError when the library's TensorFlow differs from the running one.

  TensorFlow's C++ kernel API has no stable ABI across minor releases, so a
  mismatch crashes at the first op call instead of failing cleanly: refuse it.
  """
  if _major_minor(built) != _major_minor(running):
    raise ImportError(
        f"tf_opt_ops: {LIBRARY_PATH} was built against TensorFlow {built}, but this "
        f"process runs TensorFlow {running}. Install tensorflow=={built} (or tensorflow-cpu), "
        f"or: {_REBUILD}")


@functools.lru_cache(maxsize=None)
def load_library():
  """Returns the loaded op module (generated Python wrappers of the custom ops)."""
  if not os.path.exists(LIBRARY_PATH):
    raise ImportError(
        f"tf_opt_ops: the op library {LIBRARY_PATH} is missing. In a source tree run "
        f"`make build` (it builds the library with Bazel and copies it here); otherwise "
        f"install the wheel from `make wheel`.")
  try:
    built = built_against_tf_version()
  except ImportError as e:
    raise ImportError(
        f"tf_opt_ops: {LIBRARY_PATH} has no build record (_build_info.py). {_REBUILD}") from e
  check_tf_version(built, tf.__version__)
  try:
    return tf.load_op_library(LIBRARY_PATH)
  except (tf.errors.NotFoundError, OSError) as e:
    message = str(e)
    if "undefined symbol" in message:
      raise ImportError(
          f"tf_opt_ops: {LIBRARY_PATH} needs a symbol this TensorFlow does not export "
          f"({message.strip()}). It was built against a different TensorFlow build or "
          f"compiler ABI. {_REBUILD}") from e
    raise ImportError(
        f"tf_opt_ops: loading {LIBRARY_PATH} failed: {message.strip()}. {_REBUILD}") from e
