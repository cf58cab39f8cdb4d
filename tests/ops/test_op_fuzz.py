"""Property-based fuzzing of the ops: no input kills the process.

Hypothesis draws shapes, dtypes, index types, indices (in range, out of range,
negative, duplicated, empty), eager or graph execution, and at most one fault:
a slot, gradient or hyperparameter of the wrong dtype or shape, an
uninitialized variable, indices that are not a vector, both Clippy
accumulator flags. Every op call runs in a long-lived worker process, so a
crash (a failed CHECK, a segfault) fails the example instead of killing
pytest; the worker is restarted for the next one.

- A valid call must compute what the NumPy reference computes (bit for bit
  in float32/float64, to the storage rounding in float16/bfloat16).
- An invalid call must raise InvalidArgumentError (or, in graph mode, be
  rejected by the shape function when the graph is built) and leave every
  variable bit-identical.

Why: see docs/design.md, "Invariants".
"""

import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tf_opt_ops import reference

import common

pytestmark = pytest.mark.slow

EXAMPLES_PER_OP = int(os.environ.get("TF_OPT_OPS_FUZZ_EXAMPLES", "40"))
CALL_TIMEOUT_S = 120

OPS = ("lazy_adam", "clippy", "sparse_clippy")
# The V2 ops (light state: lazy Adam's slots, Clippy's accumulator, of their own dtype): fuzzed
# too, their dtypes (no float64) and layout drawn; the named regressions below are for the three
# ops above.
FUZZ_OPS = OPS + ("lazy_adam_v2", "clippy_v2", "sparse_clippy_v2", "rowwise_adagrad")
LIGHT_DTYPES = ("float16", "bfloat16", "float32")
SLOTS = {
    "lazy_adam": ("var", "m", "v"), "lazy_adam_v2": ("var", "m", "v"), "clippy": ("var", "accum"),
    "sparse_clippy": ("var", "accum"), "clippy_v2": ("var", "accum"),
    "sparse_clippy_v2": ("var", "accum"), "rowwise_adagrad": ("var", "accum")
}
HYPERS = {
    "lazy_adam": ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"),
    "clippy": ("lr", "epsilon", "variable_relative_threshold", "accumulator_relative_threshold",
               "absolute_threshold"),
}
HYPERS["sparse_clippy"] = HYPERS["clippy"]
HYPERS["lazy_adam_v2"] = HYPERS["lazy_adam"]
HYPERS["clippy_v2"] = HYPERS["sparse_clippy_v2"] = HYPERS["clippy"]
HYPERS["rowwise_adagrad"] = ("lr", "epsilon", "weight_decay")

# ------------------------------------------------------------------ the worker
# Runs in its own process: builds the tensors of one case, calls the op, and
# answers with the variables' values afterwards and the outcome.


def _worker_tensor(tf, values, dtype):
  if dtype == "bfloat16":
    return tf.constant(np.asarray(values, np.uint16).view(tf.bfloat16.as_numpy_dtype))
  return tf.constant(values)


def _worker_numpy(tf, t):
  x = t.numpy()
  return x.view(np.uint16) if t.dtype == tf.bfloat16 else x


def _tensor_or_none(out):
  """What a tf.function may return: lazy Adam's op has no output."""
  return out if hasattr(out, "dtype") else None


