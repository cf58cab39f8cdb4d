"""Where the tf_opt_ops op library is, and how to build against it: like `tf.sysconfig`.

A top-level module beside the `tf_opt_ops` package, in the same wheel: importing
the package loads TensorFlow and every Keras flavor (it registers their
serialization names), while production tooling often only needs a path, e.g.
for `tf.load_op_library` in a pipeline or `TF_LoadLibrary` in a C++ server.
This module imports neither TensorFlow nor Keras nor the package. See
docs/design.md, "Production".

TensorFlow's C++ API changes with every minor release, so the wheel holds one
library per supported TensorFlow minor, at `tf_opt_ops/libs/tf<minor>/`. Every
function that names a library takes the TensorFlow version it is for; without
one, it is the TensorFlow installed beside this module (from its distribution's
metadata, or `tensorflow.__version__` when TensorFlow is already imported).

    python -m tf_opt_ops_sysconfig                     # the library for the installed TensorFlow
    python -m tf_opt_ops_sysconfig --tf-version 2.15   # the library for TensorFlow 2.15
    python -m tf_opt_ops_sysconfig --lflags            # link flags, shell-quoted

Flags print shell-quoted, as pkg-config prints them, so that a path with a space
stays one flag: a Makefile recipe or `eval` reads them back, Python `shlex.split`.
    python -m tf_opt_ops_sysconfig --list              # the TensorFlow versions this install has

The command line names only libraries this install holds: for another version
it exits non-zero, naming the versions it has (`make wheel` holds the build's
TensorFlow only; `make wheel-all` every supported one).
"""

import argparse
import importlib.metadata
import importlib.util
import os
import re
import shlex
import sys

LIBRARY_NAME = "_tf_opt_ops.so"
BUILD_INFO_NAME = "_build_info.py"
# The TensorFlow minor versions a release wheel holds a library for (`make wheel-all`).
SUPPORTED_TF_VERSIONS = ("2.15", "2.16", "2.17", "2.18", "2.19", "2.20", "2.21")


def _package_dir(name):
  # find_spec of a top-level name locates it without running its __init__.
  spec = importlib.util.find_spec(name)
  if spec is None or not spec.submodule_search_locations:
    raise ImportError(f"tf_opt_ops_sysconfig: the {name} package is not installed.")
  return list(spec.submodule_search_locations)[0]


def tf_minor(version):
  """"2.15" for "2.15.1", "2.15.0rc1" or "2.15"."""
  match = re.match(r"(\d+)\.(\d+)", str(version))
  if match is None:
    raise ValueError(f"tf_opt_ops_sysconfig: {version!r} is not a TensorFlow version.")
  return f"{match.group(1)}.{match.group(2)}"


def installed_tf_version():
  """The version of the TensorFlow this Python runs, without importing it.

  `tensorflow.__version__` when TensorFlow is already imported; otherwise the
  version of the installed distribution that provides the `tensorflow` package
  (`tensorflow`, `tensorflow-cpu`, ...).
  """
  running = sys.modules.get("tensorflow")
  if running is not None and getattr(running, "__version__", None):
    return running.__version__
  versions = {
      importlib.metadata.version(dist)
      for dist in importlib.metadata.packages_distributions().get("tensorflow", ())
  }
  if len(versions) == 1:
    return versions.pop()
  if not versions:
    raise ImportError("tf_opt_ops_sysconfig: TensorFlow is not installed.")
  raise ImportError(f"tf_opt_ops_sysconfig: several TensorFlow distributions ({sorted(versions)}) "
                    "share this environment's `tensorflow` package; uninstall all but one, or "
                    "pass the version.")


def get_lib():
  """The directory of the tf_opt_ops package (as `tf.sysconfig.get_lib()`)."""
  return _package_dir("tf_opt_ops")


def get_library_dir(tf_version=None):
  """The directory that holds the library for `tf_version` (default: the installed one)."""
  return os.path.join(get_lib(), "libs", "tf" + tf_minor(tf_version or installed_tf_version()))


