"""Mixed precision — layer_configs priority, int16 through the quantized and the
compiled model, and the auto_int16 rule."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import ratelnn
from ratelnn.calibration.histogram import AbsHistogram
from ratelnn.calibration.stats import TensorStats, load_statistics
from ratelnn.ir import Graph, Node, TensorInfo
from ratelnn.quantization.policy import layer_data_types, make_plan
from ratelnn.quantization.quantizer import auto_int16_tensors, quantize

from helpers.stats import small_graph_def

import tensorflow as tf


def stats_of(values) -> TensorStats:
    values = np.asarray(values, np.float32)
    lo, hi = float(values.min()), float(values.max())
    return TensorStats(lo, hi, lo, hi, 1, values.size, AbsHistogram.of_values(values))


def chain_graph() -> Graph:
    """x -> conv1 (relu) -> conv2 -> add(conv2, conv1) -> pool (AvgPool), NHWC batch 1."""
    rng = np.random.default_rng(0)
    g = Graph("chain")
    g.add_input("x", (1, 4, 4, 2))
    conv = dict(strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1, layout="NHWC")
    for name, src, act in (("conv1", "x", "relu"), ("conv2", "conv1", "none")):
        g.add_param(f"w_{name}", rng.normal(0, 0.5, (1, 1, 2, 2)).astype(np.float32))
        g.add_node(Node(name, "Conv2D", [src, f"w_{name}"], [name], dict(conv, act=act)),
                   [TensorInfo((1, 4, 4, 2))])
    g.add_node(Node("add", "Add", ["conv2", "conv1"], ["add"], {}), [TensorInfo((1, 4, 4, 2))])
    g.add_node(Node("pool", "AvgPool", ["add"], ["pool"],
                    dict(ksize=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), layout="NHWC",
                         count_include_pad=False)), [TensorInfo((1, 2, 2, 2))])
    g.outputs = ["pool"]
    g.validate()
    return g


def test_layer_configs_priority_layer_over_op_type_over_subgraph():
    g = chain_graph()
    layer_configs = [  # listed weakest-last to show that priority, not order, decides
        {"layer_name": "conv2", "data_type": "uint8"},
        {"op_type": "Conv2D", "data_type": "int8"},
        {"op_type": ["Conv2D"], "data_type": "int16"},  # same kind: the later entry wins
        {"start_tensor_names": ["x"], "end_tensor_names": ["pool"], "data_type": "fp32"},
    ]
    config = {"layer_configs": layer_configs}
    assert layer_data_types(g, config) == {"conv1": "int16", "conv2": "uint8", "add": "fp32",
                                           "pool": "fp32"}
    rng = np.random.default_rng(1)
    stats = {t: stats_of(rng.normal(0, 1, 64)) for t in ("x", "conv1", "conv2")}
    q = quantize(g, stats, dict(config, auto_int16=False))
    assert {t: q.qparams[t].dtype for t in ("x", "conv1", "conv2")} == {
        "x": "int8", "conv1": "int16", "conv2": "uint8"}
    assert "add" not in q.qparams and "pool" not in q.qparams
    assert q.qparams["conv1"].scale == pytest.approx(stats["conv1"].max / 32767, rel=1e-6)


def test_layer_config_matching_nothing_warns():
    with pytest.warns(UserWarning, match="matches no node"):
        layer_data_types(chain_graph(), {"layer_configs": [{"layer_name": "conv9",
                                                            "data_type": "int16"}]})


def test_int16_through_quantized_and_compiled_model(tmp_path):
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.testing import run_graph

    ratelnn.tf_init()
    graph_def = small_graph_def()
    config = {"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[4, 8, 8, 3]],
              "output_dir": str(tmp_path), "auto_int16": False}
    images = np.random.default_rng(2).normal(0, 1, (32, 8, 8, 3)).astype(np.float32)
    run_graph(converter(graph_def, config).to_cal(), "x:0", "prob:0", images, 4)
    conv = converter(graph_def, dict(config, layer_configs=[
        {"op_type": "Conv2D", "data_type": "int16"}, {"layer_name": "x", "data_type": "int16"}]))
    qir = conv.quantized_ir()
    conv_outputs = [n.outputs[0] for n in conv.graph.nodes if n.op == "Conv2D"]
    assert {qir.qparams[t].dtype for t in conv_outputs + ["x"]} == {"int16"}
    graph_quant = conv.to_quant()
    quant_dtypes = {n.attr["dtype"].type for n in graph_quant.node if n.op == "RatelQuant"}
    assert tf.int16.as_datatype_enum in quant_dtypes
    reference = run_graph(graph_def, "x:0", "prob:0", images[:16], 4)
    quant = run_graph(graph_quant, "x:0", "prob:0", images[:16], 4)
    graph_npu = conv.to_npu()
    assert any(n.op == "RatelEngineOp" for n in graph_npu.node)
    npu = run_graph(graph_npu, "x:0", "prob:0", images[:16], 4)
    assert np.abs(quant - reference).max() < 0.05
    assert np.abs(npu - quant).max() < 0.02  # the engine computes the int16 tensors too


def outlier_stats(rng, anchors, noisy):
    """Well-behaved statistics for every anchor, heavy outliers (few values 1000x the
    typical magnitude) for those in ``noisy``."""
    stats = {}
    for t in anchors:
        x = rng.normal(0, 1, 20_000)
        if t in noisy:
            x[:noisy[t]] = 1000.0
        stats[t] = stats_of(x)
    return stats


def test_auto_int16_promotes_the_lowest_sqnr_within_budget():
    g = chain_graph()
    plan = make_plan(g, {})
    assert plan.anchors == ["x", "conv1", "conv2", "add", "pool"]
    stats = outlier_stats(np.random.default_rng(3), plan.anchors, {"conv2": 1, "add": 3})
    config = {"auto_int16_max_fraction": 0.4, "enable_EMA": False}  # budget: 2 of 5
    q8 = quantize(g, stats, dict(config, auto_int16=False))
    assert auto_int16_tensors(plan, stats, q8.qparams, config) == ["conv2", "add"]
    q = quantize(g, stats, config)
    assert {t for t in plan.anchors if q.qparams[t].dtype == "int16"} == {"conv2", "add"}
    assert q.qparams["conv2"].scale == pytest.approx(1000.0 / 32767, rel=1e-6)
    # budget 1: only the worst; forced dtypes are never candidates; the default budget of 5
    # anchors is max(1, floor(0.5)) = 1 (small graphs get one); fraction 0 promotes nothing
    assert auto_int16_tensors(plan, stats, q8.qparams, dict(config, auto_int16_max_fraction=0.2)) == ["conv2"]
    assert auto_int16_tensors(plan, stats, q8.qparams, dict(config, auto_int16_max_fraction=0.1)) == ["conv2"]
    assert auto_int16_tensors(plan, stats, q8.qparams, dict(config, auto_int16_max_fraction=0.0)) == []
    forced_cfg = dict(config, layer_configs=[{"layer_name": "conv2", "data_type": "int8"}])
    forced_plan = make_plan(g, forced_cfg)
    assert auto_int16_tensors(forced_plan, stats, q8.qparams, forced_cfg) == ["add"]
    assert auto_int16_tensors(plan, stats, q8.qparams, {}) == ["conv2"]
    # statistics without histograms are not candidates
    bare = {t: TensorStats(s.min, s.max, s.ema_min, s.ema_max, 1, s.count) for t, s in stats.items()}
    assert auto_int16_tensors(plan, bare, q8.qparams, config) == []
    with pytest.raises(ratelnn.config.ConfigError, match="auto_int16_max_fraction"):
        auto_int16_tensors(plan, stats, q8.qparams, {"auto_int16_max_fraction": 2})


def test_auto_int16_default_promotes_nothing_on_the_fashion_cnn(fashion_mnist, fashion_cnn, tmp_path):
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing import run_graph

    ratelnn.tf_init()
    (x_train, _), _ = fashion_mnist
    graph_def, inputs, outputs = freeze_keras(fashion_cnn)
    config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[32, 28, 28, 1]],
              "output_dir": str(tmp_path)}
    conv = converter(graph_def, config)
    run_graph(conv.to_cal(), inputs[0] + ":0", outputs[0] + ":0", x_train[:320], 32)
    stats = load_statistics(tmp_path)
    plan = make_plan(conv.graph, conv.config)
    q8 = quantize(conv.graph, stats, dict(conv.config, auto_int16=False))
    assert auto_int16_tensors(plan, stats, q8.qparams, conv.config) == []
    q = quantize(conv.graph, stats, conv.config)
    assert not any(q.qparams[t].dtype == "int16" for t in plan.anchors)
    # kld clips two tensors hard (SQNR < 25 dB): the 10% budget (1 of 14) promotes one
    kld = dict(conv.config, quantize_algorithm="kld")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q_kld = quantize(conv.graph, stats, dict(kld, auto_int16=False))
    assert len(auto_int16_tensors(plan, stats, q_kld.qparams, kld)) <= int(0.1 * len(plan.anchors))


def test_layer_configs_set_the_graph_input_dtype():
    g = chain_graph()
    rng = np.random.default_rng(4)
    stats = {t: stats_of(rng.normal(0, 1, 64)) for t in ("x", "conv1", "conv2", "add", "pool")}
    config = {"auto_int16": False, "layer_configs": [{"layer_name": "x", "data_type": "int16"}]}
    assert layer_data_types(g, config) == {"x": "int16"}
    q = quantize(g, stats, config)
    assert q.qparams["x"].dtype == "int16"
    assert q.qparams["x"].scale == pytest.approx(max(abs(stats["x"].min), stats["x"].max) / 32767, rel=1e-6)
    assert q.qparams["conv1"].dtype != "int16"
    with pytest.raises(ratelnn.config.ConfigError, match="graph input 'x' can only be"):
        layer_data_types(g, {"layer_configs": [{"layer_name": "x", "data_type": "fp32"}]})


def test_an_int16_op_reads_its_constant_operand_in_int16():
    """Means spanning 0.05..1000 (a Normalization's Sub): 8 bits round the small ones to 0."""
    g = Graph("sub_means")
    g.add_input("x", (1, 3))
    g.add_param("means", np.array([1000.0, 0.5, 0.05], np.float32))
    g.add_node(Node("sub", "Sub", ["x", "means"], ["sub"], {}), [TensorInfo((1, 3))])
    g.outputs = ["sub"]
    g.validate()
    stats = {t: stats_of([-1000.0, 1000.0]) for t in ("x", "sub")}
    q8 = quantize(g, stats, {"auto_int16": False})
    q16 = quantize(g, stats, {"auto_int16": False, "layer_configs": [{"layer_name": "sub", "data_type": "int16"}]})
    const8, const16 = (q.nodes[0].inputs[1] for q in (q8, q16))
    assert q8.qparams[const8].dtype == "uint8" and q16.qparams[const16].dtype == "int16"
    back = q16.params[const16] * np.float64(q16.qparams[const16].scale)
    np.testing.assert_allclose(back, [1000.0, 0.5, 0.05], atol=1000.0 / 32767)
    assert q8.params[const8][2] == 0                          # the 8-bit code of 0.05 is 0


def sqrt_transpose_graph() -> Graph:
    """x -> sqrt (float: Sqrt is not a quantized op) -> t (Transpose, scale-preserving) ->
    r (Relu): the quantized Transpose makes sqrt's output a border anchor that t shares."""
    g = Graph("border")
    g.add_input("x", (1, 2, 3))
    g.add_node(Node("sqrt", "Sqrt", ["x"], ["sqrt"], {}), [TensorInfo((1, 2, 3))])
    g.add_node(Node("t", "Transpose", ["sqrt"], ["t"], {"perm": (0, 2, 1)}), [TensorInfo((1, 3, 2))])
    g.add_node(Node("r", "Relu", ["t"], ["r"], {}), [TensorInfo((1, 3, 2))])
    g.outputs = ["r"]
    g.validate()
    return g


@pytest.mark.parametrize("named", ["sqrt", "t"])
def test_int16_reaches_a_border_anchor_through_its_float_producer_or_a_scale_preserving_reader(named):
    """basic-pitch: its CQT magnitude (Sqrt, on the CPU) is read by a quantized Transpose;
    int16 given to either must make that border int16 (it stayed uint8: 82% of the
    magnitudes rounded to 0 and the model's log spectrogram lost them)."""
    g = sqrt_transpose_graph()
    values = np.geomspace(1e-6, 16.0, 64)
    stats = {t: stats_of(values) for t in ("x", "sqrt", "r")}
    plain = quantize(g, stats, {"auto_int16": False})
    assert "sqrt" not in make_plan(g, {}).quantized_nodes and plain.qparams["sqrt"].dtype == "uint8"
    config = {"auto_int16": False, "layer_configs": [{"layer_name": named, "data_type": "int16"}]}
    assert make_plan(g, config).forced_dtype == {"sqrt": "int16"}
    q = quantize(g, stats, config)
    assert q.qparams["sqrt"].dtype == "int16"
    assert q.qparams["sqrt"].scale == pytest.approx(16.0 / 32767, rel=1e-6)
    assert q.qparams["r"].dtype != "int16"                    # only the named anchor changes


def test_a_producer_forced_dtype_wins_over_its_scale_preserving_reader():
    g = sqrt_transpose_graph()
    config = {"layer_configs": [{"layer_name": "sqrt", "data_type": "uint8"},
                                {"layer_name": "t", "data_type": "int16"}]}
    assert make_plan(g, config).forced_dtype == {"sqrt": "uint8"}
