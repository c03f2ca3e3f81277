"""Configuration forms (docs/architecture.md §14): a Pulsar2-style build config (``quant:``,
``input_processors:``, ``compiler:`` sections, U8/U16/FP32, ONNX op type ``Conv``, a subgraph,
``"name:NxHxWxC"`` input shapes) builds the trained Fashion-MNIST CNN through the CLI into the
same engines, byte for byte, as the equivalent native config; and every new ConfigError."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import ratelnn.config
from ratelnn.cli import main
from ratelnn.config import ConfigError, QuantConfig, normalize

BATCH = 8
SAMPLES = 16           # calibration samples used (the uint8 file holds more: calibration_size cuts)


def _names(graph_def):
    """(input, output, MatMul node, its input tensor, the global average pooling Mean node)."""
    ops = {nd.name: nd for nd in graph_def.node}
    matmul = next(n for n in ops.values() if n.op == "MatMul")
    mean = next(n for n in ops.values() if n.op == "Mean")
    return matmul.name, matmul.input[0], mean.name


@pytest.fixture(scope="module")
def builds(fashion_mnist, fashion_cnn, tmp_path_factory):
    """The CNN built twice through ``ratelnn build``: from a Pulsar2-style YAML config and from
    the equivalent native JSON config; returns both output folders."""
    from ratelnn.frontend.tensorflow import freeze_keras

    d = tmp_path_factory.mktemp("forms")
    graph_def, ins, outs = freeze_keras(fashion_cnn)
    (d / "cnn.pb").write_bytes(graph_def.SerializeToString())
    matmul, concat, mean = _names(graph_def)
    (x_train, _), _ = fashion_mnist
    u8 = np.round(x_train[:2 * SAMPLES] * 255).astype(np.uint8)
    np.save(d / "u8.npy", u8)                                          # what Pulsar2 users calibrate on
    np.save(d / "u8_native.npy", u8[:SAMPLES])
    pulsar2 = {
        "input_nodes": ins, "output_nodes": outs, "input_shapes": f"{ins[0]}:{BATCH}x28x28x1",
        "quant": {"calibration_method": "MSE", "calibration_size": SAMPLES, "precision_analysis": False,
                  "precision_analysis_method": "PerLayer", "precision_analysis_mode": "Reference",
                  "conv_bias_data_type": "S32",
                  "layer_configs": [{"op_type": "Conv", "data_type": "U16"},
                                    {"layer_name": mean, "data_type": "U8"},
                                    {"start_tensor_names": [concat], "end_tensor_names": outs,
                                     "data_type": "FP32"}]},
        "input_processors": [{"tensor_name": ins[0], "calibration_dataset": str(d / "u8.npy"),
                              "src_dtype": "U8", "calibration_mean": [0.0], "calibration_std": [255.0],
                              "tensor_layout": "NHWC"}],
        "compiler": {"static_batch_sizes": [BATCH], "check": 0},
    }
    native = {
        "input_nodes": ins, "output_nodes": outs, "input_shapes": [[BATCH, 28, 28, 1]],
        "quantize_algorithm": "mse", "static_batch_sizes": [BATCH], "precision_analysis_method": "PerLayer",
        "src_dtype": "uint8", "std": 255.0,   # the compiled model takes the uint8 image in both forms
        "layer_configs": [{"op_type": "Conv2D", "data_type": "int16"},
                          {"layer_name": mean, "data_type": "uint8"},
                          {"start_tensor_names": [concat], "end_tensor_names": outs, "data_type": "fp32"}],
    }
    (d / "pulsar2.yaml").write_text(yaml.safe_dump(pulsar2))
    (d / "native.json").write_text(json.dumps(native))
    common = ["--model", str(d / "cnn.pb"), "--no-progress", "--forms", "quant,npu", "--output_name", "cnn"]
    assert main(["build", str(d / "pulsar2.yaml"), "--work_dir", str(d / "p2"), *common]) == 0
    assert main(["build", str(d / "native.json"), "--work_dir", str(d / "nat"), "--data", str(d / "u8_native.npy"),
                 *common]) == 0
    return d, matmul


def test_pulsar2_config_builds_the_same_engines_as_the_native_one(builds):
    from ratelnn.frontend.tensorflow.model_io import engine_nodes, read_graphdef

    d, matmul = builds
    p2, nat = (read_graphdef(str(d / f / "cnn_npu.pb")) for f in ("p2", "nat"))
    engines = engine_nodes(p2)
    assert engines and engines == engine_nodes(nat)
    assert (d / "p2" / "cnn_quant.pb").read_bytes() == (d / "nat" / "cnn_quant.pb").read_bytes()
    # the FP32 subgraph stayed in TensorFlow; the effective configs agree but for the paths
    assert any(nd.op == "MatMul" for nd in p2.node)
    eff = [json.loads((d / f / "cnn_effective_config.json").read_text()) for f in ("p2", "nat")]
    for e in eff:
        for key in ("output_dir", "calibration_data", "calibration_size", "src_dtype", "mean", "std",
                    "data_format"):
            e.pop(key)
    assert eff[0]["layer_configs"][0].pop("op_type") == "Conv"        # matched as Conv2D (registry)
    assert eff[1]["layer_configs"][0].pop("op_type") == "Conv2D"
    assert eff[0] == eff[1]
    assert eff[0]["quantize_algorithm"] == "mse" and eff[0]["layer_configs"][0]["data_type"] == "int16"


def _base(tmp_path, **extra):
    return {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[1, 4]],
            "output_dir": str(tmp_path / "out"), **extra}


BAD = {
    "calibration_method unknown": ({"quant": {"calibration_method": "Entropy"}},
                                   r"quant.calibration_method: 'Entropy' is not one of .*kl.*minmax.*mse"),
    "calibration_size a string": ({"quant": {"calibration_size": "32"}},
                                  r"quant.calibration_size must be an integer, got '32' \(str\)"),
    "quant not a mapping": ({"quant": ["MSE"]}, r"config section 'quant' must be a mapping"),
    "data_type unknown": ({"quant": {"layer_configs": [{"op_type": "Conv", "data_type": "U4"}]}},
                          r"quant.layer_configs\[0\].data_type: 'U4' is not one of"),
    "data_type and output_data_type differ": (
        {"layer_configs": [{"layer_name": "a", "data_type": "U16", "output_data_type": "U8"}]},
        r"layer_configs\[0\]: data_type 'U16' and output_data_type 'uint8' differ"),
    "precision_analysis not a bool": ({"quant": {"precision_analysis": "yes"}},
                                      r"quant.precision_analysis must be true or false, got 'yes'"),
    "precision_analysis_method": ({"quant": {"precision_analysis_method": "Layerwise"}},
                                  r"'precision_analysis_method' must be one of \('PerLayer', 'EndToEnd'\)"),
    "precision_analysis_mode": ({"precision_analysis_mode": "NPU"},
                                r"'precision_analysis_mode' must be one of \('Reference', 'NPUBackend'\)"),
    "FP32 conv bias": ({"quant": {"conv_bias_data_type": "FP32"}}, r"FP32 biases are not supported"),
    "compiler check out of range": ({"compiler": {"check": 3}}, r"compiler.check must be 0, 1 or 2, got 3"),
    "compiler static_batch_sizes not a list": ({"compiler": {"static_batch_sizes": 4}},
                                               r"compiler.static_batch_sizes must be a list, got 4 \(int\)"),
    "max_dynamic_batch_size negative": ({"compiler": {"max_dynamic_batch_size": -1}},
                                        r"compiler.max_dynamic_batch_size must be an integer >= 0"),
    "both forms differ": ({"quantize_algorithm": "kld", "quant": {"calibration_method": "MSE"}},
                          r"quantize_algorithm = 'kld' and quant.calibration_method = 'MSE' set the same thing"),
    "input_processors layout": ({"input_processors": [{"tensor_name": "x", "tensor_layout": "NCWH"}]},
                                r"input_processors\[0\].tensor_layout: 'NCWH' is not one of nchw, nhwc"),
    "input_processors mean a string": ({"input_processors": [{"calibration_mean": "0"}]},
                                       r"input_processors\[0\].calibration_mean must be a number or a list"),
    "input_processors two sizes": ({"input_processors": [{"tensor_name": "x", "calibration_size": 4}],
                                    "quant": {"input_configs": [{"tensor_name": "x", "calibration_size": 8}]}},
                                   r"calibration sizes differ"),
    "src_dtype": ({"input_processors": [{"src_dtype": "S16"}]}, r"src_dtype: 'S16' is not one of"),
    "input_shapes string of another input": ({"input_shapes": "z:1x4"}, r"input_shapes names \['z'\], which are not"),
    "input_shapes string malformed": ({"input_shapes": "x:1by4"}, r"the entry 'x:1by4' is neither"),
    "calibration_size zero": ({"calibration_size": 0}, r"'calibration_size' must be a positive integer"),
    "calibration_size below -1": ({"quant": {"calibration_size": -2}}, r"'calibration_size' must be a positive"),
    "calibration_format": ({"input_processors": [{"calibration_format": "Tensor"}]},
                           r"calibration_format: 'Tensor' is not one of binary, image, numpy"),
    "flat calibration_format": ({"calibration_format": "Numpy"}, r"'calibration_format' must be one of"),
    "flat compiler_check": ({"compiler_check": 5}, r"'compiler_check' must be 0, 1 or 2, got 5"),
    "flat and section differ": ({"static_batch_sizes": [2], "compiler": {"static_batch_sizes": [4]}},
                                r"static_batch_sizes = \[2\] and compiler.static_batch_sizes = \[4\]"),
    "op_processors not a list": ({"op_processors": {"op_name": "a"}}, r"'op_processors' must be a list of mappings"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_section_value_is_a_config_error_naming_it(tmp_path, case):
    extra, message = BAD[case]
    with pytest.raises(ConfigError, match=message):
        normalize(_base(tmp_path, **extra), "tensorflow")


def test_unknown_op_type_is_an_error_listing_the_known_ones(tmp_path):
    from ratelnn.frontend.tensorflow import converter
    from helpers.stats import small_graph_def

    config = {"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[4, 8, 8, 3]],
              "output_dir": str(tmp_path / "out"), "quant": {"layer_configs": [{"op_type": "Convolution2D",
                                                                                 "data_type": "U8"}]}}
    with pytest.raises(ConfigError, match=r"op_type 'Convolution2D' is not a known op type \(did you mean "
                                          r".*\); known op types: IR: Conv2D, .*TensorFlow: .*ONNX: .*Gemm"):
        converter(small_graph_def(), config)


def test_section_forms_resolve_to_flat_keys_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(ratelnn.config, "_warned_unknown", set())
    config = _base(tmp_path, input_shapes="x:2x4", quant={
        "calibration_method": "KL", "calibration_size": 10, "junk": 1,
        "layer_configs": [{"layer_name": "DEFAULT", "data_type": "S16"}, {"op_type": "FullyConnected",
                                                                        "output_data_type": "FP32"}]},
        compiler={"max_dynamic_batch_size": 8, "check": 2, "opt": 1},
        input_processors=[{"tensor_name": "x", "calibration_dataset": "a.npy", "src_extra_shapes": []}])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = normalize(config, "tensorflow")
    messages = [str(w.message) for w in caught if "unknown config keys" in str(w.message)]
    assert messages == ["ratelnn: unknown config keys kept and ignored: quant.junk, compiler.opt, "
                        "input_processors[].src_extra_shapes"]
    assert c["input_shapes"] == [[2, 4]] and c["quantize_algorithm"] == "kld" and c["calibration_size"] == 10
    assert c["layer_configs"] == [{"start_tensor_names": ["DEFAULT"], "end_tensor_names": ["DEFAULT"],
                                   "data_type": "int16"}, {"op_type": "FullyConnected", "data_type": "fp32"}]
    assert (c["max_dynamic_batch_size"], c["compiler_check"]) == (8, 2)
    assert c["calibration_data"] == {"x": "a.npy"}
    assert not {"quant", "compiler", "input_processors"} & set(c)
    assert normalize(c, "tensorflow") == c                           # resolving is idempotent


def test_pulsar2_dataset_keys_resolve(tmp_path):
    """calibration_format in Pulsar2's spelling, per input, and calibration_size -1 (all)."""
    c = normalize(_base(tmp_path, quant={"calibration_size": -1, "input_configs": [
        {"tensor_name": "x", "calibration_dataset": "x.zip", "calibration_format": "NumpyObject"}]}), "tensorflow")
    assert c["calibration_size"] is None and c["calibration_data"] == {"x": "x.zip"}
    assert c["calibration_format"] == {"x": "numpy_object"}
    one = normalize(_base(tmp_path, input_processors=[{"calibration_format": "Binary"}]), "tensorflow")
    assert one["calibration_format"] == "binary"


def test_from_file_reads_the_sections(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base(tmp_path, quant={"calibration_method": "Percentile"})))
    assert normalize(QuantConfig.from_file(path), "tensorflow")["quantize_algorithm"] == "percentile"
