"""Selection rules: which variables one block of a router claims.

A block is a layer, a variable, a callable returning variables, a regular
expression matched in full against variable paths (an exact path matches too,
as in `keras.optimizers.OptimizerMap`), or a list of those. A layer claims the
variables of its sub-layers the way Merlin Models' `MultiOptimizer` collects
them: a walk over the sub-modules, each contributing its own trainable
variables, that skips Merlin's `ModelContext` (the context every tower of a
Merlin model references, and through which every tower would otherwise own
every embedding table). Why: see docs/design.md, "Routers".

Blocks may be layers or models in any build state: nothing here reads a Keras
property that raises before a layer is built; a layer claims the variables it
has when the router first routes.

Nothing here depends on a Keras API: the flavor object passed to `claim`
knows how to walk a layer of its API.
"""

import re

# The class name of the context layer Merlin Models shares between all towers.
MERLIN_SHARED_CONTEXT = "ModelContext"


def variable_path(variable):
  """A variable's path (Keras 3) or its name without the `:0` suffix (TensorFlow)."""
  path = getattr(variable, "path", None)
  if isinstance(path, str):
    return path
  name = str(getattr(variable, "name", variable))
  return name[:-2] if name.endswith(":0") else name


def is_variable(value):
  import tensorflow as tf
  if isinstance(value, tf.Variable):
    return True
  # Keras 3 variables (keras.Variable) are not tf.Variables.
  return hasattr(value, "path") and hasattr(value, "assign") and hasattr(value, "trainable")


def is_layer(value):
  """True for a Keras layer or model (or a tf.Module), built or not.

  Looks at the class, never at the instance's properties: `trainable_weights`
  raises on a tf_keras model that is not built yet, `weights` on a deferred
  layer, and `hasattr` only absorbs AttributeError.
  """
  cls = type(value)
  return hasattr(cls, "trainable_weights") or hasattr(cls, "trainable_variables")


class _Selector:
  """One block: which variables it claims out of the candidates.

  Each kind of block is a subclass that keeps its block and implements
  `describe`, `claim` and `key`: the subclasses share that shape by design.
  """

  # Whether `claim` can run before the router knows its variables.
  static = True

  def claim(self, candidates, flavor):
    raise NotImplementedError

  def describe(self):
    raise NotImplementedError

  def same_as(self, other):
    return type(other) is type(self) and other.key() == self.key()

  def key(self):
    raise NotImplementedError


class _VariableSelector(_Selector):

  def __init__(self, variable):
    self.variable = variable

  def describe(self):
    return f"variable {variable_path(self.variable)!r}"

  def claim(self, candidates, flavor):
    return [self.variable]

  def key(self):
    return id(self.variable)


class _LayerSelector(_Selector):
  """A layer: its own trainable variables and those of its sub-layers (Merlin's walk)."""

  def __init__(self, layer):
    self.layer = layer

  def describe(self):
    return f"layer {getattr(self.layer, 'name', self.layer)!r}"

  def claim(self, candidates, flavor):
    result, seen, queue = [], set(), [self.layer]
    while queue:
      module = queue.pop(0)
      if id(module) in seen:
        continue
      seen.add(id(module))
      result.extend(flavor.own_trainable_variables(module))
      queue.extend(
          m for m in flavor.sub_layers(module) if type(m).__name__ != MERLIN_SHARED_CONTEXT)
    return result

  def key(self):
    return id(self.layer)


class _CallableSelector(_Selector):
  static = False

  def __init__(self, fn):
    self.fn = fn

  def describe(self):
    return f"callable {self.fn!r}"

  def claim(self, candidates, flavor):
    variables = self.fn()
    if variables is None:
      return []
    if is_variable(variables):
      return [variables]
    return list(variables)

  def key(self):
    return id(self.fn)


class _PatternSelector(_Selector):
  """A regular expression matched in full against variable paths."""
  static = False

  def __init__(self, pattern):
    re.compile(pattern)  # Fails early on a bad expression.
    self.pattern = pattern

  def describe(self):
    return f"pattern {self.pattern!r}"

  def claim(self, candidates, flavor):
    claimed = [
        v for v in candidates or ()
        if variable_path(v) == self.pattern or re.fullmatch(self.pattern, variable_path(v))
    ]
    if claimed or re.escape(_unescape(self.pattern)) != self.pattern:
      return claimed
    # An exact path (as a config writes a variable) that names no variable: Keras 3 puts the
    # model's name in front of a variable's path when the model builds it in its call (and
    # not when a loaded model builds it), and numbers the names of models made in one
    # process (`sequential`, `sequential_1`, ...). The one variable whose path is the same
    # but for leading components, or but for the first one, is that variable.
    path = _unescape(self.pattern)

    def near(other):
      return (path.endswith("/" + other) or other.endswith("/" + path) or
              ("/" in path and "/" in other and path.split("/", 1)[1] == other.split("/", 1)[1]))

    found = [v for v in candidates or () if near(variable_path(v))]
    return found if len(found) == 1 else []

  def key(self):
    return self.pattern


