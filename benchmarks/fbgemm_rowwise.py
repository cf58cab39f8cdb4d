"""FBGEMM's CPU row-wise Adagrad step, timed for `benchmarks.bench --rowwise`.

    .venvs/fbgemm/bin/python -m benchmarks.fbgemm_rowwise CASES_JSON ROUNDS

Runs in the FBGEMM venv (tools/fbgemm_venv.sh: torch and fbgemm-gpu-cpu, no TensorFlow). Each
case is one float32 table on the host (SplitTableBatchedEmbeddingBagsCodegen, CPU,
EXACT_ROWWISE_ADAGRAD, sum pooling, one index per bag), trained on the same indices and
gradient rows as our op (`bench.distinct_row_arrays`). FBGEMM fuses the optimizer into the
backward, which needs a forward first: a step is timed as forward + backward, and the forward
alone in the same interleaved rounds, so the backward's share is their difference. Prints one
line, "FBGEMM_JSON " and the results.
"""

import json
import os
import sys

import torch
from fbgemm_gpu import split_table_batched_embeddings_ops_training as tbe_training
from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import ComputeDevice
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode

from benchmarks.bench import AdamCase
from benchmarks.bench import distinct_row_arrays
from benchmarks.bench import summary
from benchmarks.bench import time_interleaved


def bench_case(case, rounds, seed=0):
  tbe = tbe_training.SplitTableBatchedEmbeddingBagsCodegen(
      [(case.rows, case.dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
      optimizer=OptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01, eps=1e-8,
      pooling_mode=PoolingMode.SUM, weights_precision=SparseType.FP32, output_dtype=SparseType.FP32,
      device="cpu")
  offsets = torch.arange(case.batch + 1, dtype=torch.int64)
  steps = [(torch.from_numpy(indices), torch.from_numpy(grad))
           for indices, grad in distinct_row_arrays(case, seed)]

  def forward_backward(indices, grad):
    tbe(indices, offsets).backward(grad)

  def forward(indices, grad):
    with torch.no_grad():
      tbe(indices, offsets)

  times = time_interleaved({"forward_backward": forward_backward, "forward": forward}, steps,
                           rounds)
  result = {name: summary(samples) for name, samples in times.items()}
  backward = [fb - f for fb, f in zip(times["forward_backward"], times["forward"])]
  result["backward"] = summary(backward)
  return result


def main():
  cases = [AdamCase(**c) for c in json.loads(sys.argv[1])]
  rounds = int(sys.argv[2])
  torch.set_num_threads(os.cpu_count())
  out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cases": {}}
  for case in cases:
    out["cases"][case.label] = bench_case(case, rounds)
  print("FBGEMM_JSON " + json.dumps(out))


if __name__ == "__main__":
  main()