def get_library_path(tf_version=None):
  """The op library for `tf_version`: `tf.load_op_library(get_library_path())`, `TF_LoadLibrary`.

  The path is returned whether or not this install holds that library; `built_tf_versions()`
  says which it holds.
  """
  return os.path.join(get_library_dir(tf_version), LIBRARY_NAME)


def built_tf_versions():
  """The TensorFlow minor versions this install holds a library for, oldest first."""
  libs = os.path.join(get_lib(), "libs")
  found = []
  if os.path.isdir(libs):
    for name in os.listdir(libs):
      if name.startswith("tf") and os.path.exists(os.path.join(libs, name, LIBRARY_NAME)):
        found.append(name[2:])
  return sorted(found, key=lambda v: tuple(int(p) for p in v.split(".")))


def get_build_info(tf_version=None):
  """What a library was built against: TF_VERSION, CUDA_VERSION, CUDA_MIN_DRIVER, BUILD_ID, ..."""
  path = os.path.join(get_library_dir(tf_version), BUILD_INFO_NAME)
  scope = {}
  with open(path, encoding="utf-8") as f:
    exec(compile(f.read(), path, "exec"), scope)
  return {key: value for key, value in scope.items() if key.isupper()}


def get_include():
  """The installed TensorFlow's header directory (build against the library of its version)."""
  return os.path.join(_package_dir("tensorflow"), "include")


def get_compile_flags(tf_version=None):
  """Flags to compile C++ code that uses TensorFlow's headers beside the library."""
  abi = get_build_info(tf_version).get("CXX11_ABI_FLAG", 1)
  return [
      f"-I{get_include()}", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "--std=c++17",
      "-DEIGEN_MAX_ALIGN_BYTES=64"
  ]


def get_link_flags(tf_version=None):
  """Flags to link a program or library against the op library (and TensorFlow's).

  TensorFlow's library stays a direct dependency (no --as-needed drop) with its
  directory in the run path: the op library needs it at load time.
  """
  tf_dir = _package_dir("tensorflow")
  lib_dir = get_library_dir(tf_version)
  return [
      f"-L{lib_dir}", f"-l:{LIBRARY_NAME}", f"-L{tf_dir}", "-Wl,--push-state,--no-as-needed",
      "-l:libtensorflow_framework.so.2", "-Wl,--pop-state", f"-Wl,-rpath,{lib_dir}:{tf_dir}"
  ]


def check_built(tf_version=None):
  """Raises FileNotFoundError, naming the versions this install has, unless it holds the
  library for `tf_version` (default: the installed TensorFlow)."""
  minor = tf_minor(tf_version or installed_tf_version())
  if os.path.exists(get_library_path(minor)):
    return
  built = built_tf_versions()
  raise FileNotFoundError(
      f"tf_opt_ops_sysconfig: this install holds no library for TensorFlow {minor}; it holds "
      f"{', '.join(built) or 'none'} (in {os.path.join(get_lib(), 'libs')}). Install a wheel "
      "built for that TensorFlow: `make wheel` builds one for the build environment's "
      "TensorFlow only, `make wheel-all` one for every supported version "
      f"({', '.join(SUPPORTED_TF_VERSIONS)}).")


def main(argv=None):
  parser = argparse.ArgumentParser(description="Prints where the tf_opt_ops op library is.")
  parser.add_argument("--tf-version", help="the TensorFlow version (default: the installed one)")
  parser.add_argument("--cflags", action="store_true", help="compile flags")
  parser.add_argument("--lflags", action="store_true", help="link flags")
  parser.add_argument("--build-id", action="store_true", help="the library's build id")
  parser.add_argument("--list", action="store_true",
                      help="the TensorFlow versions this install holds a library for")
  args = parser.parse_args(argv)
  if args.list:
    print(" ".join(built_tf_versions()))
    return
  try:
    check_built(args.tf_version)
  except (FileNotFoundError, ImportError, ValueError) as e:
    sys.exit(str(e))
  if args.cflags:
    print(shlex.join(get_compile_flags(args.tf_version)))
  elif args.lflags:
    print(shlex.join(get_link_flags(args.tf_version)))
  elif args.build_id:
    print(get_build_info(args.tf_version).get("BUILD_ID", ""))
  else:
    print(get_library_path(args.tf_version))


if __name__ == "__main__":
  main()
