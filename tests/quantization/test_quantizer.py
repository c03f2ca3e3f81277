"""Quantization policy, thresholds, quantizer and the calibration / QDQ emitters, on
hand-built IR graphs with statistics computed by evaluating the float graph."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from ratelnn.calibration.histogram import AbsHistogram
from ratelnn.errors import CalibrationError
from ratelnn.ir import Graph, Node, TensorInfo
from ratelnn.ir.evaluate import evaluate, evaluate_node
from ratelnn.ir import arith
from ratelnn.quantization.emit import emit_calibration, emit_qdq
from ratelnn.quantization.policy import calibration_tensors, make_plan
from ratelnn.quantization.quantizer import (MIN_SCALE, quantize, quantize_bias,
                                            quantize_weight)
from ratelnn.quantization.thresholds import threshold_for


@dataclasses.dataclass
class Stats:
    """Statistics with the fields of ratelnn.calibration.stats.TensorStats."""

    min: float
    max: float
    ema_min: float
    ema_max: float
    batches: int = 1
    count: int = 1
    histogram: object = None


def _config(tmp_path, **extra):
    cfg = {"input_nodes": ["x"], "output_nodes": ["prob", "logits"],
           "input_shapes": [[2, 8, 8, 3]], "output_dir": str(tmp_path / "stats")}
    cfg.update(extra)
    return cfg


def _node(g: Graph, name: str, op: str, inputs, out_shape, **attrs) -> str:
    g.add_node(Node(name, op, list(inputs), [name], attrs), [TensorInfo(tuple(out_shape))])
    return name


def build_model(seed: int = 0) -> Graph:
    """conv+bias+relu -> conv -> residual Add -> Concat -> AvgPool -> Mean -> Reshape
    -> MatMul -> Softmax, NHWC, batch 2."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    g = Graph("toy")
    g.add_input("x", (2, 8, 8, 3))
    g.add_param("w1", rng.normal(0, 0.4, (3, 3, 3, 4)).astype(f32))
    g.add_param("b1", rng.normal(0, 0.1, (4,)).astype(f32))
    g.add_param("w2", rng.normal(0, 0.4, (1, 1, 4, 4)).astype(f32))
    g.add_param("b2", rng.normal(0, 0.1, (4,)).astype(f32))
    g.add_param("w3", rng.normal(0, 0.5, (8, 5)).astype(f32))
    g.add_param("b3", rng.normal(0, 0.1, (5,)).astype(f32))
    conv = dict(strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1, layout="NHWC")
    _node(g, "conv1", "Conv2D", ["x", "w1", "b1"], (2, 8, 8, 4), act="relu", **conv)
    _node(g, "conv2", "Conv2D", ["conv1", "w2", "b2"], (2, 8, 8, 4), act="none",
          **dict(conv, pads=(0, 0, 0, 0)))
    _node(g, "add", "Add", ["conv2", "conv1"], (2, 8, 8, 4))
    _node(g, "concat", "Concat", ["add", "conv1"], (2, 8, 8, 8), axis=3)
    _node(g, "pool", "AvgPool", ["concat"], (2, 4, 4, 8), ksize=(2, 2), strides=(2, 2),
          pads=(0, 0, 0, 0), layout="NHWC", count_include_pad=False)
    _node(g, "mean", "Mean", ["pool"], (2, 1, 1, 8), axes=(1, 2), keepdims=True)
    _node(g, "flat", "Reshape", ["mean"], (2, 8), shape=(2, 8))
    _node(g, "logits", "MatMul", ["flat", "w3", "b3"], (2, 5), transpose_a=False,
          transpose_b=False, act="none")
    _node(g, "prob", "Softmax", ["logits"], (2, 5), axis=-1)
    g.outputs = ["prob", "logits"]
    g.validate()
    return g


