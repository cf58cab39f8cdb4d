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
import sys

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
