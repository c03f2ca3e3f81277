"""The numpy evaluator against direct loop definitions, and the IR passes on hand-built
graphs: each pass must keep the outputs and the graph output names."""
import numpy as np
import pytest

from ratelnn.ir import Graph, Node, TensorInfo
from ratelnn.ir.evaluate import EvaluationError, evaluate
from ratelnn.ir.passes import (fold_batchnorm, fold_constants, fuse_bias_activation, remove_identity,
                               run_default_passes)
from ratelnn.ir import arith

# the numpy evaluator only; 'tensorflow' is an Opaque node's attribute (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _conv_loops(x, w, strides, dilations, pads, groups):
    """Direct NHWC grouped convolution, one output element at a time."""
    t, b, l, r = pads
    x = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))
    kh, kw, cin_g, cout = w.shape
    sh, sw = strides
    dh, dw = dilations
    n, h, wd, _ = x.shape
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (wd - (kw - 1) * dw - 1) // sw + 1
    cout_g = cout // groups
    y = np.zeros((n, oh, ow, cout), np.float64)
    for o in range(cout):
        g = o // cout_g
        for i in range(oh):
            for j in range(ow):
                patch = x[:, i * sh: i * sh + (kh - 1) * dh + 1: dh, j * sw: j * sw + (kw - 1) * dw + 1: dw,
                          g * cin_g:(g + 1) * cin_g]
                y[:, i, j, o] = np.einsum("nabc,abc->n", patch, w[..., o])
    return y


