"""Our row-wise Adagrad reference (reference.sparse_rowwise_adagrad) against FBGEMM's own.

FBGEMM's CPU table-batched embedding (SplitTableBatchedEmbeddingBagsCodegen on the host,
OptimType.EXACT_ROWWISE_ADAGRAD) trains one table for 10 steps; the reference trains a copy
from the same table and accumulator. Each step looks up one index per bag with sum pooling, so
the gradient FBGEMM's backward sees for bag b is the output gradient's row b: the gradient rows
the reference gets, with their indices (duplicates included). After every step both tables and
both accumulators must agree to 1e-6 relative (float32 tables) or to the float16 rounding
(float16 tables). Each test prints its largest relative difference (`make fbgemm-tests` runs
pytest with -s).

Relative, for an accumulator, is element by element (its values are positive sums). For a table
it is to the table's scale, max |ours - theirs| / max |theirs|: both compute in float32 but sum
the mean square in different orders (ours in 32 lanes, FBGEMM's JIT kernel in 8, its loop in
one), so the accumulators differ in their last bits and each element's update by as much,
which a value that the update takes near zero turns into a large relative difference of that
element alone.

FBGEMM's CPU backward has two paths for float32 tables (docs/rowwise_adagrad.md): a JIT kernel
for a table of its own, which ignores weight decay, and a generic loop, which applies it and
runs for a table that several features share. The weight-decay modes are checked on the
generic path: the table is shared by two features, the second of which looks up nothing.

The last test backs the checkpoint conversion of a full Adagrad accumulator (its row mean):
FBGEMM's full Adagrad trains on the same gradients, and its accumulator's row means must be our
row-wise accumulator.
"""

import os

import numpy as np
import pytest
import torch
from fbgemm_gpu import split_table_batched_embeddings_ops_training as tbe_training
from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import ComputeDevice
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode
from fbgemm_gpu.tbe.config.optimizer_config import WeightDecayMode

ROWS, BATCH, STEPS = 48, 40, 10
TOUCHED = 16  # indices drawn from the first 16 rows: duplicates in every batch, rows untouched
# An epsilon large enough that putting it inside the square root would show.
LR, EPSILON, WEIGHT_DECAY = 0.05, 1e-3, 0.1
INITIAL_ACCUMULATOR = 0.1
FBGEMM_MODES = {
    "none": WeightDecayMode.NONE, "l2": WeightDecayMode.L2, "decoupled": WeightDecayMode.DECOUPLE
}
RTOL = {"float32": 1e-6, "float16": 2.0**-10}  # float16: a unit in the last place at [1, 2)
PRECISION = {"float32": SparseType.FP32, "float16": SparseType.FP16}


def batches(dim, seed):
  """STEPS (indices, gradient rows) pairs, one index and one float32 gradient row per bag."""
  rng = np.random.default_rng(seed)
  return [(rng.integers(0, TOUCHED,
                        BATCH).astype(np.int64), rng.uniform(-1.0, 1.0,
                                                             (BATCH, dim)).astype(np.float32))
          for _ in range(STEPS)]