def _unescape(pattern):
  return re.sub(r"\\(.)", r"\1", pattern)


class LayerName:
  """A block given by a layer's name only (as written in a config): the variables under it.

  Matches `(.*/)?<name>/.*` against variable paths, and the same for the names of
  its sub-layers (`sublayers`, written for a layer that had no variables yet:
  tf_keras names a nested model's variables after the innermost layer only). A
  name found under two different parents is ambiguous and raises, rather than
  routing both.
  """

  def __init__(self, name, sublayers=()):
    self.name = name
    self.sublayers = tuple(sublayers)

  def __repr__(self):
    return f"LayerName({self.name!r}, sublayers={self.sublayers!r})"


class _LayerNameSelector(_PatternSelector):

  def __init__(self, name, sublayers=()):
    names = [name] + [n for n in sublayers if n != name]
    super().__init__("(.*/)?(?:" + "|".join(re.escape(n) for n in names) + ")/.*")
    self.name = name
    self.sublayers = tuple(sublayers)

  def describe(self):
    return f"layer name {self.name!r} (pattern {self.pattern!r})"

  def claim(self, candidates, flavor):
    claimed, parents, paths = [], set(), set()
    for v in candidates or ():
      path = variable_path(v)
      match = re.fullmatch(self.pattern, path)
      if match:
        if path in paths:
          # tf_keras names a nested model's variables after the innermost layer only, so
          # two towers' "dense" layers both hold "dense/kernel".
          raise ValueError(
              f"The block {self.describe()} is ambiguous: two variables it matches are both "
              f"named {path!r} (layers of that name in two nested models). Give the layers "
              "unique names, or build the router from the layers themselves.")
        paths.add(path)
        claimed.append(v)
        # The parent of the outermost name in the path (a nested name's parent is its own
        # ancestor's path, which the first match already accounts for).
        parents.add(match.group(1) or "")
    if len(parents) > 1:
      raise ValueError(
          f"The block {self.describe()} is ambiguous: layers of that name sit under "
          f"{sorted(parents)}. Give the layers unique names, or route them with a pattern over "
          "variable paths.")
    return claimed


def make_selectors(blocks):
  """The selectors for `blocks` (see the module docstring)."""
  if isinstance(blocks, str):
    return [_PatternSelector(blocks)]
  if isinstance(blocks, LayerName):
    return [_LayerNameSelector(blocks.name, blocks.sublayers)]
  if is_variable(blocks):
    return [_VariableSelector(blocks)]
  if is_layer(blocks):
    return [_LayerSelector(blocks)]
  if isinstance(blocks, (list, tuple)):
    return [selector for block in blocks for selector in make_selectors(block)]
  if callable(blocks):
    return [_CallableSelector(blocks)]
  raise TypeError("A block must be a layer, a variable, a callable returning variables, a regular "
                  f"expression (str) or a list of those; got {blocks!r}.")


def same_selectors(a, b):
  return len(a) == len(b) and all(x.same_as(y) for x, y in zip(a, b))


def is_pattern(selector):
  return type(selector) is _PatternSelector


def layer_name_of(selector):
  """The layer name a selector routes by, if it routes by one (else None)."""
  return selector.name if isinstance(selector, _LayerNameSelector) else None


def layer_config(selector, flavor):
  """{"layer": name, "sublayers": [...]} for a selector that routes by layer name, or a layer
  block whose variables do not exist yet (its sub-layers' names: see LayerName)."""
  if isinstance(selector, _LayerNameSelector):
    name, sublayers = selector.name, selector.sublayers
  else:
    name, sublayers, queue, seen = selector.layer.name, [], [selector.layer], set()
    while queue:
      layer = queue.pop(0)
      if id(layer) in seen:
        continue
      seen.add(id(layer))
      if layer is not selector.layer:
        sublayers.append(layer.name)
      queue.extend(flavor.sub_layers(layer))
  return {"layer": name, "sublayers": list(sublayers)} if sublayers else {"layer": name}


def is_layer_selector(selector):
  return isinstance(selector, _LayerSelector)