def _worker_call(tf, lib, case):
  """Runs one case; returns {'outcome', 'error', 'message', 'after', 'scale'}."""
  variables = []
  handles = []
  for k, (values, dtype) in enumerate(zip(case["slot_values"], case["slot_dtypes"])):
    if k == case.get("uninitialized"):
      handles.append(
          tf.raw_ops.VarHandleOp(dtype=tf.as_dtype(dtype), shape=np.shape(values),
                                 shared_name=f"tf_opt_ops_fuzz_uninitialized_{case['serial']}"))
      variables.append(None)
    else:
      variables.append(tf.Variable(_worker_tensor(tf, values, dtype)))
      handles.append(variables[-1].handle)
  grad = _worker_tensor(tf, case["grad"], case["grad_dtype"])
  hypers = {
      name: tf.constant(value, tf.as_dtype(case["hyper_dtype"]))
      for name, value in case["hypers"].items()
  }
  kwargs = dict(zip(SLOTS[case["op"]], handles), grad=grad, **hypers)
  if sparse_op(case["op"]):
    kwargs["indices"] = tf.constant(case["indices"], tf.as_dtype(case["index_dtype"]))
  if case["op"] == "rowwise_adagrad":
    kwargs.update(weight_decay_mode=case["weight_decay_mode"])
  elif not case["op"].startswith("lazy_adam"):
    kwargs.update(clip_accumulator_update=case["flags"][0],
                  use_standard_accumulator_update=case["flags"][1])
  if case["op"].endswith("_v2"):
    light = case["light"]
    kwargs.update(step=tf.constant(light["step"], tf.int64),
                  stochastic_rounding=light["stochastic_rounding"], seed=light["seed"])
    if case["op"] == "lazy_adam_v2":
      kwargs.update(Tslot=tf.as_dtype(light["slot_dtype"]),
                    rowwise_second_moment=light["rowwise_second_moment"])
    else:
      kwargs.update(Taccum=tf.as_dtype(light["slot_dtype"]))
  op = {
      "lazy_adam": lib.tf_opt_ops_resource_sparse_apply_lazy_adam,
      "lazy_adam_v2": lib.tf_opt_ops_resource_sparse_apply_lazy_adam_v2,
      "clippy_v2": lib.tf_opt_ops_resource_apply_clippy_adagrad_v2,
      "sparse_clippy_v2": lib.tf_opt_ops_resource_sparse_apply_clippy_adagrad_v2,
      "clippy": lib.tf_opt_ops_resource_apply_clippy_adagrad,
      "sparse_clippy": lib.tf_opt_ops_resource_sparse_apply_clippy_adagrad,
      "rowwise_adagrad": lib.tf_opt_ops_resource_sparse_apply_rowwise_adagrad,
  }[case["op"]]
  result = {"outcome": "ok", "error": None, "message": "", "scale": None}
  try:
    if case["graph"]:
      try:
        fn = tf.function(lambda: _tensor_or_none(op(**kwargs))).get_concrete_function()
      except (ValueError, tf.errors.InvalidArgumentError) as e:
        result.update(outcome="rejected_at_graph_construction", error=type(e).__name__,
                      message=str(e)[:2000])
        fn = None
      out = fn() if fn is not None else None
    else:
      out = op(**kwargs)
    if out is not None and not case["op"].startswith(("lazy_adam", "rowwise")):
      result["scale"] = float(out.numpy())
  except tf.errors.OpError as e:
    result.update(outcome="error", error=type(e).__name__, message=str(e)[:2000])
  except (TypeError, ValueError) as e:  # the generated Python wrapper refused the call
    result.update(outcome="error", error=type(e).__name__, message=str(e)[:2000])
  result["after"] = [None if v is None else _worker_numpy(tf, v) for v in variables]
  return result


def _read_message(stream):
  header = stream.read(8)
  if len(header) < 8:
    return None
  (size,) = struct.unpack("<Q", header)
  return pickle.loads(stream.read(size))


def _write_message(stream, obj):
  data = pickle.dumps(obj)
  stream.write(struct.pack("<Q", len(data)) + data)
  stream.flush()


def serve():
  """The worker's main loop: one case per message on stdin, one answer on stdout."""
  protocol_out = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)  # stray prints (TensorFlow's C++ included) go to stderr
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf

  from tf_opt_ops import ops
  lib = ops.load_library()
  _write_message(protocol_out, "ready")
  stdin = sys.stdin.buffer
  while True:
    case = _read_message(stdin)
    if case is None:
      return
    _write_message(protocol_out, _worker_call(tf, lib, case))


class Worker:
  """The worker process, seen from pytest; restarted after it dies."""

  def __init__(self):
    self.proc = None

  def _start(self):
    code = ("import sys; sys.path.insert(0, {!r}); import test_op_fuzz; "
            "test_op_fuzz.serve()").format(os.path.dirname(os.path.abspath(__file__)))
    # stderr to a file, not a pipe: TensorFlow's warnings would fill a pipe
    # nobody reads until the worker blocks.
    self.stderr = tempfile.TemporaryFile()
    self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=self.stderr,
                                 env=common.python_env())
    assert self._receive() == "ready", self._death_note("the worker did not start")

  def _receive(self):
    fd = self.proc.stdout.fileno()
    ready, _, _ = select.select([fd], [], [], CALL_TIMEOUT_S)
    if not ready:
      self.proc.kill()
      return None
    return _read_message(self.proc.stdout)

  def _death_note(self, what):
    self.proc.kill()
    self.proc.wait()
    self.stderr.seek(0)
    stderr = self.stderr.read().decode(errors="replace")[-3000:]
    self.proc = None
    return f"{what} (exit status {self.proc_status}): {stderr}"

  def call(self, case):
    if self.proc is None:
      self._start()
    try:
      _write_message(self.proc.stdin, case)
      answer = self._receive()
    except (BrokenPipeError, EOFError, pickle.UnpicklingError):
      answer = None
    if answer is None:
      try:
        self.proc_status = self.proc.wait(timeout=10)
      except subprocess.TimeoutExpired:
        self.proc_status = "still running: hung"
      raise AssertionError(self._death_note("the worker died or hung on this call"))
    return answer

  def close(self):
    if self.proc is not None:
      self.proc.stdin.close()
      self.proc.wait(timeout=60)
      self.proc = None

  proc_status = None


