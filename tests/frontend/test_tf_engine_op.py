"""RatelEngineOp in TensorFlow (docs/architecture.md §5): bit-exact with both executors at any
batch, input errors and bad engine bytes give an error status naming the engine, hostile
engine bytes run in a bare TF process never crash or hang it, runs record their predicted
device time, and depthwise convolutions survive the quantized-model round trip."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from ratelnn.npu.engine import EngineBuilder, make_lut, make_softmax_table, quantize_multiplier

from helpers.engines import engine_mutations, engines_without_names, flip_constant_bit, without_checksum

import tensorflow as tf

from helpers.paths import SCRIPTS

COMPILED_BATCH = 2
CONV_CYCLES, POOL_CYCLES = 3000, 500   # per instruction, at the compiled batch
# tests marked no_tf_math run no TensorFlow op but RatelEngineOp, ratelnn's own (tests/conftest.py)


def two_input_engine(name: str = "test_engine", batch: int = COMPILED_BATCH):
    """x int8 [N,6,6,3], y int8 [N,6,6,4] -> conv(x) + y -> maxpool -> flatten ->
    (softmax uint8 [N,36], tanh int16 [N,36]); runs on cores 0 and 1 split by batch."""
    rng = np.random.default_rng(0)
    b = EngineBuilder(name, batch)
    x = b.tensor("x", (batch, 6, 6, 3), "int8", 0.05)
    y = b.tensor("y", (batch, 6, 6, 4), "int8", 0.1)
    conv = b.tensor("conv", (batch, 6, 6, 4), "int8", 0.1)
    add = b.tensor("add", (batch, 6, 6, 4), "int8", 0.2)
    pool = b.tensor("pool", (batch, 3, 3, 4), "int8", 0.2)
    flat = b.tensor("flat", (batch, 36), "int8", 0.2)
    soft = b.tensor("softmax", (batch, 36), "uint8", 1 / 255)
    tanh = b.tensor("tanh", (batch, 36), "int16", 1 / 32767)
    m, s = quantize_multiplier(0.05 * 0.01 / 0.1, 27 * 128 * 128 + 100)
    consts = [b.const("w", rng.integers(-128, 128, (3, 3, 3, 4)).astype(np.int8)),
              b.const("b", rng.integers(-100, 100, 4).astype(np.int32)),
              b.const("m", np.full(4, m, np.int32)), b.const("s", np.full(4, s, np.int32))]
    b.add("CONV2D", [x], [conv], consts, name="conv", strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1),
          groups=1).cycles = CONV_CYCLES
    b.add("ADD", [conv, y], [add], name="add", multipliers=[1 << 20, 1 << 20], shifts=[21])
    b.add("MAX_POOL", [add], [pool], name="pool", ksize=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0)).cycles = POOL_CYCLES
    b.add("RESHAPE", [pool], [flat], name="flatten")
    table, sm_m, sm_s = make_softmax_table("int8", 0.2, 1 / 255, 36)
    b.add("SOFTMAX", [flat], [soft], [b.const("exp", table)], name="softmax", multipliers=[sm_m], shifts=[sm_s])
    b.add("LUT", [flat], [tanh], [b.const("tanh", make_lut(np.tanh, "int8", 0.2, "int16", 1 / 32767))], name="tanh")
    b.set_io([x, y], [soft, tanh])
    b.set_placement(device_id=0, core_ids=[0, 1], split_mode="SPLIT_BATCH")
    return b.build()


def random_inputs(engine, batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.integers(np.iinfo(t.dtype).min, np.iinfo(t.dtype).max + 1, (batch,) + t.shape[1:]).astype(t.dtype)
            for t in engine.inputs]


def engine_op(ops, engine, inputs, name="test_engine", **attrs):
    """Run RatelEngineOp eagerly on numpy ``inputs``; returns numpy outputs."""
    outs = ops.ratel_engine_op(inputs, Tout=[tf.as_dtype(t.dtype) for t in engine.outputs],
                               engine=engine.to_bytes(), engine_name=name,
                               core_ids=attrs.pop("core_ids", [0, 1]), **attrs)
    return [o.numpy() for o in outs]


def engine_graph_def(engine, name="test_engine"):
    """A GraphDef: int placeholders (batch free) -> RatelEngineOp -> the outputs, exported
    from a one-engine IR graph by the TF frontend."""
    from ratelnn.frontend.tensorflow import export_graphdef
    from ratelnn.ir import Graph, Node, TensorInfo

    g = Graph("engine_only")
    for t in engine.inputs:
        g.add_input(t.name, (None,) + t.shape[1:], t.dtype.name)
    outputs = [f"{t.name}_out" for t in engine.outputs]
    g.add_node(Node(name, "Engine", [t.name for t in engine.inputs], outputs,
                    {"engine": engine.to_bytes(), "engine_name": name, "device_id": 0, "core_ids": [0, 1]}),
               [TensorInfo((None,) + t.shape[1:], t.dtype.name) for t in engine.outputs])
    g.outputs = outputs
    return g, export_graphdef(g)


@pytest.fixture(scope="module")
def ops():
    import ratelnn
    return ratelnn.tf_init()


@pytest.mark.no_tf_math
@pytest.mark.parametrize("batch", [1, COMPILED_BATCH, 5])
def test_engine_op_equals_both_executors_at_any_batch(ops, batch):
    engine = two_input_engine()
    inputs = random_inputs(engine, batch, seed=batch)
    got = engine_op(ops, engine, inputs)
    for backend in ("native", "reference"):
        want = engine.run(inputs, backend=backend)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == (batch,) + w.shape[1:]
            np.testing.assert_array_equal(g, w)


@pytest.mark.no_tf_math
def test_graph_round_trip_shapes_and_results(ops):
    from ratelnn.frontend.tensorflow import import_graphdef

    engine = two_input_engine()
    ir, graph_def = engine_graph_def(engine)
    node = next(n for n in graph_def.node if n.op == "RatelEngineOp")
    assert node.name == "test_engine" and node.attr["engine"].s == engine.to_bytes()
    assert list(node.attr["core_ids"].list.i) == [0, 1]
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    outputs = [graph.get_tensor_by_name(f"{t}:0") for t in ir.outputs]
    assert [o.shape.as_list() for o in outputs] == [[None, 36], [None, 36]]   # batch free
    inputs = random_inputs(engine, 3)
    with tf.compat.v1.Session(graph=graph) as sess:
        got = sess.run(outputs, {f"{t.name}:0": a for t, a in zip(engine.inputs, inputs)})
    for g, w in zip(got, engine.run(inputs, backend="reference")):
        np.testing.assert_array_equal(g, w)

    back = import_graphdef(graph_def, ["x", "y"], ir.outputs, [[3, 6, 6, 3], [3, 6, 6, 4]])
    (engine_node,) = [n for n in back.nodes if n.op == "Engine"]
    assert engine_node.attrs["engine"] == engine.to_bytes()
    assert engine_node.attrs["engine_name"] == "test_engine" and engine_node.attrs["core_ids"] == [0, 1]


@pytest.mark.no_tf_math
@pytest.mark.parametrize("change, message", [
    (lambda x, y: [x.astype(np.int16), y], r"input 0 \('x'\) must be int8, got int16"),
    (lambda x, y: [x[:, :5], y], r"input 0 \('x'\) has shape \[2,5,6,3\], expected \[N,6,6,3\]"),
    (lambda x, y: [x, y[:1]], r"inputs disagree on the batch size \(2 vs 1 for input 1 \('y'\)\)"),
    (lambda x, y: [x], r"expects 2 inputs, got 1"),
])
def test_wrong_inputs_name_the_engine(ops, change, message):
    engine = two_input_engine()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"engine 'my_engine': " + message):
        engine_op(ops, engine, change(*random_inputs(engine, 2)), name="my_engine")


@pytest.mark.no_tf_math
def test_bad_engine_bytes_and_attrs_give_error_status(ops):
    engine = two_input_engine()
    inputs = random_inputs(engine, 2)
    tout = [tf.as_dtype(t.dtype) for t in engine.outputs]
    data = engine.to_bytes()
    for bad in (data[: len(data) // 2], data + b"\xff\xff", b"", b"not an engine"):
        with pytest.raises(tf.errors.InvalidArgumentError, match="engine 'broken'"):
            ops.ratel_engine_op(inputs, Tout=tout, engine=bad, engine_name="broken")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"engine 'e': output 0 \('softmax'\) is uint8"):
        ops.ratel_engine_op(inputs, Tout=[tf.int8, tf.int16], engine=data, engine_name="e")
    with pytest.raises(tf.errors.InvalidArgumentError, match="engine 'e': core id 1 listed twice"):
        ops.ratel_engine_op(inputs, Tout=tout, engine=data, engine_name="e", core_ids=[1, 1])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"engine 'e': output_shapes\[1\]"):
        ops.ratel_engine_op(inputs, Tout=tout, engine=data, engine_name="e", output_shapes=[[None, 36], [None, 35]])


@pytest.mark.no_tf_math
def test_corrupted_or_old_engines_and_oversized_batches_give_error_status(ops, monkeypatch):
    """Engine integrity: one flipped weight bit and an engine without its checksum are refused
    when the kernel is built; sizes beyond the run-time limits before outputs are allocated."""
    engine = two_input_engine()
    inputs = random_inputs(engine, 2)
    tout = [tf.as_dtype(t.dtype) for t in engine.outputs]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"engine 'flip': checksum mismatch .* corrupted"):
        ops.ratel_engine_op(inputs, Tout=tout, engine=flip_constant_bit(engine.to_bytes()), engine_name="flip")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"engine 'old': no checksum .* compile the model again"):
        ops.ratel_engine_op(inputs, Tout=tout, engine=without_checksum(engine.to_bytes()), engine_name="old")
    monkeypatch.setenv("RATELNN_MAX_TENSOR_ELEMENTS", "1000")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"engine 'big': tensor 'x' \[10,6,6,3\] has more than "
                                                             r"1000 elements at batch 10"):
        engine_op(ops, engine, random_inputs(engine, 10), name="big")


@pytest.mark.no_tf_math
def test_runs_record_predicted_device_time(ops):
    import ratelnn.npu as npu
    from ratelnn.npu.device import get_device

    engine = two_input_engine()
    npu.reset_device_time()
    for batch in (5, 1, 0):
        engine_op(ops, engine, random_inputs(engine, batch), name="timed_engine")
    engine_op(ops, engine, random_inputs(engine, 2), name="other_engine")
    per_sample = (CONV_CYCLES + POOL_CYCLES) / COMPILED_BATCH
    timed = npu.device_time("timed_engine")
    assert (timed.runs, timed.samples) == (2, 6)       # the empty batch runs nothing
    # split by batch over 2 cores: the busiest core runs ceil(N / 2) samples
    assert timed.cycles == pytest.approx(per_sample * (3 + 1))
    assert timed.seconds == pytest.approx(timed.cycles / get_device(0).core.clock_hz)
    total = npu.device_time()
    assert total.runs == 3 and total.cycles == pytest.approx(per_sample * 5)
    assert npu.device_time("never_ran").runs == 0
    npu.reset_device_time()
    assert npu.device_times() == {}



@pytest.mark.no_tf_math
def test_hostile_engines_never_crash_a_bare_tf_process(ops, tmp_path):
    import ratelnn

    engine = two_input_engine()
    ir, graph_def = engine_graph_def(engine)
    (tmp_path / "graph.pb").write_bytes(graph_def.SerializeToString())
    cases = engine_mutations(engine.to_bytes(), 300, seed=3)
    with open(tmp_path / "engines.pkl", "wb") as f:
        pickle.dump(cases, f)
    feeds = {}
    for k, batch in enumerate((1, 3)):
        for t, a in zip(engine.inputs, random_inputs(engine, batch, seed=k)):
            feeds[f"{t.name}__{k}"] = a
    np.savez(tmp_path / "inputs.npz", **feeds)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    cmd = [sys.executable, str(SCRIPTS / "run_engine_graphs.py"), ratelnn.ops_library_path("tensorflow"),
           str(tmp_path / "graph.pb"), str(tmp_path / "engines.pkl"), str(tmp_path / "inputs.npz"),
           f"{ir.outputs[1]}:0"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    except subprocess.TimeoutExpired as e:
        last = (e.stdout or b"").decode(errors="replace").strip().splitlines()[-1:]
        pytest.fail(f"the TF process hung on a hostile engine (last started: {last})")
    last_case = [line for line in proc.stdout.splitlines() if line.startswith("case ")][-1:]
    assert proc.returncode == 0, f"rc {proc.returncode} after {last_case}: {proc.stderr[-2000:]}"
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nhostile engines: {counts['error']} runs ended in an error status, {counts['ran']} gave a result")
    assert counts["error"] + counts["ran"] == 2 * len(cases)
    assert counts["error"] > len(cases)   # most corruptions are caught
    assert all("engine '" in m for m in counts["messages"]), counts["messages"]


# ---------------------------------------------------------------- depthwise round trip
def depthwise_graph_def():
    """A float GraphDef: x [N,8,8,3] -> depthwise 3x3 (multiplier 2) + bias + relu ->
    conv 1x1 -> out; fixed random weights."""
    rng = np.random.default_rng(1)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        w = tf.constant(rng.normal(0, 0.5, (3, 3, 3, 2)).astype(np.float32))
        y = tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME")
        y = tf.nn.relu(tf.nn.bias_add(y, tf.constant(rng.normal(0, 0.1, 6).astype(np.float32))))
        y = tf.nn.conv2d(y, tf.constant(rng.normal(0, 0.3, (1, 1, 6, 4)).astype(np.float32)), 1, "VALID")
        tf.identity(y, name="out")
    return graph.as_graph_def()



def test_depthwise_conv_survives_the_quantized_model_round_trip(ops, tmp_path):
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.testing import run_graph

    config = {"input_nodes": ["x"], "output_nodes": ["out"], "input_shapes": [[4, 8, 8, 3]],
              "output_dir": str(tmp_path)}
    c = converter(depthwise_graph_def(), config)
    images = np.random.default_rng(2).uniform(0, 1, (16, 8, 8, 3)).astype(np.float32)
    run_graph(c.to_cal(), "x:0", "out:0", images, 4)
    direct, via_quant = c.to_npu(), c.to_npu(c.to_quant())

    assert len(engines_without_names(direct)) == 1, "the depthwise model should compile into one engine"
    assert engines_without_names(via_quant) == engines_without_names(direct)
    assert not [n.name for n in via_quant.node if n.op == "DepthwiseConv2dNative"]
    np.testing.assert_array_equal(run_graph(via_quant, "x:0", "out:0", images, 4),
                                  run_graph(direct, "x:0", "out:0", images, 4))


def test_compiled_model_runs_on_the_calling_thread_with_the_same_bits(ops, tmp_path):
    """A model wholly on the NPU (RatelEngineOp and its Quant/Dequant) runs each Session call
    on the calling thread in ratelnn's runner (ratelnn.runners.tf_session_options), with the
    bits of a default Session; the float model, a compiled one with an op left to the CPU and
    one with two engines keep TensorFlow's defaults."""
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.runners import runner_for, runs_on_caller_thread, tf_session_options
    from ratelnn.testing import run_graph

    config = {"input_nodes": ["x"], "output_nodes": ["out"], "input_shapes": [[4, 8, 8, 3]],
              "output_dir": str(tmp_path)}
    graph_float = depthwise_graph_def()
    c = converter(graph_float, config)
    images = np.random.default_rng(3).uniform(0, 1, (4, 8, 8, 3)).astype(np.float32)
    run_graph(c.to_cal(), "x:0", "out:0", images, 4)
    npu = c.to_npu()
    assert runs_on_caller_thread(npu) and not runs_on_caller_thread(graph_float)
    with_cpu_op = tf.compat.v1.GraphDef()
    with_cpu_op.CopyFrom(npu)
    out = next(n for n in with_cpu_op.node if n.name == "out")
    out.op = "Relu"   # a float op after the engine's Dequant: CPU work in the graph
    assert not runs_on_caller_thread(with_cpu_op)
    two_engines = tf.compat.v1.GraphDef()
    two_engines.CopyFrom(npu)
    two_engines.node.add().CopyFrom(next(n for n in npu.node if n.op == "RatelEngineOp"))
    two_engines.node[-1].name = "second_engine"
    assert not runs_on_caller_thread(two_engines)   # engines that may run side by side
    assert tf_session_options(graph_float)[1] is None
    config_proto, run_options = tf_session_options(npu)
    assert run_options.inter_op_thread_pool == -1 and len(config_proto.session_inter_op_thread_pool) == 1

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(npu, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        want = sess.run("out:0", {"x:0": images})
    runner = runner_for("tensorflow", npu)
    assert runner.run_options is not None
    np.testing.assert_array_equal(runner.run({"x": images}, ["out"])[0], want)
