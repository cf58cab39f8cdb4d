"""Serialization names of our classes, and the aliases of the classes we replace.

One policy for every flavor and every class (optimizers and routers alike):

- each class is registered under our own name, `package>ClassName`, and saves
  under it;
- each alias (the name a replaced library saved under, such as
  `Addons>LazyAdam` or `merlin.models>MultiOptimizer`) is written into the same
  Keras registry and overrides an entry already there, so a model file written
  by that library loads into our class even when the library itself was
  imported first.
"""

import importlib

from tf_opt_ops import _keras2

# The module whose serialization registry each Keras API reads. "tf_keras" is
# the Keras 2 package of this TensorFlow (keras 2.15 on TensorFlow 2.15, where
# it is tf.keras and its registry is the one tf.keras reads): see `_keras2`.
_KERAS_UTILS = {"keras": "keras.saving", "tf_keras": f"{_keras2.NAME}.utils"}


def register(api, cls, package, aliases=()):
  """Registers `cls` in the registry of Keras `api` ("keras" or "tf_keras").

  `cls` saves as `package>ClassName`; every name in `aliases` resolves to it too.
  """
  utils = importlib.import_module(_KERAS_UTILS[api])
  utils.register_keras_serializable(package=package, name=cls.__name__)(cls)
  objects = utils.get_custom_objects()
  for alias in aliases:
    objects[alias] = cls
  return cls
