"""The benchmark compares like with like: its composite lazy Adam (what Python
optimizers run today) and the fused op both compute what the reference computes."""

import os

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import bench
from tf_opt_ops import ops
from tf_opt_ops import reference

pytestmark = pytest.mark.slow


def test_composite_baseline_and_fused_op_match_the_reference():
  rng = np.random.default_rng(0)
  init = rng.standard_normal((50, 8)).astype(np.float32)
  fused = [tf.Variable(init), tf.Variable(tf.zeros((50, 8))), tf.Variable(tf.zeros((50, 8)))]
  composite = [tf.Variable(init), tf.Variable(tf.zeros((50, 8))), tf.Variable(tf.zeros((50, 8)))]
  want = [init, np.zeros_like(init), np.zeros_like(init)]
  hyper = dict(lr=0.01, beta1=0.9, beta2=0.999, epsilon=1e-7)
  for t in range(1, 4):
    indices = rng.integers(0, 50, 30)  # with duplicates
    grad = rng.standard_normal((30, 8)).astype(np.float32)
    powers = dict(beta1_power=0.9**t, beta2_power=0.999**t)
    ops.sparse_lazy_adam(*fused, grad, indices, lr=0.01, beta_1_power=0.9**t, beta_2_power=0.999**t)
    lr_t = reference.adam_step("float32", **hyper, **powers)["lr_t"]
    bench.composite_lazy_adam(*composite, tf.constant(grad), tf.constant(indices), lr_t, 0.9, 0.999,
                              1e-7)
    want = reference.sparse_lazy_adam(*want, grad, indices, "float32", **hyper, **powers)
  for f, c, w in zip(fused, composite, want):
    np.testing.assert_array_equal(f.numpy(), w)  # float32: the kernel's operations, bit for bit
    np.testing.assert_allclose(c.numpy(), w, rtol=1e-5, atol=1e-6)


def test_report_renders_every_case():
  case = {
      "fused": {"median_ms": 1.0, "min_ms": 0.9, "max_ms": 1.2},
      "composite": {"median_ms": 6.0, "min_ms": 5.0, "max_ms": 7.0}, "bytes": 40_000_000,
      "ops": {"fused": 10, "composite": 30}
  }
  report = {
      "machine": "test", "tf_version": tf.__version__,
      "bandwidth": {"1": {"median_gbs": 20.0}, "2": {"median_gbs": 40.0}},
      "fixed_cost": {"median_ms": 0.3, "min_ms": 0.2, "max_ms": 0.4},
      "lazy_adam": {"1,000×8, B=10": case}
  }
  table = bench.render(report)
  # 40 MB in 1 ms is 40 GB/s: 100% of the 40 GB/s limit; composite is 6x slower.
  assert "| 1,000×8, B=10 | 1 (0.9–1.2) | 6 (5–7) | — | 6.0× | — | 100% | 10 / 30 |" in table


def test_keras3_composite_baseline_trains_as_our_lazy_adam():
  import keras

  from tf_opt_ops import keras as k3_ops

  rng = np.random.default_rng(1)
  init = rng.standard_normal((50, 8)).astype(np.float32)
  tables = [keras.Variable(init), keras.Variable(init)]
  optimizers = [
      k3_ops.LazyAdam(learning_rate=0.01),
      bench.keras3_composite_lazy_adam(learning_rate=0.01)
  ]
  case = bench.AdamCase(50, 8, 30)
  steps = [bench._apply_gradients_step(o, t, case) for o, t in zip(optimizers, tables)]
  for _ in range(3):
    indices = tf.constant(rng.integers(0, 50, 30))  # with duplicates
    grad = tf.constant(rng.standard_normal((30, 8)).astype(np.float32))
    for step in steps:
      step(indices, grad)
  assert int(optimizers[1].iterations.numpy()) == 3
  assert not np.array_equal(tables[1].numpy(), init)
  np.testing.assert_allclose(tables[1].numpy(), tables[0].numpy(), rtol=1e-5, atol=1e-6)


def test_optimizer_level_table_renders_ours_against_the_composite_and_the_raw_op():
  timing = lambda ms: {"median_ms": ms, "min_ms": ms, "max_ms": ms}  # noqa: E731
  case = {
      "fused": timing(1.0), "composite": timing(6.0), "keras3_ours": timing(2.0),
      "keras3_composite": timing(8.0), "bytes": 40_000_000, "ops": {"fused": 10, "composite": 30}
  }
  report = {
      "machine": "test", "tf_version": tf.__version__,
      "bandwidth": {"1": {"median_gbs": 20.0}, "2": {"median_gbs": 40.0}},
      "lazy_adam": {"1,000,000×64, B=16,384": case}
  }
  table = bench.render(report)
  assert "| 1,000,000×64, B=16,384 | 2 (2–2) | 8 (8–8) | 4.00× | 50% | 100% | 2.00× |" in table
  assert "Fixed cost" not in table
  assert bench.optimizer_level(bench.AdamCase(1_000_000, 64, 16_384))
  assert not bench.optimizer_level(bench.AdamCase(100_000, 64, 16_384))


