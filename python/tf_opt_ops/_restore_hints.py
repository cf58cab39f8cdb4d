"""Errors that name the class to use when a checkpoint meets the wrong Keras flavor.

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
