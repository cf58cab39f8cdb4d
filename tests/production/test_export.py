"""tf_opt_ops.export: what a module tracks, and versions under a TF Serving base path."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import export

import serving_runner


class Scorer(tf.Module):
  """A Keras 3 layer and a lookup table, read by one function."""

  def __init__(self):
    self.layer = keras.layers.Embedding(10, 2, embeddings_initializer="ones")
    self.layer.build((None,))
    self.remap = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant([1, 2], tf.int64),
                                            tf.constant([7, 8], tf.int64)), default_value=0)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int64)])
  def serve(self, ids):
    return tf.reduce_sum(self.layer(self.remap.lookup(ids)), axis=1)


def test_module_tracks_each_captured_variable_and_resource_once():
  scorer = Scorer()
  module = export.exportable(scorer, {"serve": scorer.serve})
  assert {id(r) for r in module.captured_resources
         } == {id(scorer.layer.embeddings.value),
               id(scorer.remap)}
  assert isinstance(scorer.layer.embeddings, keras.Variable)  # the wrapper itself is not tracked


@pytest.mark.slow
def test_export_with_a_table_serves_in_the_c_loader(tmp_path):
  scorer = Scorer()
  scorer.layer.embeddings.assign(np.arange(20, dtype=np.float32).reshape(10, 2))
  export.save(scorer, str(tmp_path / "serve"), {"serve": scorer.serve})
  (scores,) = serving_runner.run(serving_runner.build_runners()["plain"], str(tmp_path / "serve"),
                                 [("serve", {"ids": ("int64", [1, 2, 5])})])
  np.testing.assert_array_equal(scores, scorer.serve(tf.constant([1, 2, 5], tf.int64)))


def test_a_variable_outside_the_root_is_named():
  elsewhere = tf.Variable(1.0)
  module = tf.Module()
  serve = tf.function(lambda: elsewhere * 2.0, input_signature=[])
  with pytest.raises(ValueError, match=r"1 variable\(s\) or resource\(s\).*not tracked by"):
    export.exportable(module, {"serve": serve})


def test_versions_are_numbered_written_once_and_stale_staging_is_removed(tmp_path):
  scorer = Scorer()
  base = tmp_path / "model"
  assert export.versions(base) == []
  assert export.save_version(scorer, str(base), {"serve": scorer.serve}) == str(base / "1")
  (base / ".tmp-2-crashed").mkdir()  # what a killed writer leaves
  (base / "notes").mkdir()  # not a version: TF Serving ignores it, so do we
  assert export.save_version(scorer, str(base), {"serve": scorer.serve}) == str(base / "2")
  assert sorted(os.listdir(base)) == ["1", "2", "notes"]
  assert export.versions(base) == [1, 2]
  with pytest.raises(FileExistsError, match="version 2 already exists"):
    export.save_version(scorer, str(base), {"serve": scorer.serve}, version=2)
  restored = tf.saved_model.load(str(base / "2"))
  np.testing.assert_array_equal(restored.serve(tf.constant([1, 3], tf.int64)), [2.0, 2.0])
