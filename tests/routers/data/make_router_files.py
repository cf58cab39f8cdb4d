"""Writes the router model files and configs of tests/routers/test_router_files.py.

Run once with the tf_opt_ops of commit aebc01a (before the routers moved into the
`tf_opt_ops.routers` package), on TensorFlow 2.21:

    PYTHONPATH=python python tests/routers/data/make_router_files.py tests/routers/data

so that the test proves that files saved before the move still load. Each flavor trains a
small model with a MultiOptimizer (LazyAdam on the embedding, ClippyAdagrad the rest) and a
CompositeOptimizer for 3 steps, then saves the model file and the routers' get_config() as
JSON, with the weights and optimizer variables it expects back (NPZ).
"""

import os
import subprocess
import sys

SCRIPT = r"""
import json, os, sys
import numpy as np
flavor, out = sys.argv[1], sys.argv[2]
if flavor != "keras":
  os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
import tf_opt_ops
api = getattr(tf_opt_ops, flavor)
if flavor == "keras":
  import keras
else:
  import tf_keras as keras
rng = np.random.default_rng(0)
x = rng.integers(0, 50, (96, 2)).astype("int32")
y = rng.normal(size=(96, 1)).astype("float32")
for kind in ("multi", "composite"):
  keras.utils.set_random_seed(0)
  emb = keras.layers.Embedding(50, 4, name="emb")
  head = keras.layers.Dense(1, name="head")
  model = keras.Sequential([keras.Input(shape=(2,), dtype="int32"), emb, keras.layers.Flatten(),
                            head])
  lazy = api.LazyAdam(learning_rate=0.05)
  clippy = api.ClippyAdagrad(learning_rate=0.1)
  if kind == "multi":
    router = api.MultiOptimizer([api.OptimizerBlocks(lazy, emb)], default_optimizer=clippy)
  else:
    router = api.CompositeOptimizer([(lazy, lambda: emb.trainable_variables),
                                     (clippy, lambda: head.trainable_variables)])
  model.compile(optimizer=router, loss="mse")
  model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
  stem = os.path.join(out, f"{flavor}_{kind}")
  if kind == "multi":
    model.save(stem + (".keras" if flavor == "keras" else ".h5"))
  with open(stem + "_config.json", "w") as f:
    json.dump(router.get_config(), f, indent=1, default=str)
  variables = router.variables if flavor == "keras" else router.variables()
  np.savez(stem + "_expected.npz", weights=np.array([w.numpy() for w in model.weights],
                                                     dtype=object),
           optimizer=np.array([np.asarray(v.numpy()) for v in variables], dtype=object))
print("written", flavor)
"""


def main():
  out = os.path.abspath(sys.argv[1])
  for flavor in ("keras", "tf_keras", "legacy"):
    subprocess.run([sys.executable, "-c", SCRIPT, flavor, out], check=True)


if __name__ == "__main__":
  main()
