"""Keras 3 for the Keras 3 flavor's modules (`keras`, `routers.keras`).

`from tf_opt_ops._keras3 import keras` raises ImportError on TensorFlow 2.15,
where `keras` is Keras 2 (tf.keras itself): our Keras 3 classes cannot subclass
it, and registering them in its registry would override the tf_keras flavors'
names. The message says what to use there (see `_keras2.require_keras3`).
"""

import importlib

from tf_opt_ops import _keras2

_keras2.require_keras3()
keras = importlib.import_module("keras")
