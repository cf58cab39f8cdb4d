"""A worker or parameter-server task of a TensorFlow cluster, with the op library loaded.

    TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}' python -m tf_opt_ops.server

Under `ParameterServerStrategy` the chief traces the training step and every
other task runs the ops placed on it: the fused ops run on the parameter
server that holds each variable (or shard), so every task must have
registered them. A plain `tf.distribute.Server` started without this library
fails the first step with `Op type not registered 'TfOptOps>...'`. This
module reads the cluster and this task from `TF_CONFIG` (as TensorFlow's
`TFConfigClusterResolver` does), loads the library, starts the server and
serves until the process is stopped. The chief is an ordinary program that
imports `tf_opt_ops`. Why: see docs/design.md, "Production".
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

import tensorflow as tf

from tf_opt_ops._loader import load_library

SERVER_TASK_TYPES = ("worker", "ps")


def start_server(resolver=None):
  """Loads the library and starts this task's `tf.distribute.Server`; returns the server.

  `resolver` defaults to the `TFConfigClusterResolver` of `TF_CONFIG`.
  """
  resolver = resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()
  if resolver.task_type not in SERVER_TASK_TYPES:
    raise ValueError(
        f"TF_CONFIG names task type {resolver.task_type!r}; python -m tf_opt_ops.server runs "
        f"{' or '.join(SERVER_TASK_TYPES)} tasks. Set TF_CONFIG's \"task\" to "
        "{\"type\": \"worker\" or \"ps\", \"index\": N}; the chief is your training program.")
  load_library()
  return tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                              task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc",
                              start=True)


def free_ports(n):
  """`n` localhost ports that were free just now."""
  sockets = [socket.socket() for _ in range(n)]
  for s in sockets:
    s.bind(("localhost", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


class LocalCluster:
  """Worker and parameter-server tasks on free localhost ports, as subprocesses of this process.

  Each task runs `task_command(job, index)` (default: this module, so with the
  library loaded) with `TF_CONFIG` naming it; the cluster also names a chief
  (this process) unless `chief=False`. `stop()`, or leaving the `with` block,
  kills exactly the processes it started, by PID.
  """

  def __init__(self, num_workers, num_ps, *, chief=True, task_command=None, env=None,
               stdout=subprocess.DEVNULL):
    ports = iter(free_ports(int(chief) + num_workers + num_ps))
    self.spec = {}
    if chief:
      self.spec["chief"] = [f"localhost:{next(ports)}"]
    self.spec["worker"] = [f"localhost:{next(ports)}" for _ in range(num_workers)]
    if num_ps:
      self.spec["ps"] = [f"localhost:{next(ports)}" for _ in range(num_ps)]
    task_command = task_command or (lambda job, index: [sys.executable, "-m", __name__])
    if env is None:
      # The tasks import the tf_opt_ops this process runs.
      package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
      env = dict(
          os.environ,
          PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p))
    self.procs = []
    # Error output goes to files: a pipe nobody reads would block a chatty task.
    self._stderr = {}
    try:
      for job in ("worker", "ps"):
        for index in range(len(self.spec.get(job, []))):
          tf_config = json.dumps({"cluster": self.spec, "task": {"type": job, "index": index}})
          stderr = tempfile.TemporaryFile(mode="w+")
          proc = subprocess.Popen(task_command(job, index), env=dict(env, TF_CONFIG=tf_config),
                                  stdout=stdout, stderr=stderr, text=True)
          self._stderr[proc.pid] = stderr
          self.procs.append(proc)
    except BaseException:
      self.stop()
      raise

  def chief_resolver(self):
    """The cluster resolver of the chief: this process."""
    return tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(self.spec),
                                                                rpc_layer="grpc", task_type="chief",
                                                                task_id=0)

  def error_output(self, proc):
    """What task `proc` has written to stderr so far."""
    stderr = self._stderr[proc.pid]
    stderr.seek(0)
    return stderr.read()

  def check_running(self):
    """Raises RuntimeError, with its last error output, if a task has exited."""
    for p in self.procs:
      if p.poll() is not None:
        raise RuntimeError(f"cluster task {p.args} exited with {p.returncode}:\n"
                           f"{self.error_output(p)[-3000:]}")

  def wait(self, timeout=None):
    """Waits for every task to exit; their return codes."""
    return [p.wait(timeout=timeout) for p in self.procs]

  def stop(self):
    for p in self.procs:
      if p.poll() is None:
        p.kill()
    for p in self.procs:
      p.wait(timeout=30)
      stderr = self._stderr.pop(p.pid, None)
      if stderr is not None:
        stderr.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.stop()


def main(argv=None):
  parser = argparse.ArgumentParser(
      prog="python -m tf_opt_ops.server",
      description="Starts the worker or parameter-server task that TF_CONFIG names, with the "
      "tf_opt_ops op library loaded, and serves until stopped.")
  parser.parse_args(argv)
  if not os.environ.get("TF_CONFIG"):
    sys.exit(
        "python -m tf_opt_ops.server: TF_CONFIG is not set. Set it to this task's "
        "cluster and task, e.g. " + json.dumps({
            "cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"], "ps": ["host2:2222"]},
            "task": {"type": "ps", "index": 0}
        }))
  server = start_server()
  print(f"tf_opt_ops.server: serving {server.target}", flush=True)
  server.join()


if __name__ == "__main__":
  main()
