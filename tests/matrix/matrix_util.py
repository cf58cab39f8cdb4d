"""What the matrix suite's tests and worker scripts share: the flavors on this TensorFlow.

Imported by the tests (through conftest.py) and by the scripts they run in fresh
processes; imports the installed tf_opt_ops, never the source tree.
"""

import dataclasses
import importlib
import os
import subprocess
import sys
import textwrap
from typing import Any

import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

TF_MINOR = tuple(int(x) for x in tf.__version__.split(".")[:2])
# TensorFlow 2.16 made `keras` Keras 3 and moved Keras 2 to `tf_keras`; on 2.15
# tf.keras is the keras 2.15 package, and there is no Keras 3 flavor.
HAS_KERAS3 = TF_MINOR >= (2, 16)
EXPECTED_FLAVORS = ("keras", "tf_keras", "legacy") if HAS_KERAS3 else ("tf_keras", "legacy")


def keras2():
  """The Keras 2 package of this TensorFlow: tf_keras, or keras 2.15 (tf.keras) on 2.15."""
  return importlib.import_module("tf_keras" if HAS_KERAS3 else "keras")


@dataclasses.dataclass(frozen=True)
class Flavor:
  """One Keras optimizer API as the tests drive it."""
  name: str
  module: Any  # tf_opt_ops.keras, .tf_keras or .legacy
  keras: Any  # the Keras package its models use

  @property
  def optimizer_v2(self):
    return self.name == "legacy"

  def stock_adam(self, **kwargs):
    """The flavor's own Adam (tf_keras': jit_compile off, as ours)."""
    if self.name == "keras":
      return self.keras.optimizers.Adam(**kwargs)
    if self.name == "tf_keras":
      return self.keras.optimizers.Adam(jit_compile=False, **kwargs)
    return self.keras.optimizers.legacy.Adam(**kwargs)

  def variable(self, value, name):
    if self.name == "keras":
      return self.keras.Variable(value, name=name)
    return tf.Variable(value, name=name)

  def build(self, optimizer, variables):
    """Creates the optimizer's state now (OptimizerV2 creates slots at the first step)."""
    if self.optimizer_v2:
      optimizer._create_all_weights(variables)
    else:
      optimizer.build(variables)


def flavor(name):
  """The Flavor `name`; ImportError where it is not available here."""
  module = importlib.import_module(f"tf_opt_ops.{name}")
  keras = importlib.import_module("keras") if name == "keras" else keras2()
  return Flavor(name, module, keras)


def available_flavors():
  return [flavor(name) for name in EXPECTED_FLAVORS]


def run_python(code, cwd, env=None, timeout=600):
  """Runs `code` (dedented) in a fresh Python without the source tree on its path."""
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
  full_env.pop("PYTHONPATH", None)
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=full_env,
                        capture_output=True, text=True, timeout=timeout)


def run_script(script, args, cwd, env=None, timeout=600):
  """Runs a script of this directory in a fresh Python (its directory on sys.path)."""
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
  full_env.pop("PYTHONPATH", None)
  return subprocess.run([sys.executable, os.path.join(HERE, script), *args], cwd=cwd, env=full_env,
                        capture_output=True, text=True, timeout=timeout)


def last_line(result, prefix):
  """The payload of the last stdout line starting with `prefix` (fails with stderr)."""
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
  lines = [line for line in result.stdout.splitlines() if line.startswith(prefix)]
  assert lines, result.stdout[-3000:] + result.stderr[-3000:]
  return lines[-1][len(prefix):].strip()


def embedding_model(k, rows, dim, ids_per_example):
  """A Keras `k` model: `ids_per_example` int32 ids through a `rows` x `dim` Embedding ("emb"),
  flattened into one Dense output ("out")."""
  return k.Sequential([
      k.Input(shape=(ids_per_example,), dtype="int32"),
      k.layers.Embedding(rows, dim, name="emb"),
      k.layers.Flatten(),
      k.layers.Dense(1, name="out"),
  ])
