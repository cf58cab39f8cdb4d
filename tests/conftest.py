"""The test suite's shared setup; what tests share is in common.py.

Layout (one folder per layer of docs/design.md): ops/ (the kernels through the raw ops),
optimizers/ (each Keras flavor), routers/, distributed/ (strategies and clusters),
production/ (loader, SavedModel, serving, retraining), packaging/ (wheel, portability, the
CUDA build), programs/ (demo, benchmarks), docs/ (README and guide). matrix/ is a suite of
its own for the installed wheel on each TensorFlow version (`make matrix`), peers/ one for
the real TF Addons and Merlin Models in a venv of their own (`make peer-tests`), fbgemm/ one
for FBGEMM's CPU optimizers against our references (`make fbgemm-tests`).

Markers: `slow` (tens of seconds or more, or needs the wheel from `make wheel`) and
`cluster` (starts TensorFlow server processes); `make test-fast` leaves both out.
"""

import os
import sys

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TESTS_DIR)
sys.path.insert(0, os.path.join(os.path.dirname(TESTS_DIR), "python"))

import common  # noqa: E402  (after the path above)

# tests/matrix refuses the source tree this file puts on sys.path, tests/peers needs the
# peers' own venv (`make peer-tests`) and tests/fbgemm FBGEMM's (`make fbgemm-tests`): suites of
# their own, not part of this one.
collect_ignore = ["matrix", "peers", "fbgemm"]


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: takes tens of seconds or more, or needs the wheel")
  config.addinivalue_line("markers", "cluster: starts TensorFlow server processes")


@pytest.fixture
def run_python():
  """common.run_python: Python code in a fresh process with the test environment."""
  return common.run_python