def collect_stats(graph: Graph, tensors, batches, decay: float = 0.9, histograms: bool = False):
    """Absolute and EMA min/max of ``tensors`` over ``batches`` (list of feed dicts); with
    ``histograms`` also the histogram of |x| over all of them."""
    acc = {}
    for feeds in batches:
        values = evaluate(graph, feeds, tensors)
        for t, v in values.items():
            lo, hi = float(v.min()), float(v.max())
            hist = AbsHistogram.of_values(v) if histograms else None
            if t not in acc:
                acc[t] = Stats(lo, hi, lo, hi, 1, v.size, hist)
                continue
            s = acc[t]
            if histograms:
                s.histogram = s.histogram.merged(hist)
            s.min, s.max = min(s.min, lo), max(s.max, hi)
            s.ema_min = decay * s.ema_min + (1 - decay) * lo
            s.ema_max = decay * s.ema_max + (1 - decay) * hi
            s.batches += 1
            s.count += v.size
    return acc


def random_batches(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (2, 8, 8, 3)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def model():
    g = build_model()
    cfg = {"output_dir": "unused"}
    stats = collect_stats(g, calibration_tensors(g, cfg), random_batches(4))
    return g, stats


# ---------------------------------------------------------------- policy
def test_calibration_tensors_skip_scale_preserving_outputs():
    g = build_model()
    assert calibration_tensors(g, {}) == ["x", "conv1", "conv2", "add", "concat", "pool",
                                          "mean", "logits", "prob"]
    plan = make_plan(g, {})
    assert plan.shared == {"flat": "mean"}
    assert plan.border == {"x"}
    assert sorted((u.param, u.role) for u in plan.param_uses) == [
        ("b1", "bias"), ("b2", "bias"), ("b3", "bias"),
        ("w1", "weight"), ("w2", "weight"), ("w3", "weight")]


def test_layer_config_fp32_keeps_op_float(model, tmp_path):
    g, stats = model
    cfg = _config(tmp_path, layer_configs=[{"op_type": "Softmax", "data_type": "fp32"},
                                           {"layer_name": "conv2", "data_type": "int16"}])
    assert "prob" not in calibration_tensors(g, cfg)
    q = quantize(g, stats, cfg)
    assert "prob" not in q.qparams
    assert q.qparams["conv2"].dtype == "int16"
    qdq = emit_qdq(q, cfg)
    softmax = [n for n in qdq.nodes if n.op == "Softmax"][0]
    assert qdq.producer(softmax.inputs[0]).op == "Dequant"   # reads the dequantized logits
    assert qdq.producer("prob") is softmax                    # its output stays float


def test_layer_config_subgraph_fp32_makes_border_points():
    g = build_model()
    cfg = {"layer_configs": [{"start_tensor_names": ["conv1"], "end_tensor_names": ["add"],
                              "data_type": "fp32"},
                             {"layer_name": "add", "data_type": "int8"}]}
    plan = make_plan(g, cfg)
    assert "conv2" not in plan.quantized_nodes and "add" in plan.quantized_nodes  # layer wins
    cfg["layer_configs"].pop()
    plan = make_plan(g, cfg)
    assert {"conv2", "add"}.isdisjoint(plan.quantized_nodes)
    assert plan.anchors == ["x", "conv1", "add", "concat", "pool", "mean", "logits", "prob"]
    assert plan.border == {"x", "add"}


# ---------------------------------------------------------------- thresholds / qparams
def test_naive_threshold_uses_ema_only_when_enabled():
    s = Stats(min=-3.0, max=2.0, ema_min=-1.5, ema_max=2.5)
    assert threshold_for("t", s, {"enable_EMA": True}) == 2.5
    assert threshold_for("t", s, {"enable_EMA": False}) == 3.0
    with pytest.raises(CalibrationError, match="histogram"):   # kld needs the histogram
        threshold_for("t", s, {"quantize_algorithm": "kld"})
    assert threshold_for("t", s, {"quantize_algorithm": "naive_kld_mix", "kld_nodes": ["u"]}) == 2.5


def test_activation_qparams_dtypes_and_scales(model, tmp_path):
    g, stats = model
    q = quantize(g, stats, _config(tmp_path))
    assert {t: q.qparams[t].dtype for t in ["x", "conv1", "conv2", "add", "prob"]} == {
        "x": "int8", "conv1": "uint8", "conv2": "int8", "add": "int8", "prob": "uint8"}
    for t in ["x", "conv1", "conv2"]:
        s, qp = stats[t], q.qparams[t]
        qmax = 255 if qp.dtype == "uint8" else 127
        expected = np.float32(max(abs(s.ema_min), abs(s.ema_max)) / qmax)
        assert qp.scale == float(expected) and qp.axis is None
    # the model's outputs take their whole calibrated range, not the EMA extremes
    assert q.qparams["prob"].scale == float(np.float32(stats["prob"].max / 255))
    s = stats["logits"]
    assert q.qparams["logits"].scale == float(np.float32(max(-s.min, s.max) / 127))
    assert q.qparams["flat"].scale == q.qparams["mean"].scale
    q_abs = quantize(g, stats, _config(tmp_path, enable_EMA=False))
    assert q_abs.qparams["x"].scale == float(np.float32(max(-stats["x"].min, stats["x"].max) / 127))
    # the graph given is not modified
    assert g.params["w1"].dtype == np.float32 and not g.qparams


def test_model_outputs_take_their_whole_range_under_every_method(model, tmp_path):
    g = model[0]
    stats = collect_stats(g, calibration_tensors(g, {}), random_batches(4), histograms=True)
    assert g.outputs == ["prob", "logits"]
    for method in ("naive", "kld", "percentile", "mse"):
        on = quantize(g, stats, _config(tmp_path, quantize_algorithm=method, auto_int16=False))
        off = quantize(g, stats, _config(tmp_path, quantize_algorithm=method, auto_int16=False,
                                         full_range_outputs=False))
        for t, qmax in (("prob", 255), ("logits", 127)):
            s = stats[t]
            assert on.qparams[t].scale == float(np.float32(max(-s.min, s.max) / qmax)), (method, t)
            clipped = threshold_for(t, s, {"quantize_algorithm": method}, dtype=on.qparams[t].dtype)
            assert off.qparams[t].scale == float(np.float32(clipped / qmax)), (method, t)
        assert off.qparams["conv1"].scale == on.qparams["conv1"].scale, method  # the other tensors as configured
    # the EMA extremes (naive's default) would clip the probabilities
    assert stats["prob"].ema_max < stats["prob"].max


def test_int16_activations_from_quant_cfg(model, tmp_path):
    g, stats = model
    cfg = _config(tmp_path, quant_cfg={"activations": {"num_bits": 16}})
    q = quantize(g, stats, cfg)
    assert q.qparams["add"].dtype == "int16"
    s = stats["add"]
    assert q.qparams["add"].scale == float(np.float32(max(-s.ema_min, s.ema_max) / 32767))
    # conv_output keeps 8 bits, but conv1 feeds Add/Concat (role "activations") -> 16 bits
    assert q.qparams["conv2"].dtype == "int16" and q.qparams["conv1"].dtype == "int16"


def test_zero_range_gets_floor_scale(model, tmp_path):
    g, stats = model
    zero = dict(stats, conv2=Stats(0.0, 0.0, 0.0, 0.0))
    q = quantize(g, zero, _config(tmp_path))
    assert q.qparams["conv2"].scale == MIN_SCALE


# ---------------------------------------------------------------- weights and biases
def test_integer_weights_reconstruct_within_half_step(model, tmp_path):
    g, stats = model
    q = quantize(g, stats, _config(tmp_path))
    for name in ["w1", "w2", "w3"]:
        w, codes, qp = g.params[name], q.params[name], q.qparams[name]
        assert codes.dtype == np.int8 and qp.axis == w.ndim - 1
        scales = np.asarray(qp.scale)
        assert scales.shape == (w.shape[-1],)
        np.testing.assert_array_equal(scales, (np.abs(w).reshape(-1, w.shape[-1]).max(0) / 127)
                                      .astype(np.float32))
        err = np.abs(codes.astype(np.float32) * scales - w)
        assert np.all(err <= scales / 2 * (1 + 1e-6))
        assert np.abs(codes).max(axis=tuple(range(w.ndim - 1))).tolist() == [127] * w.shape[-1]


def test_bias_is_int32_at_product_scale(model, tmp_path):
    g, stats = model
    q = quantize(g, stats, _config(tmp_path))
    b, qp = q.params["b1"], q.qparams["b1"]
    expected_scale = (np.float64(q.qparams["x"].scale) * np.asarray(q.qparams["w1"].scale, np.float64)
                      ).astype(np.float32)
    assert b.dtype == np.int32 and qp.axis == 0
    np.testing.assert_array_equal(qp.scale, expected_scale)
    assert np.all(np.abs(b * expected_scale.astype(np.float64) - g.params["b1"]) <= expected_scale / 2)


def test_bias_saturates_and_zero_channel_scale_is_one():
    w = np.zeros((1, 1, 2, 3), np.float32)
    w[..., 0] = 1e-6
    w[..., 2] = -0.5
    codes, wq = quantize_weight(w, 8, axis=3)
    assert list(np.asarray(wq.scale)) == [np.float32(1e-6 / 127), 1.0, np.float32(0.5 / 127)]
    assert codes[0, 0, :, 1].tolist() == [0, 0]
    b, bq = quantize_bias(np.array([1e6, -1e7, 0.25], np.float32), 1e-3, wq)
    assert b.tolist() == [2 ** 31 - 1, -2 ** 31, int(np.round(0.25 / float(bq.scale[2])))]


def test_per_tensor_weights_from_quant_cfg(model, tmp_path):
    g, stats = model
    cfg = _config(tmp_path, quant_cfg={"conv_weights": {"is_per_channel": False}})
    q = quantize(g, stats, cfg)
    assert q.qparams["w1"].axis is None
    assert q.qparams["w1"].scale == float(np.float32(np.abs(g.params["w1"]).max() / 127))
    assert np.ndim(q.qparams["b1"].scale) == 0
    assert q.qparams["w3"].axis == 1          # matmul_weights still per channel


def test_shared_param_gets_one_integer_copy_per_use(tmp_path):
    g = Graph()
    g.add_input("x", (1, 4))
    g.add_param("w", np.eye(4, dtype=np.float32))
    _node(g, "a", "MatMul", ["x", "w"], (1, 4))
    _node(g, "b", "MatMul", ["a", "w"], (1, 4))
    g.outputs = ["b"]
    stats = {t: Stats(-1.0, 1.0, -1.0, 1.0) for t in calibration_tensors(g, {})}
    q = quantize(g, stats, _config(tmp_path))
    assert q.node("a").inputs[1] != q.node("b").inputs[1]
    assert "w" not in q.params and all(q.params[n.inputs[1]].dtype == np.int8 for n in q.nodes)


# ---------------------------------------------------------------- errors
def test_missing_statistics_are_named(model, tmp_path):
    g, stats = model
    partial = {k: v for k, v in stats.items() if k not in ("conv2", "prob")}
    with pytest.raises(CalibrationError, match=r"2 tensor\(s\): 'conv2', 'prob'"):
        quantize(g, partial, _config(tmp_path))


def test_non_finite_statistics_rejected(model, tmp_path):
    g, stats = model
    bad = dict(stats, add=Stats(float("nan"), 1.0, 0.0, 1.0))
    with pytest.raises(CalibrationError, match="'add'.*NaN"):
        quantize(g, bad, _config(tmp_path))


# ---------------------------------------------------------------- emitters
def test_calibration_graph_has_minmax_and_keeps_names(model, tmp_path):
    g, _ = model
    cfg = _config(tmp_path)
    cal = emit_calibration(g, cfg)
    minmax = [n for n in cal.nodes if n.op == "MinMax"]
    assert sorted(n.attrs["tensor_name"] for n in minmax) == sorted(calibration_tensors(g, cfg))
    assert {n.attrs["output_dir"] for n in minmax} == {os.path.abspath(cfg["output_dir"])}
    assert {n.attrs["ema_decay"] for n in minmax} == {0.9}
    assert cal.inputs == ["x"] and cal.outputs == ["prob", "logits"]
    for out in cal.outputs:                      # the user-visible node now is the MinMax
        assert cal.producer(out).op == "MinMax" and cal.producer(out).name == out
    assert cal.node("prob/raw").op == "Softmax"
    # every MinMax is on the path to the outputs, and the values are unchanged
    cal.prune()
    assert len([n for n in cal.nodes if n.op == "MinMax"]) == len(minmax)
    feeds = random_batches(1, seed=5)[0]
    for t, v in evaluate(g, feeds).items():
        np.testing.assert_array_equal(evaluate(cal, feeds)[t], v)


def test_qdq_graph_structure(model, tmp_path):
    g, stats = model
    cfg = _config(tmp_path, round_mode="half_to_even")
    q = quantize(g, stats, cfg)
    qdq = emit_qdq(q, cfg)
    assert qdq.inputs == ["x"] and qdq.outputs == ["prob", "logits"]
    ops = [n.op for n in qdq.nodes]
    assert ops.count("Quant") == 9 and ops.count("Dequant") == 9 + 6
    for out in qdq.outputs:
        node = qdq.producer(out)
        assert node.op == "Dequant" and node.name == out
    conv1 = qdq.node("conv1")
    assert [qdq.producer(t).op for t in conv1.inputs] == ["Dequant"] * 3
    wdq = qdq.producer(conv1.inputs[1])
    assert wdq.attrs["axis"] == 3 and len(wdq.attrs["scales"]) == 4
    quant = qdq.node("x/quant")
    assert quant.attrs["round_mode"] == "half_to_even" and quant.attrs["dtype"] == "int8"
    assert isinstance(quant.attrs["scale"], float)
    assert quant.attrs["scale"] == float(np.float32(quant.attrs["scale"]))
    # Reshape is scale-preserving: no Quant after it
    assert qdq.producer(qdq.node("flat").inputs[0]).op == "Dequant"
    assert all(n.op != "Quant" for n in qdq.consumers("flat"))


def test_qdq_output_close_to_float(model, tmp_path):
    g, stats = model
    cfg = _config(tmp_path, enable_EMA=False)
    q = quantize(g, stats, cfg)
    qdq = emit_qdq(q, cfg)
    feeds = random_batches(1, seed=1)[0]      # a calibration batch: no value is clipped
    ref, got = evaluate(g, feeds), evaluate(qdq, feeds)
    logits_step = q.qparams["logits"].scale
    err = np.abs(got["logits"] - ref["logits"])
    assert err.max() <= 4 * logits_step, err.max() / logits_step
    assert err.max() > 0                       # it is quantized, not the float graph
    got_codes = got["logits"] / np.float32(logits_step)
    np.testing.assert_allclose(got_codes, np.round(got_codes), atol=1e-3)  # on the grid
    assert np.abs(got["prob"] - ref["prob"]).max() <= 4 * q.qparams["prob"].scale


def test_qdq_conv_equals_integer_accumulator(model, tmp_path):
    """The float conv on dequantized values equals (sum xq*wq + bq) * s_x*s_w[c]: the
    int32 bias is on the accumulator's scale."""
    g, stats = model
    cfg = _config(tmp_path)
    q = quantize(g, stats, cfg)
    qdq = emit_qdq(q, cfg)
    feeds = random_batches(1, seed=7)[0]
    conv_float = evaluate(qdq, feeds, ["conv1"])["conv1"]          # before output Quant
    xq = arith.quantize(feeds["x"], q.qparams["x"].scale, "int8")
    no_bias = dataclasses.replace(g.node("conv1"), inputs=["x", "w1"], attrs=dict(
        g.node("conv1").attrs, act="none"))
    acc = evaluate_node(no_bias, [xq.astype(np.float32), q.params["w1"].astype(np.float32)])[0]
    assert np.array_equal(acc, np.round(acc))                      # exact integer sums
    acc = acc.astype(np.int64) + q.params["b1"]
    expected = np.maximum(acc * np.asarray(q.qparams["b1"].scale, np.float64), 0)
    np.testing.assert_allclose(conv_float, expected, rtol=1e-5, atol=1e-6)


def test_border_tensor_of_float_op(tmp_path):
    """x -> conv(a) -> Exp (float) -> Add(e, a): e is quantized only for the Add."""
    g = Graph()
    g.add_input("x", (1, 2, 2, 2))
    g.add_param("w", np.full((1, 1, 2, 2), 0.5, np.float32))
    _node(g, "a", "Conv2D", ["x", "w"], (1, 2, 2, 2), strides=(1, 1), dilations=(1, 1),
          pads=(0, 0, 0, 0), groups=1, layout="NHWC", act="none")
    _node(g, "e", "Exp", ["a"], (1, 2, 2, 2))
    _node(g, "s", "Add", ["e", "a"], (1, 2, 2, 2))
    g.outputs = ["s", "e"]
    plan = make_plan(g, {})
    assert plan.anchors == ["x", "a", "e", "s"] and plan.border == {"x", "e"}
    feeds = {"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 2, 2, 2)}
    stats = collect_stats(g, plan.anchors, [feeds])
    cfg = _config(tmp_path)
    qdq = emit_qdq(quantize(g, stats, cfg), cfg)
    exp = [n for n in qdq.nodes if n.op == "Exp"][0]
    assert qdq.producer(exp.inputs[0]).op == "Dequant"       # a is an integer tensor
    assert qdq.producer("e") is exp                          # e stays the float output
    add = qdq.producer(qdq.producer("s").inputs[0]).inputs[0]
    assert [qdq.producer(t).op for t in qdq.node(add).inputs if qdq.producer(t)] == ["Dequant"] * 2
    out = evaluate(qdq, feeds)
    ref = evaluate(g, feeds)
    np.testing.assert_allclose(out["e"], ref["e"], rtol=0.02)
    assert out["e"].tolist() != ref["e"].tolist()


def test_round_half_away_and_quantize_match_their_definitions():
    """arith's rint-and-fix-ties rounding equals the definition (truncate, then away from
    zero when the dropped fraction is at least one half) value for value, sign of zero
    included; quantize equals round, NaN to 0, clamp in float64."""
    rng = np.random.default_rng(3)
    with np.errstate(invalid="ignore"):   # inf - inf in the definitions below
        _check_rounding(rng)


def _check_rounding(rng):
    for dtype in (np.float32, np.float64):
        v = (rng.standard_normal(50_000) * 300).astype(dtype)
        v[:25_000] = np.round(v[:25_000] * 2) / 2          # exact ties k + 0.5
        v[:12] = [np.nan, np.inf, -np.inf, 0.0, -0.0, -0.3, 0.5, -0.5, 2.5, -2.5, 0.49999997, 8388607.5]
        t = np.trunc(v)
        want = t + np.where(np.abs(v - t) >= 0.5, np.sign(v), 0).astype(dtype)
        got = arith.ROUNDERS["half_away_from_zero"](v)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
    x = (rng.standard_normal((4, 9, 7)) * 200).astype(np.float32)
    x[0, 0, :4] = [np.nan, np.inf, -np.inf, 63.5]
    for dtype in ("int8", "uint8", "int16", "int32"):
        lo, hi = arith.QRANGE[dtype]
        v = (x / np.float32(0.5)).astype(np.float32)
        t = np.trunc(v)
        r = (t + np.where(np.abs(v - t) >= 0.5, np.sign(v), 0)).astype(np.float32)
        want = np.clip(np.where(np.isnan(r), 0, r).astype(np.float64), lo, hi).astype(dtype)
        np.testing.assert_array_equal(arith.quantize(x, 0.5, dtype), want)
        assert arith.quantize(np.float32(300.2), 0.5, dtype) == want.dtype.type(min(max(600, lo), hi))
