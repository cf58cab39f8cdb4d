"""What both routers do in every flavor: the `Flavor` interface, `OptimizerBlocks`, and the
Keras-facing behaviour of `CompositeOptimizer` and `MultiOptimizer`.

`CompositeOptimizer` (TensorFlow Recommenders' signature) and `MultiOptimizer`
with `OptimizerBlocks` (Merlin Models' signature) send each `(gradient,
variable)` pair to the optimizer that claims the variable (`rules`), through a
routing table (`table`). What differs between the Keras APIs lives in a
`Flavor` object and in each flavor's adapter (`keras`, `tf_keras`, `legacy`).
Importing this module needs neither Keras 3 nor tf_keras. Why: see
docs/design.md, "Routers".

Checkpoint names follow the peers: the optimizer of the i-th constructor pair
is `Optimizer<i>`, one first given to `add()`/`update()` is
`Optimizer<1 + number of pairs>` (Merlin's rule), and the default optimizer is
`default_optimizer`. Every router saves every sub-optimizer's state, the
default optimizer's included; only `save_default_optimizer=False` (Merlin's
layout) leaves the default optimizer's out.
"""

import copy
import warnings

from tf_opt_ops.routers import rules
from tf_opt_ops.routers import table as routing_table


class Flavor:
  """What the routers need to know about one Keras optimizer API.

  The methods that raise NotImplementedError are the interface each flavor
  module implements; they are written out one by one, as an abstract base
  class is, so that their shared shape is a list, not repeated logic.
  """

  name = "?"
  # Whether the router keeps an iteration counter of its own (Keras 3), or its
  # `iterations` is the first sub-optimizer's, as in TFRS and Merlin.
  own_counter = True

  def check_optimizer(self, optimizer, what):
    raise NotImplementedError

  def get(self, identifier):
    raise NotImplementedError

  def serialize(self, optimizer):
    raise NotImplementedError

  def deserialize(self, config, custom_objects=None):
    raise NotImplementedError

  def serialize_layer(self, layer):
    raise NotImplementedError

  def deserialize_layer(self, config):
    raise NotImplementedError

  def var_key(self, variable):
    raise NotImplementedError

  def builds_once(self, optimizer):
    """Whether `optimizer` must be built once with all its variables."""
    raise NotImplementedError

  def build(self, optimizer, variables, scope):
    """Creates `optimizer`'s state for `variables`; `scope` is a unique name for it."""
    raise NotImplementedError

  def optimizer_variables(self, optimizer):
    raise NotImplementedError

  def own_trainable_variables(self, layer):
    """The trainable variables a layer holds itself (not those of its sub-layers)."""
    raise NotImplementedError

  def sub_layers(self, layer):
    """A layer's direct sub-layers."""
    raise NotImplementedError

  def learning_rate(self, optimizer):
    return optimizer.learning_rate

  def finish_config(self, config):
    """The router's config as this Keras API's deserializer expects it."""
    return config

  def resolve(self, identifier, what):
    """An optimizer instance from an instance or a Keras identifier string."""
    optimizer = self.get(identifier) if isinstance(identifier, str) else identifier
    self.check_optimizer(optimizer, what)
    return optimizer

  def type_error(self, optimizer, what, expected):
    return TypeError(
        f"{what} must be a {expected} optimizer (the {self.name} flavor) or a Keras identifier "
        f"string, got {optimizer!r} of type {type(optimizer).__module__}."
        f"{type(optimizer).__qualname__}. Keras 3 and tf_keras optimizers cannot be mixed in one "
        "router: use tf_opt_ops.keras's router for Keras 3 optimizers, tf_opt_ops.tf_keras's or "
        "tf_opt_ops.legacy's for tf_keras ones (either takes both tf_keras optimizer APIs).")


class OptimizerBlocks:
  """An optimizer (instance or Keras identifier string) and the blocks it trains.

  `blocks`: a layer, a variable, a callable returning variables, a regular
  expression matched in full against variable paths, or a list of those.
  Unpacks like the pair `(optimizer, blocks)`. Each flavor has its own subclass
  (`_flavor`), for `get_config`/`from_config` in Merlin's format:
  `(serialized optimizer, [serialized layer or pattern, ...])`.
  """

  _flavor = None

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

  def get_config(self):
    blocks = self.blocks if isinstance(self.blocks, (list, tuple)) else [self.blocks]
    serialized = []
    for block in blocks:
      if isinstance(block, str):
        serialized.append(block)
      elif rules.is_layer(block):
        serialized.append(self._flavor.serialize_layer(block))
      else:
        raise ValueError(f"OptimizerBlocks.get_config() writes layers and patterns, not {block!r}: "
                         "route it with a regular expression over variable paths instead.")
    optimizer = self.optimizer
    if not isinstance(optimizer, str):
      optimizer = self._flavor.serialize(optimizer)
    return (optimizer, serialized)

  @classmethod
  def from_config(cls, config):
    optimizer, blocks = config
    if not isinstance(optimizer, str):
      optimizer = cls._flavor.deserialize(optimizer)
    return cls(optimizer,
               [b if isinstance(b, str) else cls._flavor.deserialize_layer(b) for b in blocks])


