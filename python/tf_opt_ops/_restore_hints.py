"""Errors that say what to do when a checkpoint meets the wrong optimizer: the class to use
when it meets the wrong Keras flavor, the options when it holds another slot layout.

TensorFlow Addons' and Merlin's `LazyAdam` are tf_keras legacy optimizers
(OptimizerV2). Restoring their checkpoints into a tf_keras (not legacy) optimizer
fails in tf_keras with a message that names `tf.keras.optimizers.legacy.<Class>`,
a class that does not exist for ours. Why the flavors differ: see
docs/design.md, "Keras flavors and checkpoints".
"""

import contextlib
import re

import tensorflow as tf

from tf_opt_ops import _core
from tf_opt_ops import _keras2
from tf_opt_ops import _tf_private

# What tf_keras' new Optimizer says when a checkpoint holds OptimizerV2 slots
# ("... from a legacy TF-Keras optimizer into a v2.11+ Optimizer"; keras 2.15,
# TensorFlow 2.15's tf.keras, says "legacy Keras optimizer").
_TF_KERAS_LEGACY_CHECKPOINT = "optimizer into a v2.11+ Optimizer"


@contextlib.contextmanager
def name_the_legacy_class(optimizer):
  """Re-raises tf_keras' legacy-checkpoint error naming `tf_opt_ops.legacy.<Class>`."""
  try:
    yield
  except ValueError as e:
    if _TF_KERAS_LEGACY_CHECKPOINT not in str(e):
      raise
    name = type(optimizer).__name__
    raise ValueError(
        f"This checkpoint was written by a tf_keras legacy optimizer (OptimizerV2, as TensorFlow "
        f"Addons' and Merlin's LazyAdam are), but it is being restored into "
        f"{type(optimizer).__module__}.{name}, a tf_keras optimizer (not legacy) whose checkpoint "
        f"layout differs. Use tf_opt_ops.legacy.{name} instead (under TF_USE_LEGACY_KERAS=1 the "
        f"top-level tf_opt_ops.{name} is the tf_keras class).") from e


# What TensorFlow says when a checkpoint's tensor has another dtype than the variable it is
# restored into.
_DTYPE_MISMATCH = re.compile(r"tensor_name = (\S+); expected dtype (\w+) does not equal "
                             r"original dtype (\w+)")


@contextlib.contextmanager
def name_the_slot_layout(optimizer):
  """Around slot creation: a checkpoint's slots of another dtype fail naming the slot layout."""
  try:
    yield
  except tf.errors.InvalidArgumentError as e:
    found = _DTYPE_MISMATCH.search(str(e))
    if found is None:
      raise
    key, want, saved = found.groups()
    raise ValueError(
        f"The checkpoint's optimizer state does not have the slot layout of this "
        f"{type(optimizer).__name__}: {key} was saved as {saved}, and this optimizer keeps it as "
        f"{want}. {_core.LAYOUT_ADVICE}") from e


# ----------------------------------------------------------------------------- slot layouts
#
# A checkpoint keeps each slot in the dtype and shape of the optimizer that wrote it. Restoring
# it into an optimizer of another layout must fail before anything is assigned: TensorFlow
# would otherwise fail half-way (a shape) or with a bare RestoreV2 error (a dtype), and Keras 3
# and tf_keras, whose slot lists swallow a shape mismatch while they fill, would leave the slot
# at zeros and report the restore as consumed. Every check below compares the saved (dtype,
# shape) of each slot with the one this optimizer keeps and raises one ValueError (ValueError
# itself: AutoGraph re-raises a subclass from a traced step as a StagingError). Why: see
# docs/design.md, "Light state".

# The slot lists of the Keras 3 and tf_keras optimizers, by the slot each holds.
SLOT_LISTS = {"_momentums": "m", "_velocities": "v", "_accumulators": "accumulator"}


def _layout(dtype, shape):
  return tf.as_dtype(dtype).name, tuple(tf.TensorShape(shape).as_list())


def _describe(slot, layout, layouts):
  dtype, shape = layout
  text = f"{dtype}[{', '.join(map(str, shape))}]"
  if slot == "v" and "m" in layouts:
    text += " (one value per row)" if shape != layouts["m"][1] else " (per element)"
  return text


