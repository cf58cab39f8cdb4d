"""Keras 3 for the Keras 3 flavor's modules (`keras`, `routers.keras`).

`from tf_opt_ops._keras3 import keras` raises ImportError on TensorFlow 2.15,
where `keras` is Keras 2 (tf.keras itself): our Keras 3 classes cannot subclass
it, and registering them in its registry would override the tf_keras flavors'
names. The message says what to use there (see `_keras2.require_keras3`).

It is also the one module that reaches Keras 3's private attributes (docs/design.md,
"Private framework APIs"). Hooks our optimizer subclasses override or call on
themselves (`_momentums`, `_get_variable_index`...) are the subclass API of Keras 3's
optimizer base and stay in the subclasses.
"""

import importlib

from tf_opt_ops import _keras2

_keras2.require_keras3()
keras = importlib.import_module("keras")


def own_trainable_variables(layer):
  """The trainable variables `layer` made itself, not its sublayers'."""
  return list(layer._trainable_variables)


def direct_sublayers(layer):
  """The layers `layer` tracks directly (one level down)."""
  return list(layer._flatten_layers(include_self=False, recursive=False))