def _block_from_config(block):
  if isinstance(block, dict):
    return rules.LayerName(block["layer"], block.get("sublayers", ()))
  return block


class RouterState:
  """A router's own bookkeeping: a plain object, so that Keras' attribute tracking, which
  wraps lists and dicts and makes Trackables dependencies, leaves it alone (only the
  sub-optimizers are dependencies, under the names `_track_optimizer` gives them)."""

  def __init__(self, table):
    self.table = table
    self.dependencies = []  # [(checkpoint name, optimizer)] in checkpoint order
    self.pairs = []  # MultiOptimizer: the OptimizerBlocks of the constructor and add()
    self.updates = []  # MultiOptimizer: the OptimizerBlocks of update()
    self.saves_default = True  # whether the default optimizer's state is checkpointed
    self.restored_names = set()  # checkpoint children looked up while restoring this router
    self.warned_fresh_default = False


class RouterMixin:
  """Behaviour both router kinds share (mixed in before the flavor's base class).

  The flavor's base class provides `_flavor`, `_blocks_class` (its
  `OptimizerBlocks`) and `_track_optimizer(optimizer, name)`.
  """

  def _init_router(self, default, name, label):
    self._routing = RouterState(routing_table.RoutingTable(self._flavor, name, label, default))

  @property
  def _table(self):
    return self._routing.table

  def _router_name(self):
    return self._table.owner_name

  def _depend_on(self, optimizer, name):
    dependencies = self._routing.dependencies
    if any(opt is optimizer for _, opt in dependencies):
      return
    dependencies.append((name, optimizer))
    self._table.names[id(optimizer)] = name
    self._track_optimizer(optimizer, name)

  def _saved_optimizers(self):
    """The sub-optimizers that are checkpoint dependencies, in checkpoint order."""
    return [opt for _, opt in self._routing.dependencies]

  def _first_optimizer(self):
    return self._table.optimizers()[0]

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

  def _own_variables(self):
    """The router's own state: its iteration counter, where the flavor keeps one."""
    return [self.iterations] if self._flavor.own_counter else []

  def _all_variables(self, optimizers=None):
    """The router's own state, then each saved sub-optimizer's, in checkpoint order."""
    result, seen = list(self._own_variables()), set()
    for opt in self._saved_optimizers() if optimizers is None else optimizers:
      for var in self._flavor.optimizer_variables(opt):
        if id(var) not in seen:
          seen.add(id(var))
          result.append(var)
    return result

  def finalize_variable_values(self, var_list):
    keys = {self._flavor.var_key(v) for v in var_list}
    for optimizer in self.optimizers:
      own = [v for v in self._table.variables_of(optimizer) if self._flavor.var_key(v) in keys]
      # OptimizerV2 (a legacy sub-optimizer of a tf_keras router) has no such method.
      finalize = getattr(optimizer, "finalize_variable_values", None)
      if own and finalize is not None:
        finalize(own)

  def _assign_all(self, weights):
    """`set_weights`: the values of `variables`, in order.

    A model file of a router that did not save its default optimizer (Merlin's layout)
    holds every variable but the default optimizer's: those load, and the default
    optimizer starts fresh, with a warning.
    """
    weights = list(weights)
    variables = self._all_variables()
    default = self._table.default
    if len(weights) != len(variables) and default is not None and self._routing.saves_default:
      without_default = self._all_variables(
          [o for o in self._saved_optimizers() if o is not default])
      if len(weights) == len(without_default):
        variables = without_default
        self._warn_default_starts_fresh("the weights loaded")
    if len(weights) != len(variables):
      raise ValueError(f"{self._table.owner_label} has {len(variables)} variables; got "
                       f"{len(weights)} weights.")
    for variable, weight in zip(variables, weights):
      shape = tuple(getattr(weight, "shape", ()))
      if tuple(variable.shape) != shape:
        raise ValueError(f"Optimizer variable {variable.name} has shape {tuple(variable.shape)}, "
                         f"not that of the weight given for it, {shape}.")
      variable.assign(weight)

  # Restoring a checkpoint, TensorFlow looks up each child the checkpoint holds by name, with
  # the router's children at hand (`cached_dependencies`); tracking an attribute looks up one
  # name without them.
  def _lookup_dependency(self, name, cached_dependencies=None):
    routing = getattr(self, "_routing", None)
    if cached_dependencies is not None and routing is not None:
      routing.restored_names.add(name)
    return super()._lookup_dependency(name, cached_dependencies)

  def _check_restored_default(self):
    """Warns once when a restored checkpoint held no state of the default optimizer."""
    routing = self._routing
    if (routing.restored_names and self._table.default is not None and routing.saves_default and
        "default_optimizer" not in routing.restored_names):
      self._warn_default_starts_fresh("the checkpoint restored")

  def _warn_default_starts_fresh(self, what):
    if self._routing.warned_fresh_default:
      return
    self._routing.warned_fresh_default = True
    warnings.warn(
        f"{self._table.owner_label}: {what} holds no state of the default optimizer "
        "(a Merlin or TensorFlow Recommenders checkpoint, or one saved with "
        "save_default_optimizer=False): the default optimizer's slots and step counter start "
        "fresh, as they did in Merlin.", stacklevel=3)

  # Keras model files (`.keras`): the router stores its own counter; Keras' walk
  # over attributes saves each sub-optimizer (`optimizers`, `default_optimizer`).
  def save_own_variables(self, store):
    for i, variable in enumerate(self._own_variables()):
      store[str(i)] = variable.numpy()

  def load_own_variables(self, store):
    for i, variable in enumerate(self._own_variables()):
      if str(i) in store:
        variable.assign(store[str(i)])

  def get_config(self):
    return self._flavor.finish_config(self._router_config())

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
    config = copy.deepcopy({k: v for k, v in config.items() if k != "is_legacy_optimizer"})
    optimizers = [flavor.deserialize(c, custom_objects) for c in config["optimizers"]]
    default = config.get("default_optimizer")
    default = optimizers[default] if default is not None else None
    entries = [(optimizers[e["optimizer"]], [_block_from_config(b)
                                             for b in e["blocks"]], bool(e.get("update")))
               for e in config["entries"]]
    return config, optimizers, default, entries


