"""The matrix suite: the installed tf_opt_ops wheel on one TensorFlow version.

Runs in a fresh venv holding TensorFlow, the wheel and the extras of
tests/matrix/extras.txt for that TensorFlow minor (see there), e.g. from
`make matrix`. It never imports the source tree: this file takes python/ off
sys.path and fails the session when `tf_opt_ops` does not come from an
installed distribution. Its own pytest.ini makes tests/matrix the rootdir, so
tests/conftest.py is not loaded.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_PYTHON = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "python")
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _SOURCE_PYTHON]

import importlib.metadata  # noqa: E402

import pytest  # noqa: E402


def _installed_package_dir():
  """The directory of the installed tf_opt_ops, from its distribution's file list."""
  try:
    dist = importlib.metadata.distribution("tf_opt_ops")
  except importlib.metadata.PackageNotFoundError:
    pytest.exit(
        "matrix suite: tf_opt_ops is not installed in this Python "
        f"({sys.executable}); pip install the release wheel first.", returncode=4)
  init = next(
      (f for f in dist.files or () if str(f).replace("\\", "/") == "tf_opt_ops/__init__.py"), None)
  if init is None:
    pytest.exit("matrix suite: the installed tf_opt_ops distribution has no tf_opt_ops/__init__.py",
                returncode=4)
  return os.path.dirname(os.path.realpath(init.locate()))


def pytest_configure(config):
  import tf_opt_ops

  imported = os.path.dirname(os.path.realpath(tf_opt_ops.__file__))
  installed = _installed_package_dir()
  if imported != installed or imported.startswith(os.path.realpath(_SOURCE_PYTHON)):
    pytest.exit(
        f"matrix suite: tf_opt_ops was imported from {imported}, not from the installed "
        f"wheel at {installed}; run it where the source tree is not on sys.path.", returncode=4)


def pytest_report_header(config):
  import keras
  import tensorflow as tf

  import peer_runner

  return peer_runner.report_header("matrix",
                                   [f"tensorflow {tf.__version__}", f"keras {keras.__version__}"],
                                   ["tf-keras", "tensorflow-addons", "tensorflow-recommenders"])


@pytest.fixture(scope="session")
def flavors():
  import matrix_util

  return matrix_util.available_flavors()


def pytest_generate_tests(metafunc):
  # `flavor_name`: every flavor expected on this TensorFlow.
  if "flavor_name" in metafunc.fixturenames:
    import matrix_util

    metafunc.parametrize("flavor_name", matrix_util.EXPECTED_FLAVORS)


@pytest.fixture
def flavor(flavor_name):
  import matrix_util

  return matrix_util.flavor(flavor_name)
