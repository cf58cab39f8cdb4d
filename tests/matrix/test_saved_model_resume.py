"""A SavedModel whose tf.function train step runs our optimizers resumes in a fresh process.

The test trains a few steps, saves, and trains on; a fresh process (this file
run as a script) imports tf_opt_ops, loads the SavedModel and runs the same
further steps: every model and optimizer variable equals the uninterrupted run.
"""

import json
import sys

import numpy as np
import tensorflow as tf

ROWS, USED, DIM, BATCH = 30, 24, 4, 16
SAVED_STEPS, MORE_STEPS = 3, 3


def batches(first, count):
  out = []
  for step in range(first, first + count):
    rng = np.random.default_rng(step)
    ids = rng.integers(0, USED, size=(BATCH, 3)).astype(np.int32)
    ids[1] = ids[0]
    out.append((ids, rng.normal(size=(BATCH, 1)).astype(np.float32)))
  return out


def optimizer_variables(optimizer):
  variables = optimizer.variables
  return list(variables() if callable(variables) else variables)


def make_trainer(flavor):
  import matrix_util

  k = flavor.keras
  k.utils.set_random_seed(0)
  model = matrix_util.embedding_model(k, ROWS, DIM, 3)
  lazy = flavor.module.LazyAdam(learning_rate=0.05)
  clippy = flavor.module.ClippyAdagrad(learning_rate=0.3, export_clipping_factors=True)

  class Trainer(tf.Module):

    def __init__(self):
      super().__init__()
      self.model, self.lazy, self.clippy = model, lazy, clippy
      self.emb = model.get_layer("emb").trainable_variables
      self.out = model.get_layer("out").trainable_variables
      if not flavor.optimizer_v2:  # OptimizerV2 creates its slots in the first step
        lazy.build(self.emb)
        clippy.build(self.out)

    @tf.function(
        input_signature=[tf.TensorSpec([None, 3], tf.int32),
                         tf.TensorSpec([None, 1], tf.float32)])
    def train(self, ids, labels):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(self.model(ids) - labels))
      grads = tape.gradient(loss, self.emb + self.out)
      self.lazy.apply_gradients(zip(grads[:1], self.emb))
      self.clippy.apply_gradients(zip(grads[1:], self.out))
      return loss

    @tf.function(input_signature=[])
    def state(self):
      variables = (list(self.model.weights) + optimizer_variables(self.lazy) +
                   optimizer_variables(self.clippy))
      return {f"v{i:02d}": tf.convert_to_tensor(v) for i, v in enumerate(variables)}

  return Trainer()


def as_lists(state):
  return {key: np.asarray(value).tolist() for key, value in state.items()}


def test_saved_train_step_resumes_in_a_fresh_process(flavor, tmp_path):
  import matrix_util

  trainer = make_trainer(flavor)
  for ids, labels in batches(0, SAVED_STEPS):
    trainer.train(ids, labels)
  path = str(tmp_path / "saved")
  tf.saved_model.save(trainer, path)
  graph = trainer.train.get_concrete_function().graph.as_graph_def()
  ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
  assert "TfOptOps>ResourceSparseApplyLazyAdam" in ops and ("TfOptOps>ResourceApplyClippyAdagrad"
                                                            in ops), sorted(
                                                                o for o in ops if "TfOptOps" in o)
  before = as_lists(trainer.state())
  for ids, labels in batches(SAVED_STEPS, MORE_STEPS):
    trainer.train(ids, labels)
  want = as_lists(trainer.state())

  result = matrix_util.run_script(__file__, [path], tmp_path)
  got = json.loads(matrix_util.last_line(result, "STATE"))
  assert sorted(got) == sorted(want) and len(want) > 4
  assert sum(want[key] != before[key] for key in want) >= 6  # trained on after the save
  for key in want:
    np.testing.assert_array_equal(np.array(got[key]), np.array(want[key]), err_msg=key)


def _continue(path):
  import tf_opt_ops  # noqa: F401

  loaded = tf.saved_model.load(path)
  for ids, labels in batches(SAVED_STEPS, MORE_STEPS):
    loaded.train(ids, labels)
  print("STATE", json.dumps(as_lists(loaded.state())))


if __name__ == "__main__":
  _continue(sys.argv[1])
