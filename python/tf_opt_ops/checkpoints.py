"""Converting a checkpoint's optimizer state between slot layouts (LazyAdam's, the Adagrads').

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
them. ClippyAdagrad's accumulators (the `_accumulators` lists, or OptimizerV2
`accumulator` slots) are cast to `accumulator_dtype` when it is given.

The same accumulators (Keras' and tf_keras' `Adagrad`, ClippyAdagrad) convert
to and from RowwiseAdagrad's [rows] accumulator (`rowwise_accumulator`): a
per-element accumulator becomes its row mean, FBGEMM's row-wise state (the
mean of the squared gradients, which is the mean of the per-element sums), and
a row-wise one is repeated over its row. Repeating needs the variable's shape:
a Keras 3 checkpoint pairs each accumulator with its variable (the optimizer's
`_trainable_variables`), an OptimizerV2 one names it (the slot's variable); a
tf_keras one does not, so the shape is that of the checkpoint's only variable
with that many rows, or `variable_shapes` gives it.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"
_SLOT_DTYPES = ("bfloat16", "float16", "float32")
_CONVERTIBLE = (tf.float16, tf.bfloat16, tf.float32)


def _object_graph(checkpoint_prefix):
  """The checkpoint's object graph, and the function giving a node's checkpoint key (None for a
  node that holds no value)."""
  reader = tf.train.load_checkpoint(checkpoint_prefix)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH))

  def key(node_id):
    attributes = graph.nodes[node_id].attributes
    return attributes[0].checkpoint_key if attributes else None

  return graph, key


def adam_slot_pairs(checkpoint_prefix):
  """[(m checkpoint key, v checkpoint key)] of every Adam-like optimizer in the checkpoint."""
  graph, key = _object_graph(checkpoint_prefix)

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


def accumulators(checkpoint_prefix):
  """The checkpoint keys of every Clippy-like (`_accumulators` / `accumulator`) accumulator."""
  graph, key = _object_graph(checkpoint_prefix)
  nodes = []
  for node in graph.nodes:
    for child in node.children:
      if child.local_name == "_accumulators":
        nodes += [c.node_id for c in graph.nodes[child.node_id].children]
    nodes += [s.slot_variable_node_id for s in node.slot_variables if s.slot_name == "accumulator"]
  return [key(n) for n in nodes if graph.nodes[n].attributes]


def _accumulator_variables(checkpoint_prefix):
  """{accumulator checkpoint key: its variable's checkpoint key, or None where the object graph
  does not link them (tf_keras)}, and the keys of every optimizer's own variables."""
  graph, key = _object_graph(checkpoint_prefix)

  def listed(node, name):
    return [[c.node_id
             for c in graph.nodes[child.node_id].children]
            for child in node.children
            if child.local_name == name][0]

  paired, optimizer_keys = {}, set()
  for node in graph.nodes:
    names = {c.local_name for c in node.children}
    if "_accumulators" in names:
      found = listed(node, "_accumulators")
      trained = listed(node, "_trainable_variables") if "_trainable_variables" in names else []
      for position, accumulator in enumerate(found):
        paired[key(accumulator)] = key(trained[position]) if len(trained) == len(found) else None
    for slot in node.slot_variables:
      if slot.slot_name == "accumulator":
        paired[key(slot.slot_variable_node_id)] = key(slot.original_variable_node_id)
      optimizer_keys.add(key(slot.slot_variable_node_id))
    if "_iterations" in names or "iter" in names or node.slot_variables:
      optimizer_keys |= {key(c.node_id) for c in node.children}
      for child in node.children:
        if child.local_name != "_trainable_variables":  # the model's, listed by Keras 3
          optimizer_keys |= {key(c.node_id) for c in graph.nodes[child.node_id].children}
  optimizer_keys |= set(paired)
  return paired, optimizer_keys


def _variable_shape(accumulator_key, variable_key, shapes, optimizer_keys, variable_shapes):
  """The shape of the variable `accumulator_key` belongs to."""
  if variable_shapes and accumulator_key in variable_shapes:
    return list(variable_shapes[accumulator_key])
  if variable_key is not None:
    return list(shapes[variable_key])
  rows = shapes[accumulator_key][0]
  candidates = sorted({
      tuple(shape)
      for name, shape in shapes.items()
      if name not in optimizer_keys and name != _OBJECT_GRAPH and shape and shape[0] == rows
  })
  if len(candidates) != 1:
    raise ValueError(
        f"The checkpoint does not say which variable accumulator {accumulator_key} (shape "
        f"{shapes[accumulator_key]}) belongs to, and its variables with {rows} rows have "
        f"{'shapes ' + ', '.join(map(str, candidates)) if candidates else 'no shape'}: pass "
        f"variable_shapes={{{accumulator_key!r}: <the variable's shape>}}.")
  return list(candidates[0])


def _converted_v(v, m_shape, rowwise):
  """v (float64) as a row-wise v (the row means) or per element (each row's value repeated)."""
  if rowwise and v.shape != tuple(m_shape[:1]):
    return v.reshape(v.shape[0], -1).mean(axis=1)
  if not rowwise and v.shape != tuple(m_shape):
    return np.broadcast_to(v.reshape((-1,) + (1,) * (len(m_shape) - 1)), m_shape)
  return v