def _rowwise(layouts):
  return "v" in layouts and "m" in layouts and layouts["v"][1] != layouts["m"][1]


def _options(layouts):
  """The light options that give `layouts` ({slot: (dtype, shape)} of one variable), as text."""
  if "accumulator" in layouts:
    return f"accumulator_dtype={layouts['accumulator'][0]!r}"
  dtype = (layouts.get("m") or layouts["v"])[0]
  return f"slot_dtype={dtype!r}, rowwise_second_moment={_rowwise(layouts)}"


def _accumulator_rows_differ(saved, current):
  """Whether one of the two accumulators keeps a value per row (RowwiseAdagrad's) and the other
  one per element (Adagrad's, ClippyAdagrad's): no constructor option bridges the two."""
  if "accumulator" not in saved or "accumulator" not in current:
    return False
  saved_shape, current_shape = saved["accumulator"][1], current["accumulator"][1]
  return (len(saved_shape) != len(current_shape) and saved_shape[:1] == current_shape[:1])


def check_slot_layouts(optimizer, variable_name, saved, current):
  """Raises ValueError when `saved` and `current` ({slot: (dtype name, shape tuple)}, the
  slots of one variable in the checkpoint and in `optimizer`) differ in any slot both have."""
  for slot in sorted(set(saved) & set(current)):
    if saved[slot] != current[slot]:
      name = type(optimizer).__name__
      saved_as = _describe(slot, saved[slot], saved)
      if _accumulator_rows_differ(saved, current):
        to_rowwise = len(current["accumulator"][1]) < len(saved["accumulator"][1])
        saved_as += (" by a per-element Adagrad (Adagrad, ClippyAdagrad)" if to_rowwise else
                     " by RowwiseAdagrad")
        conversion = "the row means" if to_rowwise else "each row value repeated along its row"
        advice = (f"Convert the checkpoint first: tf_opt_ops.convert_checkpoint(path, new_path, "
                  f"rowwise_accumulator={to_rowwise}) ({conversion}), or restore it into the "
                  f"optimizer that wrote it.")
      else:
        advice = (f"To restore the checkpoint as it is, construct the optimizer with the options "
                  f"it was written with: {name}({_options(saved)}). To go on in this optimizer's "
                  f"layout, convert the checkpoint first: tf_opt_ops.convert_checkpoint(path, "
                  f"new_path, {_options(current)}).")
      raise ValueError(
          f"The checkpoint's optimizer state does not have the slot layout of this {name} (no "
          f"slot was restored): slot {slot!r} of {variable_name} was saved as {saved_as}, and "
          f"this {name} keeps it as {_describe(slot, current[slot], current)}. {advice}")


def saved_layout(position):
  """(dtype name, shape tuple) of the tensor saved at checkpoint `position`, or None."""
  saved = _tf_private.saved_tensor_dtype_and_shape(position)
  return None if saved is None else _layout(*saved)


def saved_slot_lists(positions_by_list):
  """{index: {slot: (dtype, shape)}} of the slot lists at `positions_by_list` ({list name:
  CheckpointPosition}; lists not in SLOT_LISTS are left out)."""
  saved = {}
  for list_name, position in positions_by_list.items():
    if list_name not in SLOT_LISTS:
      continue
    for index, child in _tf_private.child_positions(position).items():
      layout = saved_layout(child)
      if layout is not None and index.isdigit():
        saved.setdefault(int(index), {})[SLOT_LISTS[list_name]] = layout
  return saved


def check_deferred_slot_lists(optimizer, var_list, current_layouts):
  """Before a Keras 3 / tf_keras optimizer builds its slots: a checkpoint restored before (its
  slot lists wait in `_deferred_dependencies`) must have the layout `current_layouts(var)`
  ({slot: (dtype, shape)}) gives each of `var_list`, the lists' order."""
  deferred = {
      name: positions[-1]
      for name, positions in _tf_private.deferred_dependencies(optimizer).items()
      if name in SLOT_LISTS and positions
  }
  if not deferred:
    return
  var_list = list(var_list)
  for index, saved in sorted(saved_slot_lists(deferred).items()):
    if index < len(var_list):
      var = var_list[index]
      check_slot_layouts(optimizer, _variable_name(var), saved, current_layouts(var))


