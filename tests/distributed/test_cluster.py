"""ParameterServerStrategy on a localhost cluster equals one device, with sharded variables.

Two clusters of subprocesses on free localhost ports, each stopped by PID:

- 2 workers and 2 parameter servers started with `python -m tf_opt_ops.server`;
  a chief (this file run as `python test_cluster.py chief CLUSTER_JSON`) trains
  an Embedding + Dense model whose variables are all split in two shards by
  `FixedShardsPartitioner(2)`, one step at a time (schedule, join: a
  deterministic schedule), and the same model on one device on the same
  batches, for each flavor and optimizer; and restores checkpoints across the
  two.
- 1 worker with the library and 1 parameter server without it (a plain
  `tf.distribute.Server`): the first step fails naming the fused op, which is
  what shows that the fused ops run on the parameter servers.
- The chief of docs/distributed.md, as the guide prints it, on 2 workers and
  2 parameter servers: it trains a sharded model with `model.fit`.

Keras 3 is not here: its layers cannot use a `ShardedVariable` (stock Adam
fails the same way). Why: see docs/design.md, "Invariants".
"""

import ast
import json
import os
import re
import subprocess
import sys

import pytest

import common

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = common.ROOT
FLAVORS = ["tf_keras", "legacy"]
CASES = [
    "LazyAdam", "ClippyAdagrad", "ClippyAdagrad_factors", "CompositeOptimizer", "MultiOptimizer"
]
# Checkpointed at step 2 in one layout, restored into another, trained on.
RESTORES = [("one", "one"), ("ps", "ps"), ("one", "ps"), ("ps", "one")]
RESTORED_CASES = ["LazyAdam", "ClippyAdagrad_factors", "CompositeOptimizer", "MultiOptimizer"]
ROWS, USED, DIM, BATCH, STEPS = 30, 24, 4, 8, 4  # rows >= USED never appear in the data
TIMEOUT_S = 420
GUIDE_TIMEOUT_S = 300

# ----------------------------------------------------------------------------- the chief


def _optimizer(module, case, model):
  lazy = lambda: module.LazyAdam(learning_rate=0.05)  # noqa: E731
  # Thresholds that let the table train while clipping stays active (scale < 1).
  clippy = lambda factors: module.ClippyAdagrad(  # noqa: E731
      learning_rate=0.2, variable_relative_threshold=0.5, absolute_threshold=1e-3,
      export_clipping_factors=factors)
  if case == "LazyAdam":
    return lazy()
  if case.startswith("ClippyAdagrad"):
    return clippy(case.endswith("factors"))
  table = model.get_layer("emb")
  dense = [model.get_layer(n) for n in ("hidden", "out")]
  if case == "MultiOptimizer":
    # A stateful default optimizer: its moments and step counter must survive a restore.
    return module.MultiOptimizer([module.OptimizerBlocks(lazy(), table)],
                                 default_optimizer=module.LazyAdam(learning_rate=0.02))
  return module.CompositeOptimizer([
      (lazy(), lambda: table.trainable_variables),
      (clippy(True), lambda: [v for layer in dense for v in layer.trainable_variables]),
  ])


def _build(k):
  inputs = k.Input(shape=(3,), dtype="int32")
  h = k.layers.Embedding(ROWS, DIM, name="emb")(inputs)
  h = k.layers.Flatten()(h)
  h = k.layers.Dense(4, activation="tanh", name="hidden")(h)
  return k.Model(inputs, k.layers.Dense(1, name="out")(h))


def _whole(variables):
  """The variables with every shard replaced by its sharded variable (once)."""
  out = []
  for v in variables:
    container = getattr(v, "_sharded_container", None)
    v = container() if container is not None else v
    if not any(v is o for o in out):
      out.append(v)
  return out


def _value(v):
  import numpy as np
  shards = getattr(v, "variables", None)
  if shards is not None and not callable(shards):
    return np.concatenate([s.numpy() for s in shards])
  return v.numpy()