class FbgemmTable:
  """One FBGEMM CPU embedding table trained with EXACT_ROWWISE_ADAGRAD.

  `shared`: the table serves two features (the generic backward loop); the second feature's
  bags are empty, so only the first one's gradient reaches the table.
  """

  def __init__(self, table, accum, *, weight_decay_mode, weight_decay, dtype, shared):
    rows, self.dim = table.shape
    self.features = 2 if shared else 1
    self.tbe = tbe_training.SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, self.dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
        feature_table_map=[0] * self.features, optimizer=OptimType.EXACT_ROWWISE_ADAGRAD,
        learning_rate=LR, eps=EPSILON, weight_decay=weight_decay,
        weight_decay_mode=FBGEMM_MODES[weight_decay_mode], pooling_mode=PoolingMode.SUM,
        weights_precision=PRECISION[dtype], output_dtype=SparseType.FP32, device="cpu")
    with torch.no_grad():
      self.tbe.split_embedding_weights()[0].copy_(torch.from_numpy(table))
      self.tbe.split_optimizer_states()[0][0].copy_(torch.from_numpy(accum))
    assert np.array_equal(self.table(), table) and np.array_equal(self.accumulator(), accum)

  def table(self):
    return self.tbe.split_embedding_weights()[0].detach().numpy().copy()

  def accumulator(self):
    return self.tbe.split_optimizer_states()[0][0].detach().numpy().copy()

  def step(self, indices, grad):
    batch = len(indices)
    # Bag b of the first feature holds indices[b]; the second feature's bags are empty.
    offsets = torch.cat([
        torch.arange(batch + 1, dtype=torch.int64),
        torch.full((batch * (self.features - 1),), batch, dtype=torch.int64)
    ])
    pooled = self.tbe(torch.from_numpy(indices), offsets)  # [batch, features * dim]
    pooled_grad = torch.zeros_like(pooled)
    pooled_grad[:, :self.dim] = torch.from_numpy(grad)
    pooled.backward(pooled_grad)


def relative_difference(ours, theirs):
  """The largest difference relative to each element (accumulators; to 1 where theirs is 0:
  an untouched row of an accumulator that starts at 0)."""
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  return float(np.max(np.abs(ours - theirs) / np.where(theirs == 0, 1.0, np.abs(theirs))))


def scaled_difference(ours, theirs):
  """The largest difference relative to the largest magnitude (tables)."""
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  return float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))


def train_both(reference, *, dim, dtype, weight_decay_mode, weight_decay, shared,
               reference_mode=None, seed=0, initial_accumulator=INITIAL_ACCUMULATOR):
  """Both trained from the same table: the largest relative difference of the tables and of
  the accumulators after each step."""
  rng = np.random.default_rng(100 + seed)
  table = rng.uniform(-1.0, 1.0, (ROWS, dim)).astype(dtype)
  accum = np.full(ROWS, initial_accumulator, np.float32)
  theirs = FbgemmTable(table, accum, weight_decay_mode=weight_decay_mode, weight_decay=weight_decay,
                       dtype=dtype, shared=shared)
  ours_table, ours_accum = table, accum
  table_diff, accum_diff = [], []
  for indices, grad in batches(dim, seed):
    theirs.step(indices, grad)
    ours_table, ours_accum = reference.sparse_rowwise_adagrad(
        ours_table, ours_accum, grad, indices, dtype, lr=LR, epsilon=EPSILON,
        weight_decay=weight_decay, weight_decay_mode=reference_mode or weight_decay_mode)
    table_diff.append(scaled_difference(ours_table, theirs.table()))
    accum_diff.append(relative_difference(ours_accum, theirs.accumulator()))
  # Untouched rows are left as they were by both.
  np.testing.assert_array_equal(ours_table[TOUCHED:], table[TOUCHED:])
  np.testing.assert_array_equal(theirs.table()[TOUCHED:], table[TOUCHED:])
  return table_diff, accum_diff


def report(name, table_diff, accum_diff):
  print(f"\nrow-wise Adagrad vs FBGEMM, {name}: max relative difference over {STEPS} steps: "
        f"table {max(table_diff):.3g}, accumulator {max(accum_diff):.3g}")


@pytest.mark.parametrize("dim", [24, 64])
@pytest.mark.parametrize("weight_decay_mode", ["none", "l2", "decoupled"])
def test_float32_table_generic_path(reference, weight_decay_mode, dim):
  table_diff, accum_diff = train_both(reference, dim=dim, dtype="float32",
                                      weight_decay_mode=weight_decay_mode,
                                      weight_decay=WEIGHT_DECAY, shared=True)
  report(f"float32, {weight_decay_mode}, dim {dim}", table_diff, accum_diff)
  assert max(table_diff) <= RTOL["float32"] and max(accum_diff) <= RTOL["float32"]


