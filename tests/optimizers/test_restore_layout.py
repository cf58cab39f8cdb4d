"""A checkpoint of another slot layout never restores silently wrong, and bad options are refused.

The matrix: {layout change} x {restore API} x {restored before / after the optimizer is built} x
{flavor}. Each restore fails with one message (the slot, the saved and the current layout, the
options to construct with, tf_opt_ops.convert_checkpoint), and the failing call changes no
variable. Restored before building, the failure comes at the first training step (traced in a
tf.function); restored after building, from the restore itself. Why: see docs/design.md,
"Light state".
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import common

ROWS, DIM, BATCH = 12, 4, 8
# saved options -> restored options, and (optimizer, slot, saved layout, current layout) as
# the message spells them for the embedding table.
CHANGES = {
    "full-v-into-rowwise-v":
        ("LazyAdam", {}, dict(rowwise_second_moment=True), "v",
         rf"float32\[{ROWS}, {DIM}\] \(per element\)", rf"float32\[{ROWS}\] \(one value per row\)"),
    "rowwise-v-into-full-v":
        ("LazyAdam", dict(rowwise_second_moment=True), {}, "v",
         rf"float32\[{ROWS}\] \(one value per row\)", rf"float32\[{ROWS}, {DIM}\] \(per element\)"),
    "float32-into-bfloat16-slots": ("LazyAdam", {}, dict(slot_dtype="bfloat16"), "m",
                                    rf"float32\[{ROWS}, {DIM}\]", rf"bfloat16\[{ROWS}, {DIM}\]"),
    "bfloat16-into-float32-accumulator":
        ("ClippyAdagrad", dict(accumulator_dtype="bfloat16"), {}, "accumulator",
         rf"bfloat16\[{ROWS}, {DIM}\]", rf"float32\[{ROWS}, {DIM}\]"),
}
# What each change's message says to construct with, and to convert with.
ADVICE = {
    "full-v-into-rowwise-v": ("slot_dtype='float32', rowwise_second_moment=False",
                              "slot_dtype='float32', rowwise_second_moment=True"),
    "rowwise-v-into-full-v": ("slot_dtype='float32', rowwise_second_moment=True",
                              "slot_dtype='float32', rowwise_second_moment=False"),
    "float32-into-bfloat16-slots": ("slot_dtype='float32', rowwise_second_moment=False",
                                    "slot_dtype='bfloat16', rowwise_second_moment=False"),
    "bfloat16-into-float32-accumulator":
        ("accumulator_dtype='bfloat16'", "accumulator_dtype='float32'"),
}
# Restore APIs: TensorFlow checkpoints (tf.train.Checkpoint, CheckpointManager, a SavedModel's
# variables, tf_keras' load_weights) restore into an unbuilt optimizer too; Keras files
# (`.keras`, Keras 3's `.weights.h5`) only into a built one (Keras skips the state of an
# unbuilt optimizer, with a warning).
TF_APIS = ("checkpoint", "manager", "saved_model", "load_weights")


def _cases():
  """Every case; one layout change per (flavor, API, when) runs without the `slow` marker, the
  changes taking turns so that each flavor meets each."""
  turn = 0
  for flavor in common.FLAVORS:
    for api in TF_APIS + ("keras_file",):
      for when in ("before", "after"):
        if api == "keras_file" and flavor == "legacy":
          continue  # OptimizerV2 is saved in SavedModels and TensorFlow checkpoints
        if _keras_file(flavor, api) and when == "before":
          continue
        for k, change in enumerate(CHANGES):
          if flavor == "tf_keras" and api == "keras_file" and change.startswith("bfloat16"):
            continue  # tf_keras' `.keras` files keep bfloat16 as opaque bytes, of no dtype
          marks = () if k == turn % len(CHANGES) else (pytest.mark.slow,)
          yield pytest.param(flavor, api, when, change, id=f"{flavor}-{api}-{when}-{change}",
                             marks=marks)
        turn += 1


def _keras_file(flavor, api):
  """Whether `api` saves a Keras file (`.keras`, Keras 3's `.weights.h5`)."""
  return api == "keras_file" or (flavor == "keras" and api == "load_weights")


def _keras(flavor):
  if flavor == "keras":
    import keras
    return keras
  import tf_keras
  return tf_keras


def _data():
  rng = np.random.default_rng(0)
  return (rng.integers(0, ROWS, size=(BATCH, 2)).astype(np.int32),
          rng.normal(size=(BATCH, 1)).astype(np.float32))


def _model(flavor, optimizer_name, options, seed):
  k = _keras(flavor)
  k.utils.set_random_seed(seed)
  model = k.Sequential([
      k.Input(shape=(2,), dtype="int32"),
      k.layers.Embedding(ROWS, DIM, name="emb"),
      k.layers.Flatten(),
      k.layers.Dense(1, name="head")
  ])
  optimizer = getattr(common.flavor_module(flavor), optimizer_name)(0.1, **options)
  model.compile(optimizer=optimizer, loss="mse")
  return model, optimizer


def _optimizer_variables(optimizer):
  if hasattr(optimizer, "_create_all_weights"):  # OptimizerV2
    return optimizer.weights
  return list(optimizer.variables() if callable(optimizer.variables) else optimizer.variables)


def _values(variables):
  return [np.asarray(tf.convert_to_tensor(v)).astype(np.float64) for v in variables]


def _step(model, optimizer):
  """One training step on `_data()`: eager, or traced inside a tf.function."""
  x, y = _data()
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
  variables = model.trainable_variables
  optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))