def _state(opt):
  """{name without shard suffix or optimizer prefix: value} of every optimizer variable.

  A router's, per sub-optimizer (`<position>/<name>`): slots a legacy optimizer creates
  when a checkpoint is read are named without the router's scope.
  """
  subs = getattr(opt, "optimizers", None)
  if isinstance(subs, list):
    prefix = r"^((CompositeOptimizer|MultiOptimizer)/)?(Optimizer\d+|default_optimizer)/"
    return {
        f"{i}/" + re.sub(prefix, "", name): value for i, sub in enumerate(subs)
        for name, value in _state(sub).items()
    }
  variables = opt.variables() if callable(opt.variables) else opt.variables
  flat = {}  # id -> variable: legacy lists both the shards' slots and their ShardedVariable
  for v in variables:
    shards = getattr(v, "variables", None)
    for s in shards if shards is not None and not callable(shards) else [v]:
      flat[id(s)] = s
  parts = {}
  for v in flat.values():
    name = getattr(v, "path", None)  # Keras 3 variables (never sharded): a unique path
    if name is None:
      name = re.sub(r"/part_\d+", "", v.name.split(":")[0])
      name = re.sub(r"^(LazyAdam|ClippyAdagrad|CompositeOptimizer)[^/]*/", "", name)
    parts.setdefault(name, []).append((v.name, v))
  import numpy as np
  return {
      n: np.concatenate([v.numpy() for _, v in sorted(p, key=lambda t: t[0])]) if len(p) > 1 else
         p[0][1].numpy() for n, p in parts.items()
  }


def _factors(opt):
  if hasattr(opt, "optimizers"):
    return [f for o in opt.optimizers for f in _factors(o)]
  return [float(f.numpy()) for f in getattr(opt, "clipping_factors", [])]


def chief(cluster_json):
  """Runs in the chief subprocess; prints one JSON line of results."""
  sys.path.insert(0, os.path.join(ROOT, "python"))
  import importlib

  import numpy as np
  import tensorflow as tf
  import tf_keras as k

  spec = json.loads(cluster_json)
  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(spec),
                                                                  rpc_layer="grpc",
                                                                  task_type="chief", task_id=0)
  strategy = tf.distribute.experimental.ParameterServerStrategy(
      resolver,
      variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(2))
  coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
  x, y = common.duplicate_id_batches(USED, BATCH, STEPS)
  k.utils.set_random_seed(0)
  init = _build(k).get_weights()

  def make(mode, flavor, case):
    module = importlib.import_module(f"tf_opt_ops.{flavor}")
    scope = strategy.scope() if mode == "ps" else tf.distribute.get_strategy().scope()
    with scope:
      model = _build(k)
      opt = _optimizer(module, case, model)
    for v, value in zip(_whole(model.weights), init):
      v.assign(value)
    return model, opt

  def train(mode, model, opt, steps):
    run = strategy.run if mode == "ps" else tf.distribute.get_strategy().run

    def replica_step(xb, yb):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(xb) - yb)**2)
      grads = tape.gradient(loss, model.trainable_variables)
      opt.apply_gradients(zip(grads, model.trainable_variables))

    step = tf.function(lambda xb, yb: run(replica_step, args=(xb, yb)))
    for s in steps:
      batch = (x[s * BATCH:(s + 1) * BATCH], y[s * BATCH:(s + 1) * BATCH])
      if mode == "ps":
        coordinator.schedule(step, args=batch)
        coordinator.join()  # one step at a time: the same order as one device
      else:
        step(*batch)

  def snapshot(model, opt):
    return dict(weights=[_value(v) for v in _whole(model.weights)], state=_state(opt),
                factors=_factors(opt), shards=len(model.trainable_variables))

  def diff(a, b):
    weights = max(float(np.abs(p - q).max()) for p, q in zip(a["weights"], b["weights"]))
    same_names = sorted(a["state"]) == sorted(b["state"])
    state = max(float(np.abs(a["state"][n] - b["state"][n]).max())
                for n in a["state"]) if same_names else None
    return dict(weights=weights, state=state, names=[sorted(a["state"]),
                                                     sorted(b["state"])],
                factors=[a["factors"], b["factors"]], shards=[a["shards"], b["shards"]])

  results = {}
  for flavor in FLAVORS:
    for case in CASES:
      runs = {}
      for mode in ("one", "ps"):
        model, opt = make(mode, flavor, case)
        train(mode, model, opt, range(STEPS))
        runs[mode] = snapshot(model, opt)
      r = diff(runs["one"], runs["ps"])
      emb_before, emb_after = init[0], runs["one"]["weights"][0]
      r["trained"] = float(np.abs(emb_after[:USED] - emb_before[:USED]).max())
      r["unused_rows_changed"] = float(
          np.abs(runs["ps"]["weights"][0][USED:] - emb_before[USED:]).max())
      results[f"{flavor}/{case}"] = r
    # Checkpoints, both ways: one device -> sharded, sharded -> one device. Each
    # restore happens before the optimizer has state (the common case: a job
    # restarting from its checkpoint), then training goes on and must still match.
    for case in RESTORED_CASES:
      for source, target in RESTORES:
        saved_model, saved_opt = make(source, flavor, case)
        train(source, saved_model, saved_opt, range(2))
        path = tf.train.Checkpoint(model=saved_model, optimizer=saved_opt).save(
            os.path.join(os.environ["CKPT_DIR"], f"{flavor}_{case}_{source}"))
        model, opt = make(target, flavor, case)
        tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
        with strategy.scope() if target == "ps" else tf.distribute.get_strategy().scope():
          if flavor == "legacy":
            opt._create_all_weights(model.trainable_variables)
          else:
            opt.build(model.trainable_variables)
        restored = diff(snapshot(saved_model, saved_opt), snapshot(model, opt))
        train(source, saved_model, saved_opt, range(2, STEPS))
        train(target, model, opt, range(2, STEPS))
        trained = diff(snapshot(saved_model, saved_opt), snapshot(model, opt))
        results[f"{flavor}/checkpoint/{case}/{source}->{target}"] = dict(
            restored=restored, trained=trained)
  print(json.dumps(results))


