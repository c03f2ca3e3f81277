"""IR graph helpers for compiler tests: building small graphs, calibrating them by
evaluation, quantizing, and comparing a compiled graph (reference and native executors)
with its quantized model."""
from __future__ import annotations

import numpy as np

from ratelnn.calibration.stats import TensorStats
from ratelnn.compiler import run_compiled
from ratelnn.ir import Graph, Node, TensorInfo, arith
from ratelnn.ir.evaluate import evaluate
from ratelnn.quantization.emit import emit_qdq
from ratelnn.quantization.policy import calibration_tensors
from ratelnn.quantization.quantizer import quantize

F32 = np.float32


def add_node(g: Graph, name: str, op: str, inputs, out_shape, **attrs) -> str:
    g.add_node(Node(name, op, list(inputs), [name], attrs), [TensorInfo(tuple(out_shape))])
    return name


def conv_attrs(layout="NHWC", pads=(1, 1, 1, 1), groups=1, act="none", strides=(1, 1), **extra):
    return dict(strides=strides, dilations=(1, 1), pads=pads, groups=groups, layout=layout, act=act, **extra)


def random_feeds(g: Graph, rng, scale: float = 1.0) -> dict:
    return {t: (rng.normal(0, 1, g.shape(t)) * scale).astype(F32) for t in g.inputs}


def evaluated_stats(g: Graph, config, batches) -> dict:
    """Absolute min/max (EMA = absolute) of the calibration tensors over ``batches``."""
    lo, hi = {}, {}
    for feeds in batches:
        for t, v in evaluate(g, feeds, calibration_tensors(g, config)).items():
            lo[t], hi[t] = min(lo.get(t, np.inf), float(v.min())), max(hi.get(t, -np.inf), float(v.max()))
    return {t: TensorStats(lo[t], hi[t], lo[t], hi[t], len(batches), 1) for t in lo}


def quantized(g: Graph, config, seed=0, data_scale: float = 1.0) -> Graph:
    g.validate()
    rng = np.random.default_rng(seed)
    return quantize(g, evaluated_stats(g, config, [random_feeds(g, rng, data_scale) for _ in range(4)]), config)


def compile_config(tmp_path, **extra):
    return {"output_dir": str(tmp_path / "out"), **extra}


def engine_nodes(compiled: Graph):
    return [n for n in compiled.nodes if n.op == "Engine"]


def output_codes(graph_q: Graph, t: str, value: np.ndarray) -> np.ndarray:
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
        feeds = random_feeds(q, rng)
        ref = run_compiled(compiled, feeds, backend="reference")
        nat = run_compiled(compiled, feeds, backend="native")
        want = evaluate(qdq, feeds)
        for t in q.outputs:
            np.testing.assert_array_equal(ref[t], nat[t])
            diffs[t].append((output_codes(q, t, ref[t]) - output_codes(q, t, want[t])).ravel())
    result = {}
    for t, d in diffs.items():
        d = np.concatenate(d)
        result[t] = (float(np.mean(d == 0)), int(np.abs(d).max()))
    return result


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
    add_node(g, "conv1", "Conv2D", ["x", "w1", "b1"], act_shape(8, 8), **conv_attrs(layout, act="relu"))
    add_node(g, "dw", "Conv2D", ["conv1", "wd", "bd"], act_shape(8, 8), **conv_attrs(layout, groups=8, act="relu6"))
    add_node(g, "pw", "Conv2D", ["dw", "wp", "bp"], act_shape(8, 8), **conv_attrs(layout, pads=(0, 0, 0, 0)))
    add_node(g, "res", "Add", ["pw", "conv1"], act_shape(8, 8))
    add_node(g, "cat", "Concat", ["res", "conv1"], act_shape(8, 16), axis=caxis)
    add_node(g, "pool", "AvgPool", ["cat"], act_shape(4, 16), ksize=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0),
          layout=layout, count_include_pad=False)
    add_node(g, "gap", "Mean", ["pool"], (8, 16), axes=(2, 3) if nchw else (1, 2), keepdims=False)
    add_node(g, "mp", "MaxPool", ["pool"], act_shape(2, 16), ksize=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0),
          layout=layout)
    add_node(g, "flat", "Flatten", ["mp"], (8, 64))
    add_node(g, "feat", "Concat", ["gap", "flat"], (8, 80), axis=1)
    add_node(g, "logits", "MatMul", ["feat", "wf", "bf"], (8, 10), transpose_a=False, transpose_b=False, act="none")
    add_node(g, "prob", "Softmax", ["logits"], (8, 10), axis=-1)
    g.outputs = ["prob"]
    return g
