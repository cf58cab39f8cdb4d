"""Composite routers: one optimizer per group of variables, for every Keras flavor.

`CompositeOptimizer` (TensorFlow Recommenders' signature) and `MultiOptimizer`
with `OptimizerBlocks` (Merlin Models' signature) send each `(gradient,
variable)` pair to the optimizer that claims the variable. This module is the
routing core every flavor shares; the thin per-base-class adapters live in
`_router_keras` (Keras 3), `_router_tf_keras` (tf_keras new optimizer) and
`_router_legacy` (tf_keras OptimizerV2), and are re-exported by
`tf_opt_ops.keras`, `tf_opt_ops.tf_keras` and `tf_opt_ops.legacy`. Importing
this module needs neither Keras 3 nor tf_keras.

Rules (SPEC section 3, "Routers"):

- a block is a layer (anything with trainable variables), a variable, a
  callable returning variables, a regular expression matched in full against
  variable paths (an exact path matches too, as in
  `keras.optimizers.OptimizerMap`), or a list of those;
- a variable claimed by two different optimizers raises `ValueError` naming the
  variable and both optimizers. `MultiOptimizer.update()` entries override the
  constructor's and `add()`'s claims; two `update()` entries claiming the same
  variable for different optimizers raise (an `update()` of the very same
  blocks replaces the earlier `update()`);
- a variable with a gradient that no optimizer claims raises `ValueError` in
  `CompositeOptimizer` and goes to the default optimizer in `MultiOptimizer`;
- a sub-optimizer of another Keras flavor raises `TypeError`;
- each sub-optimizer is built with exactly the variables routed to it (in the
  order the router was built with) and runs as it would alone on them; the
  router counts one iteration per `apply_gradients`;
- every sub-optimizer, the default one included, is a checkpoint dependency of
  the router (`Optimizer0`, `Optimizer1`, ..., `default_optimizer`).
"""

import copy
import re

__all__ = ["OptimizerBlocks", "RoutingTable", "Flavor"]


class OptimizerBlocks:
  """An optimizer (instance or Keras identifier string) and the blocks it trains.

  `blocks`: a layer, a variable, a callable returning variables, a regular
  expression matched in full against variable paths, or a list of those.
  Unpacks like the pair `(optimizer, blocks)`.
  """

  def __init__(self, optimizer, blocks):
    self.optimizer = optimizer
    self.blocks = blocks

  def __iter__(self):
    return iter((self.optimizer, self.blocks))

  def __eq__(self, other):
    if not isinstance(other, OptimizerBlocks):
      return NotImplemented
    return self.optimizer is other.optimizer and self.blocks is other.blocks

  __hash__ = object.__hash__

  def __repr__(self):
    return f"OptimizerBlocks(optimizer={self.optimizer!r}, blocks={self.blocks!r})"


def optimizer_label(optimizer):
  name = getattr(optimizer, "_name", None)
  if not isinstance(name, str):
    name = getattr(optimizer, "name", None)
  return f"{type(optimizer).__name__}(name={name!r})"


class Flavor:
  """What the routing core needs to know about one Keras optimizer API.

  Adapters subclass this; every method here has the behaviour shared by the
  flavors, the rest is abstract.
  """

  name = "?"
  # Whether an optimizer must be built once with all its variables (Keras 3 and
  # tf_keras new optimizers) or accepts new variables later (OptimizerV2).
  builds_once = True
  # Where the router's own variables (its counter) live in this base class.
  own_variables_attr = "_variables"

  def check_optimizer(self, optimizer, what):
    raise NotImplementedError

  def get(self, identifier):
    raise NotImplementedError

  def serialize(self, optimizer):
    raise NotImplementedError

  def deserialize(self, config, custom_objects=None):
    raise NotImplementedError

  def var_key(self, variable):
    raise NotImplementedError

  def build(self, optimizer, variables, scope):
    """Creates `optimizer`'s state for `variables`; `scope` is a unique name for it."""
    raise NotImplementedError

  def optimizer_variables(self, optimizer):
    raise NotImplementedError

  def learning_rate(self, optimizer):
    return optimizer.learning_rate

  def resolve(self, identifier, what):
    """An optimizer instance from an instance or a Keras identifier string."""
    if isinstance(identifier, str):
      optimizer = self.get(identifier)
    else:
      optimizer = identifier
    self.check_optimizer(optimizer, what)
    return optimizer

  def type_error(self, optimizer, what, expected):
    return TypeError(
        f"{what} must be a {expected} optimizer (the {self.name} flavor) or a Keras identifier "
        f"string, got {optimizer!r} of type {type(optimizer).__module__}."
        f"{type(optimizer).__qualname__}. Optimizers of different Keras APIs cannot be mixed in "
        f"one router: use the router of the flavor your optimizers come from.")

  @staticmethod
  def var_path(variable):
    path = getattr(variable, "path", None)
    if isinstance(path, str):
      return path
    name = str(getattr(variable, "name", variable))
    return name[:-2] if name.endswith(":0") else name

  @staticmethod
  def is_variable(value):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if isinstance(value, tf.Variable):
      return True
    # Keras 3 variables (keras.Variable) are not tf.Variables.
    return hasattr(value, "path") and hasattr(value, "assign") and hasattr(value, "trainable")

  @staticmethod
  def layer_variables(layer):
    for attr in ("trainable_weights", "trainable_variables"):
      variables = getattr(layer, attr, None)
      if variables is not None:
        return list(variables)
    raise TypeError(f"{layer!r} has no trainable variables")


