"""The programs outside the library (benchmarks/, demo/) import from the repository root,
as `python -m benchmarks.bench` and `python -m demo.recommender` run there."""

import sys

import common

sys.path.insert(0, common.ROOT)
