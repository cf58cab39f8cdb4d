"""RowwiseAdagrad in every flavor against reference.sparse_rowwise_adagrad, over several steps:
sparse and dense gradients, eager, tf.function and XLA, configs, checkpoints and model files."""

import numpy as np
import pytest
import tensorflow as tf
import test_optimizers
from test_optimizers import FLAVORS

from tf_opt_ops import _core
from tf_opt_ops import keras as k3
from tf_opt_ops import reference

import common
from optimizer_checks import BATCH
from optimizer_checks import COLS
from optimizer_checks import NP_DTYPES
from optimizer_checks import ROWS
from optimizer_checks import check_fit
from optimizer_checks import check_model_file_round_trip
from optimizer_checks import sparse_batches
from optimizer_checks import variables_of


@pytest.fixture(params=[pytest.param(f, id=f.name) for f in FLAVORS])
def flavor(request):
  """One case per Keras flavor (test_optimizers.FlavorCase)."""
  return request.param


# The ways an update runs inside XLA (test_optimizers' fixture): the op's XLA kernel, or the
# standard-ops fallback where there is none.
xla_kernels = test_optimizers.xla_kernels
WEIGHT_DECAY_MODES = ["none", "l2", "decoupled"]
OPTIONS = dict(learning_rate=0.05, initial_accumulator_value=0.1, epsilon=1e-3, weight_decay=0.1)
# The op's results are the reference's bit for bit (tests/ops); here the flavors' inputs are
# checked, to the last bits of a learning rate that went through float64 (and, for float64
# tables, through Keras 3's float32 learning rate variable), and where XLA has no kernel for the
# op, the standard ops' row means.
TOL = {
    "float32": dict(rtol=1e-6, atol=1e-7), "float64": dict(rtol=1e-7, atol=1e-9),
    "float16": dict(rtol=1e-3, atol=1e-3), "bfloat16": dict(rtol=1e-2, atol=1e-2)
}


def accumulator_of(opt, var):
  """The optimizer's row-wise accumulator of `var` (the only variable of shape [rows])."""
  if hasattr(opt, "get_slot"):
    return opt.get_slot(var, "accumulator")
  [accum] = [v for v in variables_of(opt) if tuple(v.shape) == (var.shape[0],)]
  return accum


def reference_state(init, dtype, options):
  accum = np.full([ROWS], options.get("initial_accumulator_value", 0.0),
                  np.float64 if dtype == "float64" else np.float32)
  return reference.store(init, dtype), accum


def reference_hyper(options, var=None):
  """The reference's hyperparameters; with `var`, its table's rounding as the optimizer
  rounds it (stochastically by default for a 16-bit table, with the variable's seed)."""
  hyper = dict(lr=options.get("learning_rate", 0.01), epsilon=options.get("epsilon", 1e-8),
               weight_decay=options.get("weight_decay", 0.0),
               weight_decay_mode=options.get("weight_decay_mode", "none"))
  if var is not None and options.get("stochastic_rounding") is not False:
    hyper.update(stochastic_rounding=True,
                 seed=_core.variable_noise_seed(options.get("seed", 0), var))
  return hyper


