"""The README's optimizer sections run: every fenced python block, and every name they cite.

Each block of the sections in SECTIONS (optimizers, migration, routers,
distribution and SavedModel) is self-contained; it is executed here, in a fresh
namespace, so the docs cannot rot.
"""

import importlib
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
SECTIONS = [
    "## Optimizers on every Keras API", "## Migrating: one import",
    "## Routing optimizers to variables", "## Distributed training and SavedModel"
]


def section(title):
  with open(README, encoding="utf-8") as f:
    text = f.read()
  start = text.index(title + "\n")
  end = text.find("\n## ", start + len(title))
  return text[start:end if end >= 0 else len(text)]


def python_blocks(text):
  return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


BLOCKS = [
    (title, i, code) for title in SECTIONS for i, code in enumerate(python_blocks(section(title)))
]


def test_sections_have_examples():
  counts = {title: sum(1 for t, _, _ in BLOCKS if t == title) for title in SECTIONS}
  assert counts[SECTIONS[0]] >= 8, counts  # top level, 3 flavors, checkpoint, XLA, AMP, names
  assert counts[SECTIONS[1]] >= 2, counts  # the routers, the differences


@pytest.fixture
def clean_keras_state():
  """A block must not leave global Keras state behind for the next one."""
  import keras  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  yield
  keras.config.set_dtype_policy("float32")
  tf_keras.mixed_precision.set_global_policy("float32")
  keras.backend.clear_session()


@pytest.mark.parametrize("title,index,code", BLOCKS,
                         ids=[f"{t.split(':')[0][3:].split()[0]}-{i}" for t, i, _ in BLOCKS])
def test_block_runs(title, index, code, clean_keras_state):
  del title, index
  namespace = {"__name__": "__readme__"}
  exec(compile(code, README, "exec"), namespace)  # pylint: disable=exec-used


@pytest.mark.parametrize("legacy_keras,flavor", [("0", "keras"), ("1", "tf_keras")])
def test_top_level_block_follows_tf_keras(legacy_keras, flavor):
  # The first block asserts that tf_opt_ops.LazyAdam is tf.keras' flavor; run
  # it where tf.keras is Keras 3 and where it is tf_keras (TF_USE_LEGACY_KERAS=1).
  code = python_blocks(section(SECTIONS[0]))[0]
  env = dict(os.environ, TF_USE_LEGACY_KERAS=legacy_keras, TF_CPP_MIN_LOG_LEVEL="3",
             PYTHONPATH=os.path.join(ROOT, "python"))
  proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split()[-1] == flavor


def test_cited_names_exist():
  text = "\n".join(section(t) for t in SECTIONS)
  names = set(re.findall(r"tf_opt_ops\.(keras|tf_keras|legacy)\.([A-Za-z_]+)", text))
  assert ("legacy", "LazyAdam") in names and ("tf_keras", "ClippyAdagrad") in names
  for flavor, name in sorted(names):
    module = importlib.import_module(f"tf_opt_ops.{flavor}")
    assert hasattr(module, name), f"README cites tf_opt_ops.{flavor}.{name}"


def test_migration_table_rows():
  table = section(SECTIONS[1])
  rows = {}
  for line in table.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if line.startswith("| `") and len(cells) == 3:
      rows[cells[0]] = cells[1]
  expected = {
      "tfa.optimizers.LazyAdam": "tf_opt_ops.legacy.LazyAdam",
      "merlin.models.tf.LazyAdam": "tf_opt_ops.legacy.LazyAdam",
      "merlin.models.tf.MultiOptimizer": "tf_opt_ops.legacy.MultiOptimizer",
      "merlin.models.tf.OptimizerBlocks": "tf_opt_ops.legacy.OptimizerBlocks",
      "tfrs.experimental.optimizers.ClippyAdagrad": "tf_opt_ops.tf_keras.ClippyAdagrad",
      "tfrs.experimental.optimizers.CompositeOptimizer": "tf_opt_ops.legacy.CompositeOptimizer",
  }
  for old, new in expected.items():
    row = [k for k in rows if f"`{old}`" in k]
    assert row, f"no migration row for {old}"
    assert f"`{new}`" in rows[row[0]], (old, rows[row[0]])