# ----------------------------------------------------------------------------- selectors


class _Selector:
  """One block: which variables it claims out of the candidates."""

  def claim(self, candidates, flavor):
    raise NotImplementedError

  def describe(self):
    raise NotImplementedError

  def is_static(self):
    """Whether `claim` can run before the router knows its variables."""
    return True


class _VariableSelector(_Selector):

  def __init__(self, variable):
    self.variable = variable

  def describe(self):
    return repr(Flavor.var_path(self.variable))

  def claim(self, candidates, flavor):
    return [self.variable]

  def same_as(self, other):
    return isinstance(other, _VariableSelector) and other.variable is self.variable


class _LayerSelector(_Selector):

  def __init__(self, layer):
    self.layer = layer

  def describe(self):
    return f"layer {getattr(self.layer, 'name', self.layer)!r}"

  def claim(self, candidates, flavor):
    return flavor.layer_variables(self.layer)

  def same_as(self, other):
    return isinstance(other, _LayerSelector) and other.layer is self.layer


class _CallableSelector(_Selector):

  def __init__(self, fn):
    self.fn = fn

  def describe(self):
    return repr(self.fn)

  def claim(self, candidates, flavor):
    variables = self.fn()
    if variables is None:
      return []
    if flavor.is_variable(variables):
      return [variables]
    return list(variables)

  def is_static(self):
    return False

  def same_as(self, other):
    return isinstance(other, _CallableSelector) and other.fn is self.fn


class _PatternSelector(_Selector):
  """A regular expression matched in full against variable paths."""

  def __init__(self, pattern):
    re.compile(pattern)  # Fails early on a bad expression.
    self.pattern = pattern

  def describe(self):
    return repr(self.pattern)

  def claim(self, candidates, flavor):
    if candidates is None:
      return []
    return [
        v for v in candidates
        if flavor.var_path(v) == self.pattern or re.fullmatch(self.pattern, flavor.var_path(v))
    ]

  def is_static(self):
    return False

  def same_as(self, other):
    return isinstance(other, _PatternSelector) and other.pattern == self.pattern


def make_selectors(blocks, flavor):
  """The selectors for `blocks` (see `OptimizerBlocks`)."""
  if isinstance(blocks, str):
    return [_PatternSelector(blocks)]
  if flavor.is_variable(blocks):
    return [_VariableSelector(blocks)]
  if hasattr(blocks, "trainable_weights") or hasattr(blocks, "trainable_variables"):
    return [_LayerSelector(blocks)]
  if isinstance(blocks, (list, tuple)):
    selectors = []
    for block in blocks:
      selectors.extend(make_selectors(block, flavor))
    return selectors
  if callable(blocks):
    return [_CallableSelector(blocks)]
  raise TypeError("A block must be a layer, a variable, a callable returning variables, a regular "
                  f"expression (str) or a list of those; got {blocks!r}.")


class _Entry:

  def __init__(self, optimizer, selectors, is_update):
    self.optimizer = optimizer
    self.selectors = selectors
    self.is_update = is_update


# ----------------------------------------------------------------------------- routing core


