"""Concurrent sparse updates of one table (Hogwild appliers, no use_locking) lose nothing.

Threads apply the same sparse update, to the same rows, many times at once,
while another thread reads the table densely (as Keras 3's Embedding does).
Every update uses the same gradient and hyperparameters, so the result does
not depend on their order: K concurrent updates must leave exactly the bits of
K updates in a row. A lost, torn or doubled row update changes them.
"""

import threading

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops

pytestmark = pytest.mark.slow

# Updates large enough to take milliseconds, so that concurrent ones overlap in time.
ROWS, DIM, THREADS, UPDATES_PER_THREAD = 200_000, 16, 4, 8
INDICES = np.concatenate([np.random.default_rng(2).permutation(ROWS),
                          np.arange(0, 1000)]).astype(np.int64)  # and duplicates


def _grad():
  rng = np.random.default_rng(0)
  return tf.constant(rng.standard_normal((len(INDICES), DIM)).astype(np.float32))


def _lazy_adam(variables, grad):
  ops.sparse_lazy_adam(*variables, grad, INDICES, lr=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                       beta_1_power=0.9, beta_2_power=0.999)


def _clippy(variables, grad):
  ops.sparse_clippy_adagrad(*variables, grad, INDICES, lr=0.1)


def _fresh(n):
  rng = np.random.default_rng(1)
  initial = rng.standard_normal((ROWS, DIM)).astype(np.float32)
  return [tf.Variable(initial)] + [tf.Variable(tf.fill((ROWS, DIM), 0.1)) for _ in range(n - 1)]


@pytest.mark.parametrize("update, num_variables", [(_lazy_adam, 3), (_clippy, 2)],
                         ids=["lazy_adam", "clippy"])
def test_concurrent_updates_all_land(update, num_variables):
  grad = _grad()
  step = tf.function(lambda variables: update(variables, grad))

  sequential = _fresh(num_variables)
  for _ in range(THREADS * UPDATES_PER_THREAD):
    step(sequential)

  concurrent = _fresh(num_variables)
  step(concurrent)  # trace once, outside the race
  start = threading.Barrier(THREADS + 1)
  done = threading.Event()
  errors = []

  def applier(n):
    start.wait()
    try:
      for _ in range(n):
        step(concurrent)
    except Exception as e:
      errors.append(e)

  def reader():
    start.wait()
    while not done.is_set():
      tf.reduce_sum(concurrent[0].read_value()).numpy()  # dense reads alias the buffer

  threads = [
      threading.Thread(target=applier, args=(UPDATES_PER_THREAD - (k == 0),))
      for k in range(THREADS)
  ]
  threads.append(threading.Thread(target=reader))
  for t in threads:
    t.start()
  for t in threads[:-1]:
    t.join(timeout=300)
  done.set()
  threads[-1].join(timeout=60)
  assert not errors, errors
  for ours, theirs in zip(concurrent, sequential):
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
