"""The installed library and a copy of it at another path (a pipeline's vendored .so) in one
process: both load, the ops are registered once and run (docs/design.md, "Production")."""

import shutil

import pytest

import matrix_util

ONE_STEP = """
import tensorflow as tf
from tf_opt_ops import ops

def step(var, m, v):
  ops.sparse_lazy_adam(var, m, v, tf.ones((2, 2)), tf.constant([1, 1]),
                       beta_1_power=0.5, beta_2_power=0.75, lr=0.1, beta_1=0.5, beta_2=0.75)

eager, graph = [[tf.Variable(tf.zeros((4, 2))) for _ in range(3)] for _ in range(2)]
step(*eager)
tf.function(step)(*graph)
print("VALUES", eager[0].numpy()[1, 0], graph[0].numpy()[1, 0], eager[0].numpy()[0, 0])
"""


def vendored_copy(tmp_path):
  import tf_opt_ops_sysconfig

  source = tf_opt_ops_sysconfig.get_library_path()
  copy = tmp_path / "vendor" / "_tf_opt_ops.so"
  copy.parent.mkdir()
  shutil.copyfile(source, copy)
  return str(copy), tf_opt_ops_sysconfig.get_build_info()["BUILD_ID"]


def values(result):
  return [float(x) for x in matrix_util.last_line(result, "VALUES").split()]


# Duplicates summed: g = 2, m = 1, v = 1, lr_t = 0.1 * sqrt(0.25) / 0.5 = 0.1 -> -0.1 (+eps).
ONE_STEP_VALUES = [-0.1, -0.1, 0.0]


def test_copy_loaded_first_serves_the_package(tmp_path):
  copy, build_id = vendored_copy(tmp_path)
  result = matrix_util.run_python(
      f"""
import tensorflow as tf
vendored = tf.load_op_library({copy!r})
print("VENDORED", vendored.tf_opt_ops_build_id().numpy().decode())
import tf_opt_ops
""" + ONE_STEP, tmp_path)
  assert values(result) == pytest.approx(ONE_STEP_VALUES, rel=1e-5)
  assert matrix_util.last_line(result, "VENDORED") == build_id
  assert "Multiple OpKernel registrations" not in result.stderr


def test_copy_loaded_after_the_package_registers_nothing(tmp_path):
  copy, build_id = vendored_copy(tmp_path)
  result = matrix_util.run_python(
      f"""
import tensorflow as tf
import tf_opt_ops
vendored = tf.load_op_library({copy!r})
print("WRAPPERS", [name for name in dir(vendored) if name.startswith("tf_opt_ops")])
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
buf = pywrap_tf_session.TF_GetAllOpList()
names = [op.name for op in op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(buf)).op
         if op.name.startswith("TfOptOps>")]
print("REGISTERED", len(names), len(set(names)))
""" + ONE_STEP, tmp_path)
  assert values(result) == pytest.approx(ONE_STEP_VALUES, rel=1e-5)
  assert matrix_util.last_line(result, "WRAPPERS") == "[]"
  registered, distinct = map(int, matrix_util.last_line(result, "REGISTERED").split())
  assert registered == distinct >= 4  # three update ops and BuildId, each once
  assert f"{copy} is a copy of the library already loaded" in result.stderr
  assert f"build {build_id}" in result.stderr
  assert "Multiple OpKernel registrations" not in result.stderr
