"""Where the tf_opt_ops op library is, and how to build against it: like `tf.sysconfig`.

A top-level module beside the `tf_opt_ops` package, in the same wheel: importing
the package loads TensorFlow and every Keras flavor (it registers their
serialization names), while production tooling often only needs a path, e.g.
for `tf.load_op_library` in a pipeline or `TF_LoadLibrary` in a C++ server.
This module imports neither TensorFlow nor Keras nor the package. See
docs/design.md, "Production".

    python -m tf_opt_ops_sysconfig            # the library's path
    python -m tf_opt_ops_sysconfig --lflags   # link flags
"""

import argparse
import importlib.util
import os

LIBRARY_NAME = "_tf_opt_ops.so"


def _package_dir(name):
  # find_spec of a top-level name locates it without running its __init__.
  spec = importlib.util.find_spec(name)
  if spec is None or not spec.submodule_search_locations:
    raise ImportError(f"tf_opt_ops_sysconfig: the {name} package is not installed.")
  return list(spec.submodule_search_locations)[0]


def get_lib():
  """The directory that holds the op library (as `tf.sysconfig.get_lib()`)."""
  return _package_dir("tf_opt_ops")


def get_library_path():
  """The op library's path: `tf.load_op_library(get_library_path())`, `TF_LoadLibrary`."""
  return os.path.join(get_lib(), LIBRARY_NAME)


def get_build_info():
  """What the library was built against: TF_VERSION, CUDA_VERSION, CUDA_MIN_DRIVER, BUILD_ID, ..."""
  path = os.path.join(get_lib(), "_build_info.py")
  scope = {}
  with open(path, encoding="utf-8") as f:
    exec(compile(f.read(), path, "exec"), scope)  # pylint: disable=exec-used
  return {key: value for key, value in scope.items() if key.isupper()}


def get_include():
  """TensorFlow's header directory, the one the library was compiled against."""
  return os.path.join(_package_dir("tensorflow"), "include")


def get_compile_flags():
  """Flags to compile C++ code that uses TensorFlow's headers beside the library."""
  abi = get_build_info().get("CXX11_ABI_FLAG", 1)
  return [
      f"-I{get_include()}", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "--std=c++17",
      "-DEIGEN_MAX_ALIGN_BYTES=64"
  ]


def get_link_flags():
  """Flags to link a program or library against the op library (and TensorFlow's).

  TensorFlow's library stays a direct dependency (no --as-needed drop) with its
  directory in the run path: the op library needs it at load time.
  """
  tf_dir = _package_dir("tensorflow")
  return [
      f"-L{get_lib()}", f"-l:{LIBRARY_NAME}", f"-L{tf_dir}", "-Wl,--push-state,--no-as-needed",
      "-l:libtensorflow_framework.so.2", "-Wl,--pop-state", f"-Wl,-rpath,{get_lib()}:{tf_dir}"
  ]


def main(argv=None):
  parser = argparse.ArgumentParser(description="Prints where the tf_opt_ops op library is.")
  parser.add_argument("--cflags", action="store_true", help="compile flags")
  parser.add_argument("--lflags", action="store_true", help="link flags")
  parser.add_argument("--build-id", action="store_true", help="the library's build id")
  args = parser.parse_args(argv)
  if args.cflags:
    print(" ".join(get_compile_flags()))
  elif args.lflags:
    print(" ".join(get_link_flags()))
  elif args.build_id:
    print(get_build_info().get("BUILD_ID", ""))
  else:
    print(get_library_path())


if __name__ == "__main__":
  main()
