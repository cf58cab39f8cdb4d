"""What the tests share: where things are, the flavors, the tolerances, fresh processes.

Imported by test modules (`from common import ...`); tests/conftest.py puts this folder and
the source package (python/) on sys.path and turns `run_python` into a fixture.
"""

import contextlib
import importlib
import logging
import os
import subprocess
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS_DIR)
PYTHON_DIR = os.path.join(ROOT, "python")

# The Keras optimizer APIs, as the flavor modules tf_opt_ops.<name> are called.
FLAVORS = ("keras", "tf_keras", "legacy")
# The two Keras 2 APIs: what tf_keras models, clusters with sharded variables and the peers
# (TF Addons, Merlin, TFRS) use.
TF_KERAS_FLAVORS = ("tf_keras", "legacy")


def flavor_module(name):
  """tf_opt_ops.keras, tf_opt_ops.tf_keras or tf_opt_ops.legacy."""
  return importlib.import_module(f"tf_opt_ops.{name}")


# (rtol, atol) of a kernel's result against tf_opt_ops.reference, by variable dtype: what
# reference.py promises. float32 and float64 are bit for bit (the kernels compute the
# reference's operations in its order, without FMA contraction); half types compute in
# float32 and round once when stored, so a float32 difference in the last place may flip
# the stored value's last bit.
TOLERANCE = {
    "float64": (0.0, 0.0),
    "float32": (0.0, 0.0),
    "float16": (2.0**-10, 2.0**-10),
    "bfloat16": (2.0**-7, 2.0**-7),
}


def fused_op_cases(test):
  """Parametrizes a fused op's test against the ops it fuses: each table dtype, both index
  dtypes, eager and tf.function, without and with weight decay (`decays`)."""
  import numpy as np
  import pytest

  from tf_opt_ops import reference
  marks = (pytest.mark.parametrize("decays", [False, True], ids=["plain", "weight-decay"]),
           pytest.mark.parametrize("mode", ["eager", "function"]),
           pytest.mark.parametrize("index_dtype", [np.int32, np.int64]),
           pytest.mark.parametrize("dtype", reference.DTYPES))
  for mark in marks:
    test = mark(test)
  return test


def python_env(package=True, **extra):
  """The environment of a fresh Python process: quiet TensorFlow; PYTHONPATH this folder (for
  `common` and the test modules a process runs) and, when `package`, the source package; then
  `extra`."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR, TESTS_DIR] if package else [TESTS_DIR])
  env.update({k: str(v) for k, v in extra.items()})
  return env


def run_python(code=None, *args, package=True, env=None, cwd=None, timeout=600, check=True):
  """Runs `code` (or `python *args`) in a fresh process; returns the CompletedProcess.

  `env` adds to `python_env(package)`. With `check`, a non-zero exit fails the test with
  the end of its stderr.
  """
  command = [sys.executable, *args] + ([] if code is None else ["-c", code])
  result = subprocess.run(command, env=python_env(package, **(env or {})), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)
  if check and result.returncode != 0:
    raise AssertionError(f"{command[:3]} exited {result.returncode}:\n{result.stderr[-4000:]}")
  return result


@contextlib.contextmanager
def tensorflow_log():
  """The messages TensorFlow's logger emits inside the block (a list, filled as they come),
  with tf_opt_ops' once-only warnings armed again."""
  import tensorflow as tf

  from tf_opt_ops import _core

  messages = []
  handler = logging.Handler()
  handler.emit = lambda record: messages.append(record.getMessage())
  tf.get_logger().addHandler(handler)
  _core._logged.clear()
  try:
    yield messages
  finally:
    tf.get_logger().removeHandler(handler)


def duplicate_id_batches(ids, batch, steps, seed=0):
  """`steps` batches of `batch` examples as one (x, y): three int32 ids below `ids` and a
  float32 label each, the second example of every batch a copy of the first (duplicate ids,
  which the kernels sum)."""
  import numpy as np

  rng = np.random.default_rng(seed)
  x = rng.integers(0, ids, size=(batch * steps, 3)).astype(np.int32)
  x[1::batch] = x[::batch]
  y = rng.normal(size=(batch * steps, 1)).astype(np.float32)
  return x, y


def stored_tensor(stored, dtype):
  """A tensor of tf_opt_ops.reference's stored values of `dtype` (bfloat16 stored as bits)."""
  import ml_dtypes
  import numpy as np
  import tensorflow as tf

  stored = np.asarray(stored)
  if dtype == "bfloat16":
    return tf.constant(stored.view(ml_dtypes.bfloat16))
  return tf.constant(stored)


def stored_values(variable, dtype):
  """A variable's values as tf_opt_ops.reference stores them (bfloat16 as bits)."""
  import numpy as np

  value = variable.numpy()
  return value.view(np.uint16) if dtype == "bfloat16" else value