def chief_without_library(cluster_json):
  """One LazyAdam step on a cluster whose parameter server lacks the library; prints the error."""
  sys.path.insert(0, os.path.join(ROOT, "python"))
  import tensorflow as tf
  import tf_keras as k

  from tf_opt_ops import legacy

  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
      tf.train.ClusterSpec(json.loads(cluster_json)), rpc_layer="grpc", task_type="chief",
      task_id=0)
  strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
  coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
  with strategy.scope():
    table = k.layers.Embedding(ROWS, DIM)
    table.build((None,))
    opt = legacy.LazyAdam(0.1)

  def replica_step():
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(table(tf.constant([1, 2])))
    opt.apply_gradients(
        zip(tape.gradient(loss, table.trainable_variables), table.trainable_variables))

  step = tf.function(lambda: strategy.run(replica_step))
  try:
    coordinator.schedule(step)
    coordinator.join()
    print(json.dumps({"error": None}))
  except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"[:2000]}))


# ----------------------------------------------------------------------------- the cluster


def _env():
  env = common.python_env()
  env.pop("TF_USE_LEGACY_KERAS", None)
  return env


# A server task without the library: TensorFlow's own server.
_PLAIN_SERVER = ("import tensorflow as tf; "
                 "r = tf.distribute.cluster_resolver.TFConfigClusterResolver(); "
                 "tf.distribute.Server(r.cluster_spec(), job_name=r.task_type, "
                 "task_index=r.task_id, protocol='grpc').join()")


def _cluster(workers, ps, plain=()):
  """A `LocalCluster` whose `plain` jobs run without the library."""
  sys.path.insert(0, os.path.join(ROOT, "python"))
  from tf_opt_ops.server import LocalCluster

  def command(job, index):
    del index
    if job in plain:
      return [sys.executable, "-c", _PLAIN_SERVER]
    return [sys.executable, "-m", "tf_opt_ops.server"]

  return LocalCluster(workers, ps, task_command=command, env=_env())