def _update_graph_op_types(optimizer, variables, grads):
  optimizer.build(variables)

  @tf.function
  def step():
    optimizer.apply_gradients(zip(grads, variables))

  return [op.type for op in step.get_concrete_function().graph.get_operations()]


def test_one_fused_op_per_variable_in_the_traced_update():
  import keras

  from tf_opt_ops import keras as flavor
  tables = [keras.Variable(np.zeros((100, 4), np.float32)) for _ in range(3)]
  grads = [
      tf.IndexedSlices(tf.ones((5, 4)), tf.constant([1, 2, 2, 7, 9]), tf.constant([100, 4]))
      for _ in tables
  ]
  for optimizer, op_type in ((flavor.LazyAdam(), "TfOptOps>ResourceSparseApplyLazyAdam"),
                             (flavor.ClippyAdagrad(), "TfOptOps>ResourceSparseApplyClippyAdagrad")):
    types = _update_graph_op_types(optimizer, tables, grads)
    assert types.count(op_type) == len(tables)
    # No composite path behind it: no gathers, scatters, dedup or dense passes over a table.
    assert not [
        t for t in types if t.startswith(("ResourceGather", "ResourceScatter", "Unique",
                                          "UnsortedSegment", "ResourceApply"))
    ], types
    # The only other write is the iteration increment (Keras 3 writes it with
    # AssignVariableOp or AssignAddVariableOp, depending on the context).
    assert types.count("AssignVariableOp") + types.count("AssignAddVariableOp") == 1, types


# ----------------------------------------------------------------- whole DLRM train step
TINY_DLRM = dict(cap=40, dim=4, batch=64, bottom=(8,), top=(8,))


def test_dlrm_tables_are_the_criteo_sizes_capped():
  from benchmarks import bench_e2e
  case = bench_e2e.DlrmCase(cap=1_000, dim=16, batch=4_096)
  assert len(case.rows) == 26
  assert max(case.cardinalities) == 10_131_227 and min(case.cardinalities) == 3
  assert case.rows[2] == 1_000 and case.rows[8] == 3  # capped, and kept below the cap
  assert bench_e2e.DlrmCase(cap=None, dim=16, batch=1).rows == bench_e2e.CRITEO_KAGGLE_ROWS


def test_every_dlrm_contender_trains_and_passes_the_first_step_check(tmp_path):
  from benchmarks import bench_e2e
  case = bench_e2e.DlrmCase(**TINY_DLRM)
  for flavor in bench_e2e.FLAVORS:
    result = bench_e2e.run_case(case, flavor, rounds=1, batches=2)
    assert result["checked"]
    assert list(result["contenders"]) == list(bench_e2e.CONTENDERS)
    for name, r in result["contenders"].items():
      assert r["step"]["median_ms"] > 0 and r["examples_per_s"] > 0, (flavor, name)
      assert r["x_floor"]["median_ms"] > 0, (flavor, name)
    floor = result["contenders"]["floor"]["x_floor"]
    assert floor["min_ms"] == floor["max_ms"] == 1.0
    report = {
        "machine": "test", "tf_version": tf.__version__, "cases": {case.label: {flavor: result}}
    }
    assert "| ours: MultiOptimizer(LazyAdam, ClippyAdagrad) |" in bench_e2e.render(report)
    bench_e2e.plot(report, tmp_path / f"{flavor}.png")
    assert (tmp_path / f"{flavor}.png").stat().st_size > 0


def test_the_first_step_check_rejects_a_wrong_update(monkeypatch):
  """The floor's SGD step is not Adam's: checked as Adam, it fails."""
  import pytest

  from benchmarks import bench_e2e
  monkeypatch.setitem(bench_e2e.CONTENDERS, "floor", ("SGD checked as Adam", "adam", "adam"))
  with pytest.raises(AssertionError, match="not the adam reference"):
    bench_e2e.run_case(bench_e2e.DlrmCase(**TINY_DLRM), "keras", rounds=1, batches=2,
                       contenders=("floor",))