class RoutingTable:
  """Which optimizer trains which variable. Shared by every flavor and router kind.

  Not a Trackable: the adapters own the sub-optimizers' checkpoint
  dependencies. `default` is None for `CompositeOptimizer`.
  """

  def __init__(self, flavor, owner_name, owner_label, default=None):
    self.flavor = flavor
    self.owner_name = owner_name
    self.owner_label = owner_label
    self.dependency_names = {}  # id(optimizer) -> "Optimizer<i>" or "default_optimizer"
    self.entries = []
    self.default = default
    self.candidates = None  # The variables the router was built with.
    self.assignment = {}  # var key -> optimizer
    self.built_with = {}  # id(optimizer) -> list of variables it was built with

  # --- optimizers

  def optimizers(self):
    """Unique sub-optimizers in first-claim order, the default last."""
    seen, result = set(), []
    for entry in self.entries:
      if entry.optimizer is self.default or id(entry.optimizer) in seen:
        continue
      seen.add(id(entry.optimizer))
      result.append(entry.optimizer)
    if self.default is not None:
      result.append(self.default)
    return result

  def dependency_name(self, optimizer):
    """The sub-optimizer's checkpoint name in the router: `Optimizer<i>` or `default_optimizer`."""
    name = self.dependency_names.get(id(optimizer))
    if name is None:
      if optimizer is self.default:
        name = "default_optimizer"
      else:
        name = "Optimizer%d" % sum(
            1 for n in self.dependency_names.values() if n != "default_optimizer")
      self.dependency_names[id(optimizer)] = name
    return name

  # --- claims

  def add(self, optimizer, blocks, is_update=False):
    """Adds an entry; checks what can be checked now, undoing the entry on error."""
    selectors = make_selectors(blocks, self.flavor)
    entry = _Entry(optimizer, selectors, is_update)
    previous = list(self.entries)
    if is_update:
      # An update of the very same blocks replaces the earlier update.
      self.entries = [
          e for e in self.entries if not (e.is_update and _same_selectors(e.selectors, selectors))
      ]
    self.entries.append(entry)
    try:
      if self.candidates is None:
        self._resolve(None, static_only=True)
      else:
        self.build(self.candidates)
    except Exception:
      self.entries = previous
      raise
    return entry

  def _resolve(self, candidates, static_only=False):
    """var key -> (variable, optimizer) for every claimed variable."""
    flavor = self.flavor
    owners = {}

    def claim_all(entries, override):
      claimed_here = {}
      for entry in entries:
        for selector in entry.selectors:
          if static_only and not selector.is_static():
            continue
          for var in selector.claim(candidates, flavor):
            key = flavor.var_key(var)
            other = claimed_here.get(key)
            if other is not None and other is not entry.optimizer:
              raise ValueError(
                  f"Variable {flavor.var_path(var)!r} is claimed by two optimizers of "
                  f"{self.owner_label}: {optimizer_label(other)} and "
                  f"{optimizer_label(entry.optimizer)}. The set of variables handled by each "
                  "optimizer must be disjoint" +
                  (" (update() overrides the constructor and add(), but two update() calls "
                   "claiming one variable for different optimizers are ambiguous)." if override else
                   "."))
            claimed_here[key] = entry.optimizer
            if override or key not in owners:
              owners[key] = (var, entry.optimizer)
      return claimed_here

    claim_all([e for e in self.entries if not e.is_update], override=False)
    claim_all([e for e in self.entries if e.is_update], override=True)
    return owners

  def owner_of(self, owners, variable):
    entry = owners.get(self.flavor.var_key(variable))
    if entry is not None:
      return entry[1]
    if self.default is not None:
      return self.default
    raise ValueError(
        f"Variable {self.flavor.var_path(variable)!r} is not handled by any optimizer of "
        f"{self.owner_label}. This would cause it to be not trained: list it in one of the "
        "(optimizer, variables) pairs.")

  def build(self, variables, required=()):
    """Assigns `variables` to optimizers and builds each sub-optimizer with its own.

    Without a default optimizer, an unclaimed variable is an error only if its
    key is in `required` (it has a gradient): `build(model.trainable_variables)`
    may name variables a `CompositeOptimizer` deliberately leaves alone.
    """
    variables = list(variables)
    required = set(required)
    owners = self._resolve(variables)
    assignment, per_optimizer = {}, {}
    for var in variables:
      key = self.flavor.var_key(var)
      if key in assignment:
        continue
      if key not in owners and self.default is None and key not in required:
        continue
      optimizer = self.owner_of(owners, var)
      assignment[key] = optimizer
      per_optimizer.setdefault(id(optimizer), (optimizer, []))[1].append(var)
    # Check everything before building anything.
    for optimizer, own in per_optimizer.values():
      before = self.built_with.get(id(optimizer))
      if before is None:
        continue
      before_keys = {self.flavor.var_key(v) for v in before}
      new = [v for v in own if self.flavor.var_key(v) not in before_keys]
      if new and self.flavor.builds_once:
        raise ValueError(
            f"{optimizer_label(optimizer)} in {self.owner_label} was already built with its "
            f"variables and cannot take {self.flavor.var_path(new[0])!r} as well "
            f"({self.flavor.name} optimizers are built once). Route variables before the first step, or use a new "
            "optimizer instance.")
    for optimizer, own in per_optimizer.values():
      before = self.built_with.get(id(optimizer))
      if before is None:
        self.flavor.build(optimizer, own, self._scope(optimizer))
        self.built_with[id(optimizer)] = own
      elif not self.flavor.builds_once:
        before_keys = {self.flavor.var_key(v) for v in before}
        new = [v for v in own if self.flavor.var_key(v) not in before_keys]
        if new:
          self.flavor.build(optimizer, new, self._scope(optimizer))
          self.built_with[id(optimizer)] = before + new
    self.assignment = assignment
    if self.candidates is None:
      self.candidates = variables
    else:
      keys = {self.flavor.var_key(v) for v in self.candidates}
      self.candidates = self.candidates + [
          v for v in variables if self.flavor.var_key(v) not in keys
      ]
    return per_optimizer

  def _scope(self, optimizer):
    owner = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(self.owner_name))
    return f"{owner}/{self.dependency_name(optimizer)}"

  def route(self, grads_and_vars):
    """[(optimizer, [(grad, var), ...]), ...] in `optimizers()` order; None grads dropped."""
    grads_and_vars = list(grads_and_vars)
    with_grads = [v for g, v in grads_and_vars if g is not None]
    if self.candidates is None:
      self.build([v for _, v in grads_and_vars],
                 required=[self.flavor.var_key(v) for v in with_grads])
    else:
      unknown = [v for v in with_grads if self.flavor.var_key(v) not in self.assignment]
      if unknown:
        self.build(self.candidates + unknown, required=[self.flavor.var_key(v) for v in unknown])
    groups = {}
    for grad, var in grads_and_vars:
      if grad is None:
        continue
      optimizer = self.assignment[self.flavor.var_key(var)]
      groups.setdefault(id(optimizer), []).append((grad, var))
    return [(opt, groups[id(opt)]) for opt in self.optimizers() if id(opt) in groups]

  def variables_of(self, optimizer):
    return list(self.built_with.get(id(optimizer), []))

  # --- config

  def entries_config(self, optimizers):
    """[{"optimizer": index into optimizers, "blocks": [regex, ...], "update": bool}, ...].

    Layers, variables and callables are written as the exact paths of the
    variables they claim (escaped regular expressions), so the config
    round-trips into a router for the same model (e.g. a loaded model file).
    """
    flavor = self.flavor
    index = {id(opt): i for i, opt in enumerate(optimizers)}
    result = []
    for entry in self.entries:
      patterns = []
      for selector in entry.selectors:
        if isinstance(selector, _PatternSelector):
          patterns.append(selector.pattern)
          continue
        try:
          variables = selector.claim(self.candidates, flavor)
        except Exception as e:  # pylint: disable=broad-except
          raise ValueError(
              f"{self.owner_label} cannot serialize the block {selector.describe()}: its "
              f"variables are not available yet ({e}). Build the router (or the model) first."
          ) from e
        if not variables and isinstance(selector, _LayerSelector):
          raise ValueError(
              f"{self.owner_label} cannot serialize the block {selector.layer!r}: the layer has "
              "no variables yet. Build the model first.")
        patterns.extend(re.escape(flavor.var_path(v)) for v in variables)
      result.append(
          {"optimizer": index[id(entry.optimizer)], "blocks": patterns, "update": entry.is_update})
    return result


