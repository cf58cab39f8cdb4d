"""Private TensorFlow and Keras APIs are reached through their seams alone (docs/design.md,
"Private framework APIs"): `_tf_private` for TensorFlow, `_keras2` and `_keras3` for Keras.

Elsewhere in the package a private attribute is reached only on the object itself (`self`,
`cls`, `super()`: the subclass hooks both Keras bases document) or when the package itself
defines that name; and no module but the seams imports `tensorflow.python` or a Keras
package's `src`.
"""

import ast
import os

import common

PACKAGE = os.path.join(common.PYTHON_DIR, "tf_opt_ops")
SEAMS = {"_tf_private.py", "_keras2.py", "_keras3.py"}


def _sources():
  """{path relative to the package: parsed module}, without the staged libraries."""
  found = {}
  for root, dirs, files in os.walk(PACKAGE):
    dirs[:] = [d for d in dirs if d != "libs"]
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
          found[os.path.relpath(path, PACKAGE)] = ast.parse(f.read())
  return found


def _private(name):
  return name.startswith("_") and not name.startswith("__")


def _defined_names(tree):
  """The private names a module defines: functions, classes, class attributes, `self._x = `."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      names.add(node.id)
    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
      names.add(node.attr)
  return {n for n in names if _private(n)}


def _on_itself(node):
  """Whether `node` (an attribute's object) is `self`, `cls` or `super()`."""
  if isinstance(node, ast.Name):
    return node.id in ("self", "cls")
  return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _private_reaches(tree):
  """(line, object, attribute) of each private attribute read off another object, as
  `obj._x` or `getattr`/`hasattr`/`setattr`/`delattr(obj, "_x")`."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute) and _private(node.attr) and not _on_itself(node.value):
      yield node.lineno, ast.unparse(node.value), node.attr
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
          node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1 and
          isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) and
          _private(node.args[1].value) and not _on_itself(node.args[0])):
      yield node.lineno, ast.unparse(node.args[0]), node.args[1].value


def _module_names(tree):
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
      yield node.value  # importlib.import_module("...")


def test_private_framework_attributes_only_in_the_seams():
  sources = _sources()
  ours = set().union(*(_defined_names(tree) for path, tree in sources.items() if path not in SEAMS))
  reaches = [(path, *reach) for path, tree in sources.items() if os.path.basename(path) not in SEAMS
             for reach in _private_reaches(tree) if reach[2] not in ours]
  assert not reaches, reaches


def test_private_framework_modules_only_in_the_seams():
  private = ("tensorflow.python", "keras.src", "tf_keras.src")
  imports = [(path, name) for path, tree in _sources().items()
             if os.path.basename(path) not in SEAMS for name in _module_names(tree)
             if name.startswith(private)]
  assert not imports, imports


def test_the_checks_see_a_private_reach():
  # The checks above are only as good as what they find: one of each kind, as written.
  tree = ast.parse("import tensorflow.python.ops\n"
                   "def f(var, layer):\n"
                   "  return var._shared_name, getattr(layer, '_flatten_layers'), self._ok\n")
  assert [(obj, name) for _, obj, name in _private_reaches(tree)] == [("var", "_shared_name"),
                                                                      ("layer", "_flatten_layers")]
  assert "tensorflow.python.ops" in list(_module_names(tree))
