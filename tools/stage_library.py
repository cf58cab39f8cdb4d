"""Copies a built op library and its build record to DIR/tf<minor>/, the layout the package loads.

    python tools/stage_library.py --out python/tf_opt_ops/libs \
        bazel-bin/tf_opt_ops/_tf_opt_ops.so bazel-bin/tf_opt_ops/_build_info.py \
        bazel-bin/tf_opt_ops/_tf_opt_ops_xla.so

Files after the build record (the XLA library) are copied beside them.

The TensorFlow minor version comes from the build record. Prints the directory written.
"""

import argparse
import os
import re
import shutil


def tf_minor_of(build_info_path):
  """The TensorFlow minor version ("2.15") a _build_info.py records."""
  with open(build_info_path, encoding="utf-8") as f:
    match = re.search(r'^TF_VERSION = "(\d+\.\d+)', f.read(), re.MULTILINE)
  if match is None:
    raise SystemExit(f"stage_library: {build_info_path} records no TF_VERSION")
  return match.group(1)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True, help="the libs directory")
  parser.add_argument("library", help="the built _tf_opt_ops.so")
  parser.add_argument("build_info", help="its _build_info.py")
  parser.add_argument("others", nargs="*", help="libraries built with it (_tf_opt_ops_xla.so)")
  args = parser.parse_args()
  target = os.path.join(args.out, "tf" + tf_minor_of(args.build_info))
  os.makedirs(target, exist_ok=True)
  for source in (args.library, args.build_info, *args.others):
    destination = os.path.join(target, os.path.basename(source))
    if os.path.exists(destination):
      os.remove(destination)  # Bazel's outputs are read-only
    shutil.copyfile(source, destination)
  print(target)


if __name__ == "__main__":
  main()