def _single_op_graph(op, x_shape, attrs, params=()):
    g = Graph()
    g.add_input("x", x_shape)
    names = [g.add_param(f"p{i}", p) for i, p in enumerate(params)]
    g.add_node(Node("n", op, ["x"] + names, ["y"], attrs), [TensorInfo(None)])
    g.outputs = ["y"]
    return g


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("groups,strides,dilations,pads", [
    (1, (1, 1), (1, 1), (1, 1, 1, 1)),
    (2, (2, 1), (1, 2), (0, 2, 1, 0)),
    (4, (2, 2), (1, 1), (1, 2, 1, 2)),  # depthwise: groups == Cin
])
def test_conv2d_matches_direct_loops(layout, groups, strides, dilations, pads, rng):
    x = _rand(rng, 2, 7, 6, 4)
    w = _rand(rng, 3, 2, 4 // groups, 8)
    b = _rand(rng, 8)
    attrs = {"strides": strides, "dilations": dilations, "pads": pads, "groups": groups,
             "layout": layout, "act": "relu6"}
    feed = x.transpose(0, 3, 1, 2) if layout == "NCHW" else x
    got = evaluate(_single_op_graph("Conv2D", feed.shape, attrs, [w, b]), {"x": feed})["y"]
    if layout == "NCHW":
        got = got.transpose(0, 2, 3, 1)
    want = np.clip(_conv_loops(x, w, strides, dilations, pads, groups) + b, 0, 6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_pools_ignore_padding_cells(rng):
    x = _rand(rng, 1, 4, 4, 2) - 5.0  # all negative: a zero padding cell must never win the max
    attrs = {"ksize": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "layout": "NHWC"}
    mx = evaluate(_single_op_graph("MaxPool", x.shape, attrs), {"x": x})["y"]
    assert mx[0, 0, 0, 0] == x[0, :2, :2, 0].max()
    avg = evaluate(_single_op_graph("AvgPool", x.shape, dict(attrs, count_include_pad=False)), {"x": x})["y"]
    np.testing.assert_allclose(avg[0, 0, 0], x[0, :2, :2].mean(axis=(0, 1)), rtol=1e-6)
    avg_incl = evaluate(_single_op_graph("AvgPool", x.shape, dict(attrs, count_include_pad=True)), {"x": x})["y"]
    np.testing.assert_allclose(avg_incl[0, 0, 0], x[0, :2, :2].sum(axis=(0, 1)) / 9, rtol=1e-6)


def test_quant_dequant_follow_reference_arithmetic_and_opaque_is_refused(rng):
    x = _rand(rng, 2, 3, 4)
    q = evaluate(_single_op_graph("Quant", x.shape, {"dtype": "int8", "scales": [0.01, 0.02, 0.03, 0.04],
                                                      "axis": -1}), {"x": x})["y"]
    np.testing.assert_array_equal(q, arith.quantize(x, [0.01, 0.02, 0.03, 0.04], "int8", -1))
    d = evaluate(_single_op_graph("Dequant", q.shape, {"scale": 0.5}), {"x": q})["y"]
    np.testing.assert_array_equal(d, q.astype(np.float32) * 0.5)
    opaque = _single_op_graph("Opaque", x.shape, {"framework": "tensorflow", "type": "Cumsum", "payload": b""})
    with pytest.raises(EvaluationError, match="Opaque tensorflow op 'Cumsum'"):
        evaluate(opaque, {"x": x})


def _conv_bn_relu_graph(rng, layout="NHWC"):
    """x -> Conv2D -> Identity -> BatchNorm -> Relu -> Identity(named 'out')."""
    g = Graph()
    shape = (1, 5, 5, 3) if layout == "NHWC" else (1, 3, 5, 5)
    out_shape = (1, 5, 5, 4) if layout == "NHWC" else (1, 4, 5, 5)
    g.add_input("x", shape)
    g.add_param("w", _rand(rng, 3, 3, 3, 4))
    for name in ("gamma", "beta", "mean"):
        g.add_param(name, _rand(rng, 4))
    g.add_param("var", np.abs(_rand(rng, 4)) + 0.1)
    info = [TensorInfo(out_shape)]
    g.add_node(Node("conv", "Conv2D", ["x", "w"], ["conv"],
                    {"strides": (1, 1), "pads": (1, 1, 1, 1), "layout": layout, "act": "none"}), info)
    g.add_node(Node("id1", "Identity", ["conv"], ["id1"]), info)
    g.add_node(Node("bn", "BatchNorm", ["id1", "gamma", "beta", "mean", "var"], ["bn"],
                    {"eps": 1e-3, "axis": 3 if layout == "NHWC" else 1}), info)
    g.add_node(Node("relu", "Relu", ["bn"], ["relu"]), info)
    g.add_node(Node("out", "Identity", ["relu"], ["out"]), info)
    g.outputs = ["out"]
    return g


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_default_passes_fold_conv_bn_relu_into_one_node(layout, rng):
    g = _conv_bn_relu_graph(rng, layout)
    x = _rand(rng, *g.shape("x"))
    want = evaluate(g, {"x": x})["out"]
    run_default_passes(g)
    assert [n.op for n in g.nodes] == ["Conv2D"]
    conv = g.nodes[0]
    assert conv.attrs["act"] == "relu" and len(conv.inputs) == 3
    assert g.outputs == ["out"] and conv.outputs == ["out"]
    np.testing.assert_allclose(evaluate(g, {"x": x})["out"], want, rtol=1e-5, atol=1e-5)


def test_batchnorm_without_conv_becomes_mul_add(rng):
    g = _single_op_graph("BatchNorm", (2, 3, 4, 4), {"eps": 1e-3, "axis": 1},
                         [_rand(rng, 3), _rand(rng, 3), _rand(rng, 3), np.abs(_rand(rng, 3)) + 0.5])
    g.tensors["y"] = TensorInfo((2, 3, 4, 4))
    x = _rand(rng, 2, 3, 4, 4)
    want = evaluate(g, {"x": x})["y"]
    fold_batchnorm(g)
    assert [n.op for n in g.nodes] == ["Mul", "Add"] and g.nodes[-1].outputs == ["y"]
    np.testing.assert_allclose(evaluate(g, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)


def _dense_graph(rng, transpose_b=False):
    """MatMul -> BiasAdd -> Mul(per-channel) -> Sub(per-channel) -> LeakyRelu, Keras-3 style."""
    g = Graph()
    g.add_input("x", (2, 6))
    w = _rand(rng, 5, 6) if transpose_b else _rand(rng, 6, 5)
    for name, value in (("w", w), ("b", _rand(rng, 5)), ("s", _rand(rng, 1, 5)), ("t", _rand(rng, 5))):
        g.add_param(name, value)
    info = [TensorInfo((2, 5))]
    g.add_node(Node("mm", "MatMul", ["x", "w"], ["mm"], {"transpose_b": transpose_b}), info)
    g.add_node(Node("ba", "BiasAdd", ["mm", "b"], ["ba"]), info)
    g.add_node(Node("mul", "Mul", ["s", "ba"], ["mul"]), info)
    g.add_node(Node("sub", "Sub", ["mul", "t"], ["sub"]), info)
    g.add_node(Node("act", "LeakyRelu", ["sub"], ["act"], {"alpha": 0.3}), info)
    g.outputs = ["act"]
    return g


@pytest.mark.parametrize("transpose_b", [False, True])
def test_decomposed_batchnorm_after_matmul_is_folded(transpose_b, rng):
    g = _dense_graph(rng, transpose_b)
    x = _rand(rng, 2, 6)
    want = evaluate(g, {"x": x})["act"]
    run_default_passes(g)
    assert [n.op for n in g.nodes] == ["MatMul"]
    assert g.nodes[0].attrs["act"] == "leaky_relu" and g.nodes[0].attrs["act_alpha"] == 0.3
    np.testing.assert_allclose(evaluate(g, {"x": x})["act"], want, rtol=1e-5, atol=1e-5)


def test_no_folding_when_conv_output_has_another_reader_or_is_an_output(rng):
    g = _dense_graph(rng)
    g.outputs = ["act", "ba"]  # the biased matmul output must stay observable
    x = _rand(rng, 2, 6)
    want = evaluate(g, {"x": x})
    run_default_passes(g)
    assert [n.op for n in g.nodes] == ["MatMul", "Mul", "Sub", "LeakyRelu"]
    got = evaluate(g, {"x": x})
    for name in ("act", "ba"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_fold_constants_and_remove_identity_keep_output_name():
    g = Graph()
    g.add_input("x", (3,))
    g.add_param("a", np.float32([1, 2, 3]))
    g.add_node(Node("sq", "Square", ["a"], ["sq"]), [TensorInfo((3,))])
    g.add_node(Node("add", "Add", ["x", "sq"], ["add"]), [TensorInfo((3,))])
    g.add_node(Node("Identity", "Identity", ["add"], ["Identity"]), [TensorInfo((3,))])
    g.outputs = ["Identity"]
    remove_identity(g)
    fold_constants(g)
    assert [n.op for n in g.nodes] == ["Add"] and g.nodes[0].outputs == ["Identity"]
    np.testing.assert_array_equal(g.params["sq"], [1, 4, 9])
    np.testing.assert_array_equal(evaluate(g, {"x": np.zeros(3, np.float32)})["Identity"], [1, 4, 9])


def test_identity_of_graph_input_is_kept_as_output():
    g = Graph()
    g.add_input("x", (2,))
    g.add_node(Node("y", "Identity", ["x"], ["y"]), [TensorInfo((2,))])
    g.outputs = ["y"]
    remove_identity(g)
    assert [n.op for n in g.nodes] == ["Identity"] and g.outputs == ["y"]


def test_fuse_bias_activation_only_fuses_into_unfused_conv(rng):
    g = _conv_bn_relu_graph(rng)
    g.add_node(Node("relu2", "Relu6", ["out"], ["relu2"]), [TensorInfo((1, 5, 5, 4))])
    g.outputs = ["relu2"]
    x = _rand(rng, 1, 5, 5, 3)
    want = evaluate(g, {"x": x})["relu2"]
    run_default_passes(g)
    assert [n.op for n in g.nodes] == ["Conv2D", "Relu6"]
    np.testing.assert_allclose(evaluate(g, {"x": x})["relu2"], want, rtol=1e-5, atol=1e-5)
    fuse_bias_activation(g)
    assert [n.op for n in g.nodes] == ["Conv2D", "Relu6"]
