"""Writes the tf_opt_ops wheel from the built library and the Python sources.

Called by Bazel's //:wheel genrule. Uses only the standard library (a wheel is
a zip with a dist-info folder), so building it needs nothing from the network.
"""

import argparse
import base64
import hashlib
import os
import zipfile

# Fixed timestamps keep the wheel byte-identical across builds of the same tree.
_ZIP_DATE = (2024, 1, 1, 0, 0, 0)

_METADATA = """Metadata-Version: 2.1
Name: tf-opt-ops
Version: {version}
Summary: Fused sparse lazy Adam and Clippy Adagrad ops and optimizers for TensorFlow
Requires-Python: >=3.9
Requires-Dist: numpy
Description-Content-Type: text/markdown

Built against TensorFlow {tf_version}. Install `tensorflow=={tf_version}` (or
`tensorflow-cpu`) beside it; the wheel does not pin one of the two.
"""

_WHEEL = """Wheel-Version: 1.0
Generator: tf_opt_ops tools/build_wheel.py
Root-Is-Purelib: false
Tag: py3-none-{platform}
"""


def _digest(data):
  return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _read_tf_version(build_info_path):
  scope = {}
  with open(build_info_path) as f:
    exec(f.read(), scope)  # pylint: disable=exec-used
  return scope["TF_VERSION"]


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--out", required=True)
  parser.add_argument("--version", required=True)
  parser.add_argument(
      "--platform", required=True,
      help="platform tag, e.g. manylinux_2_27_x86_64 (the one TensorFlow's wheel has)")
  parser.add_argument("--library", required=True, help="the built _tf_opt_ops.so")
  parser.add_argument("--build-info", required=True, help="the generated _build_info.py")
  parser.add_argument("--package-root", default="python",
                      help="folder that holds the tf_opt_ops package sources")
  parser.add_argument("sources", nargs="+", help="package .py files under --package-root")
  args = parser.parse_args()
  expected_name = f"tf_opt_ops-{args.version}-py3-none-{args.platform}.whl"
  if os.path.basename(args.out) != expected_name:
    parser.error(f"--out {args.out}: a wheel with these tags must be named {expected_name}")

  files = {}
  for source in sorted(args.sources):
    arcname = os.path.relpath(source, args.package_root)
    if arcname.startswith(".."):
      parser.error(f"{source} is not under {args.package_root}")
    with open(source, "rb") as f:
      files[arcname] = f.read()
  with open(args.library, "rb") as f:
    files["tf_opt_ops/_tf_opt_ops.so"] = f.read()
  with open(args.build_info, "rb") as f:
    files["tf_opt_ops/_build_info.py"] = f.read()

  dist_info = f"tf_opt_ops-{args.version}.dist-info"
  files[f"{dist_info}/METADATA"] = _METADATA.format(
      version=args.version, tf_version=_read_tf_version(args.build_info)).encode()
  files[f"{dist_info}/WHEEL"] = _WHEEL.format(platform=args.platform).encode()
  # The package and any top-level module beside it (tf_opt_ops_sysconfig).
  top_level = {
      name.split("/")[0].removesuffix(".py") for name in files if ".dist-info/" not in name
  }
  files[f"{dist_info}/top_level.txt"] = "".join(f"{name}\n" for name in sorted(top_level)).encode()
  record = "".join(f"{name},{_digest(data)},{len(data)}\n" for name, data in files.items())
  record += f"{dist_info}/RECORD,,\n"
  files[f"{dist_info}/RECORD"] = record.encode()

  with zipfile.ZipFile(args.out, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
    for name, data in files.items():
      info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
      info.compress_type = zipfile.ZIP_DEFLATED
      info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
      wheel.writestr(info, data)


if __name__ == "__main__":
  main()