@pytest.fixture(scope="module")
def worker():
  w = Worker()
  yield w
  w.close()


# ------------------------------------------------------------------ the cases

DTYPES = reference.DTYPES
FAULTS = ("slot_dtype", "grad_dtype", "hyper_dtype", "slot_shape", "grad_shape", "hyper_shape",
          "uninitialized", "indices_shape", "both_flags")


@st.composite
def cases(draw, op):
  sparse = op not in ("clippy", "clippy_v2")
  light = op.endswith("_v2")
  dtype = draw(st.sampled_from(LIGHT_DTYPES if light else DTYPES))
  # sampled_from, not integers: hypothesis leans to the first choice, and an
  # empty table (or empty indices) should stay a rare case.
  num_rows = draw(st.sampled_from([4, 1, 6, 2, 3, 0, 5])) if sparse else None
  row_shape = draw(st.lists(st.integers(1, 4), min_size=0, max_size=2))
  shape = [num_rows, *row_shape] if sparse else draw(
      st.lists(st.integers(0, 4), min_size=0, max_size=3))
  applicable = [f for f in FAULTS if sparse or f != "indices_shape"]
  if op.startswith(("lazy_adam", "rowwise")):
    applicable.remove("both_flags")
  if light:  # float32 hyperparameters only: another dtype is refused by the op's signature
    applicable.remove("hyper_dtype")
  fault = draw(st.one_of(st.none(), st.sampled_from(applicable)))
  indices = None
  if sparse:
    indices = [] if draw(st.sampled_from([False] * 5 + [True])) else draw(
        st.lists(st.integers(-3, num_rows + 2), min_size=1, max_size=8))
  if sparse and fault is None and draw(st.booleans()):  # mostly valid indices, often duplicated
    indices = [i % num_rows for i in indices] if num_rows else []
  case = dict(op=op, dtype=dtype, shape=shape, fault=fault, indices=indices,
              index_dtype=draw(st.sampled_from(["int32", "int64"])), graph=draw(st.booleans()),
              flags=draw(st.sampled_from([(False, False), (True, False), (False, True)])),
              seed=draw(st.integers(0, 2**31 - 1)), serial=draw(st.integers(0, 2**62)),
              weight_decay_mode=draw(st.sampled_from(["none", "l2", "decoupled"])))
  if light:
    case["light"] = dict(slot_dtype=draw(st.sampled_from(LIGHT_DTYPES)),
                         rowwise_second_moment=op == "lazy_adam_v2" and draw(st.booleans()),
                         stochastic_rounding=draw(st.booleans()), seed=draw(st.integers(0, 2**40)),
                         step=draw(st.integers(1, 10**6)))
  if fault in ("slot_dtype", "grad_dtype", "hyper_dtype"):
    # Another dtype than the one the op was given for it (for a light slot, Tslot; for the
    # row-wise accumulator, the compute type).
    given = case["light"]["slot_dtype"] if light and fault == "slot_dtype" else dtype
    if op == "rowwise_adagrad" and fault == "slot_dtype":
      given = np.dtype(reference.compute_type(dtype)).name
    case["other_dtype"] = draw(
        st.sampled_from([d for d in (LIGHT_DTYPES if light else DTYPES) if d != given]))
  if fault in ("slot_dtype", "slot_shape", "uninitialized"):
    case["fault_slot"] = draw(st.integers(0 if fault == "uninitialized" else 1, len(SLOTS[op]) - 1))
  if fault == "hyper_shape":
    case["fault_hyper"] = draw(st.sampled_from(HYPERS[op]))
  return case


