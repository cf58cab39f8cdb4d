"""convert_checkpoint between a per-element Adagrad accumulator (Keras' and tf_keras' `Adagrad`,
ClippyAdagrad) and RowwiseAdagrad's [rows] one, on every flavor: the converted values (row
means; repetition over the row), the restore, and the step after it against
reference.sparse_rowwise_adagrad from the converted state.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import checkpoints
from tf_opt_ops import reference

import common

ROWS, COLS = 64, 12
LR = 0.1
TOL = dict(rtol=1e-6, atol=1e-7)


def _variables(flavor, shapes=((ROWS, COLS), (COLS,)), seed=0):
  rng = np.random.default_rng(seed)
  values = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
  if flavor == "keras":
    import keras
    return [keras.Variable(v, name=f"w{k}") for k, v in enumerate(values)]
  return [tf.Variable(v, name=f"w{k}") for k, v in enumerate(values)]


def _gradients(step, variables):
  """A sparse gradient (duplicate rows included) for the table, dense ones for the rest:
  [(values, indices or None)]."""
  rng = np.random.default_rng(100 + step)
  table, *rest = variables
  indices = rng.integers(0, table.shape[0], 40)
  return [(rng.normal(size=(40,) + tuple(table.shape[1:])).astype(np.float32), indices)
         ] + [(rng.normal(size=tuple(v.shape)).astype(np.float32), None) for v in rest]


def _apply(opt, variables, gradients):
  grads = [
      tf.IndexedSlices(tf.constant(g), tf.constant(i), tf.constant(list(v.shape))) if i is not None
      else tf.constant(g) for (g, i), v in zip(gradients, variables)
  ]
  opt.apply_gradients(zip(grads, variables))


def _train(opt, variables, first, last):
  for step in range(first, last):
    _apply(opt, variables, _gradients(step, variables))


def _stock_adagrad(flavor):
  """The Adagrad each flavor replaces, with a nonzero initial accumulator (Keras' default)."""
  if flavor == "keras":
    import keras
    return keras.optimizers.Adagrad(learning_rate=LR, initial_accumulator_value=0.1)
  import tf_keras
  optimizers = tf_keras.optimizers.legacy if flavor == "legacy" else tf_keras.optimizers
  return optimizers.Adagrad(learning_rate=LR, initial_accumulator_value=0.1)


def _accumulators(opt, variables):
  """The accumulator of each of `variables`, as NumPy float64."""
  if hasattr(opt, "get_slot"):
    slots = [opt.get_slot(v, "accumulator") for v in variables]
  else:  # built on `variables` in this order
    slots = opt._accumulators
  return [np.asarray(s.numpy(), np.float64) for s in slots]


def _build(opt, variables):
  if hasattr(opt, "_create_all_weights"):  # OptimizerV2: restored slots are made here
    opt._create_all_weights(variables)
  else:
    opt.build(variables)


def _restored(opt, variables, path):
  status = tf.train.Checkpoint(variables=variables, optimizer=opt).restore(path)
  _build(opt, variables)
  status.assert_consumed()
  return opt


def _row_means(full):
  return full.reshape(len(full), -1).mean(axis=1).astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("flavor", common.FLAVORS)
@pytest.mark.parametrize("source", ["adagrad", "clippy"])
def test_a_full_accumulator_converts_to_row_means_and_trains_on(flavor, source, tmp_path):
  api = common.flavor_module(flavor)
  opt = _stock_adagrad(flavor) if source == "adagrad" else api.ClippyAdagrad(learning_rate=LR)
  variables = _variables(flavor)
  _train(opt, variables, 1, 3)
  full = _accumulators(opt, variables)
  assert [a.shape for a in full] == [(ROWS, COLS), (COLS,)]
  assert full[0].std() > 0  # the rows' elements differ, so the mean is not any one of them
  path = tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(tmp_path / "full"))

  rowwise_path = str(tmp_path / "rowwise")
  assert checkpoints.convert_checkpoint(path, rowwise_path, rowwise_accumulator=True) == 2
  resumed_variables = _variables(flavor, seed=1)
  resumed = _restored(api.RowwiseAdagrad(learning_rate=LR), resumed_variables, rowwise_path)
  restored = _accumulators(resumed, resumed_variables)
  np.testing.assert_array_equal(restored[0], _row_means(full[0]))
  np.testing.assert_array_equal(restored[1], full[1].astype(np.float32))  # 1-D: a row per value

  # The next step is the row-wise rule from the converted state.
  weights = [np.asarray(v.numpy()) for v in variables]
  for v, w in zip(resumed_variables, weights):
    np.testing.assert_array_equal(v.numpy(), w)
  gradients = _gradients(3, resumed_variables)
  _apply(resumed, resumed_variables, gradients)
  got_accumulators = _accumulators(resumed, resumed_variables)
  for var, got_accum, w, accum, (g, indices) in zip(resumed_variables, got_accumulators, weights,
                                                    restored, gradients):
    indices = np.arange(len(w)) if indices is None else indices
    want_w, want_accum = reference.sparse_rowwise_adagrad(w, accum.astype(np.float32), g, indices,
                                                          "float32", lr=LR, epsilon=1e-8)
    np.testing.assert_allclose(var.numpy(), want_w, **TOL)
    np.testing.assert_allclose(got_accum, want_accum, **TOL)


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_a_rowwise_accumulator_converts_to_repeated_rows_and_restores_into_adagrad(
    flavor, tmp_path):
  api = common.flavor_module(flavor)
  opt = api.RowwiseAdagrad(learning_rate=LR, initial_accumulator_value=0.1)
  variables = _variables(flavor)
  _train(opt, variables, 1, 3)
  rowwise = _accumulators(opt, variables)
  assert [a.shape for a in rowwise] == [(ROWS,), (COLS,)]
  path = tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(tmp_path / "rowwise"))

  full_path = str(tmp_path / "full")
  assert checkpoints.convert_checkpoint(path, full_path, rowwise_accumulator=False) == 2
  adagrad_variables = _variables(flavor, seed=1)
  adagrad = _restored(_stock_adagrad(flavor), adagrad_variables, full_path)
  restored = _accumulators(adagrad, adagrad_variables)
  np.testing.assert_array_equal(restored[0], np.repeat(rowwise[0][:, None], COLS, axis=1))
  np.testing.assert_array_equal(restored[1], rowwise[1])
  before = [np.asarray(v.numpy()) for v in adagrad_variables]
  _train(adagrad, adagrad_variables, 3, 4)
  after = _accumulators(adagrad, adagrad_variables)
  assert (after[0] >= restored[0]).all() and (after[0] > restored[0]).any()  # it added to them
  assert any((v.numpy() != w).any() for v, w in zip(adagrad_variables, before))


