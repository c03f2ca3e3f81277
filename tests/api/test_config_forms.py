"""Configuration forms (docs/architecture.md §14, docs/config-forms.md): a Pulsar2-style build
config (``quant:``, ``input_processors:``, ``compiler:`` sections, U8/S16/FP32, ONNX op type
``Conv``, a subgraph, ``"name:NxHxWxC"`` input shapes) builds the trained Fashion-MNIST CNN
through the CLI into the same engines, byte for byte, as the equivalent native config; the
layer_configs forms of the Pulsar2 build guide; the generated key tables; every ConfigError."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import ratelnn.config
from helpers.cli import succeeds
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
                  "layer_configs": [{"op_type": "Conv", "data_type": "S16"},
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
    succeeds(["build", str(d / "pulsar2.yaml"), "--work_dir", str(d / "p2"), *common])
    succeeds(["build", str(d / "native.json"), "--work_dir", str(d / "nat"), "--data", str(d / "u8_native.npy"),
              *common])
    return d, matmul


def test_pulsar2_config_builds_the_same_engines_as_the_native_one(builds):
    from ratelnn.frontend.tensorflow import recorded_meta
    from ratelnn.frontend.tensorflow.model_io import engine_nodes, read_graphdef

    d, matmul = builds
    p2, nat = (read_graphdef(str(d / f / "cnn_npu.pb")) for f in ("p2", "nat"))
    engines = engine_nodes(p2)
    assert engines and engines == engine_nodes(nat)
    # the same quantized model; its recorded decision holds each config's own layer entries as
    # written (op_type "Conv" / "Conv2D") when the automatic step adds entries of its own
    quant = [read_graphdef(str(d / f / "cnn_quant.pb")) for f in ("p2", "nat")]
    decisions = [recorded_meta(g).get("accuracy_auto", {}) for g in quant]
    for decision in decisions:
        for entry in decision.get("settings", {}).get("layer_configs", []):
            entry.pop("op_type", None)
    assert decisions[0] == decisions[1]
    bodies = [[n.SerializeToString(deterministic=True) for n in g.node if not n.name.startswith("ratelnn/")]
              for g in quant]
    assert bodies[0] == bodies[1]
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
    # mse as configured, unless the automatic step, below its bound on this machine, chose another
    assert eff[0]["quantize_algorithm"] == decisions[0].get("settings", {}).get("quantize_algorithm", "mse")
    assert eff[0]["layer_configs"][0]["data_type"] == "int16"


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
    "16-bit data_type beside output_data_type": (
        {"layer_configs": [{"layer_name": "a", "data_type": "S16", "output_data_type": "U8"}]},
        r"layer_configs\[0\] \(layer_name 'a'\): data_type 'S16' beside output_data_type 'uint8' is the "
        r"layer's input precision, which ratelnn takes from the layer producing that input"),
    "U16 data_type": ({"quant": {"layer_configs": [{"op_type": "Add", "data_type": "U16"}]}},
                      r"quant.layer_configs\[0\] \(op_type 'Add'\): data_type 'U16': U16 is unsigned 16-bit "
                      r"\(codes 0..65535\).*cannot hold it exactly: use S16"),
    "U16 output_data_type": ({"layer_configs": [{"start_tensor_names": ["a"], "end_tensor_names": ["b"],
                                                 "output_data_type": "u16"}]},
                             r"layer_configs\[0\] \(the subgraph \['a'\] -> \['b'\]\): output_data_type "
                             r"'u16': U16 is unsigned 16-bit.*use S16"),
    "FP32 weights": ({"quant": {"layer_configs": [{"layer_names": ["c"], "data_type": "U8",
                                                   "weight_data_type": "FP32"}]}},
                     r"\(layer_name \['c'\]\): weight_data_type 'FP32': the weights of a layer on the NPU are "
                     r"int8 \(S8\); to keep the whole layer float give it data_type FP32"),
    "layer_name and layer_names": ({"layer_configs": [{"layer_name": "a", "layer_names": ["b"],
                                                       "data_type": "S8"}]},
                                   r"layer_configs\[0\] gives both layer_name and layer_names"),
    "op_types not a list": ({"quant": {"layer_configs": [{"op_types": "Conv", "data_type": "S8"}]}},
                            r"quant.layer_configs\[0\].op_types must be a list"),
    "input_shapes with an empty dim": ({"input_shapes": "x:16,,4"}, r"the entry 'x:16,,4' is neither"),
    "precision_analysis not a bool": ({"quant": {"precision_analysis": "yes"}},
                                      r"quant.precision_analysis must be true or false, got 'yes'"),
    "precision_analysis_method": ({"quant": {"precision_analysis_method": "Layerwise"}},
                                  r"'precision_analysis_method' must be one of \('PerLayer', 'EndToEnd'\)"),
    "precision_analysis_mode": ({"precision_analysis_mode": "NPU"},
                                r"'precision_analysis_mode' must be one of \('Reference', 'NPUBackend'\)"),
    "FP32 conv bias": ({"quant": {"conv_bias_data_type": "FP32"}}, r"FP32 biases are not supported"),
    "compiler check out of range": ({"compiler": {"check": 4}}, r"compiler.check must be 0 \(no check\), 1 \(all "
                                                                r"close\), 2 \(all equal\) or 3 \(cosine\), got 4"),
    "compiler check_mode": ({"compiler": {"check_mode": "Bisect"}},
                            r"'compiler_check_mode' must be one of \('CheckOutput', 'CheckPerLayer'\)"),
    "compiler check_atol negative": ({"compiler": {"check_atol": -0.1}}, r"'compiler_check_atol' must be a finite"),
    "compiler check_rtol a string": ({"compiler": {"check_rtol": "1e-5"}}, r"compiler.check_rtol must be a number"),
    "compiler input_sample_dir a list": ({"compiler": {"input_sample_dir": ["a"]}},
                                         r"compiler.input_sample_dir must be a string"),
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
    "flat compiler_check": ({"compiler_check": 5}, r"'compiler_check' must be 0, 1, 2 or 3, got 5"),
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


def test_pulsar2_check_and_sample_keys_resolve(tmp_path):
    """compiler.check_mode / check_rtol / check_atol / check_cosine_simularity (Pulsar2's
    spelling) / input_sample_dir and quant.input_sample_dir -> the flat keys; defaults as
    Pulsar2's (precision analysis PerLayer, check mode CheckOutput, rtol 1e-5, atol 0)."""
    from ratelnn.config import normalize
    base = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[2, 4]], "output_dir": str(tmp_path)}
    c = normalize(dict(base), "tensorflow")
    assert (c["precision_analysis_method"], c["compiler_check_mode"], c["compiler_check_rtol"],
            c["compiler_check_atol"], c["compiler_check_cosine"]) == ("PerLayer", "CheckOutput", 1e-5, 0, 0.999)
    c = normalize(dict(base, quant={"input_sample_dir": "analysis/"},
                       compiler={"check": 3, "check_mode": "CheckPerLayer", "check_rtol": 1e-3, "check_atol": 0.01,
                                 "check_cosine_simularity": 0.99, "input_sample_dir": "check/"}), "tensorflow")
    assert (c["compiler_check"], c["compiler_check_mode"], c["compiler_check_rtol"], c["compiler_check_atol"],
            c["compiler_check_cosine"]) == (3, "CheckPerLayer", 1e-3, 0.01, 0.99)
    assert (c["precision_analysis_data"], c["compiler_check_data"]) == ("analysis/", "check/")


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