def train_and_compare(flavor, dtype, options, sparse, mode, steps=4, exact=False):
  """Trains a table of `dtype` with RowwiseAdagrad(**options) and the reference side by side:
  to TOL, or with `exact` bit for bit."""
  module = flavor.module
  rng = np.random.default_rng(0)
  init = rng.normal(size=(ROWS, COLS))
  var = tf.Variable(tf.constant(init, dtype=dtype))
  opt = module.RowwiseAdagrad(**options)
  ref_var, ref_accum = reference_state(init, dtype, options)
  hyper = reference_hyper(options, var)

  def apply(grad):
    opt.apply_gradients([(grad, var)])

  if mode != "eager":
    apply = tf.function(apply, jit_compile=mode == "xla")
  for values, indices in sparse_batches(steps, ROWS, COLS, BATCH, seed=1):
    values = values.astype(NP_DTYPES[dtype]).astype(np.float64)
    before = var.numpy().copy()
    if sparse:
      grad = tf.IndexedSlices(tf.constant(values, dtype=dtype), tf.constant(indices),
                              tf.constant([ROWS, COLS]))
      ref_var, ref_accum = reference.sparse_rowwise_adagrad(ref_var, ref_accum,
                                                            reference.store(values, dtype), indices,
                                                            dtype, **hyper)
    else:
      dense = np.zeros((ROWS, COLS))
      np.add.at(dense, indices, values)
      grad = tf.constant(dense, dtype=dtype)
      ref_var, ref_accum = reference.rowwise_adagrad(ref_var, ref_accum,
                                                     reference.store(dense, dtype), dtype, **hyper)
    apply(grad)
    if exact:
      np.testing.assert_array_equal(var.numpy().view(np.uint8), ref_var.view(np.uint8))
      np.testing.assert_array_equal(accumulator_of(opt, var).numpy(), ref_accum)
    np.testing.assert_allclose(var.numpy().astype(np.float64),
                               reference.load(ref_var, dtype).astype(np.float64), **TOL[dtype])
    np.testing.assert_allclose(accumulator_of(opt, var).numpy(), ref_accum, **TOL[dtype])
    if sparse:
      untouched = np.setdiff1d(np.arange(ROWS), indices)
      np.testing.assert_array_equal(var.numpy()[untouched].view(np.uint8),
                                    before[untouched].view(np.uint8))
  assert int(opt.iterations.numpy()) == steps
  return opt, var


@pytest.mark.parametrize("weight_decay_mode", WEIGHT_DECAY_MODES)
@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_sparse_matches_reference(flavor, mode, weight_decay_mode):
  train_and_compare(flavor, "float32", dict(OPTIONS, weight_decay_mode=weight_decay_mode),
                    sparse=True, mode=mode)


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_table_dtypes(flavor, dtype):
  opt, var = train_and_compare(flavor, dtype, dict(OPTIONS, weight_decay_mode="l2"), sparse=True,
                               mode="eager")
  want = tf.float64 if dtype == "float64" else tf.float32
  assert accumulator_of(opt, var).dtype == want


@pytest.mark.parametrize("weight_decay_mode", ["none", "decoupled"])
def test_dense_gradient_updates_every_row_by_the_same_rule(flavor, weight_decay_mode):
  train_and_compare(flavor, "float32", dict(OPTIONS, weight_decay_mode=weight_decay_mode),
                    sparse=False, mode="tf.function")


def test_defaults_are_fbgemm_s(flavor):
  opt = flavor.module.RowwiseAdagrad()
  config = opt.get_config()
  assert config["learning_rate"] == pytest.approx(0.01)
  assert (config["initial_accumulator_value"], config["epsilon"], config["weight_decay"],
          config["weight_decay_mode"]) == (0.0, 1e-8, 0.0, "none")
  train_and_compare(flavor, "float32", {}, sparse=True, mode="eager", steps=2)


def test_config_round_trip_and_registered_name(flavor):
  module = flavor.module
  opt = module.RowwiseAdagrad(weight_decay_mode=2, **OPTIONS)
  config = opt.get_config()
  assert config["weight_decay_mode"] == "decoupled"
  clone = module.RowwiseAdagrad.from_config(config)
  assert clone.get_config() == config
  serialized = flavor.keras.optimizers.serialize(opt)
  revived = flavor.keras.optimizers.deserialize(serialized, **flavor.deserialize_kwargs)
  assert type(revived) is module.RowwiseAdagrad
  assert revived.get_config() == config


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_tables_round_stochastically_as_the_reference(flavor, dtype):
  # A learning rate exact in float32, so that every flavor's op gets the reference's bits.
  options = dict(OPTIONS, learning_rate=0.0625, weight_decay_mode="l2")
  _, var = train_and_compare(flavor, dtype, options, sparse=True, mode="tf.function", exact=True)
  # On by default: to nearest stores other bits.
  rng = np.random.default_rng(0)
  ref_var, ref_accum = reference_state(rng.normal(size=(ROWS, COLS)), dtype, options)
  for values, indices in sparse_batches(4, ROWS, COLS, BATCH, seed=1):
    ref_var, ref_accum = reference.sparse_rowwise_adagrad(
        ref_var, ref_accum,
        reference.store(values.astype(NP_DTYPES[dtype]).astype(np.float64), dtype), indices, dtype,
        **reference_hyper(options))
  assert np.count_nonzero(var.numpy().view(np.uint16) != ref_var.view(np.uint16)) > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_stochastic_rounding_off_rounds_to_nearest(flavor, dtype):
  options = dict(OPTIONS, learning_rate=0.0625, stochastic_rounding=False)
  train_and_compare(flavor, dtype, options, sparse=True, mode="eager", exact=True)