class CompositeMethods(RouterMixin):
  """`CompositeOptimizer(optimizers_and_vars, name=...)`: TensorFlow Recommenders' router."""

  def __init__(self, optimizers_and_vars, name="CompositeOptimizer"):
    self._init_base(name)
    self._init_composite(optimizers_and_vars, name)

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
      self._depend_on(optimizer, f"Optimizer{i}")

  @classmethod
  def from_config(cls, config, custom_objects=None):
    config, _, _, entries = cls._split_config(config, custom_objects)
    return cls([(opt, blocks) for opt, blocks, _ in entries], name=config.get("name"))


class MultiMethods(RouterMixin):
  """`MultiOptimizer(optimizers_and_blocks, default_optimizer="rmsprop", name=...)` (Merlin)."""

  def __init__(self, optimizers_and_blocks, default_optimizer="rmsprop", name="MultiOptimizer",
               update_optimizers_and_blocks=None, save_default_optimizer=True):
    """Every sub-optimizer's state is saved, the default optimizer's included
    (`default_optimizer`), so a resumed job continues exactly. Merlin does not
    save the default optimizer: `save_default_optimizer=False` keeps Merlin's
    checkpoint layout, for a checkpoint that Merlin's class must restore with
    `assert_consumed()`. A Merlin (or older) checkpoint without that state still
    restores into the default layout, with a warning that the default optimizer
    starts fresh.
    """
    self._init_base(name)
    self._init_multi(optimizers_and_blocks, default_optimizer, name, update_optimizers_and_blocks,
                     save_default_optimizer)

  def _init_multi(self, optimizers_and_blocks, default_optimizer, name,
                  update_optimizers_and_blocks, save_default):
    optimizers_and_blocks = list(optimizers_and_blocks)
    if not optimizers_and_blocks:
      raise ValueError("`optimizers_and_blocks` can't be empty")
    default = self._flavor.resolve(default_optimizer, "default_optimizer")
    self._init_router(default, name, f"MultiOptimizer {name!r}")
    self._routing.saves_default = bool(save_default)
    for i, item in enumerate(optimizers_and_blocks):
      self._add_blocks(item, f"optimizers_and_blocks[{i}]", is_update=False, name=f"Optimizer{i}")
    for item in update_optimizers_and_blocks or ():
      self.update(item)
    if self._routing.saves_default:
      self._depend_on(default, "default_optimizer")

  def _add_blocks(self, item, what, is_update, name=None):
    try:
      optimizer, blocks = item
    except (TypeError, ValueError) as e:
      raise ValueError(f"{what} must be an OptimizerBlocks(optimizer, blocks); got "
                       f"{item!r}.") from e
    optimizer = self._flavor.resolve(optimizer, f"{what}.optimizer")
    self._table.add(optimizer, blocks, is_update=is_update)
    pairs = self._routing.pairs
    if name is None and not any(p.optimizer is optimizer for p in pairs):
      name = f"Optimizer{1 + len(pairs)}"
    pair = self._blocks_class(optimizer, blocks)
    (self._routing.updates if is_update else pairs).append(pair)
    if name is not None:
      self._depend_on(optimizer, name)

  def add(self, optimizer_blocks):
    """Routes more blocks; a variable already claimed by another optimizer raises ValueError."""
    self._add_blocks(optimizer_blocks, "add()", is_update=False)

  def update(self, optimizer_blocks):
    """Routes blocks to an optimizer, overriding the constructor's and add()'s claims."""
    self._add_blocks(optimizer_blocks, "update()", is_update=True)

  @property
  def default_optimizer(self):
    return self._table.default

  @property
  def optimizers_and_blocks(self):
    """The `OptimizerBlocks` of the constructor and `add()`, optimizers resolved."""
    return list(self._routing.pairs)

  @property
  def update_optimizers_and_blocks(self):
    """The `OptimizerBlocks` given to `update()`, optimizers resolved."""
    return list(self._routing.updates)

  def _router_config(self):
    config = super()._router_config()
    if not self._routing.saves_default:
      config["save_default_optimizer"] = False
    return config

  @classmethod
  def from_config(cls, config, custom_objects=None):
    if "optimizers_and_blocks" in config:
      return cls._from_merlin_config(config, custom_objects)
    config, _, default, entries = cls._split_config(config, custom_objects)
    kwargs = {}
    if config.get("save_default_optimizer") is False:
      kwargs["save_default_optimizer"] = False
    return cls([cls._blocks_class(opt, blocks) for opt, blocks, upd in entries if not upd],
               default_optimizer=default, name=config.get("name"), update_optimizers_and_blocks=[
                   cls._blocks_class(opt, blocks) for opt, blocks, upd in entries if upd
               ], **kwargs)

  @classmethod
  def _from_merlin_config(cls, config, custom_objects=None):
    """Merlin Models' `MultiOptimizer.get_config()` (`merlin.models>MultiOptimizer` files).

    Merlin writes each block as a serialized layer; a loaded model has its own
    layers, so a block becomes the variables under a layer of that name (for a
    block written without one, a SequentialBlock, under its layers' names). One
    that claims no variable at the first step raises (the table's check), where
    Merlin's own `from_config` makes new layers that hold no variable and sends
    the block's variables to the default optimizer.
    """
    config = copy.deepcopy(dict(config))
    flavor = cls._flavor

    def optimizer(serialized):
      if isinstance(serialized, dict):
        serialized = {k: v for k, v in serialized.items() if k != "use_legacy_optimizer"}
      return flavor.deserialize(serialized, custom_objects)

    def layer_names(block):
      # A named layer, or (Merlin's SequentialBlock writes no name, only its layers
      # under "0", "1", ...) the names of the named layers inside it.
      layer = block.get("config") if isinstance(block, dict) else None
      if not isinstance(layer, dict):
        return []
      if layer.get("name"):
        return [layer["name"]]
      return [n for sub in layer.values() if isinstance(sub, dict) for n in layer_names(sub)]

    def blocks(serialized_blocks):
      if isinstance(serialized_blocks, (dict, str)):
        serialized_blocks = [serialized_blocks]
      patterns = []
      for block in serialized_blocks:
        if isinstance(block, str):
          patterns.append(block)
          continue
        names = layer_names(block)
        if not names:
          raise ValueError(
              f"Cannot route the Merlin block {block!r}: neither it nor a layer inside it has a "
              "name. Build the router from the model's layers instead (OptimizerBlocks(optimizer, "
              "layer)), or route with a pattern over variable paths.")
        patterns.append(rules.LayerName(names[0], names))
      return patterns

    def pairs(key):
      return [cls._blocks_class(optimizer(o), blocks(b)) for o, b in config.get(key) or ()]

    return cls(pairs("optimizers_and_blocks"),
               default_optimizer=optimizer(config.get("default_optimizer", "rmsprop")),
               name=config.get("name", "MultiOptimizer"),
               update_optimizers_and_blocks=pairs("update_optimizers_and_blocks"))
