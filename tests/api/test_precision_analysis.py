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
           "precision_analysis_method": "PerLayer",
           "accuracy_auto": False}   # the report on the plain int8 build, with its broken layer
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


def test_end_to_end_has_no_per_layer_columns(calibrated):
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


def _deep_chain_graph(depth: int = 8, channels: int = 8):
    """``depth`` 3x3 conv + ReLU layers (He-scaled random weights) -> Mean -> 'y'."""
    rng = np.random.default_rng(7)
    g = tf.Graph()
    with g.as_default():
        h = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, channels], name="x")
        for k in range(depth):
            w = rng.normal(0, np.sqrt(2 / (9 * channels)), (3, 3, channels, channels)).astype(np.float32)
            h = tf.nn.relu(tf.nn.conv2d(h, w, 1, "SAME"), name=f"layer{k}")
        tf.identity(tf.reduce_mean(h, axis=[1, 2]), name="y")
    return g.as_graph_def()


def test_errors_accumulate_end_to_end_not_per_layer(tmp_path):
    """PerLayer is the default method (Pulsar2's).  Down an 8-layer chain the end-to-end SQNR
    falls as every layer adds its rounding to what it inherits; fed the float model's inputs,
    each layer shows only its own error, so the deep layers are far more precise per layer."""
    cfg = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[8, 8, 8, 8]],
           "output_dir": str(tmp_path), "auto_int16": False}
    conv = converter(_deep_chain_graph(), cfg)
    data = np.random.default_rng(4).normal(size=(32, 8, 8, 8)).astype(np.float32)
    conv.calibrate(data, progress=False)
    report = conv.analyze(data[:16])
    assert report.method == "PerLayer"
    convs = [r for r in report.rows if r.op == "Conv2D"]
    first, last = convs[0], convs[-1]
    assert len(convs) == 8
    assert first.per_layer_sqnr_db == pytest.approx(first.sqnr_db)     # reads the graph input either way
    assert last.sqnr_db < first.sqnr_db - 6, report.table()             # accumulated end to end
    assert last.per_layer_sqnr_db > last.sqnr_db + 6, report.table()    # its own error only
    assert last.per_layer_cosine > last.cosine
    assert min(r.per_layer_sqnr_db for r in convs) > last.sqnr_db + 3, report.table()


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
    """``precision_analysis: true`` in the config makes ``ratelnn build`` print the precision
    table with the PerLayer and the EndToEnd columns (no --analyze needed)."""
    import json
    from ratelnn.cli import main
    (tmp_path / "m.pb").write_bytes(_chain_graph().SerializeToString())
    np.save(tmp_path / "x.npy", np.random.default_rng(4).normal(size=(16, 8, 8, 2)).astype(np.float32))
    config = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[8, 8, 8, 2]],
              "output_dir": str(tmp_path / "out"), "model_name": "chain", "precision_analysis": True}
    (tmp_path / "c.json").write_text(json.dumps(config))
    code = main(["build", str(tmp_path / "c.json"), "--model", str(tmp_path / "m.pb"), "--data",
                 str(tmp_path / "x.npy"), "--forms", "quant", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Quant Precision Table [PerLayer Reference]" in out and "float vs quant on 16 samples" in out
    assert "EndToEnd SQNR" in out and "each layer fed the float model's inputs" in out
    report = Report.from_json((tmp_path / "out" / "chain_analysis_quant.json").read_text())
    assert report.method == "PerLayer" and all(r.per_layer_sqnr_db is not None for r in report.rows)
    for r in report.rows:   # the table shows each layer's per-layer cosine and its end-to-end one
        assert f"{r.per_layer_cosine:.6f}" in out and f"{r.cosine:.6f}" in out


def _pulsar2_yaml(tmp_path, dataset, **quant) -> str:
    """A Pulsar2-form build config of the chain model, data named by the config only."""
    import yaml
    config = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": "x:8x8x8x2",
              "output_dir": str(tmp_path / "out"), "model_name": "chain",
              "quant": {"input_configs": [{"tensor_name": "x", "calibration_dataset": str(dataset)}],
                        "calibration_method": "MinMax", "precision_analysis": True, **quant},
              "compiler": {"check": 2, "check_mode": "CheckPerLayer"}}
    path = tmp_path / "build.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _npy_folder(folder, count: int, seed: int):
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for k in range(count):
        np.save(folder / f"{k:03d}.npy", rng.normal(size=(8, 8, 2)).astype(np.float32))
    return folder


def test_precision_analysis_runs_on_the_config_dataset(tmp_path, capsys):
    """Pulsar2's form: the calibration data named by ``quant.input_configs`` (a folder of
    .npy), no --data: the build calibrates, checks the compiled model (check 2, per layer),
    analyzes PerLayer, prints the tables and writes the analysis and the quantization table
    as JSON in the build's set of files."""
    import json
    from ratelnn.cli import main
    from ratelnn.cli.build import check_build
    (tmp_path / "m.pb").write_bytes(_chain_graph().SerializeToString())
    config = _pulsar2_yaml(tmp_path, _npy_folder(tmp_path / "calib", 24, 4))
    code = main(["build", config, "--model", str(tmp_path / "m.pb"), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Quant Config Table" in out and "Quant Precision Table [PerLayer Reference]" in out
    assert "compiler_check 2 (all equal), CheckPerLayer" in out
    out_dir = tmp_path / "out"
    assert check_build(out_dir, "chain") == []
    listed = json.loads((out_dir / "chain_build.json").read_text())["files"]
    assert {"chain_analysis_quant.json", "chain_quant_table.json"} <= set(listed)
    report = Report.from_json((out_dir / "chain_analysis_quant.json").read_text())
    assert report.method == "PerLayer" and report.num_samples == 16      # 2 batches of 8
    table = json.loads((out_dir / "chain_quant_table.json").read_text())
    assert table["analysis"] == {"method": "PerLayer", "against": "quant", "num_samples": 16}
    by_layer = {row["layer"]: row for row in table["layers"]}
    for r in report.rows:
        assert by_layer[r.name]["per_layer_cosine"] == r.per_layer_cosine
        assert by_layer[r.name]["dtype"] == r.dtype and by_layer[r.name]["scale"] > 0
    convs = [row for row in table["layers"] if row["op"] == "Conv2D"]
    assert [(row["weight_dtype"], len(row["weight_scales"])) for row in convs] == \
        [("int8", 8), ("int8", 8), ("int8", 6)]


def test_precision_analysis_reads_its_own_sample_dir(tmp_path, capsys):
    """``quant.input_sample_dir``: the analysis runs on that folder, calibration on the
    dataset."""
    import json
    from ratelnn.cli import main
    (tmp_path / "m.pb").write_bytes(_chain_graph().SerializeToString())
    config = _pulsar2_yaml(tmp_path, _npy_folder(tmp_path / "calib", 24, 4),
                           input_sample_dir=str(_npy_folder(tmp_path / "analysis", 5, 9)))
    assert main(["build", config, "--model", str(tmp_path / "m.pb"), "--no-progress"]) == 0
    assert "float vs quant on 5 samples" in capsys.readouterr().out
    table = json.loads((tmp_path / "out" / "chain_quant_table.json").read_text())
    assert table["analysis"]["num_samples"] == 5
