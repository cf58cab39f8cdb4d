"""Converting a checkpoint's Adam slots between LazyAdam's slot layouts.

A checkpoint keeps each slot in the dtype and shape of the optimizer that
wrote it (`LazyAdam(slot_dtype=..., rowwise_second_moment=...)`, or Adam's own
float slots), and restores only into an optimizer of that layout.
`convert_checkpoint` writes a copy in another layout: m and v cast to the new
slot dtype; a per-element v becomes its row mean for a row-wise v, and a
row-wise v is repeated over the row for a per-element one. Everything else is
copied bit for bit. Why: see docs/design.md, "Light state".

It finds the slots in the checkpoint's object graph, so it converts the
checkpoints of every Keras flavor and router: the `_momentums`/`_velocities`
lists of a Keras 3 or tf_keras `Adam`/`LazyAdam` (paired by position), and the
`m`/`v` slots of an OptimizerV2 `Adam`/`LazyAdam` (paired by variable).
Slots of rank 0 and float64 slots are copied as they are, as LazyAdam keeps
them.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"
_SLOT_DTYPES = ("bfloat16", "float16", "float32")
_CONVERTIBLE = (tf.float16, tf.bfloat16, tf.float32)


def adam_slot_pairs(checkpoint_prefix):
  """[(m checkpoint key, v checkpoint key)] of every Adam-like optimizer in the checkpoint."""
  reader = tf.train.load_checkpoint(checkpoint_prefix)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH))

  def key(node_id):
    attributes = graph.nodes[node_id].attributes
    return attributes[0].checkpoint_key if attributes else None

  def listed(node, name):
    lists = [c.node_id for c in node.children if c.local_name == name]
    if not lists:
      return {}
    return {c.local_name: c.node_id for c in graph.nodes[lists[0]].children}

  pairs = []
  for node in graph.nodes:
    momentums, velocities = listed(node, "_momentums"), listed(node, "_velocities")
    for position, m in momentums.items():
      if position in velocities:
        pairs.append((key(m), key(velocities[position])))
    slots = {}
    for slot in node.slot_variables:
      slots.setdefault(slot.original_variable_node_id,
                       {})[slot.slot_name] = slot.slot_variable_node_id
    for named in slots.values():
      if "m" in named and "v" in named:
        pairs.append((key(named["m"]), key(named["v"])))
  return [(m, v) for m, v in pairs if m is not None and v is not None]


def _converted_v(v, m_shape, rowwise):
  """v in float64, as a row-wise v (the row means) or per element (each row's value repeated)."""
  v = v.astype(np.float64)
  if rowwise and v.shape != tuple(m_shape[:1]):
    return v.reshape(v.shape[0], -1).mean(axis=1)
  if not rowwise and v.shape != tuple(m_shape):
    return np.broadcast_to(v.reshape((-1,) + (1,) * (len(m_shape) - 1)), m_shape)
  return v


def convert_checkpoint(checkpoint_prefix, output_prefix, *, slot_dtype, rowwise_second_moment):
  """Writes `checkpoint_prefix` to `output_prefix` with its Adam slots in another layout.

  `slot_dtype` ("bfloat16", "float16" or "float32") and `rowwise_second_moment`
  are the options of the LazyAdam that will restore the output (Adam's own
  layout for a float32 table: "float32", False). m and v are cast (rounded to
  nearest); v becomes its row means, or is repeated over each row. Tensors are
  written one at a time, so the memory needed is that of the largest one.
  Logs one line saying what was converted; returns the number of slot pairs.
  """
  if slot_dtype not in _SLOT_DTYPES:
    raise ValueError(f"slot_dtype must be one of {', '.join(map(repr, _SLOT_DTYPES))}, got "
                     f"{slot_dtype!r}.")
  target = tf.as_dtype(slot_dtype)
  reader = tf.train.load_checkpoint(checkpoint_prefix)
  dtypes, shapes = reader.get_variable_to_dtype_map(), reader.get_variable_to_shape_map()
  slot_pairs = adam_slot_pairs(checkpoint_prefix)
  if not slot_pairs:
    raise ValueError(
        f"{checkpoint_prefix} holds no Adam slots this can find: no OptimizerV2 `m`/`v` slots "
        f"and no `_momentums`/`_velocities` lists in its object graph. (A stock tf_keras "
        f"optimizer restored before its first step and saved again lists its slots only in "
        f"`_variables`; tf_opt_ops' optimizers list them.)")
  converters = {}
  pairs = 0
  for m_key, v_key in slot_pairs:
    if dtypes[m_key] not in _CONVERTIBLE or len(shapes[m_key]) == 0:
      continue
    pairs += 1
    m_shape = shapes[m_key]
    converters[m_key] = lambda m: m.astype(np.float64)
    converters[v_key] = lambda v, m_shape=m_shape: _converted_v(v, m_shape, rowwise_second_moment)
  with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(output_prefix))) as staging:
    parts = []
    for k, name in enumerate(sorted(dtypes)):
      value = reader.get_tensor(name)
      if name in converters:
        value = tf.cast(converters[name](value), target)
      part = os.path.join(staging, f"part{k}")
      tf.raw_ops.SaveV2(prefix=part, tensor_names=[name], shape_and_slices=[""],
                        tensors=[tf.convert_to_tensor(value)])
      parts.append(part)
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=output_prefix,
                                  delete_old_dirs=False)
  tf.get_logger().warning(
      "tf_opt_ops: %s -> %s: %d LazyAdam/Adam slot pairs now %s m and %s v", checkpoint_prefix,
      output_prefix, pairs, slot_dtype,
      f"row-wise {slot_dtype}" if rowwise_second_moment else f"per-element {slot_dtype}")
  return pairs