def _hypers(op, rng):
  if op.startswith("lazy_adam"):
    t = int(rng.integers(1, 20))
    beta1, beta2 = 0.9, 0.999
    return dict(beta1_power=beta1**t, beta2_power=beta2**t, lr=float(rng.uniform(1e-3, 0.5)),
                beta1=beta1, beta2=beta2, epsilon=1e-7)
  if op == "rowwise_adagrad":
    return dict(lr=float(rng.uniform(1e-3, 1.0)), epsilon=float(rng.choice([1e-8, 1e-3])),
                weight_decay=float(rng.choice([0.0, 0.01, 0.5])))
  return dict(lr=float(rng.uniform(1e-3, 1.0)), epsilon=1e-7,
              variable_relative_threshold=float(rng.uniform(0, 0.2)),
              accumulator_relative_threshold=float(rng.uniform(0, 0.02)),
              absolute_threshold=float(rng.choice([0.0, 1e-7, 1e-3])))


def sparse_op(op):
  return op not in ("clippy", "clippy_v2")


def build(case):
  """The worker's request for `case`, and whether the call is valid."""
  rng = np.random.default_rng(case["seed"])
  op, dtype, shape, fault = case["op"], case["dtype"], tuple(case["shape"]), case["fault"]
  slot_dtypes = [dtype] * len(SLOTS[op])
  slot_shapes = [shape] * len(SLOTS[op])
  light = case.get("light")
  if light:
    slot_dtypes[1:] = [light["slot_dtype"]] * (len(SLOTS[op]) - 1)
    if light["rowwise_second_moment"]:
      slot_shapes[2] = shape[:1]
  if op == "rowwise_adagrad":  # one accumulator value per row, of the compute type
    slot_dtypes[1] = np.dtype(reference.compute_type(dtype)).name
    slot_shapes[1] = shape[:1]
  grad_dtype = dtype
  hyper_dtype = "float64" if dtype == "float64" else "float32"
  if op in ("clippy", "clippy_v2"):
    grad_shape = shape
  else:
    grad_shape = (len(case["indices"]), *shape[1:])
  indices = case["indices"]
  hypers = _hypers(op, rng)
  flags = case["flags"]
  if fault == "slot_dtype":
    slot_dtypes[case["fault_slot"]] = case["other_dtype"]
  elif fault == "grad_dtype":  # the op's T follows grad: var and its slots no longer match
    grad_dtype = case["other_dtype"]
    hyper_dtype = "float64" if grad_dtype == "float64" else "float32"
  elif fault == "hyper_dtype":
    hyper_dtype = "float32" if hyper_dtype == "float64" else "float64"
  elif fault == "slot_shape":
    wrong = slot_shapes[case["fault_slot"]]
    slot_shapes[case["fault_slot"]] = (*wrong[:-1], wrong[-1] + 1) if wrong else (2,)
  elif fault == "grad_shape":
    grad_shape = (*grad_shape, 2) if rng.integers(2) or not grad_shape else (*grad_shape[:-1],
                                                                             grad_shape[-1] + 1)
  elif fault == "hyper_shape":
    hypers[case["fault_hyper"]] = [hypers[case["fault_hyper"]]] * 2
  elif fault == "indices_shape":
    indices = [indices]
    grad_shape = (1, *grad_shape)
  elif fault == "both_flags":
    flags = (True, True)
  slot_values = []
  for k, (d, s) in enumerate(zip(slot_dtypes, slot_shapes)):
    adam = op.startswith("lazy_adam")
    low = 0.0 if (not adam and k == 1) or (adam and k == 2) else -1.0
    slot_values.append(reference.random_values(rng, s, d, low=low))  # accum and v: >= 0
  request = dict(op=op, slot_values=slot_values, slot_dtypes=slot_dtypes,
                 grad=reference.random_values(rng, grad_shape, grad_dtype), grad_dtype=grad_dtype,
                 hypers=hypers, hyper_dtype=hyper_dtype,
                 indices=np.asarray(indices if indices is not None else [], np.int64),
                 index_dtype=case["index_dtype"], flags=flags, graph=case["graph"],
                 serial=case["serial"], light=light,
                 weight_decay_mode=case.get("weight_decay_mode", "none"),
                 uninitialized=case["fault_slot"] if fault == "uninitialized" else None)
  valid = fault is None and (not sparse_op(op) or all(0 <= i < shape[0] for i in indices))
  return request, valid


