"""The demo: its ratings loader on good and bad files, and a tiny run end to end."""

import json
import os
import re

import numpy as np
import pytest

from demo import recommender

import common

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write(tmp_path, text, name="ratings.csv"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def test_ratings_are_remapped_and_thresholded(tmp_path):
  path = write(
      tmp_path, "userId,movieId,rating,timestamp\n"
      "10,500,4.0,1\n10,7,3.5,2\n99,500,5,3\n\n42,7,1.0,4\n")
  data = recommender.load_ratings(path)
  np.testing.assert_array_equal(data.users, [0, 0, 1, 2])
  np.testing.assert_array_equal(data.items, [0, 1, 0, 1])
  np.testing.assert_array_equal(data.labels, [1, 0, 1, 0])
  assert (data.num_users, data.num_items) == (3, 2)


def test_columns_may_come_in_any_order(tmp_path):
  data = recommender.load_ratings(write(tmp_path, "rating,timestamp,movieId,userId\n4.5,0,3,8\n"))
  assert data.labels.tolist() == [1.0] and data.num_users == 1


@pytest.mark.parametrize("text,message", [
    ("", "the file is empty"),
    ("userId,movieId,rating,timestamp\n", "no rating rows after the header"),
    ("user,movieId,rating\n1,2,3\n", ":1: missing column(s) userId"),
    ("userId,movieId,rating,timestamp\n1,2,4,0\nabc,2,4,0\n",
     ":3: userId and movieId must be integers, got 'abc' and '2'"),
    ("userId,movieId,rating,timestamp\n1,2,high,0\n", ":2: rating must be a number, got 'high'"),
    ("userId,movieId,rating,timestamp\n1,2\n", ":2: 2 fields, the header has 4"),
])
def test_bad_ratings_files_name_the_file_and_line(tmp_path, text, message):
  path = write(tmp_path, text)
  with pytest.raises(recommender.DataError) as error:
    recommender.load_ratings(path)
  assert str(error.value).startswith(path)
  assert message in str(error.value)


def test_missing_file_is_a_clear_error(tmp_path, capsys):
  assert recommender.main(["--data", str(tmp_path / "nope.csv"), "--out", str(tmp_path)]) == 2
  assert "nope.csv: cannot open" in capsys.readouterr().err


def test_planted_clicks_are_skewed_and_learnable():
  data = recommender.planted_clicks(5_000, 1_000, 50_000, seed=1)
  assert 0.1 < data.labels.mean() < 0.6
  # Popularity skew: the top 1% of items take a large share of the examples.
  counts = np.sort(np.bincount(data.items, minlength=1_000))[::-1]
  assert counts[:10].sum() > 0.2 * len(data.items)


def test_roc_auc_against_pairs():
  labels = np.array([0, 0, 1, 1, 0, 1], np.float32)
  scores = np.array([0.1, 0.4, 0.35, 0.8, 0.8, 0.2])
  pairs = [(p, n) for p in scores[labels == 1] for n in scores[labels == 0]]
  expected = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs])
  assert recommender.roc_auc(labels, scores) == pytest.approx(expected)


def check_curve(run, evaluations):
  """Held-out points against training seconds: increasing time, the last one is the table's."""
  seconds = [p[0] for p in run["curve"]]
  assert len(run["curve"]) == evaluations
  assert seconds[0] == 0 and all(b > a for a, b in zip(seconds, seconds[1:]))
  assert run["curve"][-1][1:] == [run["auc"], run["log_loss"]]
  assert run["curve"][-1][2] < run["curve"][0][2]  # it learned: held-out log loss went down


@pytest.mark.slow
@pytest.mark.parametrize("optimizer,table_optimizer,features",
                         [("lazy_adam", "LazyAdam", False),
                          ("rowwise_adagrad", "RowwiseAdagrad", False),
                          ("lazy_adam", "LazyAdam", True)])