def convert_checkpoint(checkpoint_prefix, output_prefix, *, slot_dtype=None,
                       rowwise_second_moment=None, accumulator_dtype=None, rowwise_accumulator=None,
                       variable_shapes=None):
  """Writes `checkpoint_prefix` to `output_prefix` with its optimizer state in another layout.

  `slot_dtype` ("bfloat16", "float16" or "float32") and `rowwise_second_moment`
  are the options of the LazyAdam that will restore the output (Adam's own
  layout for a float32 table: "float32", False); `accumulator_dtype` that of
  the ClippyAdagrad. `rowwise_accumulator` True converts every Adagrad
  accumulator (Keras' or tf_keras' `Adagrad`, ClippyAdagrad) for a
  RowwiseAdagrad: each row's mean, in RowwiseAdagrad's float32 (float64 for a
  float64 one); False converts RowwiseAdagrad's back for an Adagrad: each row's
  value repeated over the row, in `accumulator_dtype` if given.
  `variable_shapes` ({accumulator checkpoint key: shape}) gives the shapes of
  the variables the checkpoint does not link to their accumulators (tf_keras
  with several variables of the same number of rows). None leaves that part as
  it is. m, v and accumulators are cast (rounded to nearest); v becomes its row
  means, or is repeated over each row. Tensors are written one at a time, so
  the memory needed is that of the largest one. Logs one line saying what was
  converted; returns the number of tensors converted.
  """
  for name, value in (("slot_dtype", slot_dtype), ("accumulator_dtype", accumulator_dtype)):
    if value is not None and value not in _SLOT_DTYPES:
      raise ValueError(f"{name} must be one of {', '.join(map(repr, _SLOT_DTYPES))} or None, "
                       f"got {value!r}.")
  if (slot_dtype is None and rowwise_second_moment is None and accumulator_dtype is None and
      rowwise_accumulator is None):
    raise ValueError("Nothing to convert: give slot_dtype and/or rowwise_second_moment (LazyAdam), "
                     "accumulator_dtype (ClippyAdagrad) or rowwise_accumulator (Adagrad <-> "
                     "RowwiseAdagrad).")
  if rowwise_accumulator and accumulator_dtype is not None:
    raise ValueError(f"RowwiseAdagrad keeps its accumulator in its compute type (float32), so "
                     f"rowwise_accumulator=True takes no accumulator_dtype (got "
                     f"{accumulator_dtype!r}): leave it out.")
  reader = tf.train.load_checkpoint(checkpoint_prefix)
  dtypes, shapes = reader.get_variable_to_dtype_map(), reader.get_variable_to_shape_map()
  converters = {}  # checkpoint key -> (function of the NumPy value, dtype to store)
  if slot_dtype is not None or rowwise_second_moment is not None:
    slot_pairs = adam_slot_pairs(checkpoint_prefix)
    if not slot_pairs:
      raise ValueError(
          f"{checkpoint_prefix} holds no Adam slots this can find: no OptimizerV2 `m`/`v` slots "
          f"and no `_momentums`/`_velocities` lists in its object graph. (A stock tf_keras "
          f"optimizer restored before its first step and saved again lists its slots only in "
          f"`_variables`; tf_opt_ops' optimizers list them.)")
    for m_key, v_key in slot_pairs:
      if dtypes[m_key] not in _CONVERTIBLE or len(shapes[m_key]) == 0:
        continue
      target = tf.as_dtype(slot_dtype) if slot_dtype else dtypes[m_key]
      rowwise = (rowwise_second_moment if rowwise_second_moment is not None else list(shapes[v_key])
                 != list(shapes[m_key]))
      converters[m_key] = (lambda m: m, target)
      converters[v_key] = (
          lambda v, m_shape=shapes[m_key], rowwise=rowwise: _converted_v(v, m_shape, rowwise),
          target)
  if accumulator_dtype is not None or rowwise_accumulator is not None:
    found = accumulators(checkpoint_prefix)
    if not found:
      raise ValueError(f"{checkpoint_prefix} holds no Adagrad accumulators this can find "
                       f"(`_accumulators` lists or OptimizerV2 `accumulator` slots).")
    paired, optimizer_keys = (_accumulator_variables(checkpoint_prefix) if rowwise_accumulator
                              is not None else ({}, set()))
    for key in found:
      if rowwise_accumulator is None:
        if dtypes[key] in _CONVERTIBLE:
          converters[key] = (lambda a: a, tf.as_dtype(accumulator_dtype))
      elif rowwise_accumulator and dtypes[key] in _CONVERTIBLE + (tf.float64,):
        compute = tf.float64 if dtypes[key] == tf.float64 else tf.float32
        converters[key] = (lambda a: a.reshape(a.shape[0], -1).mean(axis=1)
                           if a.ndim else a, compute)
      elif not rowwise_accumulator and dtypes[key] in _CONVERTIBLE + (tf.float64,):
        shape = _variable_shape(key, paired.get(key), shapes, optimizer_keys, variable_shapes)
        converters[key] = (lambda a, shape=shape: _converted_v(a, shape, rowwise=False),
                           tf.as_dtype(accumulator_dtype) if accumulator_dtype else dtypes[key])
  with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(output_prefix))) as staging:
    parts = []
    for k, name in enumerate(sorted(dtypes)):
      value = reader.get_tensor(name)
      if name in converters:
        convert, dtype = converters[name]
        value = tf.cast(convert(np.asarray(value).astype(np.float64)), dtype)
      part = os.path.join(staging, f"part{k}")
      tf.raw_ops.SaveV2(prefix=part, tensor_names=[name], shape_and_slices=[""],
                        tensors=[tf.convert_to_tensor(value)])
      parts.append(part)
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=output_prefix,
                                  delete_old_dirs=False)
  tf.get_logger().warning(
      "tf_opt_ops: %s -> %s: %d optimizer state tensors converted (slot_dtype=%s, "
      "rowwise_second_moment=%s, accumulator_dtype=%s, rowwise_accumulator=%s)", checkpoint_prefix,
      output_prefix, len(converters), slot_dtype, rowwise_second_moment, accumulator_dtype,
      rowwise_accumulator)
  return len(converters)