def np_shape(value):
  shape = getattr(value, "shape", None)
  return tuple(shape) if shape is not None else ()


def _same_selectors(a, b):
  return len(a) == len(b) and all(x.same_as(y) for x, y in zip(a, b))


# ----------------------------------------------------------------------------- shared behaviour


class RouterMixin:
  """Behaviour both router kinds share in every flavor (mixed before the base class).

  The adapter provides `_flavor` (a `Flavor`), `_track_optimizer(optimizer,
  name)`, and calls `_init_router(...)` from its constructor.
  """

  def _init_router(self, default, name, label):
    self.__dict__["_router_table"] = RoutingTable(self._flavor, name, label, default)
    self.__dict__["_router_tracked"] = set()

  @property
  def _table(self):
    return self.__dict__["_router_table"]

  def _track_sub_optimizers(self):
    tracked = self.__dict__["_router_tracked"]
    for optimizer in self._table.optimizers():
      if id(optimizer) not in tracked:
        tracked.add(id(optimizer))
        self._track_optimizer(optimizer, self._table.dependency_name(optimizer))

  @property
  def optimizers(self):
    """The sub-optimizers, in the order of their first claim; the default optimizer last."""
    return self._table.optimizers()

  @property
  def learning_rate(self):
    """Each sub-optimizer's learning rate, in `optimizers` order."""
    return [self._flavor.learning_rate(opt) for opt in self.optimizers]

  @learning_rate.setter
  def learning_rate(self, value):
    optimizers = self.optimizers
    values = list(value) if isinstance(value, (list, tuple)) else [value] * len(optimizers)
    if len(values) != len(optimizers):
      raise ValueError(f"Expected {len(optimizers)} learning rates (one per optimizer in "
                       f"`optimizers`), got {len(values)}.")
    for opt, lr in zip(optimizers, values):
      opt.learning_rate = lr

  def _sub_variables(self):
    result, seen = [], set()
    for opt in self.optimizers:
      for var in self._flavor.optimizer_variables(opt):
        if id(var) not in seen:
          seen.add(id(var))
          result.append(var)
    return result

  def _own_variables(self):
    """The router's own state (its iteration counter)."""
    return list(getattr(self, self._flavor.own_variables_attr))

  def finalize_variable_values(self, var_list):
    keys = {self._flavor.var_key(v) for v in var_list}
    for optimizer in self.optimizers:
      own = [v for v in self._table.variables_of(optimizer) if self._flavor.var_key(v) in keys]
      if own:
        optimizer.finalize_variable_values(own)

  def _assign_all(self, weights):
    """`set_weights`: the router's own variables, then each sub-optimizer's, in order."""
    weights = list(weights)
    variables = self._own_variables() + self._sub_variables()
    if len(weights) != len(variables):
      raise ValueError(f"{self._table.owner_label} has {len(variables)} variables (its own, then "
                       f"each sub-optimizer's); got {len(weights)} weights.")
    for variable, weight in zip(variables, weights):
      if tuple(variable.shape) != tuple(np_shape(weight)):
        raise ValueError(f"Optimizer variable {variable.name} has shape {tuple(variable.shape)}, "
                         f"not that of the weight given for it, {tuple(np_shape(weight))}.")
      variable.assign(weight)

  # Keras model files (`.keras`): the router stores its own counter; Keras' walk
  # over attributes saves each sub-optimizer (`optimizers`, `default_optimizer`).
  def save_own_variables(self, store):
    for i, variable in enumerate(self._own_variables()):
      store[str(i)] = variable.numpy()

  def load_own_variables(self, store):
    for i, variable in enumerate(self._own_variables()):
      if str(i) in store:
        variable.assign(store[str(i)])

  def _router_config(self):
    optimizers = self.optimizers
    return {
        "name": self._router_name(),
        "optimizers": [self._flavor.serialize(opt) for opt in optimizers],
        "entries": self._table.entries_config(optimizers),
        "default_optimizer": (len(optimizers) - 1 if self._table.default is not None else None),
    }

  @classmethod
  def _split_config(cls, config, custom_objects=None):
    flavor = cls._flavor
    # Keras' deserializers edit the dicts they are given.
    config = copy.deepcopy(config)
    optimizers = [flavor.deserialize(c, custom_objects) for c in config["optimizers"]]
    default = config.get("default_optimizer")
    default = optimizers[default] if default is not None else None
    entries = [(optimizers[e["optimizer"]], list(e["blocks"]), bool(e.get("update")))
               for e in config["entries"]]
    return config.get("name"), optimizers, default, entries


