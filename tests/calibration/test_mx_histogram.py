"""MXNet calibration records the |x| histogram that kld/percentile/mse need, equal bit for
bit to what TensorFlow's RatelMinMax records for the same values (docs/statistics.md)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ratelnn
from ratelnn.calibration.histogram import AbsHistogram
from ratelnn.calibration.stats import load_statistics
from ratelnn.frontend.mxnet import converter

BATCH = 2


@pytest.fixture(scope="module")
def tf_ops():
    return ratelnn.tf_init()


def small_model(mx):
    """data [N,1,8,8] -> conv3x3(4) -> relu -> dense(3): (sym, arg_params, aux_params)."""
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv")
    relu = mx.sym.Activation(conv, act_type="relu", name="relu")
    sym = mx.sym.FullyConnected(relu, num_hidden=3, name="fc")
    rng = np.random.default_rng(0)
    arg = {"conv_weight": rng.standard_normal((4, 1, 3, 3)), "conv_bias": np.full(4, 0.1),
           "fc_weight": rng.standard_normal((3, 144)), "fc_bias": np.zeros(3)}
    return sym, {k: mx.nd.array(v) for k, v in arg.items()}, {}


def recorded_values(mx, cal_model, images: np.ndarray) -> dict:
    """{tensor_name: values seen by each ratel_minmax node}, one array per batch, from the
    calibration model itself (running it records the batches once more)."""
    sym, arg, aux = cal_model
    nodes = [n for n in json.loads(sym.tojson())["nodes"] if n["op"] == "ratel_minmax"]
    internals = sym.get_internals()
    outputs = mx.sym.Group([internals[n["name"] + "_output"] for n in nodes])
    mod = mx.mod.Module(outputs, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind([("data", (BATCH,) + images.shape[1:])], for_training=False)
    mod.set_params(arg, aux, allow_missing=False, allow_extra=True)
    values = {n["attrs"]["tensor_name"]: [] for n in nodes}
    for start in range(0, len(images), BATCH):
        mod.forward(mx.io.DataBatch([mx.nd.array(images[start:start + BATCH])]), is_train=False)
        for node, out in zip(nodes, mod.get_outputs()):
            values[node["attrs"]["tensor_name"]].append(out.asnumpy())
    return values


def test_mxnet_calibration_histograms_equal_tensorflow_and_numpy(mx, tf_ops, tmp_path):
    config = {"input_nodes": ["data"], "output_nodes": ["fc_output"],
              "input_shapes": [[BATCH, 1, 8, 8]], "output_dir": str(tmp_path / "mx")}
    conv = converter(small_model(mx), config)
    images = (np.random.default_rng(1).laplace(0, 1.5, (8, 1, 8, 8)) + 0.2).astype(np.float32)
    mx_stats = conv.calibrate(images, batch_size=BATCH, progress=False)
    assert len(mx_stats) >= 3

    values = recorded_values(mx, conv.to_cal(), images)
    assert sorted(values) == sorted(mx_stats)
    for name, batches in values.items():
        for batch in batches:
            tf_ops.ratel_min_max(batch, tensor_name=name, output_dir=str(tmp_path / "tf"))
    tf_stats = load_statistics(tmp_path / "tf")
    twice = load_statistics(tmp_path / "mx")  # recorded_values ran the batches once more

    for name, s in mx_stats.items():
        expected = AbsHistogram.of_values(np.concatenate([b.ravel() for b in values[name]]))
        assert s.histogram is not None, name
        assert s.histogram == expected, name
        assert s.histogram.total == s.count == expected.total, name
        assert s.histogram == tf_stats[name].histogram, name
        assert (s.min, s.max, s.count) == (tf_stats[name].min, tf_stats[name].max,
                                           tf_stats[name].count), name
        assert twice[name].histogram.range_exp == expected.range_exp
        assert np.array_equal(twice[name].histogram.bins, 2 * np.asarray(expected.bins)), name

    for method in ("kld", "percentile", "mse"):  # the methods that need the histogram
        converter(small_model(mx), dict(config, quantize_algorithm=method)).to_quant()


@pytest.mark.no_tf_math
def test_mxnet_minmax_rejects_nan_before_recording(mx, tmp_path):
    x = np.ones((4, 5), np.float32)
    mx.nd.ratel_minmax(mx.nd.array(x), tensor_name="t", output_dir=str(tmp_path)).wait_to_read()
    x[2, 3] = np.inf
    with pytest.raises(mx.base.MXNetError, match="'t': calibration batch contains NaN or Inf"):
        mx.nd.ratel_minmax(mx.nd.array(x), tensor_name="t", output_dir=str(tmp_path)).wait_to_read()
    s = load_statistics(tmp_path)["t"]
    assert s.count == 20 and s.histogram.total == 20
