"""The FBGEMM suite: FBGEMM's own CPU embedding optimizers judge our NumPy references.

Runs in .venvs/fbgemm (tools/fbgemm_venv.sh, `make fbgemm-tests`): PyTorch's CPU build and
fbgemm-gpu-cpu (tests/fbgemm/requirements.txt), NumPy, pytest; no TensorFlow. Our reference,
python/tf_opt_ops/reference.py, imports nothing but NumPy and is loaded by its file path
(importing the package would import TensorFlow). Its own pytest.ini makes tests/fbgemm the
rootdir, so tests/conftest.py is not loaded; the main suite ignores this folder.
"""

import importlib.metadata
import importlib.util
import os

import pytest

REFERENCE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python",
    "tf_opt_ops", "reference.py")

if importlib.util.find_spec("fbgemm_gpu") is None or importlib.util.find_spec("torch") is None:
  pytest.exit(
      "fbgemm suite: torch and fbgemm_gpu are not installed in this Python: run `make "
      "fbgemm-tests` (tools/fbgemm_venv.sh makes .venvs/fbgemm with them).", returncode=4)


def load_reference():
  """python/tf_opt_ops/reference.py as a module of its own, by its path."""
  spec = importlib.util.spec_from_file_location("tf_opt_ops_reference", REFERENCE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def pytest_report_header(config):
  versions = [
      f"{dist} {importlib.metadata.version(dist)}" for dist in ("torch", "fbgemm-gpu-cpu", "numpy")
  ]
  return [f"fbgemm: {', '.join(versions)}", f"fbgemm: reference from {REFERENCE}"]


@pytest.fixture(scope="session")
def reference():
  return load_reference()