def test_the_optimizer_run_checks_and_times_rowwise_adagrad_against_lazy_adam(
    tmp_path, monkeypatch):
  """`--optimizer rowwise_adagrad`: each flavor's process checks RowwiseAdagrad's first step on
  the tables (and LazyAdam's on the MLPs) against NumPy, then times it with LazyAdam's."""
  from benchmarks import bench_e2e
  python_dir = os.path.dirname(os.path.dirname(bench_e2e.__file__))
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([python_dir, os.environ.get("PYTHONPATH", "")]))
  case = bench_e2e.DlrmCase(**TINY_DLRM)
  monkeypatch.setattr(bench_e2e, "optimizer_cases", lambda quick: [case])
  bench_e2e.main(["--optimizer", "rowwise_adagrad", "--rounds", "1", "--out", str(tmp_path)])
  table = (tmp_path / "e2e_rowwise_adagrad.md").read_text()
  rows = [line for line in table.splitlines() if line.startswith(f"| {case.label} |")]
  got = [tuple(cell.strip() for cell in row.strip("|").split("|")[1:3]) for row in rows]
  want = [(flavor, label)
          for flavor in bench_e2e.FLAVORS
          for label in ("ours: LazyAdam", "ours: MultiOptimizer(RowwiseAdagrad, LazyAdam)")]
  assert got == want
  for row in rows:
    assert float(row.strip("|").split("|")[3].split()[0]) > 0, row


def test_the_first_step_check_rejects_lazy_adam_checked_as_rowwise_adagrad(monkeypatch):
  from benchmarks import bench_e2e
  monkeypatch.setitem(bench_e2e.OPTIMIZER_CONTENDERS, "rowwise_adagrad",
                      ("LazyAdam checked as RowwiseAdagrad", "rowwise_adagrad", "adam"))
  monkeypatch.setattr(
      bench_e2e, "make_contender", lambda name, flavor, model: bench_e2e.KerasOptimizerStep(
          bench_e2e._flavor_modules(flavor)[1].LazyAdam(**bench_e2e.ADAM)))
  with pytest.raises(AssertionError, match="not the rowwise_adagrad reference"):
    bench_e2e.run_case(bench_e2e.DlrmCase(**TINY_DLRM), "keras", rounds=1, batches=2,
                       contenders=("rowwise_adagrad",))


def test_dlrm_cases_too_big_for_one_process_split_into_groups_each_with_the_floor():
  from benchmarks import bench_e2e
  small = bench_e2e.DlrmCase(cap=200_000, dim=16, batch=4_096)
  assert small.contender_groups(24) == (tuple(bench_e2e.CONTENDERS),)
  uncapped = bench_e2e.DlrmCase(cap=None, dim=16, batch=4_096)
  assert uncapped.memory_estimate_gib() > 24  # all six in one process do not fit
  groups = uncapped.contender_groups(24)
  assert groups == bench_e2e.SPLIT_GROUPS
  assert all("floor" in group for group in groups)
  assert sorted({name for group in groups for name in group}) == sorted(bench_e2e.CONTENDERS)
  assert uncapped.contender_groups(4) is None


def test_grouped_dlrm_runs_merge_every_contender_against_its_own_floor(monkeypatch):
  from benchmarks import bench_e2e
  python_dir = os.path.dirname(os.path.dirname(bench_e2e.__file__))
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([python_dir, os.environ.get("PYTHONPATH", "")]))
  case = bench_e2e.DlrmCase(**TINY_DLRM)
  result = bench_e2e.run_in_groups(case, "keras", 1, bench_e2e.SPLIT_GROUPS)
  assert result["checked"]
  assert list(result["contenders"]) == list(bench_e2e.CONTENDERS)
  assert result["groups"] == [list(group) for group in bench_e2e.SPLIT_GROUPS]
  for name, r in result["contenders"].items():
    assert r["step"]["median_ms"] > 0 and r["x_floor"]["median_ms"] > 0, name
  # Keras 3: our LazyAdam also ran alone in a third process.
  assert result["alone"]["step"]["median_ms"] > 0 and result["alone"]["x_floor_across"] > 0
  report = {
      "machine": "test", "tf_version": tf.__version__, "cases": {case.label: {"keras": result}}
  }
  rendered = bench_e2e.render(report)
  assert "Run as (lazy_adam, multi, composite, floor) and (adam, keras_sgd, floor)" in rendered
  assert "keras, ours: LazyAdam alone in its process" in rendered
  assert "| ours alone, examples/s (× floor) |" in rendered


def test_xla_report_renders_every_variant():
  timing = lambda ms: {"median_ms": ms, "min_ms": ms, "max_ms": ms}  # noqa: E731
  table = bench.render_xla(
      {"1,000×8, B=10": {"fused": timing(2.0), "xla": timing(2.2), "xla_fallback": timing(20.0)}})
  assert "| 1,000×8, B=10 | 2 (2–2) | 2.2 (2.2–2.2) | 20 (20–20) | 1.10× | 10.0× |" in table