def _run_chief(cluster, mode, tmp_path):
  proc = common.run_python(None, os.path.abspath(__file__), mode, json.dumps(cluster.spec),
                           env={"CKPT_DIR": str(tmp_path)}, timeout=TIMEOUT_S, check=False)
  cluster.check_running()
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  with _cluster(workers=2, ps=2) as cluster:
    yield _run_chief(cluster, "chief", tmp_path_factory.mktemp("ckpt"))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_parameter_server_equals_one_device(results, flavor, case, record_property):
  r = results[f"{flavor}/{case}"]
  record_property("max_abs_diff_weights", r["weights"])
  record_property("max_abs_diff_state", r["state"])
  assert r["shards"][1] > r["shards"][0]  # the variables were sharded
  assert r["names"][0] == r["names"][1]  # the same optimizer state, shards joined
  assert r["trained"] > 1e-3
  assert r["unused_rows_changed"] == 0.0
  assert r["weights"] <= 1e-6
  assert r["state"] <= 1e-6
  one, ps = r["factors"]
  if case in ("ClippyAdagrad_factors", "CompositeOptimizer"):
    assert len(one) == len(ps) > 0  # one per model variable, not per shard
    assert min(one) < 1.0  # clipping was active
    assert max(abs(a - b) for a, b in zip(one, ps)) <= 1e-6
  else:
    assert one == ps == []


@pytest.mark.parametrize("direction", [f"{a}->{b}" for a, b in RESTORES])
@pytest.mark.parametrize("case", RESTORED_CASES)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_checkpoint_restores_exactly(results, flavor, case, direction):
  r = results[f"{flavor}/checkpoint/{case}/{direction}"]
  restored, trained = r["restored"], r["trained"]
  assert restored["names"][0] == restored["names"][1]
  assert restored["weights"] == 0.0
  assert restored["state"] == 0.0
  assert restored["factors"][0] == restored["factors"][1]
  assert trained["weights"] <= 1e-6 and trained["state"] <= 1e-6
  if direction == "one->one":
    assert trained["weights"] == 0.0 and trained["state"] == 0.0  # bit for bit on one device


def test_parameter_server_without_library_names_the_op(tmp_path):
  with _cluster(workers=1, ps=1, plain=("ps",)) as cluster:
    error = _run_chief(cluster, "chief_without_library", tmp_path)["error"]
  assert error is not None
  assert "TfOptOps>ResourceSparseApplyLazyAdam" in error
  assert "not registered" in error or "NotFound" in error


def _guide_chief():
  """The chief program of docs/distributed.md's ParameterServerStrategy section."""
  with open(os.path.join(ROOT, "docs", "distributed.md"), encoding="utf-8") as f:
    blocks = re.findall(r"^```python\n(.*?)^```$", f.read(), flags=re.S | re.M)
  (block,) = [b for b in blocks if "ParameterServerStrategy(" in b]
  return block


def test_guide_chief_trains_a_sharded_model_on_the_cluster():
  with _cluster(workers=2, ps=2) as cluster:
    tf_config = json.dumps({"cluster": cluster.spec, "task": {"type": "chief", "index": 0}})
    proc = common.run_python(_guide_chief(), env={"TF_CONFIG": tf_config}, timeout=GUIDE_TIMEOUT_S,
                             check=False)
    cluster.check_running()
  assert proc.returncode == 0, proc.stderr[-4000:]
  devices, losses = proc.stdout.strip().splitlines()[-2:]
  devices, losses = sorted(ast.literal_eval(devices)), ast.literal_eval(losses)
  tasks = [re.sub(r"/device:CPU:0$", "", d) for d in devices]
  assert tasks == ["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]  # the table, sharded
  assert len(losses) == 4
  assert losses[-1] < 0.5 * losses[0], losses  # it learned


@pytest.mark.parametrize("tf_config,message", [
    (None, "TF_CONFIG is not set"),
    ('{"cluster": {"chief": ["localhost:1"]}, "task": {"type": "chief", "index": 0}}',
     "runs worker or ps tasks"),
])
def test_server_says_what_is_wrong_with_tf_config(tf_config, message):
  env = _env()
  env.pop("TF_CONFIG", None)
  if tf_config:
    env["TF_CONFIG"] = tf_config
  proc = subprocess.run([sys.executable, "-m", "tf_opt_ops.server"], env=env, capture_output=True,
                        text=True, timeout=120, check=False)
  assert proc.returncode != 0
  assert message in proc.stderr


if __name__ == "__main__":
  {"chief": chief, "chief_without_library": chief_without_library}[sys.argv[1]](sys.argv[2])
