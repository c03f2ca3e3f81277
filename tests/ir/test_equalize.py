"""Cross-layer equalization (ratelnn/ir/equalize.py) on hand-built graphs: the float outputs
stay the same, the weight ranges of each pair become equal, and ReLU6 pairs are left alone."""
import numpy as np
import pytest

from helpers.ir_graphs import add_node, conv_attrs
from ratelnn.ir import Graph
from ratelnn.ir.equalize import equalize, find_pairs
from ratelnn.ir.evaluate import evaluate


def _imbalanced(rng, *shape, axis=-1):
    """Normal weights whose slices along ``axis`` differ by up to 1000x."""
    w = rng.standard_normal(shape).astype(np.float32)
    f = np.exp(rng.uniform(-3.5, 3.5, shape[axis])).astype(np.float32)
    return w * f.reshape([-1 if i == (axis % len(shape)) else 1 for i in range(len(shape))])


def _dwsep(rng, act="relu", between=(), pw_pads=(0, 0, 0, 0), layout="NHWC", first_act="relu"):
    """conv3x3 -> depthwise3x3 -> [between] -> pointwise1x1 -> dense; channels imbalanced."""
    g = Graph()
    shape = (2, 6, 6, 3) if layout == "NHWC" else (2, 3, 6, 6)
    g.add_input("x", shape)
    c = 8
    out = lambda s: s if layout == "NHWC" else (s[0], s[3], s[1], s[2])
    g.add_param("w0", _imbalanced(rng, 3, 3, 3, c)); g.add_param("b0", rng.standard_normal(c).astype(np.float32))
    add_node(g, "conv", "Conv2D", ["x", "w0", "b0"], out((2, 6, 6, c)), **conv_attrs(layout, act=first_act))
    g.add_param("w1", _imbalanced(rng, 3, 3, 1, c)); g.add_param("b1", 5 * rng.standard_normal(c).astype(np.float32))
    add_node(g, "dw", "Conv2D", ["conv", "w1", "b1"], out((2, 6, 6, c)), **conv_attrs(layout, groups=c, act=act,
                                                                                         act_alpha=0.1))
    t, hw = "dw", 6
    for op in between:
        if op == "MaxPool":
            hw //= 2
            add_node(g, "pool", "MaxPool", [t], out((2, hw, hw, c)), ksize=(2, 2), strides=(2, 2),
                     pads=(0, 0, 0, 0), layout=layout)
            t = "pool"
        else:
            pads = [(0, 0), (1, 1), (1, 1), (0, 0)] if layout == "NHWC" else [(0, 0), (0, 0), (1, 1), (1, 1)]
            hw += 2
            add_node(g, "pad", "Pad", [t], out((2, hw, hw, c)), pads=pads, value=0.0)
            t = "pad"
    g.add_param("w2", _imbalanced(rng, 1, 1, c, 16, axis=2))
    g.add_param("b2", rng.standard_normal(16).astype(np.float32))
    oh = hw + pw_pads[0] + pw_pads[1]
    add_node(g, "pw", "Conv2D", [t, "w2", "b2"], out((2, oh, oh, 16)), **conv_attrs(layout, pads=pw_pads, act="relu"))
    add_node(g, "flat", "Flatten", ["pw"], (2, oh * oh * 16))
    g.add_param("w3", _imbalanced(rng, oh * oh * 16, 5, axis=0))
    add_node(g, "fc", "MatMul", ["flat", "w3"], (2, 5), act="none")
    g.outputs = ["fc"]
    return g


def _check_exact(rng, g, pairs_expected):
    feeds = {"x": rng.standard_normal(g.shape("x")).astype(np.float32)}
    before = evaluate(g, feeds)["fc"]
    eq = g.copy()
    assert equalize(eq) == pairs_expected
    after = evaluate(eq, feeds)["fc"]
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-4 * np.abs(before).max())
    return eq


@pytest.mark.parametrize("act", ["relu", "leaky_relu", "none"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_float_outputs_unchanged_and_ranges_equal(act, layout, rng):
    eq = _check_exact(rng, _dwsep(rng, act, layout=layout), 2)   # conv->dw, dw->pw
    dw, pw = eq.node("dw"), eq.node("pw")
    r1 = np.abs(eq.params[dw.inputs[1]]).max(axis=(0, 1, 2))
    r2 = np.abs(eq.params[pw.inputs[1]]).max(axis=(0, 1, 3))
    # the dw range is also balanced against the conv before it: after the sweeps both pairs agree
    np.testing.assert_allclose(r1, r2, rtol=0.05)
    if act == "none":   # high-bias absorption: the dw bias moved into the (unpadded) pointwise
        assert not np.any(eq.params[dw.inputs[2]])
    else:
        assert np.any(eq.params[dw.inputs[2]])


@pytest.mark.parametrize("between", [("MaxPool",), ("Pad",), ("MaxPool", "Pad")])
def test_through_pool_and_zero_pad(between, rng):
    eq = _check_exact(rng, _dwsep(rng, "relu", between), 2)
    assert [p.consumer.name for p in find_pairs(eq)] == ["dw", "pw"]


def test_bias_not_absorbed_into_padded_consumer(rng):
    eq = _check_exact(rng, _dwsep(rng, "none", pw_pads=(1, 1, 1, 1)), 2)
    assert np.any(eq.params[eq.node("dw").inputs[2]])


def test_relu6_pairs_left_alone(rng):
    g = _dwsep(rng, "relu6")
    assert [(p.producer.name, p.consumer.name) for p in find_pairs(g)] == [("conv", "dw")]
    _check_exact(rng, g, 1)


@pytest.mark.parametrize("act", ["relu", "none"])
def test_dense_pairs(act, rng):
    g = Graph()
    g.add_input("x", (4, 6))
    g.add_param("w1", _imbalanced(rng, 6, 10)); g.add_param("b1", 10 * rng.standard_normal(10).astype(np.float32))
    add_node(g, "d1", "MatMul", ["x", "w1", "b1"], (4, 10), act=act)
    g.add_param("w2", _imbalanced(rng, 5, 10, axis=1))   # transpose_b: [M, K], input channels on axis 1
    add_node(g, "fc", "MatMul", ["d1", "w2"], (4, 5), act="none", transpose_b=True)
    g.outputs = ["fc"]
    eq = _check_exact(rng, g, 1)
    r1 = np.abs(eq.params[eq.node("d1").inputs[1]]).max(axis=0)
    np.testing.assert_allclose(r1, np.abs(eq.params[eq.node("fc").inputs[1]]).max(axis=0), rtol=1e-5)
    assert np.any(eq.params[eq.node("d1").inputs[2]]) == (act == "relu")
