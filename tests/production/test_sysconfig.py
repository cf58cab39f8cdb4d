"""tf_opt_ops_sysconfig: the library's path and build flags, without loading TensorFlow."""

import glob
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

import tf_opt_ops_sysconfig
from tf_opt_ops import _loader

import common

PACKAGE_ROOT = common.PYTHON_DIR
TF_MINOR = ".".join(tf.__version__.split(".")[:2])


def run_python(code, *args):
  return common.run_python(code, *args, timeout=120).stdout


def test_sysconfig_loads_no_tensorflow_keras_or_package():
  out = run_python(
      textwrap.dedent("""
      import json, sys
      import tf_opt_ops_sysconfig as sysconfig
      info = dict(path=sysconfig.get_library_path(), lib=sysconfig.get_lib(),
                  libdir=sysconfig.get_library_dir(), tf=sysconfig.installed_tf_version(),
                  path215=sysconfig.get_library_path("2.15.1"),
                  include=sysconfig.get_include(), cflags=sysconfig.get_compile_flags(),
                  lflags=sysconfig.get_link_flags(), build=sysconfig.get_build_info())
      loaded = [m for m in sys.modules
                if m.split(".")[0] in ("tensorflow", "keras", "tf_keras", "tf_opt_ops")]
      print(json.dumps(dict(info, loaded=loaded)))
      """))
  info = json.loads(out)
  assert info["loaded"] == []
  assert info["path"] == _loader.LIBRARY_PATH
  assert info["tf"] == tf.__version__  # read without importing TensorFlow
  assert info["libdir"] == os.path.dirname(_loader.LIBRARY_PATH)
  assert info["libdir"] == os.path.join(info["lib"], "libs", "tf" + TF_MINOR)
  assert info["path215"] == os.path.join(info["lib"], "libs", "tf2.15", "_tf_opt_ops.so")
  assert os.path.isfile(os.path.join(info["include"], "tensorflow", "c", "c_api.h"))
  assert info["build"]["BUILD_ID"] == _loader.built_id()
  assert info["build"]["TF_VERSION"] == _loader.built_against_tf_version()


def test_command_line_prints_the_path_and_flags():
  assert run_python(None, "-m", "tf_opt_ops_sysconfig").strip() == _loader.LIBRARY_PATH
  assert run_python(None, "-m", "tf_opt_ops_sysconfig", "--tf-version",
                    tf.__version__).strip() == _loader.LIBRARY_PATH
  assert TF_MINOR in run_python(None, "-m", "tf_opt_ops_sysconfig", "--list").split()
  assert run_python(None, "-m", "tf_opt_ops_sysconfig", "--build-id").strip() == _loader.built_id()
  # Shell-quoted, so that a path with a space stays one flag.
  lflags = shlex.split(run_python(None, "-m", "tf_opt_ops_sysconfig", "--lflags"))
  assert lflags == tf_opt_ops_sysconfig.get_link_flags()
  assert f"-L{os.path.dirname(_loader.LIBRARY_PATH)}" in lflags
  cflags = shlex.split(run_python(None, "-m", "tf_opt_ops_sysconfig", "--cflags"))
  assert cflags == tf_opt_ops_sysconfig.get_compile_flags()


@pytest.mark.parametrize("option", [[], ["--cflags"], ["--lflags"], ["--build-id"]])
def test_command_line_fails_for_a_version_this_install_lacks(option):
  # A wheel from `make wheel` holds one TensorFlow's library: asking for another names
  # what the install has instead of printing a path that does not exist.
  built = tf_opt_ops_sysconfig.built_tf_versions()
  missing = next(v for v in ("2.15", "2.14") if v not in built)  # 2.14: never supported
  result = common.run_python(None, "-m", "tf_opt_ops_sysconfig", "--tf-version", missing, *option,
                             timeout=120, check=False)
  assert result.returncode != 0
  assert result.stdout == ""
  message = result.stderr.strip()
  assert f"no library for TensorFlow {missing}; it holds {', '.join(built)} (in " in message
  assert "make wheel-all" in message
  with pytest.raises(FileNotFoundError, match=f"it holds {', '.join(built)} "):
    tf_opt_ops_sysconfig.check_built(missing)
  tf_opt_ops_sysconfig.check_built(tf.__version__)  # the running TensorFlow's: present


