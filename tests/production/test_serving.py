"""SavedModels in TensorFlow's C API loader, the path TF Serving takes.

serving/saved_model_runner (built here with Bazel) loads an export with
TF_LoadSessionFromSavedModel and runs tensors through the session; a second
build links the ops and kernels statically, as a TF Serving build does. The
exports are the guide's recipe (tf_opt_ops.export.save), for every flavor, training with
LazyAdam and with RowwiseAdagrad.
"""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import _loader

import serving_runner

pytestmark = pytest.mark.slow

ROOT = serving_runner.ROOT
FLAVORS = ("keras", "legacy", "tf_keras")
# The optimizers the guide's Ranker trains with, and the fused op each one's train step runs.
OPTIMIZER_OPS = {
    "LazyAdam": "ResourceSparseApplyLazyAdam",
    "RowwiseAdagrad": "ResourceSparseApplyRowwiseAdagrad",
}
BATCHES = [([1, 2, 2], [1.0, 0.0, 0.0]), ([3, 1], [0.5, -1.0]), ([2, 7, 7, 7], [1.0, 1.0, 0.0,
                                                                                2.0])]
SERVE_IDS = [1, 2, 3, 7, 9]


@pytest.fixture(scope="module")
def runners():
  return serving_runner.build_runners()


def readme_ranker_block():
  """The guide's SavedModel example (docs/production.md: the block that defines Ranker)."""
  with open(os.path.join(ROOT, "docs", "production.md"), encoding="utf-8") as f:
    blocks = re.findall(r"^```python\n(.*?)^```$", f.read(), flags=re.S | re.M)
  (block,) = [block for block in blocks if "class Ranker(tf.Module)" in block]
  return block


def run_runner(runner, export_dir, runs, library=None):
  """serving_runner.run with the Ranker's inputs: int32 `ids`, float32 `labels`."""
  typed = [
      (key,
       {name: ("int32" if name == "ids" else "float32", values)
        for name, values in feeds.items()})
      for key, feeds in runs
  ]
  return serving_runner.run(runner, export_dir, typed, library)


@pytest.fixture(scope="module",
                params=[(flavor, optimizer) for optimizer in OPTIMIZER_OPS for flavor in FLAVORS],
                ids=lambda param: "-".join(param))
def exported(request):
  """The README's example with one optimizer of one flavor: its exports, and Python's
  numbers for two more steps of the live model and of the reloaded training export."""
  flavor, optimizer = request.param
  code = readme_ranker_block()
  assert "tf_opt_ops.keras.LazyAdam(" in code
  namespace = {}
  exec(code.replace("tf_opt_ops.keras.LazyAdam(", f"tf_opt_ops.{flavor}.{optimizer}("), namespace)
  ranker, folder = namespace["ranker"], namespace["folder"]
  served = ranker.serve(SERVE_IDS).numpy()
  reloaded = tf.saved_model.load(os.path.join(folder, "train"))
  reloaded_losses = [reloaded.train(*batch).numpy() for batch in BATCHES[1:]]
  losses = [ranker.train(*batch).numpy() for batch in BATCHES[1:]]
  np.testing.assert_array_equal(reloaded_losses, losses)
  np.testing.assert_array_equal(reloaded.serve(SERVE_IDS), ranker.serve(SERVE_IDS))
  return dict(train=os.path.join(folder, "train"), serve=os.path.join(folder, "serve"),
              op=OPTIMIZER_OPS[optimizer], served=served, losses=losses,
              trained=ranker.serve(SERVE_IDS).numpy())


def training_runs():
  return [("train", dict(ids=ids, labels=labels)) for ids, labels in BATCHES[1:]
         ] + [("serve", dict(ids=SERVE_IDS))]


def test_inference_export_serves_without_the_library(runners, exported):
  # The plain program never loads the library, and the export needs none of it.
  (served,) = run_runner(runners["plain"], exported["serve"], [("serve", dict(ids=SERVE_IDS))])
  np.testing.assert_array_equal(served, exported["served"])


def test_training_export_names_the_missing_op(runners, exported):
  error = run_runner(runners["plain"], exported["train"], [("serve", dict(ids=SERVE_IDS))])
  assert "TF_LoadSessionFromSavedModel failed" in error
  assert f"Op type not registered 'TfOptOps>{exported['op']}'" in error


def test_training_export_trains_after_tf_load_library(runners, exported):
  *losses, trained = run_runner(runners["plain"], exported["train"], training_runs(),
                                library=_loader.LIBRARY_PATH)
  np.testing.assert_array_equal(np.concatenate(losses), exported["losses"])
  np.testing.assert_array_equal(trained, exported["trained"])


def test_training_export_trains_with_the_ops_linked_in(runners, exported):
  *losses, trained = run_runner(runners["with_ops"], exported["train"], training_runs())
  np.testing.assert_array_equal(np.concatenate(losses), exported["losses"])
  np.testing.assert_array_equal(trained, exported["trained"])


def test_plain_keras_module_export_is_what_breaks_the_c_loader(runners, tmp_path):
  # Why export.save exists: tf.saved_model.save of the module itself writes each
  # Keras 3 variable twice, and the C loader restores the copy no function reads.
  namespace = {}
  exec(readme_ranker_block(), namespace)
  ranker = namespace["ranker"]
  tf.saved_model.save(ranker, str(tmp_path / "train"), signatures={"train": ranker.train})
  error = run_runner(runners["plain"], str(tmp_path / "train"),
                     training_runs()[:1], library=_loader.LIBRARY_PATH)
  assert "Could not find variable" in error