@pytest.mark.parametrize("flavor", common.FLAVORS)
@pytest.mark.parametrize("to_rowwise", [True, False])
def test_an_unconverted_accumulator_is_refused_with_the_conversion_to_run(
    flavor, to_rowwise, tmp_path):
  """A per-element accumulator restored into RowwiseAdagrad, or a row-wise one into
  ClippyAdagrad, does not train on the wrong state: the error names the conversion."""
  api = common.flavor_module(flavor)
  variables = _variables(flavor)
  opt = _stock_adagrad(flavor) if to_rowwise else api.RowwiseAdagrad(learning_rate=LR)
  _train(opt, variables, 1, 2)
  path = tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(tmp_path / "saved"))
  resumed_variables = _variables(flavor, seed=1)
  resumed = (api.RowwiseAdagrad if to_rowwise else api.ClippyAdagrad)(learning_rate=LR)
  conversion = rf"convert_checkpoint\(path, new_path, rowwise_accumulator={to_rowwise}\)"
  with pytest.raises(ValueError, match=conversion):
    tf.train.Checkpoint(variables=resumed_variables, optimizer=resumed).restore(path)
    _train(resumed, resumed_variables, 2, 3)
  # No step ran from the wrong state: the table holds the checkpoint's values or, where the
  # error came before they were assigned (legacy), its own.
  table = resumed_variables[0].numpy()
  assert any(
      np.array_equal(table, want.numpy()) for want in (variables[0], _variables(flavor, seed=1)[0]))


def test_tf_keras_asks_for_the_shape_of_a_variable_it_cannot_tell(tmp_path):
  """tf_keras' object graph does not link an accumulator to its variable: with two variables of
  the same number of rows, the error names the argument that says which."""
  api = common.flavor_module("tf_keras")
  variables = _variables("tf_keras", shapes=((ROWS, COLS), (ROWS, 3)))
  opt = api.RowwiseAdagrad(learning_rate=LR)
  _train(opt, variables, 1, 2)
  rowwise = _accumulators(opt, variables)
  path = tf.train.Checkpoint(variables=variables, optimizer=opt).save(str(tmp_path / "rowwise"))
  with pytest.raises(ValueError, match="pass variable_shapes="):
    checkpoints.convert_checkpoint(path, str(tmp_path / "out"), rowwise_accumulator=False)
  keys = checkpoints.accumulators(path)
  shapes = {key: [ROWS, COLS if k == 0 else 3] for k, key in enumerate(keys)}
  checkpoints.convert_checkpoint(path, str(tmp_path / "out"), rowwise_accumulator=False,
                                 variable_shapes=shapes)
  reader = tf.train.load_checkpoint(str(tmp_path / "out"))
  for k, key in enumerate(keys):
    np.testing.assert_array_equal(reader.get_tensor(key),
                                  np.repeat(rowwise[k][:, None], shapes[key][1], axis=1))


def test_rowwise_accumulator_refuses_an_accumulator_dtype(tmp_path):
  path = tf.train.Checkpoint(v=tf.Variable([1.0])).save(str(tmp_path / "plain"))
  with pytest.raises(ValueError, match="takes no accumulator_dtype"):
    checkpoints.convert_checkpoint(path, str(tmp_path / "out"), rowwise_accumulator=True,
                                   accumulator_dtype="bfloat16")
  with pytest.raises(ValueError, match="holds no Adagrad accumulators"):
    checkpoints.convert_checkpoint(path, str(tmp_path / "out"), rowwise_accumulator=True)