def test_features_at_a_given_size_times_every_feature_on_every_api_that_offers_it(tmp_path):
  """Each configuration in a subprocess of its own, at the size the options give."""
  import math

  bench.main([
      "--features", "--rows", "4000", "--dim", "8", "--batch", "256", "--rounds", "2", "--out",
      str(tmp_path)
  ])
  table = (tmp_path / "features_4000x8_b256.md").read_text()
  rows = [line for line in table.splitlines() if line.startswith("| ") and "×" in line]
  want = {(api, name) for name, (_, apis, _) in bench.FEATURES.items() for api in apis}
  case = bench.AdamCase(4000, 8, 256).label
  got = set()
  for row in rows:
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert len(cells) == 8, row
    assert cells[0] == case
    got.add((cells[1], cells[2]))
    # Stock Keras 3 cannot apply an IndexedSlices with loss_scale_factor; ours is timed.
    stock_fails = (cells[1], cells[2]) == ("keras3", "loss_scale_factor")
    assert cells[5].startswith("stock fails: ") == stock_fails, row
    for ratio in cells[6:7] if stock_fails else cells[6:]:
      value = float(ratio.rstrip("×"))
      assert math.isfinite(value) and value > 0, row
  assert got == want
  assert len(rows) == len(want)


def test_rowwise_mode_times_our_op_and_says_when_fbgemm_is_absent(tmp_path, monkeypatch):
  case = bench.AdamCase(1_000, 8, 64)
  monkeypatch.setattr(bench, "rowwise_cases", lambda quick: [case])
  monkeypatch.setattr(bench, "FBGEMM_PYTHON", str(tmp_path / "no_venv" / "python"))
  bench.main(["--rowwise", "--rounds", "2", "--out", str(tmp_path)])
  table = (tmp_path / "rowwise.md").read_text()
  (row,) = [line for line in table.splitlines() if line.startswith(f"| {case.label} |")]
  cells = [cell.strip() for cell in row.strip("|").split("|")]
  assert len(cells) == 9, row
  assert float(cells[1].split()[0]) > 0 and float(cells[3].split()[0]) > 0
  assert "FBGEMM not timed: no FBGEMM venv" in table
  assert cells[5:] == ["—"] * 4


def test_features_of_one_name_time_that_feature_only(tmp_path):
  bench.main([
      "--features", "--feature", "ClippyAdagrad weight_decay", "--rows", "4000", "--dim", "8",
      "--batch", "256", "--rounds", "2", "--out",
      str(tmp_path)
  ])
  table = (tmp_path / "features_4000x8_b256.md").read_text()
  rows = [line for line in table.splitlines() if line.startswith("| ") and "×" in line]
  assert [row.split("|")[2:4] for row in rows] == [[" keras3 ", " ClippyAdagrad weight_decay "],
                                                   [" tf_keras ", " ClippyAdagrad weight_decay "]]


def test_features_size_options_go_together():
  with pytest.raises(SystemExit):
    bench.main(["--feature", "use_ema"])
  with pytest.raises(SystemExit):
    bench.main(["--features", "--rows", "4000", "--dim", "8"])
  with pytest.raises(SystemExit):
    bench.main(["--rows", "4000", "--dim", "8", "--batch", "256"])


def test_features_report_keeps_the_other_rows_of_a_failed_configuration():
  timing = lambda ms: {"median_ms": ms, "min_ms": ms, "max_ms": ms}  # noqa: E731
  table = bench.render_features({
      "1,000×8, B=10": {
          "keras3": {
              "clipnorm": {
                  "bare": timing(2.0), "ours": timing(3.0), "stock": timing(30.0),
                  "ours_over_bare": 1.5, "stock_over_ours": 10.0
              },
              "use_ema": {"failed": "the subprocess failed (exit -9):"},
              "loss_scale_factor": {
                  "bare": timing(2.0), "ours": timing(2.2), "ours_over_bare": 1.1,
                  "stock_error": "stock fails: TypeError: IndexedSlices / float"
              },
          }
      }
  })
  assert ("| 1,000×8, B=10 | keras3 | loss_scale_factor | 2 (2–2) | 2.2 (2.2–2.2) | "
          "stock fails: TypeError: IndexedSlices / float | 1.10× | — |") in table
  timed = "| 1,000×8, B=10 | keras3 | clipnorm | 2 (2–2) | 3 (3–3) | 30 (30–30) | 1.50× | 10.0× |"
  assert timed in table
  assert "| 1,000×8, B=10 | keras3 | use_ema | the subprocess failed (exit -9): | | | | |" in table


def test_half_rows_times_every_op_against_the_same_rounds_bare_step():
  from benchmarks import bench_half_rows
  result = bench_half_rows.bench_half_rows(bench.AdamCase(64, 16, 8), rounds=2, dtype="float16")
  assert result["dtype"] == "float16" and result["rounds"] == 2
  for name in bench_half_rows.CASES:
    assert result[f"{name}_ms"] > 0, name
  assert {key for key in result if key.endswith("_over_bare")
         } == {f"{name}_over_bare" for name in bench_half_rows.CASES if name != "bare"}
