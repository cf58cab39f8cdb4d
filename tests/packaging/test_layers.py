"""The Python package keeps docs/design.md's layers: a module imports only from its own layer
or below, and no import cycle exists."""

import ast
import os

import common

PACKAGE = os.path.join(common.PYTHON_DIR, "tf_opt_ops")
# docs/design.md, "Layers", from the bottom up (the Python part).
LAYERS = [
    {"tf_opt_ops_sysconfig", "reference", "_version", "_tf_private"},
    {"_loader", "ops", "_op_inputs", "checkpoints"},
    {"_core", "_standard_ops"},
    {"_keras2", "_keras3", "_registry", "_restore_hints"},
    {
        "routers", "routers.rules", "routers.table", "routers.core", "routers.tf_keras_common",
        "routers.keras", "routers.tf_keras", "routers.legacy"
    },
    {"keras", "tf_keras", "legacy", "__init__"},
    {"export", "server"},
]


def _modules():
  """{module name relative to the package: set of package modules it imports}."""
  found = {}
  for root, _, files in os.walk(PACKAGE):
    if os.path.relpath(root, PACKAGE).startswith("libs"):
      continue
    for name in files:
      if not name.endswith(".py"):
        continue
      path = os.path.join(root, name)
      module = os.path.relpath(path, PACKAGE)[:-3].replace(os.sep, ".")
      module = module[:-len(".__init__")] if module.endswith(".__init__") else module
      found[module] = _imports(path)
  return found


def _imports(path):
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  imported = set()
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.ImportFrom) and node.module:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    elif isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    for name in names:
      if name == "tf_opt_ops_sysconfig":
        imported.add(name)
      elif name.startswith("tf_opt_ops."):
        imported.add(name[len("tf_opt_ops."):])
  return imported


def _layer(module):
  for i, layer in enumerate(LAYERS):
    if module in layer:
      return i
  return None


def test_every_module_has_a_layer():
  assert not [m for m in _modules() if _layer(m) is None]


def test_imports_go_down():
  upward = []
  for module, imported in _modules().items():
    for name in imported:
      target = name if _layer(name) is not None else name.rpartition(".")[0]  # `from m import x`
      if _layer(target) is not None and _layer(target) > _layer(module):
        upward.append((module, target))
  assert not upward, upward


def test_no_import_cycles():
  graph = {
      m: {i if _layer(i) is not None else i.rpartition(".")[0] for i in imported} & set(_modules())
      for m, imported in _modules().items()
  }
  state = {}

  def visit(node, stack):
    state[node] = "open"
    for nxt in graph.get(node, ()):
      if state.get(nxt) == "open":
        raise AssertionError(f"import cycle: {' -> '.join(stack + [node, nxt])}")
      if nxt not in state:
        visit(nxt, stack + [node])
    state[node] = "done"

  for module in graph:
    if module not in state:
      visit(module, [])
