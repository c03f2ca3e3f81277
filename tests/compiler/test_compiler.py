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

from helpers.ir_graphs import (add_node, build_cnn, compare, compile_config, conv_attrs, engine_nodes, output_codes,
                               quantized, random_feeds)

F32 = np.float32
BATCH = 4
# IR graphs, the numpy reference and native engines only; 'tensorflow' is an Opaque node's
# attribute: no TensorFlow kernel runs (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math



# ---------------------------------------------------------------- per op
def _conv_graph(layout="NHWC", groups=1, act="none", cin=4, cout=6, **extra) -> Graph:
    rng = np.random.default_rng(3)
    g = Graph("conv")
    shape = (BATCH, 7, 7, cin) if layout == "NHWC" else (BATCH, cin, 7, 7)
    g.add_input("x", shape)
    g.add_param("w", rng.normal(0, 0.5, (3, 3, cin // groups, cout)).astype(F32))
    g.add_param("b", rng.normal(0, 0.2, (cout,)).astype(F32))
    out = (BATCH, 4, 4, cout) if layout == "NHWC" else (BATCH, cout, 4, 4)
    add_node(g, "y", "Conv2D", ["x", "w", "b"], out, **conv_attrs(layout, groups=groups, act=act,
                                                               strides=(2, 2), **extra))
    g.outputs = ["y"]
    return g


def _unary_graph(op, shape=(BATCH, 5, 6), **attrs) -> Graph:
    g = Graph(op.lower())
    g.add_input("x", shape)
    add_node(g, "y", op, ["x"], shape, **attrs)
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
    add_node(g, "y", op, ["a", "b"], (BATCH, 3, 4, 5))
    g.outputs = ["y"]
    return g


def _matmul_graph(transpose_b=False, act="none") -> Graph:
    rng = np.random.default_rng(5)
    g = Graph("dense")
    g.add_input("x", (BATCH, 12))
    g.add_param("w", rng.normal(0, 0.4, (7, 12) if transpose_b else (12, 7)).astype(F32))
    g.add_param("b", rng.normal(0, 0.2, (7,)).astype(F32))
    add_node(g, "y", "MatMul", ["x", "w", "b"], (BATCH, 7), transpose_a=False, transpose_b=transpose_b, act=act)
    g.outputs = ["y"]
    return g


def _concat_graph() -> Graph:
    g = Graph("concat")
    g.add_input("a", (BATCH, 3, 3, 2))
    g.add_input("b", (BATCH, 3, 3, 5))
    add_node(g, "s", "Sigmoid", ["b"], (BATCH, 3, 3, 5))   # inputs at different scales
    add_node(g, "y", "Concat", ["a", "s"], (BATCH, 3, 3, 7), axis=-1)
    g.outputs = ["y"]
    return g


def _pool_graph(op, **attrs) -> Graph:
    g = Graph(op.lower())
    g.add_input("x", (BATCH, 7, 7, 3))
    add_node(g, "y", op, ["x"], (BATCH, 4, 4, 3), ksize=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
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
    add_node(g, "y", "Mean", ["x"], (BATCH, 3), axes=(1, 2), keepdims=False)
    g.outputs = ["y"]
    return g


def _reshape_graph(op, out_shape, in_shape=(BATCH, 5, 6), **attrs) -> Graph:
    """x -> Tanh (a quantized producer) -> op: the op runs on engine codes."""
    g = Graph(op.lower())
    g.add_input("x", in_shape)
    add_node(g, "t", "Tanh", ["x"], in_shape)
    add_node(g, "y", op, ["t"], out_shape, **attrs)
    g.outputs = ["y"]
    return g


def _scaled_relu6() -> Graph:
    g = Graph("relu6")
    g.add_input("x", (BATCH, 5, 6))
    g.add_param("k", np.full((1,), 5.0, F32))
    add_node(g, "s", "Mul", ["x", "k"], (BATCH, 5, 6))   # values beyond 6 to clamp
    add_node(g, "y", "Relu6", ["s"], (BATCH, 5, 6))
    g.outputs = ["y"]
    return g


AGREEMENT = {}


@pytest.mark.parametrize("case", sorted(OP_GRAPHS))
def test_op_matches_quantized_model(case, tmp_path):
    cfg = compile_config(tmp_path)
    q = quantized(OP_GRAPHS[case](), cfg)
    compiled = compile_graph(q, cfg)
    engines = engine_nodes(compiled)
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
    cfg = compile_config(tmp_path)
    compiled = compile_graph(quantized(_conv_graph(groups=4, cout=8), cfg), cfg)
    engine = Engine.from_bytes(engine_nodes(compiled)[0].attrs["engine"])
    cost = instruction_layer_cost(engine, engine.instructions[0])
    assert cost.kind == "depthwise" and cost.name == "y"
    assert cost.macs == 4 * 4 * 8 * 9 * 1 and cost.out_pixels == 16 and cost.kernel_area == 9
    assert cost.in_bytes == 7 * 7 * 4 and cost.out_bytes == 4 * 4 * 8
    assert cost.bits == 8 and cost.weight_bits == 8


def test_unlowerable_ops_stay_float(tmp_path):
    """Softmax on a non-last axis is quantized but not lowerable, Exp is not quantized:
    both stay float ops between engines, reading Dequant and feeding Quant."""
    g = Graph("split")
    g.add_input("x", (BATCH, 5, 6))
    add_node(g, "t", "Tanh", ["x"], (BATCH, 5, 6))
    add_node(g, "s", "Softmax", ["t"], (BATCH, 5, 6), axis=1)
    add_node(g, "e", "Exp", ["s"], (BATCH, 5, 6))
    add_node(g, "y", "Sigmoid", ["e"], (BATCH, 5, 6))
    g.outputs = ["y"]
    cfg = compile_config(tmp_path)
    q = quantized(g, cfg)
    compiled = compile_graph(q, cfg)
    assert len(engine_nodes(compiled)) == 2
    assert compiled.producer(compiled.node("s").inputs[0]).op == "Dequant"
    assert compiled.node("s").op == "Softmax" and compiled.node("e").op == "Exp"
    result = compare(q, compiled, cfg)
    assert result["y"][1] <= 1 and result["y"][0] >= 0.99



@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_cnn_one_engine_top1_matches_quantized_model(layout, tmp_path):
    cfg = compile_config(tmp_path)
    g = build_cnn(layout)
    q = quantized(g, cfg)
    compiled = compile_graph(q, cfg)
    assert [n.op for n in compiled.nodes] == ["Quant", "Engine", "Dequant"]
    engine = Engine.from_bytes(engine_nodes(compiled)[0].attrs["engine"])
    transposes = [i for i in engine.instructions if i.opcode == 13]
    assert (len(transposes) > 0) == (layout == "NCHW")
    qdq = emit_qdq(q, cfg)
    rng = np.random.default_rng(7)
    same, total, code_equal = 0, 0, []
    for _ in range(25):
        feeds = random_feeds(g, rng)
        got = run_compiled(compiled, feeds, backend="native")["prob"]
        want = evaluate(qdq, feeds)["prob"]
        same += int(np.sum(np.argmax(got, 1) == np.argmax(want, 1)))
        total += len(got)
        code_equal.append(np.mean(output_codes(q, "prob", got) == output_codes(q, "prob", want)))
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
    add_node(g, "conv1", "Conv2D", ["x", "w"], (2, 6, 6, 4), **conv_attrs(act="relu"))
    add_node(g, "op", "Opaque", ["conv1"], (2, 6, 6, 4), framework="tensorflow", type="Foo", payload=b"")
    add_node(g, "add", "Add", ["conv1", "op"], (2, 6, 6, 4))
    add_node(g, "y", "Sigmoid", ["add"], (2, 6, 6, 4))
    g.outputs = ["y"]
    cfg = compile_config(tmp_path)
    stats = {t: TensorStats(-2.0, 3.0, -2.0, 3.0, 1, 1) for t in calibration_tensors(g, cfg)}
    q = quantize(g, stats, cfg)
    compiled = compile_graph(q, cfg)
    compiled.validate()  # acyclic, every tensor produced once
    engines = engine_nodes(compiled)
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
    plain_cfg = compile_config(tmp_path)
    cfg = compile_config(tmp_path, remove_input_quant=True)
    q = quantized(g, plain_cfg)
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
    add_node(g, "e", "Exp", ["x"], (2, 3))
    add_node(g, "y", "Sigmoid", ["e"], (2, 3))
    g.outputs = ["y"]
    cfg = compile_config(tmp_path, remove_input_quant=True)
    q = quantized(g, cfg)
    with pytest.raises(ConfigError, match="'x' is not quantized"):
        compile_graph(q, cfg)
    assert not (tmp_path / "out" / "input_quant_nodes.txt").exists()


# ---------------------------------------------------------------- strip_qdq
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_strip_qdq_round_trip(layout, tmp_path):
    cfg = compile_config(tmp_path)
    q = quantized(build_cnn(layout), cfg)
    qdq = emit_qdq(q, cfg)
    # what a framework import gives: QParams only where a Quant node says them
    qdq.qparams = {n.outputs[0]: qdq.qparams[n.outputs[0]] for n in qdq.nodes if n.op == "Quant"}
    recovered = strip_qdq(qdq)
    assert [n.op for n in recovered.nodes] == [n.op for n in q.nodes]
    assert set(recovered.qparams) == set(q.qparams)
    before = [n.attrs["engine"] for n in engine_nodes(compile_graph(q, cfg))]
    after = [n.attrs["engine"] for n in engine_nodes(compile_graph(recovered, cfg))]
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