def test_stochastic_rounding_config_round_trip(flavor):
  module = flavor.module
  default = module.RowwiseAdagrad().get_config()
  assert (default["stochastic_rounding"], default["seed"]) == (None, 0)
  for stochastic_rounding in (True, False):
    opt = module.RowwiseAdagrad(stochastic_rounding=stochastic_rounding, seed=17)
    config = opt.get_config()
    assert (config["stochastic_rounding"], config["seed"]) == (stochastic_rounding, 17)
    clone = module.RowwiseAdagrad.from_config(config)
    assert (clone.stochastic_rounding, clone.seed) == (stochastic_rounding, 17)
    assert clone.get_config() == config
  with pytest.raises(ValueError, match="stochastic_rounding"):
    module.RowwiseAdagrad(stochastic_rounding="yes")
  with pytest.raises(ValueError, match="seed"):
    module.RowwiseAdagrad(seed=-1)


def test_inside_xla_rounds_stochastically_as_outside(flavor, xla_kernels):
  # The XLA kernel rounds a 16-bit table as the op does, bit for bit; the standard-ops fallback
  # (no XLA kernels) rounds to nearest only, so asking it for stochastic rounding is refused.
  sparse = tf.IndexedSlices(
      tf.constant(np.linspace(-1e-3, 1e-3, 2 * COLS).reshape(2, COLS), tf.bfloat16),
      tf.constant([1, 2]), tf.constant([ROWS, COLS]))

  def train(opt, jit_compile):
    var = tf.Variable(tf.ones((ROWS, COLS), tf.bfloat16), name="table")

    @tf.function(jit_compile=jit_compile)
    def step():
      opt.apply_gradients([(sparse, var)])

    for _ in range(3):
      step()
    return var.numpy()

  if xla_kernels is not None:
    with pytest.raises(ValueError, match="stochastic_rounding=False"):
      train(flavor.module.RowwiseAdagrad(stochastic_rounding=True), jit_compile=True)
    return
  outside = train(flavor.module.RowwiseAdagrad(seed=3), jit_compile=False)
  inside = train(flavor.module.RowwiseAdagrad(seed=3), jit_compile=True)
  nearest = train(flavor.module.RowwiseAdagrad(stochastic_rounding=False), jit_compile=True)
  np.testing.assert_array_equal(inside.view(np.uint16), outside.view(np.uint16))
  assert (inside.view(np.uint16) != nearest.view(np.uint16)).any()


def test_bad_options_are_refused(flavor):
  cls = flavor.module.RowwiseAdagrad
  with pytest.raises(ValueError, match="weight_decay_mode"):
    cls(weight_decay_mode="adamw")
  with pytest.raises(ValueError, match="initial_accumulator_value"):
    cls(initial_accumulator_value=-1.0)
  opt = cls()
  with pytest.raises(ValueError, match="at least 1-D"):
    opt.apply_gradients([(tf.constant(1.0), tf.Variable(2.0))])


def test_checkpoint_restore_continues_identically(flavor, tmp_path):
  module = flavor.module
  options = dict(OPTIONS, weight_decay_mode="l2")
  init = np.random.default_rng(0).normal(size=(ROWS, COLS)).astype(np.float32)
  batches = sparse_batches(6, ROWS, COLS, BATCH, seed=5)

  def step(opt, var, batch):
    values, indices = batch
    opt.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(indices),
                                           tf.constant([ROWS, COLS])), var)])

  var = tf.Variable(init)
  opt = module.RowwiseAdagrad(**options)
  for batch in batches[:3]:
    step(opt, var, batch)
  path = tf.train.Checkpoint(var=var, optimizer=opt).write(str(tmp_path / "ckpt"))
  restored_var = tf.Variable(np.zeros_like(init))
  restored = module.RowwiseAdagrad(**options)
  status = tf.train.Checkpoint(var=restored_var, optimizer=restored).read(path)
  for batch in batches[3:]:
    step(opt, var, batch)
    step(restored, restored_var, batch)
  status.assert_consumed()
  assert int(restored.iterations.numpy()) == 6
  np.testing.assert_array_equal(restored_var.numpy(), var.numpy())
  np.testing.assert_array_equal(
      accumulator_of(restored, restored_var).numpy(),
      accumulator_of(opt, var).numpy())


