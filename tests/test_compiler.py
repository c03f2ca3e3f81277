"""The compiler (ratelnn/compiler): quantized IR -> engines -> compiled IR graph.

Every test builds a float IR graph, calibrates it by evaluating it, quantizes it, compiles
it, and runs the compiled graph with real engines (reference and native executors) against
the quantized (QDQ) model evaluated by the numpy evaluator."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ratelnn.calibration.stats import TensorStats
from ratelnn.config import ConfigError
from ratelnn.ir import Graph, Node, TensorInfo
from ratelnn.ir.evaluate import evaluate
from ratelnn.npu.engine import Engine
from ratelnn.compiler import compile_graph, run_compiled
from ratelnn.npu.costs import instruction_layer_cost
from ratelnn.ir import arith
from ratelnn.quantization.emit import emit_qdq
from ratelnn.quantization.policy import calibration_tensors
from ratelnn.quantization.quantizer import quantize
from ratelnn.quantization.recover import strip_qdq

F32 = np.float32
BATCH = 4


def _node(g: Graph, name: str, op: str, inputs, out_shape, **attrs) -> str:
    g.add_node(Node(name, op, list(inputs), [name], attrs), [TensorInfo(tuple(out_shape))])
    return name


def _conv_attrs(layout="NHWC", pads=(1, 1, 1, 1), groups=1, act="none", strides=(1, 1), **extra):
    return dict(strides=strides, dilations=(1, 1), pads=pads, groups=groups, layout=layout, act=act, **extra)


def _feeds(g: Graph, rng) -> dict:
    return {t: rng.normal(0, 1, g.shape(t)).astype(F32) for t in g.inputs}


def _stats(g: Graph, config, batches) -> dict:
    """Absolute min/max (EMA = absolute) of the calibration tensors over ``batches``."""
    lo, hi = {}, {}
    for feeds in batches:
        for t, v in evaluate(g, feeds, calibration_tensors(g, config)).items():
            lo[t], hi[t] = min(lo.get(t, np.inf), float(v.min())), max(hi.get(t, -np.inf), float(v.max()))
    return {t: TensorStats(lo[t], hi[t], lo[t], hi[t], len(batches), 1) for t in lo}


def _quantized(g: Graph, config, seed=0) -> Graph:
    g.validate()
    rng = np.random.default_rng(seed)
    return quantize(g, _stats(g, config, [_feeds(g, rng) for _ in range(4)]), config)


def _config(tmp_path, **extra):
    return {"output_dir": str(tmp_path / "out"), **extra}


def _engines(compiled: Graph):
    return [n for n in compiled.nodes if n.op == "Engine"]


def _codes(graph_q: Graph, t: str, value: np.ndarray) -> np.ndarray:
    """Integer codes of a dequantized output (exact: the value is code * scale)."""
    qp = graph_q.qparams[t]
    return arith.quantize(value, qp.scale, qp.dtype).astype(np.int64)


def compare(q: Graph, compiled: Graph, config, seed=1, batches=3):
    """Run compiled (reference + native) and QDQ on random batches; returns per output
    (fraction of equal codes, largest code difference).  Asserts native == reference."""
    qdq = emit_qdq(q, config)
    rng = np.random.default_rng(seed)
    diffs = {t: [] for t in q.outputs}
    for _ in range(batches):
        feeds = _feeds(q, rng)
        ref = run_compiled(compiled, feeds, backend="reference")
        nat = run_compiled(compiled, feeds, backend="native")
        want = evaluate(qdq, feeds)
        for t in q.outputs:
            np.testing.assert_array_equal(ref[t], nat[t])
            diffs[t].append((_codes(q, t, ref[t]) - _codes(q, t, want[t])).ravel())
    result = {}
    for t, d in diffs.items():
        d = np.concatenate(d)
        result[t] = (float(np.mean(d == 0)), int(np.abs(d).max()))
    return result


# ---------------------------------------------------------------- per op
def _conv_graph(layout="NHWC", groups=1, act="none", cin=4, cout=6, **extra) -> Graph:
    rng = np.random.default_rng(3)
    g = Graph("conv")
    shape = (BATCH, 7, 7, cin) if layout == "NHWC" else (BATCH, cin, 7, 7)
    g.add_input("x", shape)
    g.add_param("w", rng.normal(0, 0.5, (3, 3, cin // groups, cout)).astype(F32))
    g.add_param("b", rng.normal(0, 0.2, (cout,)).astype(F32))
    out = (BATCH, 4, 4, cout) if layout == "NHWC" else (BATCH, cout, 4, 4)
    _node(g, "y", "Conv2D", ["x", "w", "b"], out, **_conv_attrs(layout, groups=groups, act=act,
                                                               strides=(2, 2), **extra))
    g.outputs = ["y"]
    return g


def _unary_graph(op, shape=(BATCH, 5, 6), **attrs) -> Graph:
    g = Graph(op.lower())
    g.add_input("x", shape)
    _node(g, "y", op, ["x"], shape, **attrs)
    g.outputs = ["y"]
    return g


def _binary_graph(op, const=False) -> Graph:
    rng = np.random.default_rng(4)
    g = Graph(op.lower())
    g.add_input("a", (BATCH, 3, 4, 5))
    if const:
        g.add_param("b", rng.normal(0, 1, (4, 5)).astype(F32))
    else:
        g.add_input("b", (BATCH, 3, 4, 5))
    _node(g, "y", op, ["a", "b"], (BATCH, 3, 4, 5))
    g.outputs = ["y"]
    return g


def _matmul_graph(transpose_b=False, act="none") -> Graph:
    rng = np.random.default_rng(5)
    g = Graph("dense")
    g.add_input("x", (BATCH, 12))
    g.add_param("w", rng.normal(0, 0.4, (7, 12) if transpose_b else (12, 7)).astype(F32))
    g.add_param("b", rng.normal(0, 0.2, (7,)).astype(F32))
    _node(g, "y", "MatMul", ["x", "w", "b"], (BATCH, 7), transpose_a=False, transpose_b=transpose_b, act=act)
    g.outputs = ["y"]
    return g


def _concat_graph() -> Graph:
    g = Graph("concat")
    g.add_input("a", (BATCH, 3, 3, 2))
    g.add_input("b", (BATCH, 3, 3, 5))
    _node(g, "s", "Sigmoid", ["b"], (BATCH, 3, 3, 5))   # inputs at different scales
    _node(g, "y", "Concat", ["a", "s"], (BATCH, 3, 3, 7), axis=-1)
    g.outputs = ["y"]
    return g


def _pool_graph(op, **attrs) -> Graph:
    g = Graph(op.lower())
    g.add_input("x", (BATCH, 7, 7, 3))
    _node(g, "y", op, ["x"], (BATCH, 4, 4, 3), ksize=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
          layout="NHWC", **attrs)
    g.outputs = ["y"]
    return g


OP_GRAPHS = {
    "conv": lambda: _conv_graph(),
    "conv_relu": lambda: _conv_graph(act="relu"),
    "conv_relu6": lambda: _conv_graph(act="relu6"),
    "conv_leaky": lambda: _conv_graph(act="leaky_relu", act_alpha=0.1),
    "conv_grouped": lambda: _conv_graph(groups=2),
    "conv_depthwise": lambda: _conv_graph(groups=4, cout=8),
    "conv_nchw": lambda: _conv_graph(layout="NCHW"),
    "matmul": lambda: _matmul_graph(),
    "matmul_transpose_b_relu": lambda: _matmul_graph(True, "relu"),
    "add": lambda: _binary_graph("Add"),
    "sub": lambda: _binary_graph("Sub"),
    "mul": lambda: _binary_graph("Mul"),
    "add_const": lambda: _binary_graph("Add", const=True),
    "sub_const": lambda: _binary_graph("Sub", const=True),
    "mul_const": lambda: _binary_graph("Mul", const=True),
    "concat": _concat_graph,
    "maxpool": lambda: _pool_graph("MaxPool"),
    "avgpool": lambda: _pool_graph("AvgPool", count_include_pad=False),
    "avgpool_include_pad": lambda: _pool_graph("AvgPool", count_include_pad=True),
    "mean": lambda: _mean_graph(),
    "reshape": lambda: _reshape_graph("Reshape", (BATCH, 2, 15), shape=(BATCH, 2, 15)),
    "flatten": lambda: _reshape_graph("Flatten", (BATCH, 30)),
    "squeeze": lambda: _reshape_graph("Squeeze", (BATCH, 5, 6), in_shape=(BATCH, 5, 1, 6), axes=(2,)),
    "transpose": lambda: _reshape_graph("Transpose", (BATCH, 6, 5), perm=(0, 2, 1)),
    "pad_zero": lambda: _reshape_graph("Pad", (BATCH, 6, 9), pads=((0, 0), (1, 0), (1, 2)), value=0.0),
    "pad_value": lambda: _reshape_graph("Pad", (BATCH, 6, 9), pads=((0, 0), (1, 0), (1, 2)), value=0.7),
    "sigmoid": lambda: _unary_graph("Sigmoid"),
    "tanh": lambda: _unary_graph("Tanh"),
    "leaky_relu": lambda: _unary_graph("LeakyRelu", alpha=0.3),
    "relu": lambda: _unary_graph("Relu"),
    "relu6": lambda: _scaled_relu6(),
    "softmax": lambda: _unary_graph("Softmax", axis=-1),
}


def _mean_graph() -> Graph:
    g = Graph("mean")
    g.add_input("x", (BATCH, 5, 6, 3))
    _node(g, "y", "Mean", ["x"], (BATCH, 3), axes=(1, 2), keepdims=False)
    g.outputs = ["y"]
    return g


def _reshape_graph(op, out_shape, in_shape=(BATCH, 5, 6), **attrs) -> Graph:
    """x -> Tanh (a quantized producer) -> op: the op runs on engine codes."""
    g = Graph(op.lower())
    g.add_input("x", in_shape)
    _node(g, "t", "Tanh", ["x"], in_shape)
    _node(g, "y", op, ["t"], out_shape, **attrs)
    g.outputs = ["y"]
    return g


def _scaled_relu6() -> Graph:
    g = Graph("relu6")
    g.add_input("x", (BATCH, 5, 6))
    g.add_param("k", np.full((1,), 5.0, F32))
    _node(g, "s", "Mul", ["x", "k"], (BATCH, 5, 6))   # values beyond 6 to clamp
    _node(g, "y", "Relu6", ["s"], (BATCH, 5, 6))
    g.outputs = ["y"]
    return g


AGREEMENT = {}


@pytest.mark.parametrize("case", sorted(OP_GRAPHS))
def test_op_matches_quantized_model(case, tmp_path):
    cfg = _config(tmp_path)
    q = _quantized(OP_GRAPHS[case](), cfg)
    compiled = compile_graph(q, cfg)
    engines = _engines(compiled)
    assert len(engines) == 1
    assert {n.op for n in compiled.nodes} <= {"Engine", "Quant", "Dequant"}
    engine = Engine.from_bytes(engines[0].attrs["engine"])
    assert all(ins.name and ins.cycles > 0 for ins in engine.instructions)
    result = compare(q, compiled, cfg)
    AGREEMENT[case] = result
    for t, (equal, worst) in result.items():
        assert equal >= 0.99, f"{case}: only {equal:.4f} of the codes of {t!r} agree"
        assert worst <= 1, f"{case}: codes of {t!r} differ by {worst}"


def test_instruction_costs_follow_the_instruction(tmp_path):
    cfg = _config(tmp_path)
    compiled = compile_graph(_quantized(_conv_graph(groups=4, cout=8), cfg), cfg)
    engine = Engine.from_bytes(_engines(compiled)[0].attrs["engine"])
    cost = instruction_layer_cost(engine, engine.instructions[0])
    assert cost.kind == "depthwise" and cost.name == "y"
    assert cost.macs == 4 * 4 * 8 * 9 * 1 and cost.out_pixels == 16 and cost.kernel_area == 9
    assert cost.in_bytes == 7 * 7 * 4 and cost.out_bytes == 4 * 4 * 8


def test_unlowerable_ops_stay_float(tmp_path):
    """Softmax on a non-last axis is quantized but not lowerable, Exp is not quantized:
    both stay float ops between engines, reading Dequant and feeding Quant."""
    g = Graph("split")
    g.add_input("x", (BATCH, 5, 6))
    _node(g, "t", "Tanh", ["x"], (BATCH, 5, 6))
    _node(g, "s", "Softmax", ["t"], (BATCH, 5, 6), axis=1)
    _node(g, "e", "Exp", ["s"], (BATCH, 5, 6))
    _node(g, "y", "Sigmoid", ["e"], (BATCH, 5, 6))
    g.outputs = ["y"]
    cfg = _config(tmp_path)
    q = _quantized(g, cfg)
    compiled = compile_graph(q, cfg)
    assert len(_engines(compiled)) == 2
    assert compiled.producer(compiled.node("s").inputs[0]).op == "Dequant"
    assert compiled.node("s").op == "Softmax" and compiled.node("e").op == "Exp"
    result = compare(q, compiled, cfg)
    assert result["y"][1] <= 1 and result["y"][0] >= 0.99


# ---------------------------------------------------------------- a small CNN
def build_cnn(layout: str, seed: int = 0) -> Graph:
    """conv+relu, depthwise+relu6, 1x1 conv, residual Add, Concat, AvgPool, then Mean and
    MaxPool->Flatten branches concatenated, dense, softmax; batch 8, 10 classes."""
    rng = np.random.default_rng(seed)
    nchw = layout == "NCHW"

    def act_shape(h, c):
        return (8, c, h, h) if nchw else (8, h, h, c)

    caxis = 1 if nchw else 3
    g = Graph(f"cnn_{layout.lower()}")
    g.add_input("x", act_shape(8, 3))
    for name, shape in (("w1", (3, 3, 3, 8)), ("wd", (3, 3, 1, 8)), ("wp", (1, 1, 8, 8)), ("wf", (80, 10))):
        g.add_param(name, rng.normal(0, 0.5, shape).astype(F32))
    for name, n in (("b1", 8), ("bd", 8), ("bp", 8), ("bf", 10)):
        g.add_param(name, rng.normal(0, 0.1, (n,)).astype(F32))
    _node(g, "conv1", "Conv2D", ["x", "w1", "b1"], act_shape(8, 8), **_conv_attrs(layout, act="relu"))
    _node(g, "dw", "Conv2D", ["conv1", "wd", "bd"], act_shape(8, 8), **_conv_attrs(layout, groups=8, act="relu6"))
    _node(g, "pw", "Conv2D", ["dw", "wp", "bp"], act_shape(8, 8), **_conv_attrs(layout, pads=(0, 0, 0, 0)))
    _node(g, "res", "Add", ["pw", "conv1"], act_shape(8, 8))
    _node(g, "cat", "Concat", ["res", "conv1"], act_shape(8, 16), axis=caxis)
    _node(g, "pool", "AvgPool", ["cat"], act_shape(4, 16), ksize=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0),
          layout=layout, count_include_pad=False)
    _node(g, "gap", "Mean", ["pool"], (8, 16), axes=(2, 3) if nchw else (1, 2), keepdims=False)
    _node(g, "mp", "MaxPool", ["pool"], act_shape(2, 16), ksize=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0),
          layout=layout)
    _node(g, "flat", "Flatten", ["mp"], (8, 64))
    _node(g, "feat", "Concat", ["gap", "flat"], (8, 80), axis=1)
    _node(g, "logits", "MatMul", ["feat", "wf", "bf"], (8, 10), transpose_a=False, transpose_b=False, act="none")
    _node(g, "prob", "Softmax", ["logits"], (8, 10), axis=-1)
    g.outputs = ["prob"]
    return g


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_cnn_one_engine_top1_matches_quantized_model(layout, tmp_path):
    cfg = _config(tmp_path)
    g = build_cnn(layout)
    q = _quantized(g, cfg)
    compiled = compile_graph(q, cfg)
    assert [n.op for n in compiled.nodes] == ["Quant", "Engine", "Dequant"]
    engine = Engine.from_bytes(_engines(compiled)[0].attrs["engine"])
    transposes = [i for i in engine.instructions if i.opcode == 13]
    assert (len(transposes) > 0) == (layout == "NCHW")
    qdq = emit_qdq(q, cfg)
    rng = np.random.default_rng(7)
    same, total, code_equal = 0, 0, []
    for _ in range(25):
        feeds = _feeds(g, rng)
        got = run_compiled(compiled, feeds, backend="native")["prob"]
        want = evaluate(qdq, feeds)["prob"]
        same += int(np.sum(np.argmax(got, 1) == np.argmax(want, 1)))
        total += len(got)
        code_equal.append(np.mean(_codes(q, "prob", got) == _codes(q, "prob", want)))
    AGREEMENT[f"cnn_{layout}"] = {"top1": same / total, "prob_codes_equal": float(np.mean(code_equal))}
    assert same / total >= 0.99


# ---------------------------------------------------------------- partitioning
def test_opaque_node_splits_into_two_engines_without_cycle(tmp_path):
    """conv1 -> Opaque -> Add(conv1, opaque): conv1 and the Add cannot share an engine
    (the path through the Opaque would leave and re-enter it)."""
    rng = np.random.default_rng(0)
    g = Graph("opaque")
    g.add_input("x", (2, 6, 6, 3))
    g.add_param("w", rng.normal(0, 0.5, (3, 3, 3, 4)).astype(F32))
    _node(g, "conv1", "Conv2D", ["x", "w"], (2, 6, 6, 4), **_conv_attrs(act="relu"))
    _node(g, "op", "Opaque", ["conv1"], (2, 6, 6, 4), framework="tensorflow", type="Foo", payload=b"")
    _node(g, "add", "Add", ["conv1", "op"], (2, 6, 6, 4))
    _node(g, "y", "Sigmoid", ["add"], (2, 6, 6, 4))
    g.outputs = ["y"]
    cfg = _config(tmp_path)
    stats = {t: TensorStats(-2.0, 3.0, -2.0, 3.0, 1, 1) for t in calibration_tensors(g, cfg)}
    q = quantize(g, stats, cfg)
    compiled = compile_graph(q, cfg)
    compiled.validate()  # acyclic, every tensor produced once
    engines = _engines(compiled)
    assert len(engines) == 2
    opaque = compiled.node("op")
    assert compiled.producer(opaque.inputs[0]).op == "Dequant"
    assert compiled.producer(opaque.inputs[0]).inputs[0] in engines[0].outputs
    second = engines[1]
    assert "op" in [compiled.producer(t).inputs[0] for t in second.inputs if compiled.producer(t).op == "Quant"]
    assert compiled.outputs == ["y"] and compiled.producer("y").op == "Dequant"
    assert len(second.inputs) == 2 and engines[0].outputs[0] in second.inputs  # conv1 codes stay integer


# ---------------------------------------------------------------- remove_input_quant
def test_remove_input_quant(tmp_path, monkeypatch):
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    g = build_cnn("NHWC")
    plain_cfg = _config(tmp_path)
    cfg = _config(tmp_path, remove_input_quant=True)
    q = _quantized(g, plain_cfg)
    plain = compile_graph(q, plain_cfg)
    direct = compile_graph(q, cfg)
    assert direct.tensors["x"].dtype == q.qparams["x"].dtype == "int8"
    assert direct.inputs == ["x"] and not [n for n in direct.nodes if n.op == "Quant"]
    texts = [(tmp_path / "out" / "input_quant_nodes.txt").read_text(), (workdir / "input_quant_nodes.txt").read_text()]
    assert texts[0] == texts[1]
    key, value = texts[0].strip().split(":")
    in_scale = float(value)
    assert key == "in_scale" and in_scale == float(np.float32(q.qparams["x"].scale))
    x = np.random.default_rng(3).normal(0, 1, g.shape("x")).astype(F32)
    codes = arith.quantize(x, in_scale, "int8")   # q = round(x / in_scale), saturated
    np.testing.assert_array_equal(run_compiled(direct, {"x": codes})["prob"], run_compiled(plain, {"x": x})["prob"])


def test_remove_input_quant_needs_a_quantized_input(tmp_path):
    g = Graph("float_input")
    g.add_input("x", (2, 3))
    _node(g, "e", "Exp", ["x"], (2, 3))
    _node(g, "y", "Sigmoid", ["e"], (2, 3))
    g.outputs = ["y"]
    cfg = _config(tmp_path, remove_input_quant=True)
    q = _quantized(g, cfg)
    with pytest.raises(ConfigError, match="'x' is not quantized"):
        compile_graph(q, cfg)
    assert not (tmp_path / "out" / "input_quant_nodes.txt").exists()


# ---------------------------------------------------------------- strip_qdq
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_strip_qdq_round_trip(layout, tmp_path):
    cfg = _config(tmp_path)
    q = _quantized(build_cnn(layout), cfg)
    qdq = emit_qdq(q, cfg)
    # what a framework import gives: QParams only where a Quant node says them
    qdq.qparams = {n.outputs[0]: qdq.qparams[n.outputs[0]] for n in qdq.nodes if n.op == "Quant"}
    recovered = strip_qdq(qdq)
    assert [n.op for n in recovered.nodes] == [n.op for n in q.nodes]
    assert set(recovered.qparams) == set(q.qparams)
    before = [n.attrs["engine"] for n in _engines(compile_graph(q, cfg))]
    after = [n.attrs["engine"] for n in _engines(compile_graph(recovered, cfg))]
    assert before == after


def test_strip_qdq_rejects_a_lonely_quant(tmp_path):
    g = Graph("lonely")
    g.add_input("x", (2, 3))
    g.add_node(Node("xq", "Quant", ["x"], ["xq"], {"dtype": "int8", "scale": 0.1}), [TensorInfo((2, 3), "int8")])
    g.outputs = ["xq"]
    with pytest.raises(ValueError, match="xq"):
        strip_qdq(g)


def teardown_module(module):
    if os.environ.get("RATELNN_REPORT_AGREEMENT"):
        for case, result in sorted(AGREEMENT.items()):
            print(case, result)
