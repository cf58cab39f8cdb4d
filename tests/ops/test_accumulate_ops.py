"""Gradient accumulation on a sparse gradient's rows (ops ResourceSparseAccumulateRows and
ResourceSparseTakeWindowGradient) against a NumPy restatement of their docs.

Each addition is rounded to the accumulator's dtype, in order, as a scatter-add adds; the
window's average is the held rows plus the last micro-step's values over the steps, and
taking it clears the window's rows. Bits are compared (-0.0 included). Why: see
docs/optimizers.md, "Keras features at sparse cost".
"""

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops

ROWS, DIM = 11, 5
DTYPES = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float32": np.float32,
    "float64": np.float64,
}
# Micro-steps of a window: duplicates within a step (row 3 thrice), rows named again by a
# later step (3, 7), rows a step names once; rows 6 and 10 are never named.
WINDOW = [[3, 0, 3, 7, 3], [7, 1, 7, 2], [9, 3, 5, 4, 3, 8]]
UNTOUCHED_ROWS = [6, 10]


def _values(rng, n, dtype):
  return (3.0 * rng.standard_normal((n, DIM))).astype(DTYPES[dtype])


def _bits(array):
  array = np.asarray(array)
  return array.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[array.dtype.itemsize])


def _accumulate_reference(acc, ids, count, indices, values):
  """The accumulator, row ids and count after ResourceSparseAccumulateRows (the ids when
  they fit; else None: they are a set, checked as one)."""
  acc, ids = acc.copy(), ids.copy()
  written = set()
  for i, row in enumerate(indices):
    # With no ids held the accumulator is 0: each row's first value is written as it is.
    acc[row] = values[i] if count == 0 and row not in written else acc[row] + values[i]
    written.add(row)
  if count + len(indices) > len(ids):
    return acc, None, len(set(ids[:count].tolist()) | set(indices.tolist()))
  ids[count:count + len(indices)] = indices
  return acc, ids, count + len(indices)


def _window_reference(acc, ids, count, indices, values, steps):
  """{row: average} of ResourceSparseTakeWindowGradient, and the accumulator after it."""
  held = set(ids[:count].tolist())
  zero = np.zeros(acc.shape[1], acc.dtype)
  average = {}
  for row in held | set(indices.tolist()):
    positions = [i for i, r in enumerate(indices) if r == row]
    first = values[positions[0]] if positions else zero
    total = acc[row] + first if row in held else first
    for i in positions[1:]:
      total = total + values[i]
    average[row] = total / acc.dtype.type(steps)
  acc = acc.copy()
  acc[sorted(held)] = 0
  return average, acc


def _window_variables(dtype, index_dtype, rng):
  acc = tf.Variable(tf.zeros((ROWS, DIM), tf.as_dtype(DTYPES[dtype])))
  initial_ids = rng.integers(0, ROWS, ROWS).astype(index_dtype)  # unread beyond the count
  return acc, tf.Variable(initial_ids), tf.Variable(np.zeros((), index_dtype))


def _numpy(variable):
  return np.asarray(variable.numpy())


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_window_is_the_references_bit_for_bit(dtype, index_dtype, mode):
  """Two windows of WINDOW's micro-steps: after each micro-step the accumulator, ids and count
  are the reference's; the last step's window average is, and it clears the window."""
  rng = np.random.default_rng(0)
  acc, ids, count = _window_variables(dtype, index_dtype, rng)

  def accumulate(*args):
    ops.sparse_accumulate_rows(*args)

  take = ops.sparse_take_window_gradient
  if mode == "function":
    accumulate, take = tf.function(accumulate), tf.function(take)
  steps = len(WINDOW)
  for _ in range(2):
    for k, step_indices in enumerate(WINDOW):
      indices = np.array(step_indices, index_dtype)
      values = _values(rng, len(indices), dtype)
      acc0, ids0, count0 = _numpy(acc), _numpy(ids), int(count.numpy())
      if k < steps - 1:
        accumulate(acc, ids, count, tf.constant(indices), tf.constant(values))
        want_acc, want_ids, want_count = _accumulate_reference(acc0, ids0, count0, indices, values)
        np.testing.assert_array_equal(_bits(_numpy(acc)), _bits(want_acc))
        np.testing.assert_array_equal(_numpy(ids), want_ids)
        assert int(count.numpy()) == want_count
        continue
      rows, average = take(acc, ids, count, tf.constant(indices), tf.constant(values), steps)
      want, want_acc = _window_reference(acc0, ids0, count0, indices, values, steps)
      rows, average = rows.numpy(), np.asarray(average.numpy())
      assert rows.dtype == np.int64 and sorted(rows.tolist()) == sorted(want)
      for u, row in enumerate(rows):
        np.testing.assert_array_equal(_bits(average[u]), _bits(want[row]), err_msg=f"row {row}")
      np.testing.assert_array_equal(_bits(_numpy(acc)), _bits(want_acc))
      assert int(count.numpy()) == 0
      assert not set(rows.tolist()) & set(UNTOUCHED_ROWS)


