"""The benchmark compares like with like: its composite lazy Adam (what Python
optimizers run today) and the fused op both compute what the reference computes."""

import numpy as np
import tensorflow as tf

from tf_opt_ops import bench, ops, reference


def test_composite_baseline_and_fused_op_match_the_reference():
  rng = np.random.default_rng(0)
  init = rng.standard_normal((50, 8)).astype(np.float32)
  fused = [tf.Variable(init), tf.Variable(tf.zeros((50, 8))), tf.Variable(tf.zeros((50, 8)))]
  composite = [tf.Variable(init), tf.Variable(tf.zeros((50, 8))), tf.Variable(tf.zeros((50, 8)))]
  want = [init, np.zeros_like(init), np.zeros_like(init)]
  hyper = dict(lr=0.01, beta1=0.9, beta2=0.999, epsilon=1e-7)
  for t in range(1, 4):
    indices = rng.integers(0, 50, 30)  # with duplicates
    grad = rng.standard_normal((30, 8)).astype(np.float32)
    powers = dict(beta1_power=0.9**t, beta2_power=0.999**t)
    ops.sparse_lazy_adam(*fused, grad, indices, lr=0.01, beta_1_power=0.9**t, beta_2_power=0.999**t)
    lr_t = reference.adam_step("float32", **hyper, **powers)["lr_t"]
    bench.composite_lazy_adam(*composite, tf.constant(grad), tf.constant(indices), lr_t, 0.9, 0.999,
                              1e-7)
    want = reference.sparse_lazy_adam(*want, grad, indices, "float32", **hyper, **powers)
  for f, c, w in zip(fused, composite, want):
    np.testing.assert_array_equal(f.numpy(), w)  # float32: the kernel's operations, bit for bit
    np.testing.assert_allclose(c.numpy(), w, rtol=1e-5, atol=1e-6)


def test_report_renders_every_case():
  case = {
      "fused": {"median_ms": 1.0, "min_ms": 0.9, "max_ms": 1.2},
      "composite": {"median_ms": 6.0, "min_ms": 5.0, "max_ms": 7.0}, "bytes": 40_000_000,
      "ops": {"fused": 10, "composite": 30}
  }
  report = {
      "machine": "test", "tf_version": tf.__version__,
      "bandwidth": {"1": {"median_gbs": 20.0}, "2": {"median_gbs": 40.0}},
      "fixed_cost": {"median_ms": 0.3, "min_ms": 0.2, "max_ms": 0.4},
      "lazy_adam": {"1,000×8, B=10": case}
  }
  table = bench.render(report)
  # 40 MB in 1 ms is 40 GB/s: 100% of the 40 GB/s limit; composite is 6x slower.
  assert "| 1,000×8, B=10 | 1 (0.9–1.2) | 6 (5–7) | — | 6.0× | — | 100% | 10 / 30 |" in table


def _update_graph_op_types(optimizer, variables, grads):
  optimizer.build(variables)

  @tf.function
  def step():
    optimizer.apply_gradients(zip(grads, variables))

  return [op.type for op in step.get_concrete_function().graph.get_operations()]


def test_one_fused_op_per_variable_in_the_traced_update():
  import keras  # pylint: disable=g-import-not-at-top
  from tf_opt_ops import keras as flavor  # pylint: disable=g-import-not-at-top
  tables = [keras.Variable(np.zeros((100, 4), np.float32)) for _ in range(3)]
  grads = [
      tf.IndexedSlices(tf.ones((5, 4)), tf.constant([1, 2, 2, 7, 9]), tf.constant([100, 4]))
      for _ in tables
  ]
  for optimizer, op_type in ((flavor.LazyAdam(), "TfOptOps>ResourceSparseApplyLazyAdam"),
                             (flavor.ClippyAdagrad(), "TfOptOps>ResourceSparseApplyClippyAdagrad")):
    types = _update_graph_op_types(optimizer, tables, grads)
    assert types.count(op_type) == len(tables)
    # No composite path behind it: no gathers, scatters, dedup or dense passes over a table.
    assert not [
        t for t in types if t.startswith(("ResourceGather", "ResourceScatter", "Unique",
                                          "UnsortedSegment", "ResourceApply"))
    ], types
    # The only other write is the iteration increment (Keras 3 writes it with
    # AssignVariableOp or AssignAddVariableOp, depending on the context).
    assert types.count("AssignVariableOp") + types.count("AssignAddVariableOp") == 1, types
