"""What a user sees when the library is missing, mismatched or fails to load, and a
SavedModel that names the missing op (see docs/design.md, "Production")."""

import re
import subprocess
import textwrap

import pytest
import tensorflow as tf

from tf_opt_ops import _loader

import common

PACKAGE_ROOT = common.PYTHON_DIR


@pytest.fixture
def library_at(monkeypatch):
  """Points the loader at another library path, with a fresh cache, as in a process
  where no library registered the ops yet."""

  def point(path):
    monkeypatch.setattr(_loader, "LIBRARY_PATH", path)
    monkeypatch.setattr(_loader, "registered_ops", dict)
    _loader.load_library.cache_clear()

  yield point
  _loader.load_library.cache_clear()


def test_missing_library_says_how_to_build(library_at, tmp_path):
  library_at(str(tmp_path / "_tf_opt_ops.so"))
  running = tf.__version__
  minor = ".".join(running.split(".")[:2])
  with pytest.raises(
      ImportError, match=rf"no op library for TensorFlow {re.escape(minor)} at .*holds "
      r"libraries for TensorFlow 2\.15, 2\.21.*make wheel-all.*make build"):
    raise ImportError(_loader.missing_library_message(running, ["2.15", "2.21"]))
  with pytest.raises(ImportError, match=rf"no op library for TensorFlow {re.escape(minor)}"):
    _loader.load_library()


@pytest.mark.parametrize("running", ["2.14.1", "2.22.0", "3.0.0"])
def test_unsupported_tensorflow_names_the_supported_ones(running):
  message = _loader.missing_library_message(running, ["2.21"])
  assert f"runs TensorFlow {running}, which tf_opt_ops does not support" in message
  assert "TensorFlow 2.15, 2.16, 2.17, 2.18, 2.19, 2.20, 2.21" in message
  assert "build tf_opt_ops for this TensorFlow from source" in message and "make build" in message


def test_other_tensorflow_version_names_both():
  with pytest.raises(
      ImportError, match=r"built against TensorFlow 2\.19\.0.*runs TensorFlow " +
      tf.__version__.replace(".", r"\.")):
    _loader.check_tf_version("2.19.0", tf.__version__)
  _loader.check_tf_version("2.21.0", "2.21.3")  # patch releases keep the kernel ABI


def test_undefined_symbol_becomes_an_import_error(library_at, tmp_path):
  # A real shared object that needs a symbol nothing exports, as a library
  # built against another TensorFlow would.
  source = tmp_path / "needs_symbol.c"
  source.write_text("void tf_opt_ops_no_such_symbol(void);\n"
                    "void entry(void) { tf_opt_ops_no_such_symbol(); }\n")
  library = tmp_path / "_tf_opt_ops.so"
  subprocess.run(
      ["gcc", "-shared", "-fPIC", "-Wl,-z,now", "-o",
       str(library), str(source)], check=True)
  library_at(str(library))
  with pytest.raises(
      ImportError, match="needs a symbol this TensorFlow does not export.*tf_opt_ops_no_such_symbol"
      ".*build it for this TensorFlow"):
    _loader.load_library()


def test_corrupt_library_becomes_an_import_error(library_at, tmp_path):
  library = tmp_path / "_tf_opt_ops.so"
  library.write_bytes(b"not an ELF file")
  library_at(str(library))
  with pytest.raises(ImportError, match="loading .* failed.*build it for this TensorFlow"):
    _loader.load_library()


def test_the_library_is_loaded_once():
  assert _loader.load_library() is _loader.load_library()


def run_python(code, cwd, env_extra=None):
  """`code` in a fresh process that finds the package only if `code` adds it to sys.path."""
  return common.run_python(textwrap.dedent(code), package=False, cwd=cwd,
                           env=dict(TF_CPP_MIN_LOG_LEVEL="3", **(env_extra or {})), timeout=300,
                           check=False)


@pytest.mark.slow
def test_saved_model_names_the_missing_op_and_loads_with_the_library(tmp_path):
  save = f"""
      import sys; sys.path.insert(0, {PACKAGE_ROOT!r})
      import tensorflow as tf
      from tf_opt_ops import ops

      class Table(tf.Module):
        def __init__(self):
          self.var = tf.Variable(tf.zeros((4, 2)))
          self.m = tf.Variable(tf.zeros((4, 2)))
          self.v = tf.Variable(tf.zeros((4, 2)))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
        def train(self, rows):
          ops.sparse_lazy_adam(self.var, self.m, self.v, tf.ones((tf.size(rows), 2)), rows,
                               beta_1_power=0.9, beta_2_power=0.999, lr=0.1)
          return self.var.read_value()

      tf.saved_model.save(Table(), {str(tmp_path / 'model')!r})
  """
  assert run_python(save, tmp_path).returncode == 0
  load_without = f"""
      import tensorflow as tf
      tf.saved_model.load({str(tmp_path / 'model')!r})
  """
  result = run_python(load_without, tmp_path)
  assert result.returncode != 0
  assert "Op type not registered 'TfOptOps>ResourceSparseApplyLazyAdam'" in result.stderr
  load_with = f"""
      import sys; sys.path.insert(0, {PACKAGE_ROOT!r})
      import tensorflow as tf
      import tf_opt_ops
      model = tf.saved_model.load({str(tmp_path / 'model')!r})
      print(model.train(tf.constant([1])).numpy()[1, 0])
  """
  result = run_python(load_with, tmp_path)
  assert result.returncode == 0, result.stderr
  assert float(result.stdout.split()[-1]) == pytest.approx(-0.1, rel=1e-5)


