"""Inside XLA on this TensorFlow: the ops' XLA kernels, or the fallback where there are none.

TensorFlow ships XLA's FFI (the custom call API the kernels' targets are written
against) in its headers from 2.17 on: there, a jitted update is the fused op's
custom call and bit-identical to the update without XLA. Before 2.17 the XLA
library registers nothing and says why, and the optimizers run the same math in
standard ops, logging that once. Why: see docs/design.md, "XLA".
"""

import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import _core
from tf_opt_ops import _loader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import symbol_versions

OPTS = ["LazyAdam", "ClippyAdagrad", "RowwiseAdagrad"]
HAS_XLA_FFI = tuple(int(p) for p in tf.__version__.split(".")[:2]) >= (2, 17)


def test_xla_kernels_exactly_where_tensorflow_has_xlas_ffi():
  reason = _loader.xla_unavailable()
  if HAS_XLA_FFI:
    assert reason is None, reason
  else:
    assert reason is not None and "no XLA FFI" in reason, reason


def test_xla_library_loads_wherever_this_tensorflow_loads():
  # As the op library (test_library_portability.py): no newer symbol versions
  # than this TensorFlow's own library, no search path of its own.
  framework = os.path.join(tf.sysconfig.get_lib(), "libtensorflow_framework.so.2")
  assert symbol_versions.too_new(_loader.XLA_LIBRARY_PATH, framework) == {}
  dynamic = subprocess.run(["readelf", "-d", "--wide", _loader.XLA_LIBRARY_PATH], check=True,
                           capture_output=True, text=True).stdout
  assert not re.search(r"\((RUNPATH|RPATH)\)", dynamic), dynamic
  assert "libtensorflow_framework.so.2" in dynamic


def _train(jit, opt, steps=3):
  rng = np.random.default_rng(0)
  table = tf.Variable(rng.normal(size=(200, 8)).astype(np.float32))
  slots = [tf.Variable(np.zeros((200, 8), np.float32)) for _ in range(2)]
  if opt == "RowwiseAdagrad":  # one accumulator value per row
    slots[1] = tf.Variable(np.zeros((200,), np.float32))

  @tf.function(jit_compile=jit)
  def step(values, indices, t):
    grad = tf.IndexedSlices(values, indices, tf.constant([200, 8]))
    if opt == "LazyAdam":
      _core.lazy_adam(table, *slots, grad, lr=0.05, beta_1=0.9, beta_2=0.999, epsilon=1e-7, step=t)
    elif opt == "RowwiseAdagrad":
      _core.rowwise_adagrad(table, slots[1], grad, lr=0.05, epsilon=1e-3, weight_decay=0.1,
                            weight_decay_mode="l2")
    else:
      _core.clippy_adagrad(table, slots[0], grad, lr=0.05, epsilon=1e-7,
                           variable_relative_threshold=0.1, accumulator_relative_threshold=0.0,
                           absolute_threshold=1e-7, clip_accumulator_update=False,
                           use_standard_accumulator_update=False)

  for t in range(1, steps + 1):
    indices = rng.integers(0, 100, size=32)
    args = (tf.constant(rng.normal(size=(32, 8)),
                        tf.float32), tf.constant(indices, tf.int32), tf.constant(float(t)))
    step(*args)
  hlo = step.experimental_get_compiler_ir(*args)(stage="hlo") if jit else ""
  return [table.numpy(), slots[0].numpy(), slots[1].numpy()], hlo


@pytest.mark.parametrize("opt", OPTS)
def test_jitted_update_same_numbers_and_fallback_logged(opt):
  records = []
  handler = logging.Handler()
  handler.emit = records.append
  tf.get_logger().addHandler(handler)
  _core._logged.clear()
  try:
    want, _ = _train(False, opt)
    got, hlo = _train(True, opt)
  finally:
    tf.get_logger().removeHandler(handler)
  fallbacks = [r.getMessage() for r in records if "falling back" in r.getMessage()]
  if HAS_XLA_FFI:
    assert "custom_call_target=\"tf_opt_ops_sparse_" in hlo, hlo
    assert not fallbacks, fallbacks
    for a, b in zip(got, want):
      np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
  else:
    assert len(fallbacks) == 1 and "no XLA FFI" in fallbacks[0], fallbacks
    for a, b in zip(got, want):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bad_index_inside_xla_fails_or_writes_nothing():
  # With XLA kernels (2.17 on) the step fails naming the index, as outside XLA. The
  # standard-ops fallback before 2.17 cannot fail inside XLA (XLA has no data-dependent
  # errors): it writes nothing, where XLA alone would update the other rows and drop the bad one.
  from tf_opt_ops import ops
  for name in OPTS:
    tables = [tf.Variable(np.ones((10, 2), np.float32)) for _ in range(3)]
    if name == "RowwiseAdagrad":  # one accumulator value per row
      tables[1] = tf.Variable(np.ones((10,), np.float32))

    @tf.function(jit_compile=True)
    def step(indices, tables=tables, name=name):
      grad = tf.IndexedSlices(tf.ones((2, 2)), indices, tf.constant([10, 2]))
      if name == "LazyAdam":
        if HAS_XLA_FFI:
          ops.sparse_lazy_adam(*tables, grad.values, indices, beta_1_power=0.9, beta_2_power=0.999)
        else:
          _core.lazy_adam(*tables, grad, lr=0.05, beta_1=0.9, beta_2=0.999, epsilon=1e-7, step=1)
      elif name == "RowwiseAdagrad":
        _core.rowwise_adagrad(tables[0], tables[1], grad, lr=0.05, epsilon=1e-3, weight_decay=0.1,
                              weight_decay_mode="decoupled")
      else:
        _core.clippy_adagrad(tables[0], tables[1], grad, lr=0.05, epsilon=1e-7,
                             variable_relative_threshold=0.1, accumulator_relative_threshold=0.0,
                             absolute_threshold=1e-7, clip_accumulator_update=False,
                             use_standard_accumulator_update=False)

    if HAS_XLA_FFI:
      # TensorFlow 2.17's XLA runtime reports a custom call's error as internal.
      with pytest.raises((tf.errors.InvalidArgumentError, tf.errors.InternalError),
                         match=re.escape("indices[1] = 10 is not in [0, 10)")):
        step(tf.constant([1, 10]))
    else:
      step(tf.constant([1, 10]))
    for table in tables:
      np.testing.assert_array_equal(table.numpy(), np.ones(table.shape), err_msg=name)
    step(tf.constant([1, 9]))  # and good indices still update
    assert not np.array_equal(tables[0].numpy(), np.ones((10, 2))), name


if __name__ == "__main__":  # without pytest: python tests/matrix/test_xla_kernels.py
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  test_xla_kernels_exactly_where_tensorflow_has_xlas_ffi()
  test_xla_library_loads_wherever_this_tensorflow_loads()
  for name in OPTS:
    test_jitted_update_same_numbers_and_fallback_logged(name)
  test_bad_index_inside_xla_fails_or_writes_nothing()
  print(f"TensorFlow {tf.__version__}: XLA kernels "
        f"{'registered' if HAS_XLA_FFI else 'absent: ' + str(_loader.xla_unavailable())}; ok")
