"""Ascend's calibration keys (docs/config-forms.md): ``INPUT_SHAPE`` with commas, a folder of
``.bin`` files as ``INPUT_DATA_DIR``, AMCT's ``CONFIG_FILE`` (proto text and JSON) mapped key by
key with the rest named in one warning beside ``SOC_VERSION``; a build of the trained
Fashion-MNIST CNN from them; and every ConfigError."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import yaml

import ratelnn.config
from helpers.cli import succeeds
from ratelnn.config import ConfigError, normalize

BATCH = 8
BATCHES = 2            # CONFIG_FILE batch_num: 2 batches of 8 samples
CFG = """# global quantize parameter
batch_num : 2
activation_offset : false
joint_quant : false
skip_layer_types : "MatMul"
do_fusion : true
skip_fusion_layers : "
conv_1
"
common_config : {
    arq_quantize : {
        channel_wise : true
    }
    ifmr_quantize : {
        search_range_start : 0.7
        search_step : 0.01
    }
}
override_layer_configs : {
    layer_name : "conv_3"
    calibration_config : {
        activation_quant_params { num_bits: 16 }
        weight_quant_params { channel_wise: false }
    }
}
"""
NATIVE = {"calibration_size": BATCHES * BATCH, "quantize_algorithm": "mse",
          "quant_cfg": {"conv_weights": {"is_per_channel": True}, "matmul_weights": {"is_per_channel": True}},
          "layer_configs": [{"op_type": ["MatMul"], "data_type": "fp32"},
                            {"layer_name": "conv_3", "data_type": "int16"}]}


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(ratelnn.config, "_warned_unknown", set())


def _ascend(tmp_path, **extra):
    (tmp_path / "bins").mkdir(exist_ok=True)
    (tmp_path / "quant.cfg").write_text(CFG)
    return {"output_nodes": ["probs"], "output_dir": str(tmp_path / "out"),
            "INPUT_SHAPE": f"images:{BATCH},28,28,1", "INPUT_DATA_DIR": str(tmp_path / "bins"),
            "CONFIG_FILE": str(tmp_path / "quant.cfg"), "SOC_VERSION": "Ascend310P3", **extra}


def test_ascend_keys_resolve_to_the_native_config_with_one_warning(tmp_path):
    with pytest.warns(UserWarning) as caught:
        c = normalize(_ascend(tmp_path, LOG_LEVEL="info"), "tensorflow")
    assert (c["input_nodes"], c["input_shapes"]) == (["images"], [[BATCH, 28, 28, 1]])
    assert (c["calibration_data"], c["calibration_format"]) == (str(tmp_path / "bins"), "binary")
    assert {k: c[k] for k in NATIVE} == NATIVE
    assert not {"INPUT_SHAPE", "INPUT_DATA_DIR", "CONFIG_FILE", "SOC_VERSION", "LOG_LEVEL"} & set(c)
    [message] = [str(w.message) for w in caught]
    path = tmp_path / "quant.cfg"
    assert message.startswith("ratelnn: keys of other toolchains without effect here: SOC_VERSION: the Ascend "
                              "chip to calibrate for, no meaning here")
    for named in ("LOG_LEVEL: AMCT's log level", f"CONFIG_FILE {path} skip_fusion_layers: ratelnn folds every",
                  f"CONFIG_FILE {path} common_config.ifmr_quantize.search_range_start, "
                  "common_config.ifmr_quantize.search_step: ratelnn's mse picks the threshold",
                  "override_layer_configs[conv_3].calibration_config.weight_quant_params.channel_wise: set per role"):
        assert named in message
    for mapped in ("batch_num", "activation_offset", "joint_quant", "skip_layer_types", "do_fusion", "arq_quantize"):
        assert f" {mapped}" not in message.replace("weight_quant_params.channel_wise", "")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert normalize(c, "tensorflow") == c                         # resolving is idempotent


def test_amct_json_config_maps_like_the_proto_text(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "version": 1, "batch_num": 2, "activation_offset": True, "do_fusion": True,
        "conv_1": {"quant_enable": False},
        "conv_3": {"quant_enable": True,
                   "activation_quant_params": {"num_bits": 16, "max_percentile": 0.999999, "search_range": [0.7, 1.3],
                                               "act_algo": "hfmg"},
                   "weight_quant_params": {"wts_algo": "arq_quantize", "channel_wise": True, "num_bits": 8}}}))
    config = _ascend(tmp_path, CONFIG_FILE=str(tmp_path / "config.json"))
    with pytest.warns(UserWarning, match=r"version: the file's format version.*activation_offset: ratelnn "
                                         r"quantizes symmetrically.*conv_3.activation_quant_params.act_algo: one "
                                         r"calibration method"):
        c = normalize(config, "tensorflow")
    assert c["calibration_size"] == 2 * BATCH and c["quantize_algorithm"] == "naive"
    assert c["layer_configs"] == [{"layer_name": "conv_1", "data_type": "fp32"},
                                  {"layer_name": "conv_3", "data_type": "int16"}]


def test_top_level_quant_params_are_the_whole_models_and_messages_are_not_layers(tmp_path):
    (tmp_path / "top.cfg").write_text(
        "batch_num: 1\nweight_quant_params { channel_wise: false num_bits: 8 }\n"
        "activation_quant_params { act_algo: hfmg num_bits: 16 num_of_bins: 4096 }\n"
        "nuq_config { mapping_file: \"m.json\" }\n")
    with pytest.warns(UserWarning, match=r"activation_quant_params.num_of_bins: ratelnn's mse picks.*nuq_config: "
                                         r"no non-uniform quantization here"):
        c = normalize(_ascend(tmp_path, CONFIG_FILE=str(tmp_path / "top.cfg")), "tensorflow")
    assert c["calibration_size"] == BATCH and c["quantize_algorithm"] == "mse"
    assert c["quant_cfg"] == {role: {"is_per_channel": False, "num_bits": 8} for role in ("conv_weights",
                                                                                          "matmul_weights")}
    assert c["layer_configs"] == [{"start_tensor_names": ["DEFAULT"], "end_tensor_names": ["DEFAULT"],
                                   "data_type": "int16"}]


def test_ascend_inputs_pair_with_input_shape_names(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    (tmp_path / "b.bin").write_bytes(b"")
    c = normalize({"output_nodes": ["y"], "output_dir": str(tmp_path / "out"), "INPUT_SHAPE": "b:4,3;a:4,2,2",
                   "INPUT_DATA_DIR": f"{tmp_path / 'a'},{tmp_path / 'b.bin'}", "INPUT_FORMAT": "NHWC"}, "tensorflow")
    assert c["input_nodes"] == ["b", "a"] and c["input_shapes"] == [[4, 3], [4, 2, 2]]
    assert c["calibration_data"] == {"b": str(tmp_path / "a"), "a": str(tmp_path / "b.bin")}
    assert c["calibration_format"] == {"b": "binary"} and c["data_format"] == "NHWC"
    given = normalize({"input_nodes": ["a", "b"], "output_nodes": ["y"], "output_dir": str(tmp_path / "out"),
                       "INPUT_SHAPE": "b:4,3;a:4,2,2", "INPUT_FORMAT": "ND"}, "tensorflow")
    assert given["input_shapes"] == [[4, 2, 2], [4, 3]] and given["data_format"] is None


def _bad(tmp_path):
    (tmp_path / "bad.cfg").write_text("batch_num: 2\ncommon_config {\n  arq_quantize { channel_wise: true }\n")
    (tmp_path / "stray.cfg").write_text("batch_num: 2\n}\n")
    (tmp_path / "bits.cfg").write_text("common_config { activation_quant_params { num_bits: 4 } }")
    (tmp_path / "bad.json").write_text("{\"batch_num\": 2,")
    return {
        "malformed INPUT_SHAPE": ({"INPUT_SHAPE": "images:8,28,28,1x"},
                                  r"INPUT_SHAPE 'images:8,28,28,1x': input_shapes must be .* strings like "
                                  r"'name:1x224x224x3' or 'name:1,224,224,3'.*the entry 'images:8,28,28,1x' is neither"),
        "INPUT_SHAPE half named": ({"INPUT_SHAPE": "images:8,28;28,1"},
                                   r"INPUT_SHAPE 'images:8,28;28,1': input_shapes .*: name every shape or none"),
        "INPUT_SHAPE without names": ({"INPUT_SHAPE": "8,28,28,1"}, r"INPUT_SHAPE '8,28,28,1' names no input and "
                                                                    r"the config has no input_nodes"),
        "INPUT_SHAPE of another input": ({"input_nodes": ["x"], "INPUT_SHAPE": "images:8,28,28,1"},
                                         r"INPUT_SHAPE 'images:8,28,28,1': input_shapes names \['images'\], which are not input_nodes \['x'\]"),
        "missing INPUT_DATA_DIR": ({"INPUT_DATA_DIR": str(tmp_path / "nowhere")},
                                   r"INPUT_DATA_DIR '.*nowhere': no such folder or file"),
        "INPUT_DATA_DIR paths per input": ({"INPUT_DATA_DIR": f"{tmp_path},{tmp_path}"},
                                           r"INPUT_DATA_DIR gives 2 paths for 1 inputs \['images'\]"),
        "missing CONFIG_FILE": ({"CONFIG_FILE": str(tmp_path / "none.cfg")},
                                r"CONFIG_FILE '.*none.cfg': cannot read it \(FileNotFoundError"),
        "CONFIG_FILE a folder": ({"CONFIG_FILE": str(tmp_path)}, r"CONFIG_FILE '.*': cannot read it"),
        "unclosed brace": ({"CONFIG_FILE": str(tmp_path / "bad.cfg")},
                           r"CONFIG_FILE '.*bad.cfg' line 3: a '\{' is never closed"),
        "stray brace": ({"CONFIG_FILE": str(tmp_path / "stray.cfg")}, r"'.*stray.cfg' line 2: a '\}' closes nothing"),
        "bad JSON": ({"CONFIG_FILE": str(tmp_path / "bad.json")}, r"CONFIG_FILE '.*bad.json': not valid JSON"),
        "4-bit activations": ({"CONFIG_FILE": str(tmp_path / "bits.cfg")},
                              r"CONFIG_FILE common_config.activation_quant_params.num_bits = 4: the NPU's "
                              r"activations are 8 or 16 bits"),
        "batch_num without a batch": ({"INPUT_SHAPE": None, "input_nodes": ["images"], "input_shapes": [[None, 4]]},
                                      r"batch_num counts batches: input_shapes \(or INPUT_SHAPE\) must fix the batch"),
        "FP16 inputs": ({"INPUT_FP16_NODES": "images"}, r"INPUT_FP16_NODES = 'images': float16 `.bin` inputs"),
        "INPUT_FORMAT": ({"INPUT_FORMAT": "NC1HWC0"}, r"INPUT_FORMAT 'NC1HWC0' is not one of NCHW, NHWC, ND"),
        "both forms differ": ({"quantize_algorithm": "kld"},
                              r"quantize_algorithm = 'kld' and CONFIG_FILE .*quant.cfg = 'mse' set the same thing"),
        "quant_cfg differs": ({"quant_cfg": {"conv_weights": {"is_per_channel": False}}},
                              r"quant_cfg.conv_weights.is_per_channel = False and CONFIG_FILE .* \(= True\)"),
    }


@pytest.mark.parametrize("case", ["malformed INPUT_SHAPE", "INPUT_SHAPE half named", "INPUT_SHAPE without names", "INPUT_SHAPE of another input",
                                  "missing INPUT_DATA_DIR", "INPUT_DATA_DIR paths per input", "missing CONFIG_FILE",
                                  "CONFIG_FILE a folder", "unclosed brace", "stray brace", "bad JSON",
                                  "4-bit activations", "batch_num without a batch", "FP16 inputs", "INPUT_FORMAT",
                                  "both forms differ", "quant_cfg differs"])
def test_bad_ascend_key_is_a_config_error_naming_it(tmp_path, case):
    extra, message = _bad(tmp_path)[case]
    config = {k: v for k, v in {**_ascend(tmp_path), **extra}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        normalize(config, "tensorflow")


# ---------------------------------------------------------------- a build from them
@pytest.fixture(scope="module")
def ascend_build(fashion_mnist, fashion_cnn, tmp_path_factory):
    """The CNN built by ``ratelnn build`` from the Ascend keys (a folder of 4 .bin files of 8
    float32 samples each, of which batch_num 2 x 8 are used); returns (folder, frozen graph,
    input name, the samples)."""
    from ratelnn.frontend.tensorflow import freeze_keras

    d = tmp_path_factory.mktemp("ascend")
    graph_def, ins, outs = freeze_keras(fashion_cnn)
    (d / "cnn.pb").write_bytes(graph_def.SerializeToString())
    (x_train, _), _ = fashion_mnist
    samples = x_train[:4 * BATCH].astype(np.float32)
    (d / "bins").mkdir()
    for i in range(4):
        samples[i * BATCH:(i + 1) * BATCH].tofile(d / "bins" / f"part_{i}.bin")
    (d / "quant.cfg").write_text(CFG)
    config = {"output_nodes": outs, "INPUT_SHAPE": f"{ins[0]}:{BATCH},28,28,1", "INPUT_DATA_DIR": str(d / "bins"),
              "CONFIG_FILE": str(d / "quant.cfg"), "SOC_VERSION": "Ascend310P3"}
    (d / "ascend.yaml").write_text(yaml.safe_dump(config))
    succeeds(["build", str(d / "ascend.yaml"), "--model", str(d / "cnn.pb"), "--work_dir", str(d / "out"),
              "--output_name", "cnn", "--no-progress", "--forms", "npu"])
    return d, graph_def, ins[0], samples


def test_ascend_config_builds_from_a_folder_of_bin_files(ascend_build, fashion_mnist):
    """The build calibrated on the folder's first 16 samples (the same statistics as those
    samples given as an array), kept the MatMul float, and agrees with the float model on test
    images it never saw."""
    from ratelnn.calibration.stats import load_statistics
    from ratelnn.frontend.tensorflow import converter, recorded_meta
    from ratelnn.frontend.tensorflow.model_io import read_graphdef
    from helpers.qat import run_graph

    d, graph_def, name, samples = ascend_build
    effective = json.loads((d / "out" / "cnn_effective_config.json").read_text())
    # the translation, with the keys the automatic step decided on this machine (if any) on top
    decided = recorded_meta(read_graphdef(str(d / "out" / "cnn_npu.pb"))).get("accuracy_auto", {}).get("settings", {})
    assert decided.get("layer_configs", NATIVE["layer_configs"])[:2] == NATIVE["layer_configs"]
    assert {k: effective[k] for k in NATIVE} == dict(NATIVE, **{k: v for k, v in decided.items() if k in NATIVE})
    built = load_statistics(d / "out")
    native = {k: v for k, v in effective.items() if k not in ("calibration_data", "calibration_format")}
    conv = converter(graph_def, {**native, "output_dir": str(d / "arrays")})
    again = conv.calibrate(samples[:BATCHES * BATCH], progress=False)
    assert built.keys() == again.keys() and all(built[t] == again[t] for t in built)
    assert all(built[t].histogram == again[t].histogram for t in built)
    npu = read_graphdef(str(d / "out" / "cnn_npu.pb"))
    assert any(n.op == "RatelEngineOp" for n in npu.node) and any(n.op == "MatMul" for n in npu.node)
    _, (x_test, _) = fashion_mnist
    x = x_test[:512]
    want, got = (run_graph(g, {f"{name}:0": x}, f"{effective['output_nodes'][0]}:0") for g in (graph_def, npu))
    agreement = float(np.mean(want.argmax(1) == got.argmax(1)))
    print(f"top-1 agreement with float on {len(x)} test images: {agreement:.4f}")
    assert agreement >= 0.97
