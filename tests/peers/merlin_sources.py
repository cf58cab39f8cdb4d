"""Merlin Models 23.12.0's own test files, read from its sdist on PyPI (never committed here).

Merlin's wheel ships no tests; its sdist has tests/unit/tf/. The sdist is downloaded at test
time with pip (`pip download --no-deps --no-binary :all:`, hash-checked) into a cache folder
(build/peers/, git-ignored; $TF_OPT_OPS_PEERS_CACHE overrides it) and reused while its sha256 is
the one $TF_OPT_OPS_PEERS_DIR/install.sh pins for the Merlin Models it installs.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
VERSION = "23.12.0"
SDIST = f"merlin-models-{VERSION}.tar.gz"
SHA256 = "1d0619d406e557fd693199330971f096b260ad0a0798bf51d7c549d658317579"


def cache_dir():
  return os.environ.get("TF_OPT_OPS_PEERS_CACHE", os.path.join(REPO, "build", "peers"))


def _sha256(path):
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def check_pinned_by(install_sh):
  """Fails unless `install_sh` installs the Merlin Models whose sdist this module reads."""
  with open(install_sh, encoding="utf-8") as f:
    text = f.read()
  pin = f"merlin-models=={VERSION} --hash=sha256:{SHA256}"
  assert pin in text, f"{install_sh} does not pin `{pin}`: the tests would not be its Merlin's"


def sdist_path():
  """The verified sdist in the cache, downloaded first when missing (or not the pinned one)."""
  cache = cache_dir()
  path = os.path.join(cache, SDIST)
  if os.path.exists(path) and _sha256(path) == SHA256:
    return path
  os.makedirs(cache, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=cache) as tmp:
    requirements = os.path.join(tmp, "requirements.txt")
    with open(requirements, "w", encoding="utf-8") as f:
      f.write(f"merlin-models=={VERSION} --hash=sha256:{SHA256}\n")
    proc = subprocess.run([
        sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
        "--require-hashes", "-r", requirements, "-d", tmp
    ], capture_output=True, text=True, timeout=900)
    downloaded = os.path.join(tmp, SDIST)
    if proc.returncode != 0 or not os.path.exists(downloaded):
      raise AssertionError(f"pip could not download {SDIST} (rc {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    found = _sha256(downloaded)
    assert found == SHA256, f"{SDIST}: sha256 {found}, expected {SHA256}"
    shutil.move(downloaded, path)
  return path


def read(member):
  """The text of `member` (a path inside the sdist, e.g. tests/unit/tf/blocks/test_optimizer.py)."""
  with tarfile.open(sdist_path(), "r:gz") as tar:
    f = tar.extractfile(f"merlin-models-{VERSION}/{member}")
    assert f is not None, f"{member} is not a file in {SDIST}"
    return f.read().decode("utf-8")
