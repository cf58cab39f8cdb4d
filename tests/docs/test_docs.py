"""The README and the guide in docs/ cannot rot.

- Every fenced ```python block runs, in a fresh namespace, unless its first line says why it
  is not run here (`# Not run by the docs test: <reason>`), which readers see too.
- Every relative link points at a file that exists, and every `#anchor` at a heading of it.
- Every repository path the pages name in backticks (`tests/...`, `tools/...`, globs and
  `<minor>` placeholders included) matches a file or folder of the repository.
- Every `tf_opt_ops...` name the pages cite exists.
"""

import glob
import importlib
import os
import re
import subprocess

import pytest

import common

ROOT = common.ROOT
PAGES = ["README.md"] + sorted(
    os.path.join("docs", name)
    for name in os.listdir(os.path.join(ROOT, "docs"))
    if name.endswith(".md"))
NOT_RUN = "# Not run by the docs test:"


def read(page):
  with open(os.path.join(ROOT, page), encoding="utf-8") as f:
    return f.read()


def python_blocks(text):
  return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


BLOCKS = [(page, i, code) for page in PAGES for i, code in enumerate(python_blocks(read(page)))]
RUN = [b for b in BLOCKS if not b[2].startswith(NOT_RUN)]


def test_every_page_with_examples_runs_some():
  assert len(PAGES) >= 8, PAGES
  assert len(RUN) >= 20, [(p, i) for p, i, _ in RUN]


@pytest.mark.parametrize("page, index, code", [b for b in BLOCKS if b not in RUN],
                         ids=[f"{p}-{i}" for p, i, c in BLOCKS if c.startswith(NOT_RUN)])
def test_blocks_not_run_say_why(page, index, code):
  del page, index
  reason = code.splitlines()[0][len(NOT_RUN):].strip()
  assert len(reason) > 10, f"say why the block is not run: {code.splitlines()[0]!r}"


@pytest.fixture
def clean_keras_state():
  """A block must not leave global Keras state behind for the next one."""
  yield
  for name, reset in (("keras", lambda k:
                       (k.config.set_dtype_policy("float32"), k.backend.clear_session())),
                      ("tf_keras", lambda k: k.mixed_precision.set_global_policy("float32"))):
    try:
      reset(importlib.import_module(name))
    except ImportError:
      pass


@pytest.mark.parametrize("page, index, code", RUN, ids=[f"{p}-{i}" for p, i, _ in RUN])
def test_block_runs(page, index, code, clean_keras_state):
  del index
  namespace = {"__name__": "__docs__"}
  exec(compile(code, os.path.join(ROOT, page), "exec"), namespace)


@pytest.mark.parametrize("legacy_keras, flavor", [("0", "keras"), ("1", "tf_keras")])
def test_top_level_names_follow_tf_keras(legacy_keras, flavor, run_python):
  # The first block of docs/optimizers.md asserts that tf_opt_ops.LazyAdam is tf.keras'
  # flavor: where tf.keras is Keras 3 and where it is tf_keras (TF_USE_LEGACY_KERAS=1).
  code = python_blocks(read(os.path.join("docs", "optimizers.md")))[0]
  result = run_python(code, env={"TF_USE_LEGACY_KERAS": legacy_keras})
  assert result.stdout.split()[-1] == flavor


def _tf_keras_2_15_block():
  """docs/migrating.md's TF Addons example as written for TensorFlow 2.15 (`tf.keras`)."""
  (block,) = [
      b for b in python_blocks(read(os.path.join("docs", "migrating.md")))
      if "tf.keras.Sequential" in b and "tf_opt_ops.legacy.LazyAdam" in b
  ]
  return block


# A checkpoint in TF Addons' layout (a tf_keras legacy Adam's), at the path the example reads.
_WRITE_TFA_CHECKPOINT = """
import numpy as np
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Embedding(1000, 16), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.legacy.Adam(1e-3)
model.compile(optimizer=optimizer, loss="mse")
model.fit(np.array([[1, 2, 3]]), np.ones((1, 3, 1)), verbose=0)
tf.train.Checkpoint(model=model, optimizer=optimizer).write("tfa_checkpoint")
"""


def test_tf_addons_example_runs_with_legacy_keras(run_python, tmp_path):
  # TensorFlow 2.16+ with TF_USE_LEGACY_KERAS=1: tf.keras is tf_keras, as on 2.15.
  env = {"TF_USE_LEGACY_KERAS": "1"}
  run_python(_WRITE_TFA_CHECKPOINT, env=env, cwd=tmp_path)
  result = run_python(_tf_keras_2_15_block() + "\nprint(int(optimizer.iterations.numpy()))\n",
                      env=env, cwd=tmp_path)
  assert result.stdout.split()[-1] == "1"  # TF Addons' step counter, restored


