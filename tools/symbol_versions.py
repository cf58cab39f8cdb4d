"""Which glibc, libstdc++ and libgcc symbol versions a shared library needs.

    python tools/symbol_versions.py LIBRARY REFERENCE

exits 1, naming them, when LIBRARY needs a newer version of any family than
REFERENCE does (TensorFlow's libtensorflow_framework.so.2: the library must load
wherever that TensorFlow loads) or than the wheel's manylinux_2_27 tag allows.
tests/packaging/test_portability.py, tests/matrix/ and tools/wheel_all.sh use it. Needs
binutils' readelf.
"""

import re
import shutil
import subprocess
import sys

# manylinux_2_27's ceilings, the ones TensorFlow 2.21's library reaches.
CEILINGS = {"GLIBC": "2.27", "GLIBCXX": "3.4.22", "CXXABI": "1.3.11", "GCC": "7.0.0"}


def version_key(version):
  return tuple(int(part) for part in version.split("."))


def required_versions(path):
  """{family: newest version} of the symbol versions `path` needs (.gnu.version_r).

  Families are the version name prefixes: GLIBC, GLIBCXX, CXXABI, GCC.
  """
  readelf = shutil.which("readelf")
  if readelf is None:
    raise RuntimeError("readelf (binutils) is not installed: apt-get install binutils")
  out = subprocess.run([readelf, "-V", "--wide", path], check=True, capture_output=True,
                       text=True).stdout
  newest = {}
  for name in re.findall(r"Name: (\S+)", out):
    match = re.fullmatch(r"([A-Z]+)_(\d+(?:\.\d+)*)", name)
    if not match:
      continue  # non-numeric names such as CXXABI_TM_1 or GLIBC_PRIVATE
    family, version = match.groups()
    if family not in newest or version_key(version) > version_key(newest[family]):
      newest[family] = version
  return newest


def too_new(library, reference):
  """{family: (needed, reference's, ceiling)} of each family `library` needs too new."""
  ours = required_versions(library)
  theirs = required_versions(reference)
  unknown = ours.keys() - CEILINGS.keys()
  if unknown:
    raise ValueError(f"{library}: unexpected symbol version families {sorted(unknown)}: {ours}")
  return {
      family: (version, theirs.get(family, CEILINGS[family]), CEILINGS[family])
      for family, version in ours.items()
      if version_key(version) > version_key(theirs.get(family, CEILINGS[family])) or
      version_key(version) > version_key(CEILINGS[family])
  }


def main(argv):
  if len(argv) != 3:
    sys.exit(__doc__)
  library, reference = argv[1:]
  problems = too_new(library, reference)
  if problems:
    sys.exit(f"{library} needs newer symbol versions than {reference} (needed, its, ceiling): "
             f"{problems}. Find the symbols with `objdump -T` and pin them in "
             "build_deps/portable/pins.bzl.")
  print(f"{library}: {required_versions(library)} <= {reference}")


if __name__ == "__main__":
  main(sys.argv)