@pytest.mark.parametrize("initial_accumulator", [0.0, INITIAL_ACCUMULATOR])
@pytest.mark.parametrize("dim", [24, 64])
def test_float32_table_of_its_own(reference, dim, initial_accumulator):
  """FBGEMM's JIT kernel (a table of its own, no weight decay), what most users run; FBGEMM's
  accumulator starts at 0."""
  table_diff, accum_diff = train_both(reference, dim=dim, dtype="float32", weight_decay_mode="none",
                                      weight_decay=0.0, shared=False,
                                      initial_accumulator=initial_accumulator)
  report(f"float32, none, dim {dim}, JIT kernel, accumulator from {initial_accumulator}",
         table_diff, accum_diff)
  assert max(table_diff) <= RTOL["float32"] and max(accum_diff) <= RTOL["float32"]


@pytest.mark.parametrize("weight_decay_mode", ["l2", "decoupled"])
def test_fbgemm_jit_kernel_ignores_weight_decay(reference, weight_decay_mode):
  """Why the modes are checked on a shared table: FBGEMM 1.8's CPU JIT kernel gets a weight
  decay of 0, whatever the mode, so a float32 table of its own trains as with none."""
  table_diff, accum_diff = train_both(reference, dim=24, dtype="float32",
                                      weight_decay_mode=weight_decay_mode,
                                      weight_decay=WEIGHT_DECAY, shared=False,
                                      reference_mode="none")
  assert max(table_diff) <= RTOL["float32"] and max(accum_diff) <= RTOL["float32"]


@pytest.mark.parametrize("weight_decay_mode", ["none", "l2", "decoupled"])
def test_float16_table(reference, weight_decay_mode):
  """A float16 table: FBGEMM's CPU path computes in float32 and rounds to nearest when storing
  (its stochastic rounding is the GPU's); the accumulator stays float32."""
  table_diff, accum_diff = train_both(reference, dim=24, dtype="float16",
                                      weight_decay_mode=weight_decay_mode,
                                      weight_decay=WEIGHT_DECAY, shared=False)
  report(f"float16, {weight_decay_mode}, dim 24", table_diff, accum_diff)
  assert max(table_diff) <= RTOL["float16"] and max(accum_diff) <= RTOL["float32"]


@pytest.mark.parametrize("initial_accumulator", [0.0, INITIAL_ACCUMULATOR])
def test_row_mean_of_full_adagrad_accumulator_is_rowwise_accumulator(reference,
                                                                     initial_accumulator):
  """Why converting a full Adagrad accumulator to a row-wise one takes its row mean: from the
  same first value and the same gradients, the mean of each row of FBGEMM's full Adagrad
  (EXACT_ADAGRAD) accumulator is our row-wise accumulator."""
  dim = 24
  table = np.random.default_rng(7).uniform(-1.0, 1.0, (ROWS, dim)).astype(np.float32)
  tbe = tbe_training.SplitTableBatchedEmbeddingBagsCodegen(
      [(ROWS, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)], optimizer=OptimType.EXACT_ADAGRAD,
      learning_rate=LR, eps=EPSILON, pooling_mode=PoolingMode.SUM, device="cpu")
  full = tbe.split_optimizer_states()[0][0]
  assert tuple(full.shape) == (ROWS, dim)
  with torch.no_grad():
    tbe.split_embedding_weights()[0].copy_(torch.from_numpy(table))
    full.fill_(initial_accumulator)
  ours_table, ours_accum = table, np.full(ROWS, initial_accumulator, np.float32)
  for indices, grad in batches(dim, seed=3):
    pooled = tbe(torch.from_numpy(indices), torch.arange(len(indices) + 1, dtype=torch.int64))
    pooled.backward(torch.from_numpy(grad))
    ours_table, ours_accum = reference.sparse_rowwise_adagrad(ours_table, ours_accum, grad, indices,
                                                              "float32", lr=LR, epsilon=EPSILON)
  row_means = tbe.split_optimizer_states()[0][0].detach().numpy().astype(np.float64).mean(axis=1)
  difference = relative_difference(ours_accum, row_means)
  print(f"\nfull Adagrad's row means vs our row-wise accumulator, from {initial_accumulator}: "
        f"max relative difference {difference:.3g}")
  assert difference <= RTOL["float32"]