def test_tf_addons_example_fails_on_keras_3_as_the_page_says(run_python, tmp_path):
  result = run_python(_tf_keras_2_15_block(), env={"TF_USE_LEGACY_KERAS": "0"}, cwd=tmp_path,
                      check=False)
  assert result.returncode != 0
  error = result.stderr.strip().splitlines()[-1]
  quoted = ("ValueError: Could not interpret optimizer identifier: "
            "<tf_opt_ops.legacy.LazyAdam object at ")
  assert error.startswith(quoted), error
  assert quoted in read(os.path.join("docs", "migrating.md"))


def _slug(heading):
  """GitHub's anchor for a heading."""
  text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
  return text.replace(" ", "-")


def _anchors(page):
  text = re.sub(r"^```.*?^```$", "", read(page), flags=re.S | re.M)
  return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


LINKS = [(page, target)
         for page in PAGES
         for target in re.findall(r"\]\(([^)\s]+)\)",
                                  re.sub(r"^```.*?^```$", "", read(page), flags=re.S | re.M))
         if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page, target", LINKS, ids=[f"{p}->{t}" for p, t in LINKS])
def test_links_resolve(page, target):
  path, _, anchor = target.partition("#")
  linked = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
  assert os.path.exists(os.path.join(ROOT, linked)), f"{page}: {target} does not exist"
  if anchor:
    assert linked.endswith(".md"), target
    assert anchor in _anchors(linked), f"{page}: no heading for #{anchor} in {linked}"


def _tracked_top_level():
  files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
  return {f.split("/")[0] for f in files}


# Paths the pages name that are not this repository's: inside the installed wheel, and the
# peers' own test files.
NOT_REPOSITORY_PATHS = (r"tf_opt_ops/libs/.*", r"tests/unit/tf/blocks/test_optimizer\.py")


def _brace_expand(pattern):
  match = re.search(r"\{([^{}]*)\}", pattern)
  if not match:
    return [pattern]
  return [
      expanded for choice in match.group(1).split(",")
      for expanded in _brace_expand(pattern[:match.start()] + choice + pattern[match.end():])
  ]


def _repository_paths():
  top_level = _tracked_top_level()
  paths = set()
  for page in PAGES:
    for path in re.findall(r"`\.?/?([A-Za-z_.][^`\s]*/[^`\s]*)`", read(page)):
      if path.split("/")[0] in top_level and not any(
          re.fullmatch(p, path) for p in NOT_REPOSITORY_PATHS):
        paths.add((page, path))
  return sorted(paths)


REPOSITORY_PATHS = _repository_paths()


def test_pages_name_repository_paths():
  assert len(REPOSITORY_PATHS) >= 30, REPOSITORY_PATHS


@pytest.mark.parametrize("page, path", REPOSITORY_PATHS,
                         ids=[f"{p}:{t}" for p, t in REPOSITORY_PATHS])
def test_repository_paths_exist(page, path):
  pattern = re.sub(r"<[^<>]*>", "*", path)
  matches = [m for p in _brace_expand(pattern) for m in glob.glob(os.path.join(ROOT, p))]
  assert matches, f"{page} names {path}, which is not in the repository"


def test_cited_names_exist():
  import tf_opt_ops
  text = "\n".join(read(page) for page in PAGES)
  missing = []
  for name in sorted(set(re.findall(r"`(tf_opt_ops(?:\.[A-Za-z_]\w*)+)", text))):
    module, attribute = name, None
    while True:
      try:
        obj = importlib.import_module(module)
        break
      except ImportError:
        module, _, last = module.rpartition(".")
        attribute = last if attribute is None else f"{last}.{attribute}"
        if not module:
          obj = None
          break
    for part in (attribute or "").split(".") if attribute else []:
      obj = getattr(obj, part, None)
    if obj is None:
      missing.append(name)
  assert not missing, missing
  assert tf_opt_ops.keras_flavor() in ("keras", "tf_keras")


def test_readme_is_short_and_starts_with_the_two_commands():
  lines = read("README.md").splitlines()
  assert len(lines) <= 300, len(lines)
  head = "\n".join(lines[:40])
  assert "make demo" in head and "make test" in head


def test_the_command_line_examples_use_real_make_targets():
  targets = set(re.findall(r"^([a-z][\w-]*):", read("Makefile"), flags=re.M))
  text = "\n".join(read(page) for page in PAGES)
  used = set(re.findall(r"`make ([a-z][\w-]*)", text))
  assert used <= targets, sorted(used - targets)


def test_python_m_modules_exist():
  import importlib.util
  text = "\n".join(read(page) for page in PAGES)
  for module in sorted(set(re.findall(r"python -m (tf_opt_ops[\w.]*)", text))):
    assert importlib.util.find_spec(module) is not None, module