def _build(model, optimizer):
  if hasattr(optimizer, "_create_all_weights"):
    optimizer._create_all_weights(model.trainable_variables)
  else:
    optimizer.build(model.trainable_variables)


def _save(flavor, api, model, optimizer, directory):
  """Saves `model` and `optimizer` through `api`; returns what `_restore` reads."""
  if api == "checkpoint":
    return tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(directory / "ckpt"))
  if api == "manager":
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer),
                                         str(directory), max_to_keep=1)
    manager.save()
    return str(directory)
  if api == "saved_model":
    path = str(directory / "saved_model")
    if flavor == "keras":
      tf.saved_model.save(tf.train.Checkpoint(model=model, optimizer=optimizer), path)
    else:
      model.save(path, save_format="tf")
    return os.path.join(path, "variables", "variables")
  if api == "load_weights":
    path = str(directory / ("weights.weights.h5" if flavor == "keras" else "weights"))
    model.save_weights(path)
    return path
  path = str(directory / "model.keras")
  model.save(path)
  return path


def _restore(flavor, api, model, optimizer, path):
  if api in ("checkpoint", "saved_model") and (api == "checkpoint" or flavor == "keras"):
    return tf.train.Checkpoint(model=model, optimizer=optimizer).restore(path)
  if api == "manager":
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer),
                                         path, max_to_keep=1)
    return manager.restore_or_initialize()
  return model.load_weights(path)  # tf_keras' SavedModel: its variables, the model the root


_SAVED = {}


def _saved(flavor, api, change, tmp_path_factory):
  """The path of a model trained one step with the change's saved options, through `api`."""
  key = (flavor, api, change)
  if key not in _SAVED:
    optimizer_name, saved_options = CHANGES[change][:2]
    model, optimizer = _model(flavor, optimizer_name, saved_options, seed=0)
    _step(model, optimizer)
    _SAVED[key] = _save(flavor, api, model, optimizer, tmp_path_factory.mktemp("saved"))
  return _SAVED[key]


def _message(change):
  _, _, _, slot, saved, current = CHANGES[change]
  construct, convert = ADVICE[change]
  optimizer_name = CHANGES[change][0]
  return (rf"slot layout of this {optimizer_name}.*slot '{slot}' of .* saved as {saved}, and "
          rf"this {optimizer_name} keeps it as {current}\..*{optimizer_name}\({construct}\).*"
          rf"tf_opt_ops\.convert_checkpoint\(path, new_path, {convert}\)")


