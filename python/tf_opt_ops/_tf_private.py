"""Every private TensorFlow API the package uses, in one place (docs/design.md, "Private
framework APIs").

TensorFlow has no public way to list its op registry, to generate the Python wrappers of ops
it already holds, to tell that a graph is being compiled by XLA, or to go from a replica's
or a shard's component to the variable the user made. Each use is one function here, so a
TensorFlow release that moves one breaks this module alone, and tests/packaging/
test_private_apis.py keeps other modules from reaching them.
"""

import sys

import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.framework import _pywrap_python_op_gen
from tensorflow.python.ops import control_flow_util


def all_registered_ops():
  """Every op in this process's op registry (an OpList proto)."""
  buffer = pywrap_tf_session.TF_GetAllOpList()
  try:
    return op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(buffer))
  finally:
    pywrap_tf_session.TF_DeleteBuffer(buffer)


def python_op_wrappers(op_list):
  """The Python source of the op wrappers tf.load_op_library makes for `op_list` (an OpList)."""
  return _pywrap_python_op_gen.GetPythonWrappers(op_list.SerializeToString())


def in_xla_context():
  """True while tracing inside an XLA-compiled function (`jit_compile=True`)."""
  if tf.executing_eagerly():
    return False
  return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def distributed_container(variable):
  """The DistributedVariable whose replica component `variable` (or its handle) is, else
  `variable`: one key per distributed variable, as Keras' own optimizers key their slots."""
  if hasattr(variable, "_distributed_container"):
    return variable._distributed_container()
  try:
    handle = variable.handle
  except (AttributeError, ValueError):  # A DistributedVariable in cross-replica context.
    return variable
  if hasattr(handle, "_distributed_container"):
    return handle._distributed_container()
  return variable


def unique_id(variable):
  """The id TensorFlow gives `variable` for its lifetime (Python's `id` for other objects)."""
  return getattr(variable, "_unique_id", id(variable))


def variable_key(variable):
  """One key per variable the user made: replicas' components share their distributed
  variable's."""
  return unique_id(distributed_container(variable))


def shared_name(variable):
  """The name of `variable`'s resource without the ":0" (None when it has none): the name
  checkpoints and the runtime know a variable by, where `name` may be a replica's."""
  return getattr(variable, "_shared_name", None)


def given_name(obj):
  """The name `obj` was made with, as tf.Module and both Keras 2 optimizer bases keep it
  (`_name`), else None."""
  return getattr(obj, "_name", None)


def mark_as_plugin(module):
  """Marks an op module as tf.load_op_library marks the ones it returns."""
  module._IS_TENSORFLOW_PLUGIN = True


def sharded_container(variable):
  """The `ShardedVariable` `variable` is a shard of, or None."""
  container = getattr(variable, "_sharded_container", None)
  return container() if container is not None else None


# ------------------------------------------------------------------ checkpoint restores
# A trackable sees nothing of the checkpoint while TensorFlow restores its children (only their
# names, through `_lookup_dependency`), yet the saved slots' dtypes and shapes must be checked
# before TensorFlow assigns any (docs/design.md, "Light state").


def deferred_dependencies(trackable):
  """{child name: [CheckpointPosition]} restored into `trackable` before the child existed."""
  return dict(getattr(trackable, "_deferred_dependencies", None) or {})


def child_positions(position):
  """{local name: CheckpointPosition} of the children of `position`'s object."""
  return {
      child.local_name: type(position)(checkpoint=position.checkpoint, proto_id=child.node_id)
      for child in position.object_proto.children
  }


def saved_tensor_dtype_and_shape(position):
  """(dtype, shape) of the tensor saved at checkpoint `position`, or None when it has none."""
  attributes = position.object_proto.attributes
  if not attributes:
    return None
  key = attributes[0].checkpoint_key
  coordinator = position.checkpoint
  if key not in coordinator.dtype_map:
    return None
  return coordinator.dtype_map[key], coordinator.shape_map[key]


def restoring_position(trackable):
  """The CheckpointPosition of `trackable` in the restore now looking up its children, or None.

  The position is a local (`checkpoint_position`) of the restore's frame that asks; a
  TensorFlow that names it otherwise gets None, and the check is left to the restore's own
  errors and to the check at the first step.
  """
  frame = sys._getframe(1)
  for _ in range(6):
    if frame is None:
      return None
    position = frame.f_locals.get("checkpoint_position")
    if (position is not None and hasattr(position, "object_proto") and
        getattr(position, "trackable", None) is trackable):
      return position
    frame = frame.f_back
  return None