def test_layer_configs_of_the_build_guide_resolve_to_native_entries(tmp_path):
    """The guide's forms: a Conv with U8 input and FP32 output (the layer float), the plural
    ``layer_names``/``op_types``, ``weight_data_type: S8`` (the NPU's weights: nothing to set)."""
    c = normalize(_base(tmp_path, quant={"layer_configs": [
        {"op_type": "Conv", "data_type": "U8", "output_data_type": "FP32"},
        {"layer_names": ["conv_2"], "data_type": "S16", "output_data_type": "S16", "weight_data_type": "S8"},
        {"op_types": ["Gemm", "Add"], "data_type": "S8"},
        {"layer_name": "mean", "data_type": "S8", "output_data_type": "U8"}]}), "tensorflow")
    assert c["layer_configs"] == [{"op_type": "Conv", "data_type": "fp32"},
                                  {"layer_name": ["conv_2"], "data_type": "int16"},
                                  {"op_type": ["Gemm", "Add"], "data_type": "int8"},
                                  {"layer_name": "mean", "data_type": "uint8"}]
    assert normalize(c, "tensorflow") == c


def test_input_shapes_take_commas_between_dims(tmp_path):
    two = _base(tmp_path, input_nodes=["a", "b:0"], input_shapes="b:2,3;a:16,224,224,3")
    assert normalize(two, "tensorflow")["input_shapes"] == [[16, 224, 224, 3], [2, 3]]
    assert normalize(_base(tmp_path, input_shapes=["x:2,4"]), "tensorflow")["input_shapes"] == [[2, 4]]
    assert normalize(_base(tmp_path, input_shapes="2,4"), "tensorflow")["input_shapes"] == [[2, 4]]


DOC = Path(__file__).resolve().parents[2] / "docs" / "config-forms.md"
BEGIN = "<!-- BEGIN generated: python -m ratelnn.config_tables --markdown -->"
END = "<!-- END generated -->"


def test_docs_key_tables_are_generated_from_the_resolvers_tables():
    from ratelnn import config_tables

    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC} lost its generated-table markers"
    committed = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert committed == config_tables.markdown_tables(), (
        "docs/config-forms.md is out of date: paste `python -m ratelnn.config_tables --markdown` between its markers")


def test_every_key_has_one_status_and_the_ignored_ones_are_named_with_their_reason(tmp_path, monkeypatch):
    """No key is both mapped and ignored; a Pulsar2 key without effect is named in the one
    warning with the reason the table gives."""
    from ratelnn import config_forms, config_tables

    rows = list(config_tables.pulsar2_rows()) + list(config_tables.ascend_rows())
    keys = [key for key, _, _ in rows]
    assert len(keys) == len(set(keys))
    assert {status for _, _, status in rows} == {config_forms.MAPPED, config_forms.IGNORED, config_forms.REFUSED}
    monkeypatch.setattr(ratelnn.config, "_warned_unknown", set())
    with pytest.warns(UserWarning) as caught:
        normalize(_base(tmp_path, target_hardware="AX650", quant={"enable_smooth_quant": True, "junk": 1}),
                  "tensorflow")
    assert [str(w.message) for w in caught] == [
        "ratelnn: unknown config keys kept and ignored: quant.junk; keys of other toolchains without effect "
        "here: target_hardware: ratelnn builds for its own NPU (device_info); quant.enable_smooth_quant: no "
        "SmoothQuant here; equalization is cross-layer equalization"]
