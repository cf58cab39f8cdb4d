"""Every repository path the code, build files and docs name exists, and every pointer to a
section of a page ("see docs/design.md, \"XLA\"") names a heading of that page.

A path is a token that starts at a top-level folder of the repository (`tests/...`,
`tools/...`, `tf_opt_ops/...`, which may also be the package under python/); it names a file,
a folder or a Bazel target (`serving/saved_model_runner`). Build outputs (.gitignore's
patterns), tokens with placeholders (`<minor>`, `$VAR`, `{name}`) and the peers' own paths
are not paths here. `{a,b}` alternatives and `*` globs must each match something. The C++
sources are not scanned: their `#include`s are checked by the compiler.
"""

import fnmatch
import glob
import itertools
import os
import re

import pytest

import common

ROOT = common.ROOT
SKIP_DIRS = {".git", ".venv", ".venvs", ".toolchains", "third_party", "__pycache__", "libs"}
SOURCE_NAMES = {"BUILD", "Makefile", "WORKSPACE", "run", "configure.sh"}
SOURCE_SUFFIXES = (".py", ".bzl", ".sh", ".md", ".txt", ".cfg", ".toml")
# Paths in other repositories that the peers' tests and docs name: Merlin Models' test tree.
OTHER_REPOSITORIES = ("tests/unit/",)


def _sources():
  for root, dirs, files in os.walk(ROOT):
    dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("bazel-")]
    for name in files:
      if name in SOURCE_NAMES or name.endswith(SOURCE_SUFFIXES):
        path = os.path.relpath(os.path.join(root, name), ROOT)
        if not _ignored(path):
          yield path


def _ignore_patterns():
  with open(os.path.join(ROOT, ".gitignore"), encoding="utf-8") as f:
    lines = [line.strip() for line in f]
  return [line for line in lines if line and not line.startswith("#")]


IGNORED = _ignore_patterns()


def _ignored(path):
  """Whether `path` (or a folder above it) is a build output by .gitignore's patterns."""
  parts = path.split("/")
  for pattern in IGNORED:
    anchored = pattern.startswith("/")
    pattern = pattern.strip("/")
    for end in range(1, len(parts) + 1):
      prefix = "/".join(parts[:end])
      if fnmatch.fnmatch(prefix if anchored else parts[end - 1], pattern):
        return True
  return False


TOP = sorted(n for n in os.listdir(ROOT) if not n.startswith((".git", "bazel-")))
TOP_DIRS = [n for n in TOP if os.path.isdir(os.path.join(ROOT, n))] + [".ci"]
# A path: a top-level folder, then folder and file names (globs and {a,b} alternatives too).
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w.*{},/-]*[\w*}/])" %
                  "|".join(re.escape(d) for d in TOP_DIRS))


def _expand(token):
  """`a/{b,c}.h` as ["a/b.h", "a/c.h"]."""
  parts = re.split(r"\{([^{}]*)\}", token)
  choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
  return ["".join(c) for c in itertools.product(*choices)]


def _exists(path):
  """Whether `path` names a file, a folder, a glob's match or a Bazel target here."""
  path = path.rstrip("/")
  if "*" in path:
    return bool(glob.glob(os.path.join(ROOT, path)))
  if os.path.exists(os.path.join(ROOT, path)):
    return True
  build = os.path.join(ROOT, os.path.dirname(path), "BUILD")
  if os.path.exists(build):
    with open(build, encoding="utf-8") as f:
      return f'name = "{os.path.basename(path)}"' in f.read()
  return False


def _exists_or_output(path):
  """`path` exists or is a build output, here or (a package path) under python/."""
  return any(_ignored(p.rstrip("/")) or _exists(p) for p in (path, "python/" + path))


def _named_paths(text):
  for match in PATH.finditer(text):
    token = match.group(1).rstrip(".,")
    end = match.end(1)
    if text[end:end + 1] in ("<", "$") or "<" in token or "$" in token:
      continue
    if re.search(r"\{[^,{}]*\}", token) or token.startswith(OTHER_REPOSITORIES):
      continue
    yield token


def _missing(path):
  with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
    text = f.read()
  missing = []
  for token in _named_paths(text):
    for candidate in _expand(token):
      if not _exists_or_output(candidate):
        missing.append(candidate)
  return missing


SOURCES = sorted(_sources())


def test_the_scan_sees_sources_and_paths():
  assert {"Makefile", "BUILD", "docs/design.md", "tools/matrix.sh", ".ci/run"} <= set(SOURCES)
  assert list(_named_paths("see tests/docs/test_paths.py, and docs/{design,building}.md.")) == [
      "tests/docs/test_paths.py", "docs/{design,building}.md"
  ]
  assert _expand("docs/{design,building}.md") == ["docs/design.md", "docs/building.md"]
  assert _ignored("python/tf_opt_ops/libs/tf2.21/_tf_opt_ops.so") and _ignored("dist/x.whl")
  assert not _exists("tests/" + "test_portability.py")
  assert _exists("serving/saved_model_runner") and _exists_or_output("tf_opt_ops/__init__.py")


@pytest.mark.parametrize("path", SOURCES)
def test_named_paths_exist(path):
  assert not _missing(path)


def _headings(page):
  with open(os.path.join(ROOT, page), encoding="utf-8") as f:
    return {m.strip() for m in re.findall(r"^#+ (.*)$", f.read(), flags=re.M)}


# `docs/design.md, "XLA"` or `design.md's "XLA"`: a page, then a section of it in quotes.
SECTION = re.compile(r"((?:docs/)?[\w-]+\.md)(?:,|'s| section)? \\?\"([^\"\\]+)\\?\"")


@pytest.mark.parametrize("path", SOURCES)
def test_section_pointers_name_headings(path):
  with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
    text = f.read()
  wrong = []
  for page, section in SECTION.findall(text):
    section = re.sub(r"\s*\n\s*(?:#\s*)?", " ", section)  # wrapped, maybe in a comment
    page = page if "/" in page or page == "README.md" else f"docs/{page}"
    if not os.path.exists(os.path.join(ROOT, page)) or section not in _headings(page):
      wrong.append((page, section))
  assert not wrong
