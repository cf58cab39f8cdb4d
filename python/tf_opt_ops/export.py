"""SavedModels that TensorFlow's C++ loader (TF Serving) runs, from any Keras flavor.

`tf.saved_model.save(module)` of a module that holds Keras 3 layers, variables
or optimizers writes each variable twice: the Keras variable (what the C++
loader restores) and its inner `tf.Variable` (what the functions read). Python's
loader matches them by object, the C++ loader by graph node, so there every
function fails with "Could not find variable". `save` exports the functions
with exactly the `tf.Variable`s they capture, once each; `save_version` writes
such an export as the next version of a TF Serving model atomically. Why: see
docs/design.md, "Production".
"""

import os
import re
import shutil
import tempfile

import tensorflow as tf

from tf_opt_ops import _keras2

if _keras2.has_keras3():
  import keras
  _Keras3Variable = keras.Variable
else:  # TensorFlow 2.15: `keras` is Keras 2, whose variables are tf.Variables.
  _Keras3Variable = ()  # isinstance(x, ()) is False


def _resource(trackable):
  """The tf.Variable or other resource (a lookup table...) that `trackable` holds, if any."""
  if isinstance(trackable, tf.Variable):
    return trackable
  if isinstance(trackable, _Keras3Variable):  # Keras 3: a wrapper around a tf.Variable
    value = trackable.value
    return value if isinstance(value, tf.Variable) else None
  if isinstance(trackable, tf.saved_model.experimental.TrackableResource):
    return trackable
  return None


def _handle(resource):
  return resource.handle if isinstance(resource, tf.Variable) else resource.resource_handle


def _trackables(roots):
  """Everything `roots` track, and the variables each lists: optimizer slots are no
  children in the object graph (tf_keras OptimizerV2 lists them in `variables()`)."""
  for root in roots:
    try:
      descendants = tf.train.TrackableView(root).descendants()
    except TypeError:  # Keras 3 Sequential's layer dict sorts keys that do not compare
      descendants = []
    for trackable in [root] + descendants:
      yield trackable
      try:
        listed = getattr(trackable, "variables", None)
        listed = list((listed() if callable(listed) else listed) or ())
      except TypeError:  # a `variables` that is no list of variables, or fails to list
        listed = []
      yield from listed


def _concrete(function):
  if isinstance(function, tf.types.experimental.ConcreteFunction):
    return function
  return function.get_concrete_function()


def exportable(root, functions):
  """A tf.Module with `functions` (name -> tf.function with an input_signature, or a
  concrete function) as attributes, tracking the tf.Variables (and other resources,
  such as lookup tables) they capture, and nothing else.

  They are looked up among everything `root` (a tf.Module, Keras model,
  optimizer... or a list of them) tracks, Keras 3 variables by their inner tf.Variable.
  """
  captured = {
      id(handle)
      for function in functions.values()
      for handle in _concrete(function).captured_inputs
      if handle.dtype == tf.resource
  }
  resources = {}
  roots = list(root) if isinstance(root, (list, tuple)) else [root]
  for trackable in _trackables(roots):
    resource = _resource(trackable)
    if resource is not None and id(_handle(resource)) in captured:
      resources.setdefault(id(resource), resource)
  missing = len(captured) - len(resources)
  if missing > 0:
    raise ValueError(
        f"tf_opt_ops.export: {missing} variable(s) or resource(s) that the functions use are not "
        f"tracked by {root!r}. Pass every object whose variables they use, e.g. "
        f"[model, optimizer].")
  module = tf.Module()
  module.captured_resources = list(resources.values())
  for name, function in functions.items():
    setattr(module, name, function)
  return module


def save(root, export_dir, signatures):
  """Saves `signatures` (name -> function, see `exportable`) to `export_dir`.

  An export whose signatures use no tf_opt_ops op (inference) loads where the
  library is not installed; one with a training signature needs the library
  (`import tf_opt_ops`, `TF_LoadLibrary`, or the ops linked into the server).
  """
  tf.saved_model.save(exportable(root, signatures), export_dir, signatures=signatures)


_VERSION = re.compile(r"^\d+$")


def versions(base_path):
  """The model versions (numeric folders) under a TF Serving model base path."""
  if not os.path.isdir(base_path):
    return []
  return sorted(int(name) for name in os.listdir(base_path) if _VERSION.match(name))


def save_version(root, base_path, signatures, version=None):
  """Writes the export as version `version` (default: the latest + 1) under `base_path`.

  The export is written to a temporary folder beside the versions and renamed
  into place, so TF Serving, which polls `base_path` for numeric folders, never
  sees a half-written version; a crash leaves only a temporary folder, removed
  by the next call (so one writer per base path). Returns the version's path.
  """
  os.makedirs(base_path, exist_ok=True)
  for name in os.listdir(base_path):
    if name.startswith(".tmp-"):  # left by a writer that crashed
      shutil.rmtree(os.path.join(base_path, name), ignore_errors=True)
  if version is None:
    version = (versions(base_path) or [0])[-1] + 1
  final = os.path.join(base_path, str(version))
  if os.path.exists(final):
    raise FileExistsError(f"tf_opt_ops.export: version {version} already exists at {final}; "
                          f"versions are immutable once served, export the next one.")
  staging = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=base_path)
  os.chmod(staging, 0o755)  # mkdtemp's 0700 would hide it from a server running as another user
  save(root, staging, signatures)
  _sync_tree(staging)  # on disk before it has a name a server reads, even after a power loss
  os.rename(staging, final)  # atomic on one filesystem
  _sync(base_path)
  return final


def _sync(path):
  descriptor = os.open(path, os.O_RDONLY)
  try:
    os.fsync(descriptor)
  finally:
    os.close(descriptor)


def _sync_tree(path):
  for folder, _, files in os.walk(path):
    for name in files:
      _sync(os.path.join(folder, name))
    _sync(folder)
