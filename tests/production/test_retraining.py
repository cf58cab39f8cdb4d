"""The guide's retraining job (docs/production.md), run as written, killed by PID at several points.

The job (docs/production.md, "A retraining job") loads the latest training state, trains on
a day of data, keeps the state and writes the next version of the inference
export into a TF Serving model base path. A kill at any point must leave only
complete versions (the latest served by the C loader without the library), and
rerunning the job, then the next day's, must give the versions an uninterrupted
sequence of runs gives, bit for bit.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import export

import common
import serving_runner

pytestmark = pytest.mark.slow

GUIDE = os.path.join(common.ROOT, "docs", "production.md")
SERVE_IDS = np.array([[1, 2], [3, 999], [500, 7]], np.int32)
# The points where a run is killed: where its hook pauses it (see HOOKS).
KILL_POINTS = ["training", "checkpoint", "export_started", "export_written", "version_published"]

# Runs the job as a script after installing a hook that, at one point, writes
# the marker file and waits to be killed.
HOOKS = """
import os, runpy, sys, time
point, marker, job = sys.argv[1:4]
sys.argv = [job] + sys.argv[4:]

def pause():
  with open(marker, "w") as f:
    f.write(str(os.getpid()))
  time.sleep(600)

import keras
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management

if point == "training":  # after a few optimizer steps, nothing saved
  fit = keras.Model.fit
  class Pause(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
      if batch == 3:
        pause()
  keras.Model.fit = lambda self, *a, **k: fit(self, *a, callbacks=[Pause()], **k)
elif point == "checkpoint":  # checkpoint data written, its index not yet
  record = checkpoint_management.update_checkpoint_state_internal
  def paused_record(*args, **kwargs):
    pause()
    return record(*args, **kwargs)
  checkpoint_management.update_checkpoint_state_internal = paused_record
elif point in ("export_started", "export_written"):  # before or after writing the export
  save = tf.saved_model.save
  def paused_save(*args, **kwargs):
    if point == "export_started":
      pause()
    save(*args, **kwargs)
    pause()
  tf.saved_model.save = paused_save
elif point == "version_published":  # the version renamed into place, the job not yet done
  rename = os.rename
  def paused_rename(source, destination):
    rename(source, destination)
    pause()
  os.rename = paused_rename
runpy.run_path(job, run_name="__main__")
"""


def readme_job():
  with open(GUIDE, encoding="utf-8") as f:
    blocks = re.findall(r"^```python\n(.*?)^```$", f.read(), flags=re.S | re.M)
  (job,) = [block for block in blocks if "\n# retrain.py STATE_DIR" in block]
  return job


def run_job(work, day, kill_at=None):
  """One run of the job on day `day`'s data; with `kill_at`, SIGKILLed at that point."""
  args = [str(work / "state"), str(work / "models"), str(work.parent / f"day{day}.npz")]
  env = common.python_env(TF_CPP_MIN_LOG_LEVEL="3")
  if kill_at is None:
    subprocess.run([sys.executable, str(work.parent / "retrain.py"), *args], env=env, check=True,
                   capture_output=True, timeout=300)
    return
  marker = work / "paused"
  job = subprocess.Popen(
      [sys.executable, "-c", HOOKS, kill_at,
       str(marker),
       str(work.parent / "retrain.py"), *args], env=env, stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE)
  try:
    deadline = time.monotonic() + 300
    while not marker.exists():
      assert job.poll() is None, f"the job ended before {kill_at}: {job.stderr.read()[-2000:]}"
      assert time.monotonic() < deadline, f"the job never reached {kill_at}"
      time.sleep(0.2)
    os.kill(job.pid, signal.SIGKILL)
    assert job.wait(timeout=60) == -signal.SIGKILL
  finally:
    if job.poll() is None:
      job.kill()
      job.wait()
    job.stderr.close()
  marker.unlink()


def served(runners, models, version):
  """Version `version`'s predictions in the C loader, which never loads the library."""
  (scores,) = serving_runner.run(runners["plain"], str(models / str(version)),
                                 [("serve", {"ids": ("int32", SERVE_IDS)})])
  return scores


@pytest.fixture(scope="module")
def runners():
  return serving_runner.build_runners()


@pytest.fixture(scope="module")
def days(tmp_path_factory):
  """The job script and three days of data; the state and versions after day 1; and the
  predictions of versions 2 and 3 from uninterrupted runs."""
  folder = tmp_path_factory.mktemp("retraining")
  (folder / "retrain.py").write_text(readme_job())
  for day in (1, 2, 3):
    rng = np.random.default_rng(day)
    ids = rng.integers(0, 1000, (512, 2)).astype(np.int32)
    labels = (np.sin(ids[:, 0] / 50.0) + np.cos(ids[:, 1] / 70.0)).astype(np.float32)
    np.savez(folder / f"day{day}.npz", ids=ids, labels=labels)
  first = folder / "after_day1"
  first.mkdir()
  run_job(first, 1)
  uninterrupted = folder / "uninterrupted"
  shutil.copytree(first, uninterrupted)
  run_job(uninterrupted, 2)
  run_job(uninterrupted, 3)
  return dict(folder=folder, first=first, versions=export.versions(uninterrupted / "models"),
              models=uninterrupted / "models")


def test_uninterrupted_runs_publish_one_version_each(runners, days):
  assert days["versions"] == [1, 2, 3]
  assert sorted(os.listdir(days["models"])) == ["1", "2", "3"]  # no temporary folder left
  scores = [served(runners, days["models"], version) for version in (1, 2, 3)]
  assert not np.array_equal(scores[1], scores[2])  # day 3 trained the model further


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_a_killed_run_leaves_the_last_version_and_the_rerun_resumes(runners, days, kill_at):
  work = days["folder"] / kill_at
  shutil.copytree(days["first"], work)
  run_job(work, 2, kill_at=kill_at)

  # What the kill left on disk: the state the job was killed in.
  state = os.path.basename(tf.train.latest_checkpoint(str(work / "state")))
  staged = [name for name in os.listdir(work / "models") if name.startswith(".tmp-")]
  written = [os.path.exists(work / "models" / name / "saved_model.pb") for name in staged]
  assert (state, written) == {
      "training": ("ckpt-1", []),
      "checkpoint": ("ckpt-1", []),
      "export_started": ("ckpt-2", [False]),
      "export_written": ("ckpt-2", [True]),
      "version_published": ("ckpt-2", []),
  }[kill_at]
  if kill_at == "checkpoint":  # the data was written, the index still names ckpt-1
    assert os.path.exists(work / "state" / "ckpt-2.index")
  published = kill_at == "version_published"
  assert export.versions(work / "models") == ([1, 2] if published else [1])
  latest = export.versions(work / "models")[-1]
  np.testing.assert_array_equal(served(runners, work / "models", latest),
                                served(runners, days["models"], latest))

  run_job(work, 2)  # the rerun after the crash
  run_job(work, 3)  # and the next day's run
  assert export.versions(work / "models") == [1, 2, 3]
  assert sorted(os.listdir(work / "models")) == ["1", "2", "3"]
  for version in (2, 3):
    np.testing.assert_array_equal(served(runners, work / "models", version),
                                  served(runners, days["models"], version))