def test_flags_build_a_program_that_links_the_library(tmp_path):
  # A C++ program compiled with the compile flags (TensorFlow's C API header)
  # and linked with the link flags: it runs and sees the library's build id.
  source = tmp_path / "uses_library.cc"
  source.write_text(
      textwrap.dedent("""
      #include <cstdio>
      #include "tensorflow/c/c_api.h"
      extern "C" const char tf_opt_ops_build_id[];
      int main() {
        TF_DataType dtype = TF_FLOAT;
        std::printf("%s %d\\n", tf_opt_ops_build_id, static_cast<int>(dtype));
      }
      """))
  cflags = shlex.split(run_python(None, "-m", "tf_opt_ops_sysconfig", "--cflags"))
  lflags = shlex.split(run_python(None, "-m", "tf_opt_ops_sysconfig", "--lflags"))
  program = tmp_path / "uses_library"
  subprocess.run(["g++", *cflags, str(source), "-o", str(program), *lflags], check=True)
  out = subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout
  assert out.split() == [_loader.built_id(), "1"]


def test_guide_load_op_library_block_runs_in_a_fresh_process():
  with open(os.path.join(common.ROOT, "docs", "production.md"), encoding="utf-8") as f:
    blocks = re.findall(r"^```python\n(.*?)^```$", f.read(), flags=re.S | re.M)
  (block,) = [block for block in blocks if "tf.load_op_library(path)" in block]
  out = run_python(block + "\nimport sys\nprint([m for m in sys.modules if m.split('.')[0] == "
                   "'tf_opt_ops'])\n")
  values, loaded = out.strip().splitlines()[-2:]
  assert f"print(var.numpy()[1])  # {values}:" in block  # what the guide says it prints
  assert [float(x) for x in values.strip("[]").split()] == pytest.approx([-0.1, -0.1], rel=1e-5)
  assert loaded == "[]"  # the library alone, not the package


@pytest.mark.slow
def test_the_wheel_ships_it_beside_the_package(tmp_path):
  # Installed from the wheel (`make wheel`), outside the source tree, it points
  # at the installed library; `import tf_opt_ops` stays the package's.
  wheels = sorted(glob.glob(os.path.join(os.path.dirname(PACKAGE_ROOT), "dist", "*.whl")),
                  key=os.path.getmtime)
  assert wheels, "no wheel in dist/: run `make wheel` (make test does) before the tests"
  target = tmp_path / "site"
  subprocess.run([
      sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
      str(target), wheels[-1]
  ], check=True)
  env = dict(os.environ, PYTHONPATH=str(target))
  out = subprocess.run([sys.executable, "-m", "tf_opt_ops_sysconfig"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, check=True).stdout
  assert out.strip() == str(target / "tf_opt_ops" / "libs" / f"tf{TF_MINOR}" / "_tf_opt_ops.so")
  assert os.path.isfile(out.strip())


def test_supported_versions_are_the_ones_the_build_knows():
  with open(os.path.join(os.path.dirname(PACKAGE_ROOT), "build_deps", "tf_versions.txt")) as f:
    built = [line.split()[0] for line in f if line.strip() and not line.startswith("#")]
  assert tuple(built) == tf_opt_ops_sysconfig.SUPPORTED_TF_VERSIONS
  assert TF_MINOR in tf_opt_ops_sysconfig.SUPPORTED_TF_VERSIONS


@pytest.mark.parametrize("version, minor", [("2.15.1", "2.15"), ("2.21.0rc1", "2.21"),
                                            ("2.16", "2.16"), ("10.2.3", "10.2")])
def test_tf_minor(version, minor):
  assert tf_opt_ops_sysconfig.tf_minor(version) == minor