# ------------------------------------------------------------ FBGEMM's runs, recorded for our op
# Our op cannot run here (no TensorFlow in this venv), so FBGEMM's runs are recorded in
# tests/ops/data/fbgemm_rowwise_adagrad.npz, where tests/ops/test_rowwise_adagrad_fbgemm.py
# holds the op to them with this suite's tolerances; the test below keeps the recording equal to
# what FBGEMM computes now. To write it again:
#   "$(tools/fbgemm_venv.sh)" tests/fbgemm/test_rowwise_adagrad.py \
#       tests/ops/data/fbgemm_rowwise_adagrad.npz
RECORDING = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ops", "data",
                         "fbgemm_rowwise_adagrad.npz")
# (name, dtype, weight decay mode, weight decay, table shared by two features, first accumulator)
RECORDED_RUNS = [
    ("float32-none-generic", "float32", "none", WEIGHT_DECAY, True, INITIAL_ACCUMULATOR),
    ("float32-l2-generic", "float32", "l2", WEIGHT_DECAY, True, INITIAL_ACCUMULATOR),
    ("float32-decoupled-generic", "float32", "decoupled", WEIGHT_DECAY, True, INITIAL_ACCUMULATOR),
    ("float32-none-jit", "float32", "none", 0.0, False, 0.0),
    ("float16-l2-generic", "float16", "l2", WEIGHT_DECAY, False, INITIAL_ACCUMULATOR),
    ("float16-decoupled-generic", "float16", "decoupled", WEIGHT_DECAY, False, INITIAL_ACCUMULATOR),
]
RECORDED_DIM = 24


def record_runs():
  """{name/key: array}: each recorded run's first table and accumulator, its batches, and
  FBGEMM's touched rows and accumulator after every step (the other rows never change)."""
  arrays = {"hyper/lr_epsilon": np.array([LR, EPSILON], np.float64)}
  for k, (name, dtype, mode, weight_decay, shared, first) in enumerate(RECORDED_RUNS):
    rng = np.random.default_rng(200 + k)
    table = rng.uniform(-1.0, 1.0, (ROWS, RECORDED_DIM)).astype(dtype)
    accum = np.full(ROWS, first, np.float32)
    fbgemm = FbgemmTable(table, accum, weight_decay_mode=mode, weight_decay=weight_decay,
                         dtype=dtype, shared=shared)
    steps = batches(RECORDED_DIM, seed=20 + k)
    if dtype == "float16":
      # Our op takes the gradient in the table's dtype (TensorFlow's gradient of a float16
      # lookup is float16), FBGEMM in float32: the recorded gradients are float16 values.
      steps = [(indices, grad.astype(np.float16).astype(np.float32)) for indices, grad in steps]
    tables, accums = [], []
    for indices, grad in steps:
      fbgemm.step(indices, grad)
      tables.append(fbgemm.table()[:TOUCHED])
      accums.append(fbgemm.accumulator())
    assert np.array_equal(fbgemm.table()[TOUCHED:], table[TOUCHED:])
    arrays.update({
        f"{name}/table": table, f"{name}/accumulator": accum,
        f"{name}/weight_decay": np.array(weight_decay, np.float64),
        f"{name}/indices": np.stack([i for i, _ in steps]),
        f"{name}/grads": np.stack([g for _, g in steps]),
        f"{name}/touched_rows_after": np.stack(tables),
        f"{name}/accumulator_after": np.stack(accums)
    })
  return arrays


def test_recording_is_what_fbgemm_computes():
  with np.load(RECORDING) as recorded:
    assert sorted(recorded.files) == sorted(record_runs())
    for key, value in record_runs().items():
      assert recorded[key].dtype == value.dtype, key
      np.testing.assert_array_equal(recorded[key], value, err_msg=key)


if __name__ == "__main__":
  import sys
  os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
  np.savez_compressed(sys.argv[1], **record_runs())
  print(f"wrote {sys.argv[1]}")
