"""Op TfOptOps>ResourceSparseApplyRowwiseAdagrad against FBGEMM's own EXACT_ROWWISE_ADAGRAD.

FBGEMM cannot run beside TensorFlow here, so its CPU runs are recorded
(tests/ops/data/fbgemm_rowwise_adagrad.npz, written and kept equal to FBGEMM by
tests/fbgemm/test_rowwise_adagrad.py in `make fbgemm-tests`): a 48-row table, 10 steps of 40
indices from 16 rows (duplicates in every batch), every weight decay mode on FBGEMM's generic
CPU path, its JIT kernel, float16 tables. Our op trains the same table from the same
accumulator on the same batches; after every step its accumulator must agree with FBGEMM's to
1e-6 relative and its table to 1e-6 of the table's largest magnitude (float16: to the
storage's rounding), the tolerances of the FBGEMM suite (whose docstring says why a table is
compared to its scale).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops

RECORDING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                         "fbgemm_rowwise_adagrad.npz")
RTOL = {"float32": 1e-6, "float16": 2.0**-10}


def recorded_runs():
  with np.load(RECORDING) as recorded:
    arrays = {key: recorded[key] for key in recorded.files}
  names = sorted({key.split("/")[0] for key in arrays if key != "hyper"} - {"hyper"})
  return arrays, names


ARRAYS, RUNS = recorded_runs()


def relative_difference(ours, theirs):
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  return float(np.max(np.abs(ours - theirs) / np.where(theirs == 0, 1.0, np.abs(theirs))))


def scaled_difference(ours, theirs):
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  return float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))


def test_every_mode_and_path_is_recorded():
  assert len(RUNS) == 6
  for mode in ("none", "l2", "decoupled"):
    assert any(f"-{mode}-" in name for name in RUNS)


@pytest.mark.parametrize("index_dtype", [tf.int32, tf.int64])
@pytest.mark.parametrize("name", RUNS)
def test_op_agrees_with_fbgemm_every_step(name, index_dtype):
  run = {key.split("/", 1)[1]: value for key, value in ARRAYS.items() if key.startswith(name + "/")}
  dtype = run["table"].dtype.name
  lr, epsilon = ARRAYS["hyper/lr_epsilon"]
  mode = name.split("-")[1]
  var = tf.Variable(run["table"])
  accum = tf.Variable(run["accumulator"])
  touched = run["touched_rows_after"].shape[1]
  table_diff, accum_diff = [], []
  for step, (indices, grad) in enumerate(zip(run["indices"], run["grads"])):
    ops.sparse_rowwise_adagrad(var, accum, tf.constant(grad, dtype),
                               tf.constant(indices, index_dtype), lr=lr, epsilon=epsilon,
                               weight_decay=float(run["weight_decay"]), weight_decay_mode=mode)
    table_diff.append(scaled_difference(var.numpy()[:touched], run["touched_rows_after"][step]))
    accum_diff.append(relative_difference(accum.numpy(), run["accumulator_after"][step]))
    np.testing.assert_array_equal(var.numpy()[touched:], run["table"][touched:])
  print(f"\n{name}: op vs FBGEMM over {len(table_diff)} steps: table {max(table_diff):.3g}, "
        f"accumulator {max(accum_diff):.3g}")
  assert max(table_diff) <= RTOL[dtype], table_diff
  assert max(accum_diff) <= RTOL["float32"], accum_diff
