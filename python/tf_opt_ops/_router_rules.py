"""Selection rules: which variables one block of a router claims.

A block is a layer, a variable, a callable returning variables, a regular
expression matched in full against variable paths (an exact path matches too,
as in `keras.optimizers.OptimizerMap`), or a list of those. A layer claims the
variables of its sub-layers the way Merlin Models' `MultiOptimizer` collects
them: a walk over the sub-modules, each contributing its own trainable
variables, that skips Merlin's `ModelContext` (the context every tower of a
Merlin model references, and through which every tower would otherwise own
every embedding table). Why: see docs/design.md, "Routers".

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
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if isinstance(value, tf.Variable):
    return True
  # Keras 3 variables (keras.Variable) are not tf.Variables.
  return hasattr(value, "path") and hasattr(value, "assign") and hasattr(value, "trainable")


def is_layer(value):
  return hasattr(value, "trainable_weights") or hasattr(value, "trainable_variables")


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
    return [
        v for v in candidates or ()
        if variable_path(v) == self.pattern or re.fullmatch(self.pattern, variable_path(v))
    ]

  def key(self):
    return self.pattern


class LayerName:
  """A block given by a layer's name only (as written in a config): the variables under it.

  Matches `(.*/)?<name>/.*` against variable paths; a name found under two
  different parents is ambiguous and raises, rather than routing both.
  """

  def __init__(self, name):
    self.name = name

  def __repr__(self):
    return f"LayerName({self.name!r})"


class _LayerNameSelector(_PatternSelector):

  def __init__(self, name):
    super().__init__(f"(.*/)?{re.escape(name)}/.*")
    self.name = name

  def describe(self):
    return f"layer name {self.name!r} (pattern {self.pattern!r})"

  def claim(self, candidates, flavor):
    claimed, parents = [], set()
    for v in candidates or ():
      match = re.fullmatch(self.pattern, variable_path(v))
      if match:
        claimed.append(v)
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
    return [_LayerNameSelector(blocks.name)]
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


def is_layer_selector(selector):
  return isinstance(selector, _LayerSelector)
