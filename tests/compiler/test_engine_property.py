"""Property (docs/reliability.md "Engines"): the compiler never emits an engine its validator rejects.
Random small float graphs (chains of convolutions, pools, elementwise ops, tables, means,
dense layers with random shapes, strides, paddings, groups, activations, weight and data
scales over many decades, int8 or int16 layers) are calibrated, quantized and compiled;
compilation may refuse a graph only with a ratelnn error, and every engine it emits must
pass the native validator again from its bytes and run on both executors bit-equally."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import pytest

from ratelnn.compiler import compile_graph
from ratelnn.compiler.compile import CompileError
from ratelnn.errors import RatelError
from ratelnn.ir import Graph
from ratelnn.npu.engine import Engine, EngineError

from helpers.ir_graphs import add_node, conv_attrs, engine_nodes, quantized

F32 = np.float32
BATCH = 2


@st.composite
def graphs(draw):
    """A random chain on NHWC tensors, then optionally Mean or Flatten + MatMul."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31)))
    h = draw(st.integers(3, 8))
    c = draw(st.integers(1, 9))
    g = Graph("prop")
    g.add_input("x", (BATCH, h, h, c))
    cur, shape = "x", (BATCH, h, h, c)
    for k in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["conv", "pool", "add", "mul", "table", "relu"]))
        name = f"n{k}"
        if op == "conv":
            groups = draw(st.sampled_from([1, c])) if c > 1 else 1
            cout = groups * draw(st.integers(1, 3)) if groups > 1 else draw(st.integers(1, 12))
            kh, stride = min(draw(st.integers(1, 3)), shape[1]), draw(st.integers(1, 2))
            pad = draw(st.integers(0, kh - 1))
            out_h = (shape[1] + 2 * pad - kh) // stride + 1
            wscale = 10.0 ** draw(st.floats(-4, 2))
            g.add_param(f"{name}_w", (rng.normal(0, 1, (kh, kh, c // groups, cout)) * wscale).astype(F32))
            g.add_param(f"{name}_b", (rng.normal(0, 1, (cout,)) * wscale).astype(F32))
            shape = (BATCH, out_h, out_h, cout)
            act = draw(st.sampled_from(["none", "relu", "relu6"]))
            add_node(g, name, "Conv2D", [cur, f"{name}_w", f"{name}_b"], shape,
                     **conv_attrs(pads=(pad,) * 4, groups=groups, act=act, strides=(stride, stride)))
            c = cout
        elif op == "pool":
            k_ = min(draw(st.integers(1, 3)), shape[1])
            out_h = (shape[1] - k_) // k_ + 1
            shape = (BATCH, out_h, out_h, c)
            add_node(g, name, draw(st.sampled_from(["MaxPool", "AvgPool"])), [cur], shape, ksize=(k_, k_),
                     strides=(k_, k_), pads=(0, 0, 0, 0), layout="NHWC", count_include_pad=False)
        elif op in ("add", "mul"):
            g.add_param(f"{name}_k", (rng.normal(0, 1, (c,)) * 10.0 ** draw(st.floats(-3, 3))).astype(F32))
            add_node(g, name, "Add" if op == "add" else "Mul", [cur, f"{name}_k"], shape)
        elif op == "table":
            add_node(g, name, draw(st.sampled_from(["Sigmoid", "Tanh"])), [cur], shape)
        else:
            add_node(g, name, "Relu", [cur], shape)
        cur = name
    tail = draw(st.sampled_from(["none", "mean", "dense", "softmax"]))
    if tail == "mean":
        add_node(g, "y", "Mean", [cur], (BATCH, c), axes=(1, 2), keepdims=False)
        cur = "y"
    elif tail in ("dense", "softmax"):
        flat = shape[1] * shape[2] * shape[3]
        add_node(g, "flat", "Flatten", [cur], (BATCH, flat))
        units = draw(st.integers(1, 10))
        g.add_param("fc_w", rng.normal(0, 10.0 ** draw(st.floats(-3, 1)), (flat, units)).astype(F32))
        g.add_param("fc_b", rng.normal(0, 1, (units,)).astype(F32))
        add_node(g, "fc", "MatMul", ["flat", "fc_w", "fc_b"], (BATCH, units), transpose_a=False,
                 transpose_b=False, act="none")
        cur = "fc"
        if tail == "softmax":
            add_node(g, "y", "Softmax", [cur], (BATCH, units), axis=-1)
            cur = "y"
    g.outputs = [cur]
    int16 = [n.name for n in g.nodes if draw(st.booleans()) and draw(st.booleans())]
    return g, int16, float(10.0 ** draw(st.floats(-3, 3)))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(graphs())
def test_compiler_emits_only_engines_its_validator_accepts(tmp_path_factory, case):
    g, int16, data_scale = case
    cfg = {"output_dir": str(tmp_path_factory.mktemp("prop") / "out"),
           "layer_configs": [{"layer_name": n, "data_type": "int16"} for n in int16]}
    q = quantized(g, cfg, data_scale=data_scale)
    try:
        compiled = compile_graph(q, cfg)
    except EngineError as e:  # the property: never an engine the validator rejects
        raise AssertionError(f"the compiler built an engine its validator rejects: {e}") from e
    except RatelError:
        return  # a clear refusal is allowed
    rng = np.random.default_rng(0)
    for node in engine_nodes(compiled):
        eng = Engine.from_bytes(node.attrs["engine"], label=node.attrs["engine_name"])
        inputs = [rng.integers(np.iinfo(t.dtype).min, np.iinfo(t.dtype).max + 1, (3,) + t.shape[1:]).astype(t.dtype)
                  for t in eng.inputs]
        for r, n in zip(eng.run(inputs, backend="reference"), eng.run(inputs, backend="native")):
            np.testing.assert_array_equal(r, n)


def test_compile_time_limits_name_the_tensor(tmp_path):
    g = Graph("limits")
    g.add_input("x", (BATCH, 6, 6, 3))
    add_node(g, "y", "Tanh", ["x"], (BATCH, 6, 6, 3))
    g.outputs = ["y"]
    cfg = {"output_dir": str(tmp_path / "out")}
    q = quantized(g, cfg)
    with pytest.raises(CompileError, match=r"tensor '\S+' \[2,6,6,3\] has more than 100 elements at batch 2 "
                                            r"\(max_tensor_elements, the config key\); raise the config key"):
        compile_graph(q, {**cfg, "max_tensor_elements": 100})
    with pytest.raises(CompileError, match=r"activation tensors take more than 300 bytes at batch 2 "
                                            r"\(max_total_bytes, the config key\)"):
        compile_graph(q, {**cfg, "max_total_bytes": 300})
    assert engine_nodes(compile_graph(q, {**cfg, "max_total_bytes": 432}))
