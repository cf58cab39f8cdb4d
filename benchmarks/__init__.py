"""Benchmarks of tf_opt_ops (docs/benchmarks.md), outside the library and its wheel.

Run from the repository root, with the library importable (`make bench` puts python/ on
PYTHONPATH): `python -m benchmarks.bench` (the ops), `python -m benchmarks.bench_e2e` (a
whole train step), `python -m benchmarks.bench_hogwild` (concurrent appliers).
"""