def expected(request, dtype):
  """(values after the call, scale) by the NumPy reference, for a valid call."""
  op, values = request["op"], request["slot_values"]
  indices, grad = request["indices"], request["grad"]
  if sparse_op(op) and len(indices) == 0:  # nothing touched
    return values, (None if op.startswith(("lazy_adam", "rowwise")) else 1.0)
  if op == "rowwise_adagrad":
    return reference.sparse_rowwise_adagrad(*values, grad, indices, dtype, **request["hypers"],
                                            weight_decay_mode=request["weight_decay_mode"]), None
  if op.startswith("lazy_adam"):
    h = request["hypers"]
    return reference.sparse_lazy_adam(*values, grad, indices, dtype, lr=h["lr"], beta1=h["beta1"],
                                      beta2=h["beta2"], epsilon=h["epsilon"],
                                      beta1_power=h["beta1_power"], beta2_power=h["beta2_power"],
                                      **(request["light"] or {})), None
  hyper = dict(request["hypers"], clip_accumulator_update=request["flags"][0],
               use_standard_accumulator_update=request["flags"][1])
  light = request["light"]
  if light:
    hyper.update(accumulator_dtype=light["slot_dtype"],
                 stochastic_rounding=light["stochastic_rounding"], seed=light["seed"],
                 step=light["step"])
  if not sparse_op(op):
    var, accum, scale = reference.clippy_adagrad(*values, grad, dtype, **hyper)
  else:
    var, accum, scale = reference.sparse_clippy_adagrad(*values, grad, indices, dtype, **hyper)
  return [var, accum], float(scale)


def check(worker, case):
  request, valid = build(case)
  got = worker.call(request)
  if valid:
    assert got["outcome"] == "ok", f"valid call failed: {got['error']}: {got['message']}"
    want, want_scale = expected(request, case["dtype"])
    for name, g, w, d in zip(SLOTS[case["op"]], got["after"], want, request["slot_dtypes"]):
      assert g.shape == w.shape, name
      rtol, atol = common.TOLERANCE[d]
      np.testing.assert_allclose(
          reference.load(g, d).astype(np.float64),
          reference.load(w, d).astype(np.float64), rtol=rtol, atol=atol, equal_nan=True,
          err_msg=f"{name} ({d})")
    if want_scale is not None:
      np.testing.assert_allclose(got["scale"], want_scale,
                                 rtol=0 if case["dtype"] == "float64" else 1e-6, equal_nan=True)
    return
  allowed = {"InvalidArgumentError"}
  if case["graph"]:
    allowed.add("ValueError")  # the shape function rejected it as the graph was built
  assert got["outcome"] != "ok", "an invalid call succeeded"
  assert got[
      "error"] in allowed, f"{got['error']} instead of InvalidArgumentError: {got['message']}"
  for name, before, after in zip(SLOTS[case["op"]], request["slot_values"], got["after"]):
    if after is not None:
      assert before.tobytes() == after.tobytes(), f"{name} changed by a rejected call"


FUZZ_SETTINGS = settings(max_examples=EXAMPLES_PER_OP, deadline=None, derandomize=True,
                         suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("op", FUZZ_OPS)
def test_no_input_kills_the_process(worker, op):

  @FUZZ_SETTINGS
  @given(case=cases(op))
  def run(case):
    check(worker, case)

  run()


# ---------------------------------------------- named regressions, each case once


def _case(op, **overrides):
  base = dict(op=op, dtype="float32", shape=[4, 3] if op != "clippy" else [4, 3], fault=None,
              indices=[0, 2, 2, 3] if op != "clippy" else None, index_dtype="int32", graph=False,
              flags=(False, False), seed=1, serial=0)
  base.update(overrides)
  return base


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("op", OPS)
def test_float64_slot_beside_float32_variable(worker, op, graph):
  case = _case(op, fault="slot_dtype", other_dtype="float64", fault_slot=1, graph=graph)
  request, _ = build(case)
  got = worker.call(request)
  assert got["error"] == "InvalidArgumentError", got
  slot = SLOTS[op][1]
  assert f"{slot} has dtype double but grad has dtype float" in got["message"]
  check(worker, case)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("op", OPS)
def test_float32_grad_for_float64_variable(worker, op, graph):
  case = _case(op, dtype="float64", fault="grad_dtype", other_dtype="float32", graph=graph)
  got = worker.call(build(case)[0])
  assert got["error"] == "InvalidArgumentError", got
  assert "var has dtype double but grad has dtype float" in got["message"]
  check(worker, case)


@pytest.mark.parametrize("op", OPS)
def test_float64_hyperparameters_for_float32_variable(worker, op):
  case = _case(op, fault="hyper_dtype")
  got = worker.call(build(case)[0])
  assert got["error"] == "InvalidArgumentError", got
  assert f"{HYPERS[op][0]} has dtype double but must be float" in got["message"]


def test_worker_death_fails_the_example():
  w = Worker()
  try:
    w.call(_case("clippy"))  # not a request: the worker fails and exits
  except AssertionError as e:
    assert "worker died" in str(e)
  else:
    pytest.fail("a dead worker must fail the call")
  finally:
    w.close()