# ---------------------------------------------------------------- two copies
# A pipeline vendors the .so for tf.load_op_library and also imports the
# package: two paths, two libraries to the dynamic loader. Why: see
# docs/design.md, "Production".

ONE_STEP = """
    import tensorflow as tf
    from tf_opt_ops import ops

    def step(var, m, v):
      ops.sparse_lazy_adam(var, m, v, tf.ones((1, 2)), tf.constant([1]),
                           beta_1_power=0.9, beta_2_power=0.999, lr=0.1)

    eager, graph = [[tf.Variable(tf.zeros((4, 2))) for _ in range(3)] for _ in range(2)]
    step(*eager)
    tf.function(step)(*graph)
    print("VALUES", eager[0].numpy()[1, 0], graph[0].numpy()[1, 0], eager[0].numpy()[0, 0])
"""


def library_copy(tmp_path, name, build_id=None):
  """A copy of the package's library at another path; `build_id` patches its build id."""
  data = open(_loader.LIBRARY_PATH, "rb").read()
  if build_id is not None:
    ours = _loader.built_id().encode()
    assert len(build_id) == len(ours) and data.count(ours) >= 2
    data = data.replace(ours, build_id.encode())
  path = tmp_path / name / "_tf_opt_ops.so"
  path.parent.mkdir()
  path.write_bytes(data)
  return str(path)


def run_with_package(cwd, *parts):
  """Runs the code `parts`, each dedented, in a fresh process that can import the package."""
  code = "".join(textwrap.dedent(part) for part in parts)
  return run_python(f"import sys; sys.path.insert(0, {PACKAGE_ROOT!r})\n" + code, cwd)


def one_step_values(result):
  assert result.returncode == 0, result.stderr
  line = next(line for line in result.stdout.splitlines() if line.startswith("VALUES"))
  return [float(x) for x in line.split()[1:]]


@pytest.mark.slow
def test_a_vendored_copy_loaded_first_serves_the_package(tmp_path):
  vendored = library_copy(tmp_path, "vendor")
  result = run_with_package(
      tmp_path, f"""
      import tensorflow as tf
      vendored = tf.load_op_library({vendored!r})
      import tf_opt_ops
      from tf_opt_ops import _loader
      assert _loader.load_library().tf_opt_ops_resource_sparse_apply_lazy_adam
      print("VENDORED", vendored.tf_opt_ops_build_id().numpy().decode())
      """, ONE_STEP)
  assert one_step_values(result) == pytest.approx([-0.1, -0.1, 0.0], rel=1e-5)
  assert f"VENDORED {_loader.built_id()}" in result.stdout
  assert "Multiple OpKernel registrations" not in result.stderr


@pytest.mark.slow
def test_a_vendored_copy_loaded_after_the_package_adds_no_kernels(tmp_path):
  vendored = library_copy(tmp_path, "vendor")
  result = run_with_package(
      tmp_path, f"""
      import tensorflow as tf
      import tf_opt_ops
      vendored = tf.load_op_library({vendored!r})
      print("WRAPPERS", [name for name in dir(vendored) if name.startswith("tf_opt_ops")])
      """, ONE_STEP)
  assert one_step_values(result) == pytest.approx([-0.1, -0.1, 0.0], rel=1e-5)
  # The copy's load registers nothing, so its module has no wrappers: it says where they are.
  assert "WRAPPERS []" in result.stdout
  assert (f"tf_opt_ops: {vendored} is a copy of the library already loaded from "
          f"{_loader.LIBRARY_PATH} (build {_loader.built_id()})") in result.stderr
  assert f"use tf.load_op_library('{_loader.LIBRARY_PATH}')" in result.stderr


@pytest.mark.slow
def test_another_build_loaded_first_is_refused_at_import(tmp_path):
  other = library_copy(tmp_path, "other", build_id="0123456789abcdef")
  result = run_with_package(
      tmp_path, f"""
      import tensorflow as tf
      tf.load_op_library({other!r})
      import tf_opt_ops
      """)
  assert result.returncode != 0
  assert "ImportError: tf_opt_ops: this process already registered" in result.stderr
  assert "build id 0123456789abcdef" in result.stderr
  assert f"build {_loader.built_id()} at {_loader.LIBRARY_PATH}" in result.stderr


@pytest.mark.slow
def test_another_build_loaded_after_the_package_is_refused(tmp_path):
  other = library_copy(tmp_path, "other", build_id="0123456789abcdef")
  result = run_with_package(
      tmp_path, f"""
      import tensorflow as tf
      import tf_opt_ops
      try:
        tf.load_op_library({other!r})
      except tf.errors.FailedPreconditionError as e:
        print("REFUSED", e)
      """, ONE_STEP)
  assert one_step_values(result) == pytest.approx([-0.1, -0.1, 0.0], rel=1e-5)
  refused = next(line for line in result.stdout.splitlines() if line.startswith("REFUSED"))
  assert f"{other} (build 0123456789abcdef) cannot load" in refused
  assert f"from {_loader.LIBRARY_PATH} (build {_loader.built_id()})" in refused