def test_fit_with_an_embedding(flavor):
  module = flavor.module
  check_fit(flavor.keras, module.RowwiseAdagrad(learning_rate=0.1))


def test_model_file_round_trip(flavor, tmp_path):
  options = dict(OPTIONS, learning_rate=0.1, weight_decay_mode="l2")
  for fmt in flavor.model_file_formats:
    check_model_file_round_trip(flavor.keras, flavor.module.RowwiseAdagrad(**options),
                                str(tmp_path / f"m.{fmt}"))


def test_full_accumulator_checkpoint_fails_naming_the_layout(flavor, tmp_path):
  # A ClippyAdagrad checkpoint holds a per-element `accumulator` where RowwiseAdagrad keeps one
  # per row: the restore says so rather than training from a mismatched state.
  sparse = tf.IndexedSlices(tf.ones((2, COLS)), tf.constant([1, 2]), tf.constant([ROWS, COLS]))
  var = tf.Variable(np.ones((ROWS, COLS), np.float32))
  clippy = flavor.module.ClippyAdagrad(learning_rate=0.1)
  clippy.apply_gradients([(sparse, var)])
  path = tf.train.Checkpoint(var=var, optimizer=clippy).write(str(tmp_path / "ckpt"))
  restored_var = tf.Variable(np.ones((ROWS, COLS), np.float32))
  rowwise = flavor.module.RowwiseAdagrad()
  with pytest.raises(ValueError, match=rf"saved as float32\[{ROWS}, {COLS}\].*float32\[{ROWS}\]"):
    tf.train.Checkpoint(var=restored_var, optimizer=rowwise).read(path)
    rowwise.apply_gradients([(sparse, restored_var)])


@pytest.mark.parametrize("weight_decay_mode", WEIGHT_DECAY_MODES)
def test_inside_xla(flavor, weight_decay_mode, xla_kernels):
  # With the XLA kernels the op's custom call runs, bit for bit the op's results; where there
  # are none (before TensorFlow 2.17, or a GPU variable without GPU kernels) the same rule in
  # standard ops, to float rounding (the row mean sums in another order), logged once.
  with common.tensorflow_log() as messages:
    train_and_compare(flavor, "float32", dict(OPTIONS, weight_decay_mode=weight_decay_mode),
                      sparse=True, mode="xla")
  fallbacks = [m for m in messages if "falling back" in m]
  if xla_kernels is None:
    assert not fallbacks, fallbacks
  else:
    assert len(fallbacks) == 1 and "RowwiseAdagrad" in fallbacks[0], fallbacks


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_table_dtypes_inside_xla(flavor, dtype):
  with common.tensorflow_log() as messages:
    train_and_compare(flavor, dtype, dict(OPTIONS, weight_decay_mode="l2"), sparse=True, mode="xla")
  assert not [m for m in messages if "falling back" in m]


def test_keras3_fit_with_jit_compile_runs_the_xla_kernel():
  # Keras 3 compiles `fit` with XLA wherever there is a GPU (jit_compile="auto"): the same
  # model and data give the same weights with and without it, to the float rounding of the
  # model's own gradients, which XLA computes in another order (with a gradient XLA computes
  # bit for bit as TensorFlow does, the step is bit-identical: tests/ops/test_xla.py).
  import keras

  results = []
  for jit_compile in (True, False):
    opt = k3.RowwiseAdagrad(learning_rate=0.1, weight_decay=0.01, weight_decay_mode="l2")
    with common.tensorflow_log() as messages:
      model = check_fit(keras, opt, jit_compile=jit_compile)
    assert not [m for m in messages if "falling back" in m]
    results.append([np.asarray(w.numpy()) for w in model.weights + opt.variables])
  assert len(results[0]) == len(results[1])
  for got, want in zip(*results):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
