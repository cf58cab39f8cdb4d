"""Writes a tf_opt_ops wheel: from a built library and the Python sources, or by merging wheels.

Each library is built for one TensorFlow minor version and lives in the wheel at
tf_opt_ops/libs/tf<minor>/ beside its _build_info.py (the minor read from that
record) and the XLA kernels of its ops (_tf_opt_ops_xla.so); `import tf_opt_ops`
loads the ones for the running TensorFlow.

- Bazel's //:wheel genrule passes the sources and the libraries it built:
  `--library SO --xla-library SO --build-info PY SOURCES...`.
- `make wheel-all` builds //:wheel once per supported TensorFlow and merges
  them into the release wheel: `--merge WHEEL...`. The merged wheels must hold
  the same Python sources; their libraries are combined.

Uses only the standard library (a wheel is a zip with a dist-info folder), so
building it needs nothing from the network.
"""

import argparse
import base64
import hashlib
import io
import os
import zipfile

# Fixed timestamps keep the wheel byte-identical across builds of the same tree.
_ZIP_DATE = (2024, 1, 1, 0, 0, 0)
_LIBS = "tf_opt_ops/libs/"

_METADATA = """Metadata-Version: 2.1
Name: tf-opt-ops
Version: {version}
Summary: Fused sparse lazy Adam and Clippy Adagrad ops and optimizers for TensorFlow
Requires-Python: >=3.9
Requires-Dist: numpy
Description-Content-Type: text/markdown

Holds an op library for TensorFlow {tf_versions}; `import tf_opt_ops` loads the
one for the running TensorFlow. Install `tensorflow` or `tensorflow-cpu` of one
of those versions beside it; the wheel pins neither.
"""

_WHEEL = """Wheel-Version: 1.0
Generator: tf_opt_ops tools/build_wheel.py
Root-Is-Purelib: false
Tag: py3-none-{platform}
"""


def _digest(data):
  return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _tf_minor(build_info_source):
  scope = {}
  exec(build_info_source, scope)
  return ".".join(scope["TF_VERSION"].split(".")[:2])


def _version_key(minor):
  return tuple(int(part) for part in minor.split("."))


def _files_from_build(args, parser):
  """{arcname: bytes} of the package sources and the one library."""
  files = {}
  for source in sorted(args.sources):
    arcname = os.path.relpath(source, args.package_root)
    if arcname.startswith(".."):
      parser.error(f"{source} is not under {args.package_root}")
    with open(source, "rb") as f:
      files[arcname] = f.read()
  with open(args.build_info, "rb") as f:
    build_info = f.read()
  minor = _tf_minor(build_info)
  files[f"{_LIBS}tf{minor}/_build_info.py"] = build_info
  with open(args.library, "rb") as f:
    files[f"{_LIBS}tf{minor}/_tf_opt_ops.so"] = f.read()
  if args.xla_library:
    with open(args.xla_library, "rb") as f:
      files[f"{_LIBS}tf{minor}/_tf_opt_ops_xla.so"] = f.read()
  return files


def _files_from_wheels(wheels, parser):
  """{arcname: bytes} of every wheel's package files; libraries combined, sources identical."""
  files = {}
  for wheel in wheels:
    with zipfile.ZipFile(wheel) as archive:
      for name in archive.namelist():
        if ".dist-info/" in name:
          continue
        data = archive.read(name)
        if name in files and files[name] != data:
          what = "two libraries for one TensorFlow" if name.startswith(_LIBS) else "sources differ"
          parser.error(f"--merge: {name} differs in {wheel} ({what}): build every wheel from "
                       "one source tree")
        files[name] = data
  return files


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--version", required=True)
  parser.add_argument(
      "--platform", required=True,
      help="platform tag, e.g. manylinux_2_27_x86_64 (the one TensorFlow's wheel has)")
  parser.add_argument("--merge", nargs="+", metavar="WHEEL",
                      help="wheels to combine (instead of --library/--build-info/sources)")
  parser.add_argument("--library", help="the built _tf_opt_ops.so")
  parser.add_argument("--xla-library", help="the built _tf_opt_ops_xla.so (its XLA kernels)")
  parser.add_argument("--build-info", help="the generated _build_info.py")
  parser.add_argument("--package-root", default="python",
                      help="folder that holds the tf_opt_ops package sources")
  parser.add_argument("sources", nargs="*", help="package .py files under --package-root")
  args = parser.parse_args()
  expected_name = f"tf_opt_ops-{args.version}-py3-none-{args.platform}.whl"
  if os.path.basename(args.out) != expected_name:
    parser.error(f"--out {args.out}: a wheel with these tags must be named {expected_name}")
  if args.merge:
    if args.library or args.xla_library or args.build_info or args.sources:
      parser.error("--merge takes wheels only")
    files = _files_from_wheels(args.merge, parser)
  elif args.library and args.build_info and args.sources:
    files = _files_from_build(args, parser)
  else:
    parser.error("give --merge WHEEL..., or --library, --build-info and the sources")

  tf_versions = sorted(
      {name[len(_LIBS) + 2:].split("/")[0] for name in files if name.startswith(_LIBS)},
      key=_version_key)
  dist_info = f"tf_opt_ops-{args.version}.dist-info"
  files = dict(sorted(files.items()))
  files[f"{dist_info}/METADATA"] = _METADATA.format(version=args.version,
                                                    tf_versions=", ".join(tf_versions)).encode()
  files[f"{dist_info}/WHEEL"] = _WHEEL.format(platform=args.platform).encode()
  # The package and any top-level module beside it (tf_opt_ops_sysconfig).
  top_level = {
      name.split("/")[0].removesuffix(".py") for name in files if ".dist-info/" not in name
  }
  files[f"{dist_info}/top_level.txt"] = "".join(f"{name}\n" for name in sorted(top_level)).encode()
  record = "".join(f"{name},{_digest(data)},{len(data)}\n" for name, data in files.items())
  record += f"{dist_info}/RECORD,,\n"
  files[f"{dist_info}/RECORD"] = record.encode()

  buffer = io.BytesIO()
  with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
    for name, data in files.items():
      info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
      info.compress_type = zipfile.ZIP_DEFLATED
      info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
      wheel.writestr(info, data)
  # Written whole at the end: --out may be one of the merged wheels.
  with open(args.out, "wb") as f:
    f.write(buffer.getvalue())


if __name__ == "__main__":
  main()
