"""Drives serving/saved_model_runner, the C program on TensorFlow's C API loader."""

import os
import subprocess

import numpy as np
from tensorflow.core.protobuf import saved_model_pb2

import common

ROOT = common.ROOT


def build_runners():
  """Builds both programs with Bazel: {"plain": path, "with_ops": path}."""
  build = subprocess.run(
      ["bazel", "build", "//serving:saved_model_runner", "//serving:saved_model_runner_with_ops"],
      cwd=ROOT, capture_output=True, text=True, timeout=900)
  assert build.returncode == 0, ("bazel build //serving failed (run ./configure.sh first?):\n" +
                                 build.stderr[-3000:])
  names = {"plain": "saved_model_runner", "with_ops": "saved_model_runner_with_ops"}
  return {kind: os.path.join(ROOT, "bazel-bin", "serving", name) for kind, name in names.items()}


def signature_tensors(export_dir, key):
  """The graph tensors of signature `key`: (inputs by name, the single output)."""
  saved_model = saved_model_pb2.SavedModel()
  with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
    saved_model.ParseFromString(f.read())
  signature = saved_model.meta_graphs[0].signature_def[key]
  (output,) = signature.outputs.values()
  return {name: info.name for name, info in signature.inputs.items()}, output.name


def tensor_args(values, dtype):
  """DTYPE SHAPE VALUES, as the runner's --feed takes them."""
  values = np.asarray(values)
  return [dtype, ",".join(map(str, values.shape)), ",".join(map(str, values.ravel()))]


def run(runner, export_dir, runs, library=None):
  """Runs each (signature, {input: (dtype, values)}) of `runs` in one session.

  Returns each run's output (float32 arrays), or the program's stderr when it fails.
  """
  args = [runner] + (["--library", library] if library else []) + [export_dir, "serve"]
  for key, feeds in runs:
    inputs, output = signature_tensors(export_dir, key)
    args.append("--run")
    for name, (dtype, values) in feeds.items():
      args += ["--feed", inputs[name], *tensor_args(values, dtype)]
    args += ["--fetch", output]
  result = subprocess.run(args, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if result.returncode != 0:
    return result.stderr
  lines = [line.split() for line in result.stdout.splitlines() if not line.startswith("loaded")]
  return [np.array([float(v) for v in line[1:]], np.float32) for line in lines]