def check_restored_slot_lists(optimizer, slot_lists):
  """While a checkpoint is restored into a built Keras 3 / tf_keras `optimizer` (called from its
  `_lookup_dependency`): the saved slot lists must have the layout of `slot_lists` ({list name:
  the optimizer's list of slot variables}), checked before TensorFlow reads or assigns any."""
  position = _tf_private.restoring_position(optimizer)
  if position is None:
    return
  saved = saved_slot_lists(_tf_private.child_positions(position))
  for index, saved_slots in sorted(saved.items()):
    current, slot_variable = {}, None
    for list_name, variables in slot_lists.items():
      if index < len(variables) and hasattr(variables[index], "shape"):
        if slot_variable is None:
          slot_variable = variables[index]
        current[SLOT_LISTS[list_name]] = _layout(variables[index].dtype, variables[index].shape)
    if current:
      check_slot_layouts(optimizer, _name_of(optimizer, index, slot_variable), saved_slots, current)


def _variable_name(var):
  name = getattr(var, "path", None) or getattr(var, "name", None) or repr(var)
  return repr(str(name).split(":")[0])


def check_slot_variable_position(optimizer, position, variable, current):
  """OptimizerV2 (`_create_or_restore_slot_variable`): the saved slots of `variable` (found
  from its slot at checkpoint `position`) must have the layout `current` ({slot: (dtype,
  shape)}) says."""
  graph = position.checkpoint.object_graph_proto
  saved = {}
  for node in graph.nodes:
    entries = list(node.slot_variables)
    original = next((s.original_variable_node_id
                     for s in entries
                     if s.slot_variable_node_id == position.proto_id), None)
    if original is None:
      continue
    for entry in entries:
      if entry.original_variable_node_id == original:
        layout = saved_layout(
            type(position)(checkpoint=position.checkpoint, proto_id=entry.slot_variable_node_id))
        if layout is not None:
          saved[entry.slot_name] = layout
    break
  check_slot_layouts(optimizer, _variable_name(variable), saved, current)


def check_stored_slots(optimizer, store):
  """Keras files (`.keras`, Keras 3's `.weights.h5`; `load_own_variables`): the stored slots
  must have the layout of `optimizer`'s, checked before any is assigned (Keras would cast a
  dtype and fail on a shape half-way)."""
  variables = list(optimizer.variables)
  if len(store.keys()) != len(variables):
    return  # Keras skips the state itself, with a warning
  slots = {}  # id(slot variable) -> (slot, index in its list)
  for list_name, slot in SLOT_LISTS.items():
    for index, var in enumerate(getattr(optimizer, list_name, None) or []):
      slots[id(var)] = (slot, index)
  saved, current, slot_variables = {}, {}, {}
  for k, var in enumerate(variables):
    if id(var) in slots:
      slot, index = slots[id(var)]
      value = store[str(k)]
      current.setdefault(index, {})[slot] = _layout(var.dtype, var.shape)
      try:
        saved_dtype = tf.as_dtype(value.dtype)
      except TypeError:  # tf_keras writes bfloat16 as two opaque bytes: only the shape tells
        saved_dtype = var.dtype
      saved.setdefault(index, {})[slot] = _layout(saved_dtype, value.shape)
      slot_variables.setdefault(index, var)
  for index in sorted(saved):
    check_slot_layouts(optimizer, _name_of(optimizer, index, slot_variables[index]), saved[index],
                       current[index])


def _keras3_model_variables(optimizer):
  if not _keras2.has_keras3():
    return []
  from tf_opt_ops import _keras3  # Keras 3 only where there is one (TensorFlow 2.16+)
  return _keras3.optimizer_model_variables(optimizer)


def _name_of(optimizer, index, slot_variable):
  """The name of the model variable of `optimizer`'s slots at `index` of its slot lists."""
  model_variables = _keras3_model_variables(optimizer)
  if index < len(model_variables):
    return _variable_name(model_variables[index])
  # tf_keras keeps no list of its model variables: the slot's name says which.
  return f"the variable of slot variable {_variable_name(slot_variable)}"
