"""The routing table: which sub-optimizer trains which variable, and building them.

Shared by every Keras flavor and both router kinds; not a Trackable (the
Keras-facing routers own the sub-optimizers' checkpoint dependencies). Why: see
docs/design.md, "Routers".
"""

import re
import warnings

from tf_opt_ops import _tf_private
from tf_opt_ops.routers import rules


def scope_name(name):
  """`name` as a TensorFlow name scope (and HDF5 weight name) takes it."""
  return re.sub(r"[^A-Za-z0-9_.\-]", "_", str(name))


def optimizer_label(optimizer):
  name = _tf_private.given_name(optimizer)
  if not isinstance(name, str):
    name = getattr(optimizer, "name", None)
  return f"{type(optimizer).__name__}(name={name!r})"


class _Entry:
  """One `(optimizer, blocks)` claim; `is_update` entries override the others."""

  def __init__(self, optimizer, selectors, is_update):
    self.optimizer = optimizer
    self.selectors = selectors
    self.is_update = is_update
    self.checked = False  # Whether every block was seen to claim a variable.


class RoutingTable:
  """Claims, the variable -> optimizer assignment, and each sub-optimizer's build.

  `default` (MultiOptimizer) trains every variable no entry claims; without it
  (CompositeOptimizer) such a variable with a gradient raises. A block that
  claims no variable at the first step raises when there is a default optimizer
  (its variables would silently go there) and warns otherwise.
  """

  def __init__(self, flavor, owner_name, owner_label, default=None):
    self.flavor = flavor
    self.owner_name = owner_name
    self.owner_label = owner_label
    self.entries = []
    self.default = default
    self.names = {}  # id(optimizer) -> its checkpoint name in the router
    self.candidates = None  # The variables the router was built with.
    self.assignment = {}  # var key -> optimizer
    self.built_with = {}  # id(optimizer) -> list of variables it was built with

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

  # --- claims

  def add(self, optimizer, blocks, is_update=False):
    """Adds an entry; checks what can be checked now, undoing the entry on error."""
    selectors = rules.make_selectors(blocks)
    previous = list(self.entries)
    if is_update:
      # An update of the very same blocks replaces the earlier update.
      self.entries = [
          e for e in self.entries
          if not (e.is_update and rules.same_selectors(e.selectors, selectors))
      ]
    self.entries.append(_Entry(optimizer, selectors, is_update))
    try:
      if self.candidates is None:
        self._resolve(None, static_only=True)
      else:
        self.build(self.candidates)
    except Exception:
      self.entries = previous
      raise

  def _resolve(self, candidates, static_only=False):
    """(var key -> (variable, optimizer) for every claimed variable, [(entry, empty selector)])."""
    flavor = self.flavor
    owners, empty = {}, []

    def claim_all(entries, override):
      claimed_here = {}
      for entry in entries:
        for selector in entry.selectors:
          if static_only and not selector.static:
            continue
          claimed = selector.claim(candidates, flavor)
          if not claimed:
            empty.append((entry, selector))
          for var in claimed:
            key = flavor.var_key(var)
            other = claimed_here.get(key)
            if other is not None and other is not entry.optimizer:
              raise ValueError(
                  f"Variable {rules.variable_path(var)!r} is claimed by two optimizers of "
                  f"{self.owner_label}: {optimizer_label(other)} and "
                  f"{optimizer_label(entry.optimizer)}. The set of variables handled by each "
                  "optimizer must be disjoint" +
                  (" (update() overrides the constructor and add(), but two update() calls "
                   "claiming one variable for different optimizers are ambiguous)." if override else
                   "."))
            claimed_here[key] = entry.optimizer
            if override or key not in owners:
              owners[key] = (var, entry.optimizer)

    claim_all([e for e in self.entries if not e.is_update], override=False)
    claim_all([e for e in self.entries if e.is_update], override=True)
    return owners, empty

  def _check_claims(self, empty):
    """Every block claims a variable when the router first sees its variables."""
    for entry, selector in empty:
      if entry.checked:
        continue
      where = ("its variables would silently go to the default optimizer" if self.default
               is not None else "it trains nothing")
      message = (f"In {self.owner_label}, the block {selector.describe()} of "
                 f"{optimizer_label(entry.optimizer)} claims no variable: {where}. Check that the "
                 "layer is built and part of the model, or that the pattern matches the variable "
                 "paths (a block loaded from a config is matched by its layer name).")
      if self.default is not None:
        raise ValueError(message)
      warnings.warn(message, stacklevel=4)
    for entry in self.entries:
      entry.checked = True

  def _owner_of(self, owners, variable):
    entry = owners.get(self.flavor.var_key(variable))
    if entry is not None:
      return entry[1]
    if self.default is not None:
      return self.default
    raise ValueError(
        f"Variable {rules.variable_path(variable)!r} is not handled by any optimizer of "
        f"{self.owner_label}. This would cause it to be not trained: list it in one of the "
        "(optimizer, variables) pairs.")

  def _new_variables(self, optimizer, variables):
    before = {self.flavor.var_key(v) for v in self.built_with.get(id(optimizer), ())}
    return [v for v in variables if self.flavor.var_key(v) not in before]

  def build(self, variables, required=()):
    """Assigns `variables` to optimizers and builds each sub-optimizer with its own.

    Without a default optimizer, an unclaimed variable is an error only if its
    key is in `required` (it has a gradient): `build(model.trainable_variables)`
    may name variables a `CompositeOptimizer` deliberately leaves alone.
    """
    variables = list(variables)
    required = set(required)
    owners, empty = self._resolve(variables)
    assignment, per_optimizer = {}, {}
    for var in variables:
      key = self.flavor.var_key(var)
      if key in assignment:
        continue
      if key not in owners and self.default is None and key not in required:
        continue
      optimizer = self._owner_of(owners, var)
      assignment[key] = optimizer
      per_optimizer.setdefault(id(optimizer), (optimizer, []))[1].append(var)
    self._check_claims(empty)
    # Check everything before building anything.
    for optimizer, own in per_optimizer.values():
      new = self._new_variables(optimizer, own)
      if id(optimizer) in self.built_with and new and self.flavor.builds_once(optimizer):
        raise ValueError(
            f"{optimizer_label(optimizer)} in {self.owner_label} was already built with its "
            f"variables and cannot take {rules.variable_path(new[0])!r} as well (Keras 3 and "
            "tf_keras optimizers are built once; tf_keras legacy ones are not). Route variables "
            "before the first step, or use a new optimizer instance.")
    for optimizer, own in per_optimizer.values():
      new = self._new_variables(optimizer, own)
      if new:
        self.flavor.build(optimizer, new, self._scope(optimizer))
        self.built_with[id(optimizer)] = self.built_with.get(id(optimizer), []) + new
    self.assignment = assignment
    known = {self.flavor.var_key(v) for v in self.candidates or ()}
    self.candidates = list(self.candidates or
                           ()) + [v for v in variables if self.flavor.var_key(v) not in known]
    return per_optimizer

  def _scope(self, optimizer):
    return f"{scope_name(self.owner_name)}/{self.names.get(id(optimizer), 'optimizer')}"

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
    """[{"optimizer": index into optimizers, "blocks": [block, ...], "update": bool}, ...].

    Layers, variables and callables are written as the exact paths of the
    variables they claim (escaped regular expressions), so the config
    round-trips into a router for the same model (e.g. a loaded model file); a
    layer with no variables yet is written as its name and its sub-layers' names
    (`{"layer": name, "sublayers": [...]}`: see rules.LayerName).
    """
    index = {id(opt): i for i, opt in enumerate(optimizers)}
    result = []
    for entry in self.entries:
      patterns = []
      for selector in entry.selectors:
        if rules.is_pattern(selector):
          patterns.append(selector.pattern)
          continue
        if rules.layer_name_of(selector) is not None:
          patterns.append(rules.layer_config(selector, self.flavor))
          continue
        try:
          variables = selector.claim(self.candidates, self.flavor)
        except Exception as e:
          raise ValueError(
              f"{self.owner_label} cannot serialize the block {selector.describe()}: its "
              f"variables are not available yet ({e}). Build the router (or the model) first."
          ) from e
        if not variables and rules.is_layer_selector(selector):
          patterns.append(rules.layer_config(selector, self.flavor))
          continue
        patterns.extend(re.escape(rules.variable_path(v)) for v in variables)
      result.append(
          {"optimizer": index[id(entry.optimizer)], "blocks": patterns, "update": entry.is_update})
    return result
