"""Precision analysis, method PerLayer next to EndToEnd, modes Reference and NPUBackend
(docs/quantization.md "Precision analysis: PerLayer vs EndToEnd")."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from ratelnn.analysis import Report
from ratelnn.config import ConfigError
from ratelnn.frontend.tensorflow import converter


def _chain_graph():
    """conv 'first' -> conv 'broken' (one output channel 300x the others: its 8-bit scale
    leaves the other channels few codes) -> conv 'after' (reads all channels but the
    outlier one) -> Mean -> 'y'."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.4, (3, 3, 2, 8)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (3, 3, 8, 8)).astype(np.float32)
    w2[..., 5] *= 300.0
    w3 = rng.normal(0, 0.3, (1, 1, 8, 6)).astype(np.float32)
    w3[:, :, 5, :] = 0.0
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 2], name="x")
        h = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME", name="first"))
        h = tf.nn.relu(tf.nn.conv2d(h, w2, 1, "SAME", name="broken"))
        h = tf.nn.conv2d(h, w3, 1, "SAME", name="after")
        tf.identity(tf.reduce_mean(h, axis=[1, 2]), name="y")
    return g.as_graph_def()


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    cfg = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[8, 8, 8, 2]],
           "output_dir": str(tmp_path_factory.mktemp("precision")), "auto_int16": False,
           "precision_analysis_method": "PerLayer"}
    conv = converter(_chain_graph(), cfg)
    data = np.random.default_rng(4).normal(size=(32, 8, 8, 2)).astype(np.float32)
    conv.calibrate(data, progress=False)
    return conv, data


def _rows(report):
    return {r.name: r for r in report.rows}


def test_per_layer_isolates_each_layers_own_error(calibrated):
    conv, data = calibrated
    report = conv.analyze(data[:16])
    assert report.method == "PerLayer" and report.against == "quant"
    rows = _rows(report)
    for r in report.rows:
        assert math.isfinite(r.per_layer_sqnr_db) and -1 <= r.per_layer_cosine <= 1, r
    # the first quantized layer reads the quantized input either way: same error
    assert rows["first"].per_layer_sqnr_db == pytest.approx(rows["first"].sqnr_db, abs=0.5)
    # 'after' reads 'broken' quantized at broken's scale, which leaves its channels few codes:
    # part of its own (integer) computation, so it shows per layer too
    assert rows["after"].per_layer_sqnr_db < 10, report.table()
    # the Mean only inherits that error end to end; fed the float inputs it is precise
    assert rows["Mean"].sqnr_db < 10, report.table()
    assert rows["Mean"].per_layer_sqnr_db > rows["Mean"].sqnr_db + 20, report.table()
    text = report.table()
    assert "PerLayer SQNR" in text and "each layer fed the float inputs" in text
    assert Report.from_json(report.to_json()) == report


def test_end_to_end_default_has_no_per_layer_columns(calibrated):
    conv, data = calibrated
    report = conv.analyze(data[:8], method="EndToEnd")
    assert report.method == "EndToEnd" and all(r.per_layer_sqnr_db is None for r in report.rows)
    assert "PerLayer" not in report.table()
    old = report.to_dict()
    old.pop("method")   # a report written before the PerLayer method reads back as EndToEnd
    for row in old["rows"]:
        row.pop("per_layer_cosine"), row.pop("per_layer_sqnr_db")
    import json
    assert Report.from_json(json.dumps(old)).method == "EndToEnd"


def test_npu_backend_per_layer_runs_the_engines(calibrated):
    """Mode NPUBackend: each layer compiled alone and run on the bit-exact executor.  It is not
    identical by construction to the Reference per-layer value (integer requantization vs
    float32 QDQ rounding, docs/quantization.md §7), but agrees to a fraction of an LSB."""
    conv, data = calibrated
    conv_npu = converter(_chain_graph(), dict(conv.config, precision_analysis_mode="NPUBackend"))
    npu, ref = conv_npu.analyze(data[:8]), conv.analyze(data[:8])
    assert npu.against == "npu" and npu.method == "PerLayer"
    for a, b in zip(npu.rows, ref.rows):
        assert a.name == b.name
        assert a.per_layer_sqnr_db == pytest.approx(b.per_layer_sqnr_db, abs=1.0), (a, b)
    from ratelnn.analysis import _PerLayer, _layers
    qgraph = conv.quantized_ir()
    nodes, _ = _layers(qgraph, conv.config)
    from ratelnn.ir.evaluate import evaluate
    floats = evaluate(conv.graph, {"x": data[:8]}, [t for n in nodes for t in n.inputs + n.outputs
                                                   if t in conv.graph.tensors and not conv.graph.is_param(t)])
    by_ref = _PerLayer(conv, qgraph, nodes, "quant", conv.config).run(floats)
    import pickle   # analyze(executor=) ships the per-layer engines to its workers
    by_npu = pickle.loads(pickle.dumps(_PerLayer(conv, qgraph, nodes, "npu", conv.config))).run(floats)
    for n in nodes:
        t, step = n.outputs[0], qgraph.qparams[n.outputs[0]].scale
        codes_off = np.abs(np.rint((by_npu[t] - by_ref[t]) / step))
        assert codes_off.max() <= 1 and np.mean(codes_off == 0) > 0.99, n.name


def test_bad_method_or_mode_is_a_config_error(calibrated):
    conv, data = calibrated
    with pytest.raises(ConfigError, match="precision_analysis_method"):
        conv.analyze(data[:8], method="Sideways")
    with pytest.raises(ConfigError, match="precision_analysis_mode"):   # refused when the converter is made
        converter(_chain_graph(), dict(conv.config, precision_analysis_mode="GPU"))


def test_cli_build_shows_the_per_layer_columns(tmp_path, capsys):
    """``precision_analysis: true`` with ``precision_analysis_method: PerLayer`` in the config
    makes ``ratelnn build`` print the table with the PerLayer columns (no --analyze needed)."""
    import json
    from ratelnn.cli import main
    (tmp_path / "m.pb").write_bytes(_chain_graph().SerializeToString())
    np.save(tmp_path / "x.npy", np.random.default_rng(4).normal(size=(16, 8, 8, 2)).astype(np.float32))
    config = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[8, 8, 8, 2]],
              "output_dir": str(tmp_path / "out"), "model_name": "chain", "precision_analysis": True,
              "precision_analysis_method": "PerLayer"}
    (tmp_path / "c.json").write_text(json.dumps(config))
    code = main(["build", str(tmp_path / "c.json"), "--model", str(tmp_path / "m.pb"), "--data",
                 str(tmp_path / "x.npy"), "--forms", "quant", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "PerLayer SQNR" in out and "float vs quant on 16 samples" in out
    report = Report.from_json((tmp_path / "out" / "chain_analysis_quant.json").read_text())
    assert report.method == "PerLayer" and all(r.per_layer_sqnr_db is not None for r in report.rows)