@pytest.mark.parametrize("flavor,api,when,change", list(_cases()))
def test_a_restore_of_another_slot_layout_fails_and_changes_nothing(flavor, api, when, change,
                                                                    tmp_path_factory):
  path = _saved(flavor, api, change, tmp_path_factory)
  optimizer_name, _, restored_options = CHANGES[change][:3]
  model, optimizer = _model(flavor, optimizer_name, restored_options, seed=1)
  if when == "after":
    _build(model, optimizer)
    variables = list(model.variables) + _optimizer_variables(optimizer)
    before = _values(variables)
    with pytest.raises(ValueError, match=_message(change)):
      _restore(flavor, api, model, optimizer, path)
    if _keras_file(flavor, api):
      # Keras loads a file's layers before the optimizer: the model's weights are the file's.
      variables, before = variables[len(model.variables):], before[len(model.variables):]
  else:
    variables = list(model.variables) + _optimizer_variables(optimizer)
    before = _values(variables)
    with pytest.raises(ValueError, match=_message(change)):
      # OptimizerV2 creates the slots of a restore at once: it fails here.
      _restore(flavor, api, model, optimizer, path)
      # What the restore set (the model, the step counter) the failing step leaves as it is.
      variables = list(model.variables) + _optimizer_variables(optimizer)
      before = _values(variables)
      tf.function(lambda: _step(model, optimizer))()
  for want, got in zip(before, _values(variables)):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("flavor", common.FLAVORS)
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_router_refuses_a_sub_optimizers_checkpoint_of_another_layout(flavor, when, tmp_path):
  """The router's sub-optimizers check their slots as they do alone; the step here is eager."""
  api = common.flavor_module(flavor)

  def router(**light):
    model, _ = _model(flavor, "LazyAdam", {}, seed=0)
    emb, head = model.get_layer("emb"), model.get_layer("head")
    optimizer = api.CompositeOptimizer([
        (api.LazyAdam(0.1, **light), lambda: emb.trainable_variables),
        (api.ClippyAdagrad(0.1), lambda: head.trainable_variables),
    ])
    return model, optimizer

  model, optimizer = router()
  _step(model, optimizer)
  path = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "ckpt"))
  model, optimizer = router(rowwise_second_moment=True)
  if when == "after":
    _step(model, optimizer)
  variables = list(model.variables) + list(
      optimizer.variables() if callable(optimizer.variables) else optimizer.variables)
  before = _values(variables)
  with pytest.raises(ValueError, match=_message("full-v-into-rowwise-v")):
    tf.train.Checkpoint(model=model, optimizer=optimizer).restore(path)
    variables = list(model.variables)  # restored; the failing step leaves them as they are
    before = _values(variables)
    _step(model, optimizer)
  for want, got in zip(before, _values(variables)):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("flavor", common.FLAVORS)
def test_light_options_are_refused_by_name(flavor):
  api = common.flavor_module(flavor)
  refused = [
      (api.LazyAdam, dict(rowwise_second_moment="no"),
       r"rowwise_second_moment must be True or False, got 'no' of type str"),
      (api.LazyAdam, dict(rowwise_second_moment=None), r"rowwise_second_moment must be True or "),
      (api.LazyAdam, dict(stochastic_rounding="yes"),
       r"stochastic_rounding must be True or False, or None \(on for 16-bit slots\), got 'yes'"),
      (api.LazyAdam, dict(slot_dtype=7.5),
       r"slot_dtype must be None \(the variable's dtype\) or one of 'bfloat16', 'float16', "
       r"'float32' \(a name or a tf.DType\), got 7.5"),
      (api.LazyAdam, dict(slot_dtype=tf.float64), r"slot_dtype must be None .*got tf.float64"),
      (api.LazyAdam, dict(slot_dtype="int8"), r"slot_dtype must be None .*got 'int8'"),
      (api.LazyAdam, dict(seed=True), r"seed must be an integer in \[0, 2\*\*31\), got True"),
      (api.LazyAdam, dict(seed=-1), r"seed must be an integer in \[0, 2\*\*31\), got -1"),
      (api.ClippyAdagrad, dict(accumulator_dtype="half"),
       r"accumulator_dtype must be None \(the variable's dtype\) or one of .*got 'half'"),
      (api.ClippyAdagrad, dict(stochastic_rounding=1), r"stochastic_rounding must be True or "),
      (api.ClippyAdagrad, dict(clip_accumulator_update="yes"),
       r"clip_accumulator_update must be True or False, got 'yes'"),
      (api.ClippyAdagrad, dict(use_standard_accumulator_update=0),
       r"use_standard_accumulator_update must be True or False, got 0"),
      (api.ClippyAdagrad, dict(export_clipping_factors="no"),
       r"export_clipping_factors must be True or False, got 'no'"),
      (api.ClippyAdagrad, dict(seed=2**31), r"seed must be an integer"),
  ]
  for cls, options, message in refused:
    with pytest.raises(ValueError, match=message):
      cls(0.1, **options)
  # A tf.DType names the dtype as its name does; NumPy booleans are booleans.
  accepted = api.LazyAdam(0.1, slot_dtype=tf.bfloat16, rowwise_second_moment=np.True_,
                          stochastic_rounding=False)
  config = accepted.get_config()
  assert config["slot_dtype"] == "bfloat16" and config["rowwise_second_moment"] is True
  clippy = api.ClippyAdagrad(0.1, accumulator_dtype=tf.float16, clip_accumulator_update=True)
  assert clippy.get_config()["accumulator_dtype"] == "float16"
