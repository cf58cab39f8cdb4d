"""Huge pages for the tables of CPU sparse updates (tf_opt_ops/platform/huge_pages.h).

A table's buffer is collapsed into 2 MiB pages once it has stayed for 4 sparse
updates; a variable whose collapsed buffer was replaced (here by a dense
assign, as a Keras constraint does every step) must then stay twice as long.
The counts come from the process's AnonHugePages, in a fresh process: no other
test's variables or NumPy arrays (which ask for huge pages themselves) count.
"""

import json

import numpy as np
import pytest

import common

pytestmark = pytest.mark.slow

PYTHON_DIR = common.PYTHON_DIR

_UPDATES = """
import json
import tensorflow as tf
from tf_opt_ops import ops

def huge_mib():
  with open("/proc/self/smaps_rollup") as f:
    return next(int(l.split()[1]) for l in f if l.startswith("AnonHugePages:")) / 1024

rows, dim = 2**20, 16  # 64 MiB per table, above the 32 MiB threshold
var, m, v = (tf.Variable(tf.random.uniform((rows, dim), seed=k)) for k in range(3))
indices = tf.random.uniform((4096,), maxval=rows, dtype=tf.int64, seed=7)
grad = tf.ones((4096, dim))
power = [1.0]

def update():
  power[0] *= 0.9
  ops.sparse_lazy_adam(var, m, v, grad, indices, beta_1_power=power[0], beta_2_power=power[0])

def updates_until_collapse(most):
  start = huge_mib()
  for k in range(1, most + 1):
    update()
    if huge_mib() - start >= 48:
      return k, huge_mib() - start
  return None, huge_mib() - start

result = {"first": updates_until_collapse(12)}
var.assign(var + 1.0)  # a dense write: var gets a new buffer
result["after_new_buffer"] = updates_until_collapse(12)
checksum = tf.reduce_sum(var).numpy()
print(json.dumps(dict(result, finite=bool(tf.math.is_finite(checksum)))))
"""


def _run(**env_overrides):
  run = common.run_python(_UPDATES, env=env_overrides, timeout=300)
  return json.loads(run.stdout.strip().splitlines()[-1])


def _transparent_huge_pages_mode():
  with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
    return f.read().split("[")[1].split("]")[0]


def test_tables_collapse_after_four_updates_and_a_replaced_buffer_waits_twice_as_long():
  result = _run()
  assert result["finite"]
  if _transparent_huge_pages_mode() == "never":
    # The advice is refused; the updates are unaffected.
    assert result["first"][0] is None and result["after_new_buffer"][0] is None
    return
  updates, mib = result["first"]
  # The 4th update collapses var, m and v: 3 x 64 MiB less the unaligned ends.
  assert updates == 4 and 3 * 60 <= mib <= 3 * 64 + 8, result
  # The new buffer of var (m and v stay collapsed) collapses at the 8th update.
  updates, mib = result["after_new_buffer"]
  assert updates == 8 and 48 <= mib <= 64 + 8, result


def test_huge_pages_off_by_environment():
  result = _run(TF_OPT_OPS_HUGE_PAGES="0")
  assert result["finite"]
  assert result["first"][0] is None and result["after_new_buffer"][0] is None
  assert np.isclose(result["first"][1], 0.0, atol=16)
