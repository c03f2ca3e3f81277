"""Pre-quantized (quantization-aware-trained) TensorFlow graphs compile from their own
fake-quant ranges, without calibration (docs/quantization.md "Importing pre-quantized (QAT)
graphs"): a QAT CNN trained here with FakeQuantWithMinMaxVars(PerChannel), the same weights as
a QuantizeAndDequantizeV2/V4 graph, exact weight codes, TF's nudging, asymmetric ranges held on
their own lattice, and the errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import tensorflow as tf

from helpers.qat import run_graph, train_qat_cnn
from ratelnn.errors import QuantizationError
from ratelnn.frontend.tensorflow import converter, freeze_keras
from ratelnn.frontend.tensorflow.fake_quant import nudge
from ratelnn.quantization.prequant import Grid, map_grid

EVAL_IMAGES = 2000


@pytest.fixture(scope="module")
def qat(fashion_mnist):
    """(Keras QAT model, frozen GraphDef, test images, labels)."""
    (x_train, y_train), (x_test, y_test) = fashion_mnist
    model = train_qat_cnn(x_train, y_train)
    graph_def, _, outputs = freeze_keras(model, [(None, 28, 28, 1)])
    assert outputs == ["Identity"]
    return model, graph_def, x_test[:EVAL_IMAGES], y_test[:EVAL_IMAGES]


def _config(tmp_path, output="Identity"):
    return {"input_nodes": ["images"], "output_nodes": [output], "input_shapes": [[16, 28, 28, 1]],
            "output_dir": str(tmp_path / "out")}


def _accuracy(graph_def, x, y, fetch="Identity:0"):
    return float(np.mean(run_graph(graph_def, {"images:0": x}, fetch).argmax(1) == y))


def test_qat_graph_compiles_without_calibration(qat, tmp_path):
    _, graph_def, x, y = qat
    npu = converter(graph_def, _config(tmp_path)).to_npu(graph_quant=graph_def)
    ops = [n.op for n in npu.node]
    assert "RatelEngineOp" in ops and not any("FakeQuant" in op or op == "RatelMinMax" for op in ops)
    assert not (tmp_path / "out" / "ratel_stats").exists()
    fake_quant, compiled = _accuracy(graph_def, x, y), _accuracy(npu, x, y)
    print(f"fake-quant model {fake_quant:.4f}, compiled {compiled:.4f} on {len(y)} test images")
    assert fake_quant > 0.75   # trained (10% is chance)
    assert abs(compiled - fake_quant) <= 0.005


def test_weights_are_the_fake_quant_codes(qat, tmp_path):
    model, graph_def, _, _ = qat
    qgraph = converter(graph_def, _config(tmp_path)).quantized_ir(graph_def)
    weighted = [n for n in qgraph.nodes if n.op in ("Conv2D", "MatMul")]
    layers = [layer for layer in model.layers if hasattr(layer, "kernel") and hasattr(layer, "w")]
    assert len(weighted) == len(layers) == 3
    for node, layer in zip(weighted, layers):
        kernel = np.asarray(layer.w)
        m = np.maximum(np.abs(kernel).max(axis=tuple(range(kernel.ndim - 1))), 1e-6)
        expected = tf.quantization.fake_quant_with_min_max_vars_per_channel(kernel, -m, m, narrow_range=True).numpy()
        codes, qp = qgraph.params[node.inputs[1]], qgraph.qparams[node.inputs[1]]
        assert codes.dtype == np.int8 and qp.axis == kernel.ndim - 1
        step = (2 * m.astype(np.float32)) / np.float32(254)
        np.testing.assert_array_equal(codes, np.rint(expected / step))   # the node's own codes
        np.testing.assert_allclose(codes * qp.scale, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
        assert np.abs(codes).max() == 127
        bias, s_in = qgraph.params[node.inputs[2]], qgraph.qparams[node.inputs[0]].scale
        assert bias.dtype == np.int32
        np.testing.assert_allclose(qgraph.qparams[node.inputs[2]].scale,
                                   (np.float64(s_in) * qp.scale).astype(np.float32))


def _qdq_graph(model):
    """The QAT model's weights and ranges as a QuantizeAndDequantizeV2 (activations, given
    ranges) / V4 (weights, per channel, range from the weights) graph ending in a Softmax
    without a range."""
    convs = [layer for layer in model.layers if hasattr(layer, "w")]
    acts = [layer for layer in model.layers if hasattr(layer, "seen")]
    ranges = [float(layer.fixed) if layer.fixed is not None else float(layer.a.numpy()) for layer in acts]
    weights = [(np.asarray(layer.w), np.asarray(layer.b), layer.kernel) for layer in convs]
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 1], name="images")
        x = tf.quantization.quantize_and_dequantize(x, 0.0, ranges[0], signed_input=False, range_given=True)
        for i, (kernel, bias, size) in enumerate(weights):
            unused = np.zeros(kernel.shape[-1], np.float32)   # range_given=False: from the weights
            w = tf.quantization.quantize_and_dequantize_v2(tf.constant(kernel), unused, unused,
                                                           narrow_range=True, axis=kernel.ndim - 1)
            if size:
                x = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), bias))
                x = tf.quantization.quantize_and_dequantize(x, 0.0, ranges[i + 1], signed_input=False,
                                                            range_given=True)
                x = tf.nn.max_pool2d(x, 2, 2, "VALID")
            else:
                x = tf.nn.bias_add(tf.matmul(tf.reshape(x, [-1, int(np.prod(x.shape[1:]))]), w), bias)
                x = tf.quantization.quantize_and_dequantize(x, -ranges[-1], ranges[-1], range_given=True)
        tf.nn.softmax(x, name="probs")
    ops = {n.op for n in graph.as_graph_def().node}
    assert {"QuantizeAndDequantizeV2", "QuantizeAndDequantizeV4"} <= ops
    return graph.as_graph_def()


def test_quantize_and_dequantize_graph(qat, tmp_path):
    model, _, x, y = qat
    graph_def = _qdq_graph(model)
    with pytest.warns(UserWarning, match="stay float"):
        npu = converter(graph_def, _config(tmp_path, "probs")).to_npu(graph_quant=graph_def)
    assert sum(n.op == "RatelEngineOp" for n in npu.node) == 1
    assert any(n.op == "Softmax" for n in npu.node)   # no range: left to TensorFlow
    qdq, compiled = _accuracy(graph_def, x, y, "probs:0"), _accuracy(npu, x, y, "probs:0")
    assert qdq > 0.75
    assert abs(compiled - qdq) <= 0.005


def _one_conv_graph(act_op):
    """images [N,8,8,4] -> act_op(images) -> depthwise 3x3 (x2) with per-channel fake-quant
    weights -> ReLU -> FakeQuant [0, 4] -> 'out'."""
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = act_op(tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 4], name="images"))
        kernel = rng.normal(0, 0.5, (3, 3, 4, 2)).astype(np.float32)
        m = np.abs(kernel).max(axis=(0, 1, 2))
        w = tf.quantization.fake_quant_with_min_max_vars_per_channel(tf.constant(kernel), -m, m, narrow_range=True)
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"), np.full(8, 0.1, np.float32)))
        tf.quantization.fake_quant_with_min_max_vars(y, 0.0, 4.0, name="out")
    return graph.as_graph_def()


def _small_config(tmp_path):
    return {"input_nodes": ["images"], "output_nodes": ["out"], "input_shapes": [[4, 8, 8, 4]],
            "output_dir": str(tmp_path / "out")}


def test_depthwise_per_channel_weights_match_the_fake_quant_model(tmp_path):
    # [-2, 2 * 127/128]: codes [-128, 127] exactly ([-2, 2] nudges to codes [-127, 128], and the
    # NPU's int8 saturates code 128 to 127)
    graph_def = _one_conv_graph(lambda x: tf.quantization.fake_quant_with_min_max_vars(x, -2.0, 2.0 * 127 / 128))
    npu = converter(graph_def, _small_config(tmp_path)).to_npu(graph_quant=graph_def)
    x = np.random.default_rng(1).normal(0, 0.8, (64, 8, 8, 4)).astype(np.float32)
    want, got = run_graph(graph_def, {"images:0": x}, "out:0"), run_graph(npu, {"images:0": x}, "out:0")
    step = 4.0 / 255
    np.testing.assert_allclose(np.rint(got / step) * step, got, atol=1e-6)   # on the node's lattice
    off = np.abs(np.rint((got - want) / step))
    assert off.max() <= 1 and np.mean(off == 0) > 0.99   # rounding ties of the float model only


def test_one_code_off_range_differs_only_where_the_input_saturates(tmp_path):
    """[-2, 2] nudges to codes [-127, 128]; int8 holds the lattice but clamps code 128 to 127."""
    graph_def = _one_conv_graph(lambda x: tf.quantization.fake_quant_with_min_max_vars(x, -2.0, 2.0))
    step_in, zp = nudge(-2.0, 2.0, 0, 255)
    assert (0 - zp, 255 - zp) == (-127, 128)
    npu = converter(graph_def, _small_config(tmp_path)).to_npu(graph_quant=graph_def)
    x = np.random.default_rng(1).normal(0, 0.8, (64, 8, 8, 4)).astype(np.float32)
    want, got = run_graph(graph_def, {"images:0": x}, "out:0"), run_graph(npu, {"images:0": x}, "out:0")
    off = np.abs(np.rint((got - want) / (4.0 / 255)))
    saturated = (x >= 127.5 * step_in).any(axis=(1, 2, 3))
    assert 0 < saturated.sum() < len(x)
    # unsaturated samples: the 1-code rounding differences of any float model vs integer NPU
    # (a step that is not a power of 2 makes near-ties commoner: 98.8% exact here)
    assert off[~saturated].max() <= 1 and np.mean(off[~saturated] == 0) > 0.98
    # where an input reaches code 128 (127 on the NPU) the output moves further
    assert off[saturated].max() > off[~saturated].max()


def test_a_range_computed_at_run_time_is_an_error_naming_the_node(tmp_path):
    graph_def = _one_conv_graph(
        lambda x: tf.quantization.quantize_and_dequantize(x, 0.0, 0.0, range_given=False, name="dyn_qdq"))
    with pytest.raises(QuantizationError, match="dyn_qdq"):
        converter(graph_def, _small_config(tmp_path)).to_npu(graph_quant=graph_def)


@pytest.mark.parametrize("lo, hi, bits, node, dtype", [
    (-1.3, 2.7, 8, "asym_fq", "int16"),    # codes [-83, 172]: zero point 83
    (-1.0, 1.0, 4, "four_bits", "int8"),   # codes [-8, 7]
])
def test_asymmetric_and_narrow_ranges_keep_their_lattice_and_name_the_clamp(tmp_path, lo, hi, bits, node, dtype):
    """The NPU holds the node's lattice at its own step in a wider dtype: inputs inside the
    range give the fake-quant model's outputs (to the one-code rounding ties of any float model);
    only inputs beyond it, which the node clips and the NPU does not, differ. One warning names
    the node, the dtype and the clamp."""
    graph_def = _one_conv_graph(lambda x: tf.quantization.fake_quant_with_min_max_vars(
        x, lo, hi, num_bits=bits, name=node))
    with pytest.warns(UserWarning, match=rf"{node}.*held as {dtype} at its step .*values beyond it are clipped"):
        npu = converter(graph_def, _small_config(tmp_path)).to_npu(graph_quant=graph_def)
    step_in, zp = nudge(lo, hi, 0, 2 ** bits - 1)
    inside = np.clip(np.random.default_rng(1).normal(0, 0.8, (64, 8, 8, 4)), -zp * step_in,
                     (2 ** bits - 1 - zp) * step_in).astype(np.float32)
    want, got = run_graph(graph_def, {"images:0": inside}, "out:0"), run_graph(npu, {"images:0": inside}, "out:0")
    off = np.abs(np.rint((got - want) / (4.0 / 255)))
    assert off.max() <= 1 and np.mean(off == 0) > 0.98
    beyond = inside * 3   # far outside the range: the node clips, the NPU's wider dtype does not
    want, got = run_graph(graph_def, {"images:0": beyond}, "out:0"), run_graph(npu, {"images:0": beyond}, "out:0")
    assert np.abs(np.rint((got - want) / (4.0 / 255))).max() > 1


@pytest.mark.parametrize("lo, hi, narrow, dtype, exact", [
    (0.0, 6.0, False, "uint8", True),      # codes [0, 255]
    (-0.01, 6.0, False, "uint8", True),    # nudged to [0, 6.01]
    (0.5, 6.0, False, "uint8", True),      # nudged to [0, 5.5]
    (-1.0, 1.0, False, "int8", True),      # nudged to codes [-127, 128]: one code off at the top
    (-1.0, 127 / 128, False, "int8", True),  # codes [-128, 127]
    (-1.0, 1.0, True, "int8", True),       # narrow: codes [-127, 127]
    (-0.05, 6.0, False, "int16", False),   # codes [-2, 253]: the same lattice in int16
    (-3.0, -1.0, False, "int16", False),   # codes [-255, 0]
])
def test_nudging_matches_tensorflow(lo, hi, narrow, dtype, exact):
    qmin = 1 if narrow else 0
    step, zp = nudge(lo, hi, qmin, 255)
    x = np.linspace(-8, 8, 20001, dtype=np.float32)
    y = tf.quantization.fake_quant_with_min_max_vars(x, lo, hi, narrow_range=narrow).numpy()
    codes = np.rint(y / step)
    assert (codes.min(), codes.max()) == (qmin - zp, 255 - zp)
    assert np.max(np.abs(y - codes * step)) <= 1e-6
    mapped = map_grid(Grid("n", "FakeQuantWithMinMaxVars", float(step), int(qmin - zp), int(255 - zp), f"[{lo}, {hi}]"))
    assert mapped.qparams.dtype == dtype and mapped.qparams.scale == np.float32(step)
    assert (mapped.note is None) == exact


def test_an_asymmetric_16_bit_range_maps_onto_int16_with_its_error():
    """Codes [-20000, 45535] do not fit int16 at their step: int16 over the larger side, the
    largest error on the range's values reported (at most half the new step)."""
    step = 1e-3
    mapped = map_grid(Grid("n", "FakeQuantWithMinMaxVars", step, -20000, 45535, "[-20, 45.535]"))
    wide = 45535 * step / 32767
    assert mapped.qparams.dtype == "int16" and np.isclose(mapped.qparams.scale, wide, rtol=1e-6)
    error = float(mapped.note.split("largest error ")[1].split(" ")[0])
    assert 0.4 * wide < error <= 0.5 * wide * 1.001   # the note rounds to 3 digits


def test_fully_ranged_graph_compiles_without_warnings(tmp_path):
    """A fully ranged graph compiles without a warning (nothing falls back to float)."""
    graph_def = _one_conv_graph(lambda x: tf.quantization.fake_quant_with_min_max_vars(x, 0.0, 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        npu = converter(graph_def, _small_config(tmp_path)).to_npu(graph_quant=graph_def)
    assert [n.op for n in npu.node].count("RatelEngineOp") == 1