def test_demo_end_to_end_on_a_tiny_configuration(tmp_path, capsys, optimizer, table_optimizer,
                                                 features):
  """The table and plot, with each table optimizer; with --features, a third run: LazyAdam with
  global_clipnorm, weight decay and EMA on the tables, its final point the averages that fit
  writes into the model."""
  out = tmp_path / "out"
  code = recommender.main([
      "--users", "2000", "--items", "500", "--examples", "60000", "--epochs", "2", "--batch-size",
      "512", "--embedding-dim", "8", "--learning-rate", "0.01", "--optimizer", optimizer, "--out",
      str(out)
  ] + (["--features"] if features else []))
  assert code == 0
  printed = capsys.readouterr().out
  assert ("| run | best AUC (at s) | final AUC | best log loss (at s) | final log loss "
          "| mean step (ms) | examples/s | speedup vs Adam |") in printed
  assert f"plot: {out / 'demo.png'}" in printed
  with open(out / "results.json") as f:
    result = json.load(f)
  router, *featured, adam = result["runs"]
  assert result["optimizer"] == optimizer
  assert router["name"] == f"tf_opt_ops MultiOptimizer ({table_optimizer} + ClippyAdagrad)"
  assert adam["name"] == "Keras Adam"
  assert [r["name"] for r in featured] == ([recommender.FEATURES_RUN] if features else [])
  assert "global_clipnorm=1.0, weight_decay=0.004, use_ema=True" in recommender.FEATURES_RUN
  for run in (router, *featured, adam):
    assert set(run) == {
        "name", "auc", "log_loss", "best_auc", "best_auc_seconds", "best_log_loss",
        "best_log_loss_seconds", "mean_step_ms", "examples_per_second", "curve"
    }
    trained = run["curve"][1:]
    assert run["best_auc"] == max(p[1] for p in trained) >= run["auc"]
    assert run["best_log_loss"] == min(p[2] for p in trained) <= run["log_loss"]
    assert [run["best_auc_seconds"], run["best_auc"]] in [p[:2] for p in trained]
    assert [run["best_log_loss_seconds"], run["best_log_loss"]] in [[p[0], p[2]] for p in trained]
    assert run["mean_step_ms"] > 0 and run["examples_per_second"] > 0
    assert 0 < run["log_loss"] < 1
    check_curve(run, evaluations=1 + 2 * 4)  # at the start, then 4 per epoch
  assert router["auc"] > 0.6, router  # planted data: clearly better than chance
  for run in featured:
    # Its final model is the EMA (momentum 0.99) of ~200 steps, which lags the variables here.
    assert run["auc"] > 0.55, run
  with open(out / "demo.png", "rb") as f:
    assert f.read(8) == PNG_MAGIC
  assert os.path.getsize(out / "demo.png") > 10_000


def test_features_need_keras_or_tf_keras_on_one_device(capsys):
  for argv in (["--flavor", "legacy"], ["--strategy", "parameter-server"]):
    with pytest.raises(SystemExit):
      recommender.parse_args(["--features", *argv])
    assert "--features needs --flavor keras or tf_keras on one device" in capsys.readouterr().err
  assert recommender.parse_args(["--features", "--flavor", "tf_keras"]).features


def test_cluster_strategies_need_a_tf_keras_flavor(capsys):
  with pytest.raises(SystemExit):
    recommender.parse_args(["--strategy", "parameter-server", "--flavor", "keras"])
  assert "needs --flavor tf_keras or legacy" in capsys.readouterr().err
  assert recommender.parse_args(["--strategy", "multi-worker"]).flavor == "tf_keras"


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("strategy", ["parameter-server", "multi-worker"])
def test_demo_on_a_localhost_cluster(tmp_path, strategy):
  """The demo as `make demo ARGS="--strategy ..."` runs it: the table, and no task left behind."""
  out = tmp_path / "out"
  proc = common.run_python(None, "-m", "demo.recommender", "--strategy", strategy, "--users",
                           "1000", "--items", "300", "--examples", "20000", "--epochs", "1",
                           "--evals-per-epoch", "2", "--batch-size",
                           "512", "--embedding-dim", "8", "--learning-rate", "0.01", "--out",
                           str(out), cwd=common.ROOT, timeout=400)
  assert "| run | best AUC (at s) | final AUC |" in proc.stdout
  pids = [int(p) for p in re.search(r"PIDs ([\d, ]+)", proc.stdout).group(1).split(", ")]
  assert len(pids) == (4 if strategy == "parameter-server" else 2)
  for pid in pids:  # every task it started has exited (and was reaped)
    assert not os.path.exists(f"/proc/{pid}"), pid
  with open(out / "results.json") as f:
    result = json.load(f)
  assert result["strategy"] == strategy and result["flavor"] == "tf_keras"
  for run in result["runs"]:
    check_curve(run, evaluations=1 + 2)


def test_best_and_final_leave_out_the_untrained_start():
  points = [(0.0, 0.5, 0.69), (1.0, 0.61, 0.60), (2.0, 0.59, 0.58), (3.0, 0.58, 0.62)]
  assert recommender.best_and_final(points) == {
      "auc": 0.58, "log_loss": 0.62, "best_auc": 0.61, "best_auc_seconds": 1.0,
      "best_log_loss": 0.58, "best_log_loss_seconds": 2.0
  }
