"""The wheel from `make wheel`, installed into a new virtualenv, works on its own:
not the source tree, not the build tree."""

import glob
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import common

pytestmark = pytest.mark.slow

REPO_ROOT = common.ROOT


def built_wheel():
  wheels = sorted(glob.glob(os.path.join(REPO_ROOT, "dist", "tf_opt_ops-*.whl")),
                  key=os.path.getmtime)
  assert wheels, "no wheel in dist/: run `make wheel` (make test does) before the tests"
  return wheels[-1]


def test_version_agrees_with_the_build():
  from tf_opt_ops import _version
  with open(os.path.join(REPO_ROOT, "version.bzl")) as f:
    assert f'VERSION = "{_version.__version__}"' in f.read()
  assert os.path.basename(built_wheel()).startswith(f"tf_opt_ops-{_version.__version__}-")


def test_wheel_installs_into_a_fresh_virtualenv(tmp_path):
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
  python = str(venv / "bin" / "python")
  # TensorFlow comes from the test environment (a .pth file), so the check
  # costs seconds instead of a 600 MB install; tf_opt_ops comes only from the wheel.
  site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        check=True, capture_output=True, text=True).stdout.strip()
  with open(os.path.join(site, "test_environment.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")
  subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                  built_wheel()], check=True)
  check = textwrap.dedent(f"""
      import os, numpy as np, tensorflow as tf
      import tf_opt_ops, tf_opt_ops_sysconfig
      from tf_opt_ops import _loader, ops
      assert tf_opt_ops.__file__.startswith({str(venv)!r}), tf_opt_ops.__file__
      minor = ".".join(tf.__version__.split(".")[:2])
      assert _loader.LIBRARY_PATH == os.path.join(
          os.path.dirname(tf_opt_ops.__file__), "libs", "tf" + minor, "_tf_opt_ops.so")
      assert minor in tf_opt_ops_sysconfig.built_tf_versions()
      var, m, v = (tf.Variable(tf.zeros((3, 2))) for _ in range(3))
      ops.sparse_lazy_adam(var, m, v, [[1.0, -2.0], [1.0, 0.5]], [2, 2], lr=0.1,
                           beta_1_power=0.9, beta_2_power=0.999)
      # g = [2, -1.5]: lr_t * m / sqrt(v) = lr * sign(g) on the first step.
      np.testing.assert_allclose(var.numpy()[2], [-0.1, 0.1], rtol=1e-5)
      assert not var.numpy()[:2].any()
      # The XLA kernels come with the wheel: inside XLA the same op runs.
      assert _loader.xla_unavailable() is None, _loader.xla_unavailable()
      @tf.function(jit_compile=True)
      def step():
        ops.sparse_lazy_adam(var, m, v, [[1.0, 1.0]], [0], lr=0.1, beta_1_power=0.9,
                             beta_2_power=0.999)
      step()
      np.testing.assert_allclose(var.numpy()[0], [-0.1, -0.1], rtol=1e-5)
      print("wheel ok", tf_opt_ops.__version__)
  """)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env.pop("PYTHONPATH", None)
  result = subprocess.run([python, "-I", "-c", check], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "wheel ok" in result.stdout