def test_a_window_of_many_rows_is_the_references_bit_for_bit():
  """A window of 30,000 ids on 40,000 rows: the grouping splits them over its partitions, the
  rows are taken on the thread pool and come out in the op's own order, and each row's average
  is that row's (a row taking another's sums or accumulator row fails it)."""
  rng = np.random.default_rng(4)
  rows, dim, steps = 40_000, 8, 2
  acc = tf.Variable(tf.zeros((rows, dim)))
  ids, count = tf.Variable(np.zeros(rows, np.int64)), tf.Variable(np.int64(0))
  want, named = np.zeros((rows, dim), np.float32), set()
  for k in range(steps):
    # Distinct rows, then duplicates of rows this step or the other names.
    indices = np.concatenate([rng.permutation(rows)[:12_000], rng.integers(0, rows, 3_000)])
    values = rng.standard_normal((len(indices), dim)).astype(np.float32)
    np.add.at(want, indices, values)  # in order, each addition rounded to float32
    named |= set(indices.tolist())
    if k < steps - 1:
      ops.sparse_accumulate_rows(acc, ids, count, tf.constant(indices), tf.constant(values))
    else:
      taken, average = ops.sparse_take_window_gradient(acc, ids, count, tf.constant(indices),
                                                       tf.constant(values), steps)
  taken = taken.numpy()
  assert sorted(taken.tolist()) == sorted(named)
  np.testing.assert_array_equal(_bits(average.numpy()), _bits(want[taken] / np.float32(steps)))
  assert not np.any(acc.numpy()) and int(count.numpy()) == 0


def _rounding_values(rng, shape, dtype):
  """Values whose average rounds, or nearly: multiples of the dtype's smallest subnormal (odd
  ones halve to a tie), values just above its smallest normal (their averages are subnormal),
  normal values over many exponents, the largest finite value, zeros of both signs and
  infinity."""
  info = ml_dtypes.finfo(DTYPES[dtype])
  n = int(np.prod(shape))
  smallest, tiny, eps = (float(x) for x in (info.smallest_subnormal, info.tiny, info.eps))
  kinds = np.stack([
      rng.integers(1, 64, n) * smallest,
      tiny * (1.0 + rng.integers(0, 64, n) * eps),
      rng.standard_normal(n) * 2.0**rng.integers(-12, 12, n),
      rng.choice([float(info.max), 0.0, np.inf], n),
  ])
  picked = kinds[rng.integers(0, len(kinds), n), np.arange(n)] * rng.choice([-1.0, 1.0], n)
  return picked.reshape(shape).astype(DTYPES[dtype])


def _tensorflow_window_average(acc, ids, count, indices, values, steps):
  """{row: average} of the window as TensorFlow's own add and divide ops give it: the rounding
  of _window_reference, in the denormal mode TensorFlow runs ops in (which may flush
  subnormals, as it does for the op under test)."""
  held = set(ids[:count].tolist())
  divisor = tf.constant(steps, tf.as_dtype(acc.dtype))
  average = {}
  for row in held | set(indices.tolist()):
    terms = [tf.constant(values[i]) for i, r in enumerate(indices) if r == row]
    if row in held:  # a held row the step does not name is its accumulator row plus 0
      terms = [tf.constant(acc[row])] + (terms or [tf.zeros(acc.shape[1], divisor.dtype)])
    total = terms[0]
    for term in terms[1:]:
      total = total + term
    average[row] = np.asarray(tf.math.divide(total, divisor).numpy())
  return average