class CompositeMixin(RouterMixin):
  """`CompositeOptimizer(optimizers_and_vars, name=...)`: TensorFlow Recommenders' router."""

  _router_kind = "CompositeOptimizer"

  def _init_composite(self, optimizers_and_vars, name):
    optimizers_and_vars = list(optimizers_and_vars)
    if not optimizers_and_vars:
      raise ValueError("`optimizers_and_vars` can't be empty")
    self._init_router(None, name, f"CompositeOptimizer {name!r}")
    for i, pair in enumerate(optimizers_and_vars):
      try:
        optimizer, blocks = pair
      except (TypeError, ValueError) as e:
        raise ValueError("`optimizers_and_vars` must hold (optimizer, callable returning "
                         f"variables) pairs; item {i} is {pair!r}.") from e
      optimizer = self._flavor.resolve(optimizer, f"optimizers_and_vars[{i}]")
      self._table.add(optimizer, blocks)
    self._track_sub_optimizers()

  def get_config(self):
    return self._router_config()

  @classmethod
  def from_config(cls, config, custom_objects=None):
    name, _, _, entries = cls._split_config(dict(config), custom_objects)
    return cls([(opt, blocks) for opt, blocks, _ in entries], name=name)


class MultiMixin(RouterMixin):
  """`MultiOptimizer(optimizers_and_blocks, default_optimizer="rmsprop", name=...)` (Merlin)."""

  _router_kind = "MultiOptimizer"

  def _init_multi(self, optimizers_and_blocks, default_optimizer, name):
    optimizers_and_blocks = list(optimizers_and_blocks)
    if not optimizers_and_blocks:
      raise ValueError("`optimizers_and_blocks` can't be empty")
    default = self._flavor.resolve(default_optimizer, "default_optimizer")
    self._init_router(default, name, f"MultiOptimizer {name!r}")
    for i, item in enumerate(optimizers_and_blocks):
      self._add_blocks(item, f"optimizers_and_blocks[{i}]", is_update=False)
    self._track_sub_optimizers()

  def _add_blocks(self, item, what, is_update):
    try:
      optimizer, blocks = item
    except (TypeError, ValueError) as e:
      raise ValueError(f"{what} must be an OptimizerBlocks(optimizer, blocks); got "
                       f"{item!r}.") from e
    optimizer = self._flavor.resolve(optimizer, f"{what}.optimizer")
    self._table.add(optimizer, blocks, is_update=is_update)

  def add(self, optimizer_blocks):
    """Routes more blocks; a variable already claimed by another optimizer raises ValueError."""
    self._add_blocks(optimizer_blocks, "add()", is_update=False)
    self._track_sub_optimizers()

  def update(self, optimizer_blocks):
    """Routes blocks to an optimizer, overriding the constructor's and add()'s claims."""
    self._add_blocks(optimizer_blocks, "update()", is_update=True)
    self._track_sub_optimizers()

  @property
  def default_optimizer(self):
    return self._table.default

  def get_config(self):
    return self._router_config()

  @classmethod
  def from_config(cls, config, custom_objects=None):
    if "optimizers_and_blocks" in config:
      return cls._from_merlin_config(config, custom_objects)
    name, optimizers, default, entries = cls._split_config(dict(config), custom_objects)
    router = cls([OptimizerBlocks(opt, blocks) for opt, blocks, upd in entries if not upd],
                 default_optimizer=default, name=name)
    for opt, blocks, upd in entries:
      if upd:
        router.update(OptimizerBlocks(opt, blocks))
    del optimizers
    return router

  @classmethod
  def _from_merlin_config(cls, config, custom_objects=None):
    """Merlin Models' `MultiOptimizer.get_config()` (`merlin.models>MultiOptimizer` files).

    Merlin writes each block as a serialized layer; a loaded model has its own
    layers, so a block becomes the variables under a layer of that name
    (`(.*/)?<name>/.*`).
    """
    config = copy.deepcopy(dict(config))
    flavor = cls._flavor

    def optimizer(serialized):
      if isinstance(serialized, dict):
        serialized = {k: v for k, v in serialized.items() if k != "use_legacy_optimizer"}
      return flavor.deserialize(serialized, custom_objects)

    def blocks(serialized_blocks):
      if isinstance(serialized_blocks, dict):
        serialized_blocks = [serialized_blocks]
      patterns = []
      for block in serialized_blocks:
        name = block.get("config", {}).get("name") if isinstance(block, dict) else block
        if not name:
          raise ValueError(f"Cannot route the Merlin block {block!r}: it has no layer name.")
        patterns.append(f"(.*/)?{re.escape(name)}/.*")
      return patterns

    pairs = [OptimizerBlocks(optimizer(o), blocks(b)) for o, b in config["optimizers_and_blocks"]]
    router = cls(pairs, default_optimizer=optimizer(config.get("default_optimizer", "rmsprop")),
                 name=config.get("name", "MultiOptimizer"))
    for o, b in config.get("update_optimizers_and_blocks") or []:
      router.update(OptimizerBlocks(optimizer(o), blocks(b)))
    return router
