"""The installed library for this TensorFlow loads wherever this TensorFlow loads.

It needs no newer glibc, libstdc++ or libgcc symbol versions than this
TensorFlow's own libtensorflow_framework.so.2 (TensorFlow 2.15's is built for
an older C++ runtime than 2.21's), and it carries no search path of its own.
"""

import os
import re
import subprocess
import sys

import tensorflow as tf

import tf_opt_ops_sysconfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import symbol_versions  # noqa: E402  (tools/ is not a package)

LIBRARY = tf_opt_ops_sysconfig.get_library_path()
FRAMEWORK = os.path.join(tf.sysconfig.get_lib(), "libtensorflow_framework.so.2")


def test_the_library_is_this_tensorflows():
  minor = tf_opt_ops_sysconfig.tf_minor(tf.__version__)
  assert LIBRARY.endswith(os.path.join("libs", "tf" + minor, "_tf_opt_ops.so")), LIBRARY
  assert os.path.isfile(LIBRARY)
  info = tf_opt_ops_sysconfig.get_build_info()
  assert tf_opt_ops_sysconfig.tf_minor(info["TF_VERSION"]) == minor, info


def test_no_newer_symbol_versions_than_tensorflow():
  assert symbol_versions.too_new(LIBRARY, FRAMEWORK) == {}


def test_no_search_path_and_the_framework_by_soname():
  dynamic = subprocess.run(["readelf", "-d", "--wide", LIBRARY], check=True, capture_output=True,
                           text=True).stdout
  assert not re.search(r"\((RUNPATH|RPATH)\)", dynamic), dynamic
  needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
  assert "libtensorflow_framework.so.2" in needed
  assert not [n for n in needed if "cuda" in n], needed  # CPU-only machines load it