@pytest.mark.parametrize("steps", [2, 3, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_an_average_over_steps_is_the_divide_bit_for_bit(dtype, steps):
  """Each average is TensorFlow's sum / steps in the dtype, bit for bit, over powers of two and
  not (a multiply by 1 / steps would give a power of two's bits too) and values that round
  (subnormal halves and quarters, ties), in rows of 37 (a vector loop and its tail) that are
  held and named once more, held only, named once, or named twice by the last micro-step."""
  rng = np.random.default_rng(6)
  rows, dim = 12, 37
  acc = tf.Variable(tf.zeros((rows, dim), tf.as_dtype(DTYPES[dtype])))
  ids, count = tf.Variable(np.zeros(rows, np.int64)), tf.Variable(np.int64(0))
  held, last = np.arange(8), np.array([4, 5, 8, 9, 10, 11, 9, 4])
  ops.sparse_accumulate_rows(acc, ids, count, tf.constant(held),
                             tf.constant(_rounding_values(rng, (len(held), dim), dtype)))
  values = _rounding_values(rng, (len(last), dim), dtype)
  acc0, ids0, count0 = _numpy(acc), _numpy(ids), int(count.numpy())
  taken, average = ops.sparse_take_window_gradient(acc, ids, count, tf.constant(last),
                                                   tf.constant(values), steps)
  want = _tensorflow_window_average(acc0, ids0, count0, last, values, steps)
  assert sorted(taken.numpy().tolist()) == list(range(rows))
  for u, row in enumerate(taken.numpy()):
    np.testing.assert_array_equal(_bits(np.asarray(average.numpy())[u]), _bits(want[row]),
                                  err_msg=f"row {row}")
  assert not np.any(_numpy(acc)) and int(count.numpy()) == 0


def test_negative_zero_is_written_as_it_is_into_an_empty_window():
  """The window's first micro-step writes each row's first value (-0.0 stays -0.0); a later
  one adds to the accumulator (0 + -0.0 is +0.0), as the TensorFlow-op path does."""
  acc, ids, count = _window_variables("float32", np.int32, np.random.default_rng(1))
  # Not tf.fill of the scalar -0.0: eager mode caches scalar constants by value, and -0.0 ==
  # 0.0, so a +0.0 made earlier in the process would be returned.
  negative = tf.constant(np.full((1, DIM), -0.0, np.float32))
  ops.sparse_accumulate_rows(acc, ids, count, tf.constant([2]), negative)
  assert np.all(np.signbit(acc.numpy()[2]))
  ops.sparse_accumulate_rows(acc, ids, count, tf.constant([4]), negative)
  assert not np.any(np.signbit(acc.numpy()[4]))
  # Taking the window: held row 2 (-0.0) plus 0 is +0.0; a row first named now keeps -0.0.
  rows, average = ops.sparse_take_window_gradient(acc, ids, count, tf.constant([5]), negative, 2)
  average = dict(zip(rows.numpy().tolist(), average.numpy()))
  assert not np.any(np.signbit(average[2])) and np.all(np.signbit(average[5]))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_ids_that_would_not_fit_are_kept_deduplicated(index_dtype):
  """Micro-steps naming more ids in all than the table has rows: the ids are the distinct
  rows named so far, at most one per row, and the window is still the reference's."""
  rng = np.random.default_rng(2)
  acc, ids, count = _window_variables("float32", index_dtype, rng)
  held_acc, held_ids, held_count = _numpy(acc), _numpy(ids), 0
  named, deduplicated = set(), False
  for _ in range(4):
    indices = rng.integers(0, ROWS - 2, 4).astype(index_dtype)
    values = _values(rng, len(indices), "float32")
    ops.sparse_accumulate_rows(acc, ids, count, tf.constant(indices), tf.constant(values))
    held_acc, want_ids, want_count = _accumulate_reference(held_acc, held_ids, held_count, indices,
                                                           values)
    named.update(indices.tolist())
    held_count, held_ids = int(count.numpy()), _numpy(ids)
    assert held_count == want_count
    if want_ids is None:  # deduplicated: the distinct rows named so far, once each
      deduplicated = True
      assert sorted(held_ids[:held_count].tolist()) == sorted(named)
    else:
      np.testing.assert_array_equal(held_ids, want_ids)
  assert deduplicated and held_count <= ROWS
  np.testing.assert_array_equal(_numpy(acc), held_acc)
  indices = np.array([ROWS - 1, 0], index_dtype)
  values = _values(rng, 2, "float32")
  rows, average = ops.sparse_take_window_gradient(acc, ids, count, indices, values, 5)
  want, want_acc = _window_reference(held_acc, held_ids, held_count, indices, values, 5)
  assert sorted(rows.numpy().tolist()) == sorted(want)
  for u, row in enumerate(rows.numpy()):
    np.testing.assert_array_equal(average.numpy()[u], want[row])
  np.testing.assert_array_equal(_numpy(acc), want_acc)


@pytest.mark.parametrize("op", ["accumulate", "take"])
def test_bad_indices_are_rejected_with_nothing_written(op):
  rng = np.random.default_rng(3)
  acc, ids, count = _window_variables("float32", np.int64, rng)
  ops.sparse_accumulate_rows(acc, ids, count, tf.constant([1, 2], tf.int64), tf.ones((2, DIM)))
  before = [_numpy(v) for v in (acc, ids, count)]
  indices = tf.constant([4, ROWS + 3], tf.int64)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"indices\[1\] = {ROWS + 3} is not in \[0, {ROWS}\)"):
    if op == "accumulate":
      ops.sparse_accumulate_rows(acc, ids, count, indices, tf.ones((2, DIM)))
    else:
      ops.sparse_take_window_gradient(acc, ids, count, indices, tf.ones((2, DIM)), 2)
  for variable, want in zip((acc, ids, count), before):
    np.testing.assert_array_equal(_numpy(variable), want)


def test_bad_inputs_are_rejected_with_their_names():
  acc, ids, count = _window_variables("float32", np.int32, np.random.default_rng(4))
  with pytest.raises(tf.errors.InvalidArgumentError, match="values must hold one accumulator"):
    ops.sparse_accumulate_rows(acc, ids, count, tf.constant([1]), tf.ones((1, DIM + 1)))
  count.assign(ROWS + 1)
  with pytest.raises(tf.errors.InvalidArgumentError, match="row_count = 12 is not in"):
    ops.sparse_accumulate_rows(acc, ids, count, tf.constant([1]), tf.ones((1, DIM)))
  wide_ids = tf.Variable(tf.zeros([ROWS], tf.int64))
  with pytest.raises(tf.errors.InvalidArgumentError, match="row_ids has dtype int64"):
    ops.sparse_accumulate_rows(acc, wide_ids, count, tf.constant([1]), tf.ones((1, DIM)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_tensorflow_op_path_gives_the_ops_bits(dtype, monkeypatch):
  """The optimizers' path for GPU variables (TensorFlow ops; here forced on the CPU) gives the
  fused ops' accumulator, ids, rows and average, bit for bit."""
  from tf_opt_ops import _core

  def run(on_gpu):
    monkeypatch.setattr(_core, "_on_gpu", lambda var: on_gpu)
    rng = np.random.default_rng(5)
    acc, ids, count = _window_variables(dtype, np.int32, rng)
    shape = tf.constant([ROWS, DIM], tf.int64)
    out = []
    for _ in range(2):
      for k, step_indices in enumerate(WINDOW):
        grad = tf.IndexedSlices(tf.constant(_values(rng, len(step_indices), dtype)),
                                tf.constant(step_indices, tf.int64), shape)
        if k < len(WINDOW) - 1:
          _core.accumulate_rows(acc, ids, count, grad)
          out.append(_bits(_numpy(acc)))
          out.append(_numpy(ids)[:int(count.numpy())])
        else:
          average = _core.take_window_gradient(acc, ids, count, grad, len(WINDOW))
          order = np.argsort(average.indices.numpy())
          out.append(average.indices.numpy()[order])
          out.append(_bits(np.asarray(average.values.numpy())[order]))
          out.append(_bits(_numpy(acc)))
          out.append(int(count.numpy()))
    return out

  for fused, standard in zip(run(False), run(True)):
    np.testing.assert_array_equal(fused, standard)
