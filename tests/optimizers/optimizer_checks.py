"""Checks shared by the optimizer tests: training data, stateful steps of the NumPy
reference (tf_opt_ops.reference), and model, checkpoint and file round trips.

Every flavor takes `apply_gradients([(grad, tf.Variable)])`, so the checks run
unchanged against `tf_opt_ops.keras`, `.tf_keras` and `.legacy`.
"""

import ml_dtypes
import numpy as np
import tensorflow as tf

from tf_opt_ops import reference

# Tolerances by variable dtype (as TF Addons' assert_allclose_according_to_type).
TOL = {
    "float64": dict(rtol=1e-6, atol=1e-6),
    "float32": dict(rtol=1e-5, atol=1e-6),
    "float16": dict(rtol=2e-3, atol=2e-3),
    "bfloat16": dict(rtol=2e-2, atol=2e-2),
}


class LazyAdamReference:
  """Lazy Adam state in `dtype`, stepped by the reference (a dense gradient: every row)."""

  def __init__(self, var, dtype="float32", lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    self.dtype = dtype
    self.var = reference.store(var, dtype)
    self.m = reference.store(np.zeros(np.shape(var)), dtype)
    self.v = reference.store(np.zeros(np.shape(var)), dtype)
    self.lr, self.beta_1, self.beta_2, self.epsilon = lr, beta_1, beta_2, epsilon
    self.t = 0

  def sparse(self, values, indices, lr=None):
    self.t += 1
    self.var, self.m, self.v = reference.sparse_lazy_adam(self.var, self.m, self.v,
                                                          reference.store(values, self.dtype),
                                                          indices, self.dtype,
                                                          lr=self.lr if lr is None else lr,
                                                          beta1=self.beta_1, beta2=self.beta_2,
                                                          epsilon=self.epsilon,
                                                          beta1_power=self.beta_1**self.t,
                                                          beta2_power=self.beta_2**self.t)

  def dense(self, grad, lr=None):
    self.sparse(grad, np.arange(len(grad)), lr)

  def values(self):
    return reference.load(self.var, self.dtype).astype(np.float64)


class ClippyReference:
  """Clippy Adagrad state in `dtype`, stepped by the reference; `scale` is the last step's."""

  def __init__(self, var, dtype="float32", lr=0.001, initial_accumulator_value=0.1, **hyper):
    self.dtype = dtype
    self.var = reference.store(var, dtype)
    self.accum = reference.store(np.full(np.shape(var), initial_accumulator_value), dtype)
    self.lr, self.hyper = lr, hyper
    self.scale = None

  def sparse(self, values, indices, lr=None):
    self.var, self.accum, self.scale = reference.sparse_clippy_adagrad(
        self.var, self.accum, reference.store(values, self.dtype), indices, self.dtype,
        lr=self.lr if lr is None else lr, **self.hyper)

  def dense(self, grad, lr=None):
    self.var, self.accum, self.scale = reference.clippy_adagrad(self.var, self.accum,
                                                                reference.store(grad, self.dtype),
                                                                self.dtype,
                                                                lr=self.lr if lr is None else lr,
                                                                **self.hyper)

  def values(self):
    return reference.load(self.var, self.dtype).astype(np.float64)


REFERENCES = {"LazyAdam": LazyAdamReference, "ClippyAdagrad": ClippyReference}
REFERENCE_ARGS = {
    "LazyAdam": {"lr", "beta_1", "beta_2", "epsilon"},
    "ClippyAdagrad": {
        "lr", "initial_accumulator_value", "epsilon", "variable_relative_threshold",
        "accumulator_relative_threshold", "absolute_threshold", "clip_accumulator_update",
        "use_standard_accumulator_update"
    },
}


def make_reference(opt_name, init, dtype="float32", options=None):
  """The reference of optimizer `opt_name` built with `options` (its constructor arguments:
  callables and tensors as the numbers they hold, learning_rate as lr, others dropped)."""
  kw = {}
  for key, value in dict(options or {}).items():
    value = value() if callable(value) else value
    key = "lr" if key == "learning_rate" else key
    if key in REFERENCE_ARGS[opt_name]:
      kw[key] = value if isinstance(value, (bool, int, float)) else float(np.asarray(value))
  return REFERENCES[opt_name](init, dtype, **kw)


def sparse_batches(steps, rows, cols, batch, seed=0, dtype=np.float32):
  """Per-step (values, indices) with duplicate indices and some rows never touched."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(steps):
    indices = rng.integers(0, rows - 2, size=batch)  # the last two rows are never touched
    indices[1] = indices[0]  # at least one duplicate per step
    values = rng.normal(size=(batch, cols)).astype(dtype)
    out.append((values, indices))
  return out


DTYPES = ["float32", "float64", "float16", "bfloat16"]
NP_DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16
}
ROWS, COLS, BATCH = 12, 3, 6

# Hyperparameters as callables and tensors, each where the flavor's base class
# allows it (Keras 3 takes no tensor learning rate).
HYPER_TYPES = {
    "LazyAdam": dict(beta_1=lambda: 0.8, beta_2=tf.constant(0.99), epsilon=1e-6),
    "ClippyAdagrad": dict(variable_relative_threshold=lambda: 0.05,
                          accumulator_relative_threshold=tf.constant(1e-3),
                          absolute_threshold=lambda: tf.constant(1e-4)),
}


def check_against_numpy(module, opt_name, dtype="float32", index_dtype="int32", sparse=True,
                        steps=3, options=None, wrap=None, seed=0, configure=None):
  """Trains a table for `steps` steps and compares it with the NumPy reference after each.

  Sparse: every row not named in a step is bit-identical to its value before that
  step (laziness, also for rows touched earlier). Returns (optimizer, variable, reference).
  """
  options = dict(options or {})
  options.setdefault("learning_rate", 0.05)
  rng = np.random.default_rng(seed)
  init = rng.normal(size=(ROWS, COLS)).astype(NP_DTYPES[dtype])
  init[-1, 0] = -0.0  # a zero weight decay pass would turn -0.0 into +0.0
  var = tf.Variable(tf.constant(init.astype(np.float64), dtype=dtype))
  opt = getattr(module, opt_name)(**options)
  ref = make_reference(opt_name, init.astype(np.float64), dtype, options)
  if configure is not None:
    configure(opt)

  def apply(grads_and_vars):
    opt.apply_gradients(grads_and_vars)

  if wrap is not None:
    apply = wrap(apply)
  tol = TOL[dtype]
  for values, indices in sparse_batches(steps, ROWS, COLS, BATCH, seed=seed + 1):
    values = values.astype(NP_DTYPES[dtype])
    before = var.numpy().copy()
    if sparse:
      grad = tf.IndexedSlices(tf.constant(values.astype(np.float64), dtype=dtype),
                              tf.constant(indices, dtype=index_dtype),
                              tf.constant([ROWS, COLS], dtype=index_dtype))
      ref.sparse(values.astype(np.float64), indices)
    else:
      dense = np.zeros((ROWS, COLS))
      np.add.at(dense, indices, values.astype(np.float64))
      grad = tf.constant(dense, dtype=dtype)
      ref.dense(dense)
    apply([(grad, var)])
    got = var.numpy().astype(np.float64)
    np.testing.assert_allclose(got, ref.values(), err_msg=f"{opt_name} {dtype}", **tol)
    if sparse:
      untouched = np.setdiff1d(np.arange(ROWS), indices)
      np.testing.assert_array_equal(var.numpy()[untouched].view(np.uint8),
                                    before[untouched].view(np.uint8))
  assert int(opt.iterations.numpy()) == steps
  return opt, var, ref


def variables_of(opt):
  """`opt.variables` (a method in OptimizerV2, a property elsewhere)."""
  return opt.variables() if callable(opt.variables) else opt.variables


def optimizer_state(opt):
  """The optimizer's variables as NumPy arrays, in its own order."""
  return [np.asarray(v.numpy()) for v in variables_of(opt)]


def dense_grads(steps, seed=3, shape=(ROWS, COLS)):
  rng = np.random.default_rng(seed)
  return [rng.normal(size=shape).astype(np.float32) for _ in range(steps)]


EMB_ROWS, EMB_USED = 50, 40  # embedding rows >= EMB_USED never appear in the data


def embedding_model(k, dtype=None):
  """A tiny CTR-style model for Keras module `k` (keras or tf_keras): Embedding -> Dense."""
  inputs = k.Input(shape=(3,), dtype="int32")
  x = k.layers.Embedding(EMB_ROWS, 4, dtype=dtype, name="emb")(inputs)
  x = k.layers.Flatten()(x)
  outputs = k.layers.Dense(1, dtype=dtype, name="out")(x)
  return k.Model(inputs, outputs)


def embedding_data(n=64, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.integers(0, EMB_USED, size=(n, 3)).astype(np.int32)
  y = rng.normal(size=(n, 1)).astype(np.float32)
  return x, y


def check_fit(k, optimizer, jit_compile=False, dtype=None, epochs=3):
  """model.fit with a sparse Embedding gradient: unused rows keep their bits, the loss falls."""
  k.utils.set_random_seed(0)
  model = embedding_model(k, dtype)
  model.compile(optimizer=optimizer, loss="mse", jit_compile=jit_compile)
  before = np.array(model.get_layer("emb").embeddings.numpy())
  x, y = embedding_data()
  hist = model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, shuffle=False)
  after = np.array(model.get_layer("emb").embeddings.numpy())
  assert np.isfinite(hist.history["loss"]).all()
  np.testing.assert_array_equal(after[EMB_USED:], before[EMB_USED:])
  assert np.abs(after[:EMB_USED] - before[:EMB_USED]).max() > 1e-5
  assert hist.history["loss"][-1] < hist.history["loss"][0]
  return model


def train_table(opt, var, steps, seed, sparse=True):
  """`steps` apply_gradients on a (ROWS, COLS) table, sparse (with duplicates) or dense."""
  for values, idx in sparse_batches(steps, ROWS, COLS, BATCH, seed=seed):
    if sparse:
      grad = tf.IndexedSlices(tf.constant(values), tf.constant(idx), tf.constant([ROWS, COLS]))
    else:
      grad = tf.math.unsorted_segment_sum(values, idx, ROWS)
    opt.apply_gradients([(grad, var)])


def check_dense_equals(make_ours, make_theirs, steps=5):
  """Dense gradients: our optimizer's variable and state are bit-identical to theirs."""
  grads = dense_grads(steps)
  init = np.random.default_rng(0).normal(size=grads[0].shape).astype(np.float32)
  results = []
  for make in (make_ours, make_theirs):
    var = tf.Variable(init)
    opt = make()
    for g in grads:
      opt.apply_gradients([(tf.constant(g), var)])
    results.append((var.numpy(), optimizer_state(opt)))
  np.testing.assert_array_equal(results[0][0], results[1][0])
  assert len(results[0][1]) == len(results[1][1])
  for ours, theirs in zip(results[0][1], results[1][1]):
    np.testing.assert_array_equal(ours, theirs)


def check_checkpoint_round_trip(tmp_path, src_cls, dst_cls, src_sparse, build):
  """src trains and writes a tf.train.Checkpoint; dst restores it: same state, same future.

  `build(opt, var)` creates dst's state before the restore (or None to let the
  restore be deferred to slot creation, as OptimizerV2 does).
  """
  init = np.random.default_rng(0).normal(size=(ROWS, COLS)).astype(np.float32)
  var = tf.Variable(init)
  src = src_cls(learning_rate=0.01)
  train_table(src, var, 3, seed=1, sparse=src_sparse)
  path = tf.train.Checkpoint(var=var, optimizer=src).write(str(tmp_path / "ckpt"))
  restored_var = tf.Variable(np.zeros_like(init))
  dst = dst_cls(learning_rate=0.01)
  if build is not None:
    build(dst, restored_var)
  status = tf.train.Checkpoint(var=restored_var, optimizer=dst).read(path)
  # Both continue identically (dense gradients: lazy Adam is standard Adam).
  train_table(src, var, 2, seed=2, sparse=False)
  train_table(dst, restored_var, 2, seed=2, sparse=False)
  status.assert_consumed()
  assert int(dst.iterations.numpy()) == 5
  np.testing.assert_allclose(var.numpy(), restored_var.numpy(), rtol=1e-6, atol=1e-7)
  for a, b in zip(adam_slots(src, var), adam_slots(dst, restored_var)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def adam_slots(opt, var):
  """(m, v) of `var` as NumPy arrays, for legacy (slots) and new (lists) Adam state."""
  if hasattr(opt, "get_slot"):
    return [opt.get_slot(var, name).numpy() for name in ("m", "v")]
  return [opt._momentums[0].numpy(), opt._velocities[0].numpy()]


def check_model_file_round_trip(k, optimizer, path):
  """model.save with the optimizer, then load_model: same class and state, same training."""
  k.utils.set_random_seed(0)
  model = embedding_model(k)
  model.compile(optimizer=optimizer, loss="mse")
  x, y = embedding_data()
  model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
  model.save(path)
  loaded = k.models.load_model(path)
  assert type(loaded.optimizer) is type(optimizer)
  assert loaded.optimizer.get_config() == optimizer.get_config()
  state, loaded_state = optimizer_state(model.optimizer), optimizer_state(loaded.optimizer)
  assert len(state) == len(loaded_state) > 1
  for a, b in zip(state, loaded_state):
    np.testing.assert_array_equal(a, b)
  model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
  loaded.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
  for a, b in zip(model.get_weights(), loaded.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
