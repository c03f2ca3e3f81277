"""``ratelnn build`` spelled as Pulsar2's ``pulsar2 build`` (``--input --config --output_dir
--model_type --input_shapes --quant.KEY VALUE``) on ONNX models, and ``ratelnn run`` / ``inspect``
on the ONNX forms: a CNN trained on scikit-learn's digits (Keras, written as ONNX from its
weights) built from a Pulsar2 config alone, judged on held-out digits; a QDQ model from ONNX
Runtime's ``quantize_static`` built as QuantONNX; the override values; the errors of bad input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")

import ratelnn  # noqa: E402
from ratelnn.cli.build import check_build  # noqa: E402
from ratelnn.cli.pulsar2 import apply_overrides, split_overrides  # noqa: E402
from ratelnn.config import normalize  # noqa: E402
from ratelnn.frontend.onnx import recorded_meta  # noqa: E402
from ratelnn.tune.auto import resolved  # noqa: E402
from helpers.cli import call  # noqa: E402
from helpers.onnx_digits import TRAIN, digits_as_onnx, trained_digits_cnn  # noqa: E402

CALIBRATION = 256     # the first training digits calibrate
BATCH = 16


def _top1(model, x, batch=BATCH):
    session = ratelnn.onnx_session(model)
    return np.concatenate([session.run(["probs"], {"images": x[i:i + batch]})[0].argmax(1)
                           for i in range(0, len(x), batch)])


def _files(directory: Path):
    return sorted(p.name for p in Path(directory).iterdir() if p.is_file()) if Path(directory).exists() else []


def _pulsar2_files(d: Path, model, x):
    """``m.onnx``, its calibration inputs ``calib.npy`` (the first CALIBRATION rows of ``x``)
    and ``pulsar2.json``, a Pulsar2 config naming them (no ratelnn-only key), in ``d``."""
    onnx.save(model, str(d / "m.onnx"))
    np.save(d / "calib.npy", x[:CALIBRATION])
    config = {"model_type": "ONNX", "target_hardware": "AX650", "npu_mode": "NPU1",
              "quant": {"input_configs": [{"tensor_name": "images", "calibration_dataset": str(d / "calib.npy"),
                                           "calibration_size": CALIBRATION}],
                        "calibration_method": "MinMax", "precision_analysis": False},
              "input_processors": [{"tensor_name": "images", "tensor_layout": "NCHW", "src_dtype": "FP32"}],
              "compiler": {"check": 0}}
    (d / "pulsar2.json").write_text(json.dumps(config, indent=1))
    return {"dir": d, "model": model, "x": x, "onnx": d / "m.onnx", "config": d / "pulsar2.json"}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The trained model's Pulsar2 files (:func:`_pulsar2_files`), the labels and the
    held-out digits as ``held_out.npy``."""
    d = tmp_path_factory.mktemp("pulsar2")
    keras_model, x, y = trained_digits_cnn()
    model = digits_as_onnx([layer.get_weights() for layer in keras_model.layers if layer.get_weights()])
    float_probs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["probs"], {"images": x[TRAIN:TRAIN + 32]})[0]
    np.testing.assert_allclose(float_probs, keras_model.predict(x[TRAIN:TRAIN + 32].transpose(0, 2, 3, 1),
                                                                verbose=0), atol=1e-5)
    np.save(d / "held_out.npy", x[TRAIN:])
    return {**_pulsar2_files(d, model, x), "y": y}


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """The same CNN with random weights and random inputs, for the errors found before any work."""
    rng = np.random.default_rng(0)
    shapes = [((3, 3, 1, 16), (16,)), ((3, 3, 16, 16), (16,)), ((256, 10), (10,))]
    weights = [(rng.normal(size=w).astype(np.float32) * 0.3, np.zeros(b, np.float32)) for w, b in shapes]
    x = rng.uniform(size=(CALIBRATION, 1, 8, 8)).astype(np.float32)
    return _pulsar2_files(tmp_path_factory.mktemp("pulsar2_bad"), digits_as_onnx(weights), x)


@pytest.fixture(scope="module")
def built(digits):
    """``ratelnn build`` in the Pulsar2 form, precision analysis of the compiled model switched on
    from the command line."""
    out = digits["dir"] / "out"
    result = call(["build", "--input", str(digits["onnx"]), "--config", str(digits["config"]),
                   "--output_dir", str(out), "--output_name", "digits", "--input_shapes", f"images:{BATCH}x1x8x8",
                   "--quant.precision_analysis", "1", "--quant.precision_analysis_mode", "NPUBackend",
                   "--no-progress"])
    return (*result, out)


def test_pulsar2_build_writes_the_forms_and_the_npu_form_keeps_the_float_top1(digits, built):
    code, out, err, out_dir = built
    assert code == 0, err
    assert {"digits_cal.onnx", "digits_quant.onnx", "digits_npu.onnx", "digits_effective_config.json",
            "digits_build.json", "digits_analysis_npu.json"} <= set(_files(out_dir))
    assert check_build(out_dir, "digits") == []
    assert not [f for f in _files(out_dir) if f.startswith(".")], "temporary files left behind"
    effective = json.loads((out_dir / "digits_effective_config.json").read_text())
    assert effective["input_nodes"] == ["images"] and effective["output_nodes"] == ["probs"]
    assert effective["input_shapes"] == [[BATCH, 1, 8, 8]] and effective["precision_analysis"] is True
    assert effective["calibration_data"] == {"images": str(digits["dir"] / "calib.npy")}
    npu = onnx.load(str(out_dir / "digits_npu.onnx"))
    # MinMax is naive unless the automatic defaults, judging the model trained here, chose another
    decided = recorded_meta(npu)["accuracy_auto"]["settings"]
    assert effective["quantize_algorithm"] == decided.get("quantize_algorithm", "naive")
    # the build's folder, or under it the equalized graph's statistics the decision reads
    assert effective["output_dir"] == resolved(decided, str(out_dir)).get("output_dir", str(out_dir))
    assert "float vs npu" in out and "NPU profile (batch 16)" in out
    assert [n.op_type for n in npu.graph.node].count("RatelEngineOp") == 1
    x, y = digits["x"][TRAIN:], digits["y"][TRAIN:]
    float_top1 = float(np.mean(_top1(digits["model"], x) == y))
    npu_top1 = float(np.mean(_top1(npu, x) == y))
    assert float_top1 > 0.9
    assert abs(npu_top1 - float_top1) <= 0.015, (float_top1, npu_top1)


def test_run_and_inspect_read_the_onnx_forms(digits, built, tmp_path):
    out_dir = built[3]
    npu = out_dir / "digits_npu.onnx"
    code, out, err = call(["run", str(npu), "--input", str(digits["dir"] / "held_out.npy"),
                           "--output", str(tmp_path / "probs.npy")])
    assert code == 0, err
    want = ratelnn.onnx_session(onnx.load(str(npu))).run(["probs"], {"images": digits["x"][TRAIN:]})[0]
    np.testing.assert_array_equal(np.load(tmp_path / "probs.npy"), want)
    assert "device time (cost model): " in out and "per batch of 497" in out
    assert "device time (recorded): " in out and "1 engine runs, 497 samples" in out
    code, out, err = call(["inspect", str(npu)])
    assert code == 0, err
    assert "onnx compiled model" in out and "engines (1):" in out and "digits_engine_0" in out
    assert "images  float32  [None, 1, 8, 8]" in out
    kinds = {}
    for form in ("cal", "quant"):
        code, out, err = call(["inspect", str(out_dir / f"digits_{form}.onnx"), "--json"])
        assert code == 0, err
        kinds[form] = json.loads(out)["kind"]
    assert kinds == {"cal": "calibration", "quant": "quantized"}


def test_quantize_static_qdq_model_builds_as_quantonnx_with_its_own_scales(digits, tmp_path):
    """A QDQ model (symmetric int8 activations and weights) from ONNX Runtime's
    quantize_static: recognised as QuantONNX without a config, compiled with no calibration;
    the compiled model agrees with the QDQ model run by ONNX Runtime."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    calib = digits["x"][:CALIBRATION]

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"images": calib[i:i + BATCH]} for i in range(0, CALIBRATION, BATCH)])

        def get_next(self):
            return next(self.batches, None)

    qdq_path = tmp_path / "qdq.onnx"
    quantization.quantize_static(str(digits["onnx"]), str(qdq_path), Reader(),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                 activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8,
                                 extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    out_dir = tmp_path / "out"
    code, _, err = call(["build", "--input", str(qdq_path), "--output_dir", str(out_dir), "--model_type", "ONNX"])
    assert code == 2 and "qdq.onnx is a quantized (QDQ) model" in err and not out_dir.exists()
    code, out, err = call(["build", "--input", str(qdq_path), "--output_dir", str(out_dir),
                           "--quant.precision_analysis", "true", "--no-progress"])
    assert code == 0, err
    assert "building it as QuantONNX" in err and "precision_analysis: skipped" in err
    assert _files(out_dir) == ["probs_build.json", "probs_effective_config.json", "probs_npu.onnx",
                               "probs_quant.onnx"]
    qdq = onnx.load(str(qdq_path))
    assert onnx.load(str(out_dir / "probs_quant.onnx")).SerializeToString() == qdq.SerializeToString()
    assert json.loads((out_dir / "probs_effective_config.json").read_text())["input_shapes"] == [[1, 1, 8, 8]]
    npu = onnx.load(str(out_dir / "probs_npu.onnx"))
    assert "RatelEngineOp" in {n.op_type for n in npu.graph.node}
    x, y = digits["x"][TRAIN:], digits["y"][TRAIN:]
    got, want = _top1(npu, x), _top1(qdq, x)
    assert np.mean(got == want) >= 0.98
    float_top1 = float(np.mean(_top1(digits["model"], x) == y))
    assert abs(float(np.mean(got == y)) - float_top1) <= 0.02


@pytest.mark.no_tf_math
def test_override_values_are_yaml_scalars_and_win_over_the_file():
    argv, overrides = split_overrides(
        ["--debug", "build", "--input", "m.onnx", "--quant.precision_analysis", "1", "--compiler.static_batch_sizes",
         "1", "4", "--quant.calibration_method=MSE", "--compiler.check", "-1", "--quant.layer_configs",
         "[{op_type: Conv, data_type: S16}]", "--output_dir", "out", "--quant.precision_analysis"])
    assert argv == ["--debug", "build", "--input", "m.onnx", "--output_dir", "out"]
    assert overrides == [("quant.precision_analysis", ["1"]), ("compiler.static_batch_sizes", ["1", "4"]),
                         ("quant.calibration_method", ["MSE"]), ("compiler.check", ["-1"]),
                         ("quant.layer_configs", ["[{op_type: Conv, data_type: S16}]"]),
                         ("quant.precision_analysis", [])]
    assert split_overrides(["run", "m.onnx", "--quant.x", "1"]) == (["run", "m.onnx", "--quant.x", "1"], [])

    def resolved(*pairs, **file):
        config = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[1, 4]], "output_dir": "o", **file}
        apply_overrides(config, [(k, v) for k, v in pairs])
        return normalize(config, "onnx")

    for text in ("1", "true", "True", "yes"):
        assert resolved(("quant.precision_analysis", [text]))["precision_analysis"] is True
    assert resolved(("quant.precision_analysis", ["0"]))["precision_analysis"] is False
    assert resolved(("quant.precision_analysis", []))["precision_analysis"] is True
    assert resolved(("compiler.static_batch_sizes", ["[1,2]"]))["static_batch_sizes"] == [1, 2]
    assert resolved(("compiler.static_batch_sizes", ["1", "4"]))["static_batch_sizes"] == [1, 4]
    assert resolved(("compiler.static_batch_sizes", ["8"]))["static_batch_sizes"] == [8]
    assert resolved(("compiler.check", ["1"]))["compiler_check"] == 1
    config = resolved(("quant.calibration_method", ["MSE"]),
                      ("quant.layer_configs", ["[{op_type: Conv, data_type: S16}]"]),
                      quantize_algorithm="kld", quant={"calibration_method": "KL", "calibration_size": 8})
    assert config["quantize_algorithm"] == "mse" and config["calibration_size"] == 8
    assert config["layer_configs"] == [{"op_type": "Conv", "data_type": "int16"}]


def _bad_cases(files, d: Path):
    model, cfg = str(files["onnx"]), str(files["config"])
    out = str(d / "out")
    build = lambda *more: ["build", "--input", model, "--config", cfg, "--output_dir", out, *more]  # noqa: E731
    return {
        "missing input file": (["build", "--input", str(d / "absent.onnx"), "--config", cfg, "--output_dir", out],
                               "absent.onnx does not exist"),
        "unknown model type": (build("--model_type", "Caffe"), "unknown --model_type 'Caffe'"),
        "misspelt model type": (build("--model_type", "QuantOnx"), "did you mean 'QuantONNX'?"),
        "unknown section": (build("--quantt.calibration_method", "MSE"),
                            "--quantt.calibration_method: ratelnn reads no section 'quantt' (did you mean 'quant'?)"),
        "unknown key": (build("--quant.calibration_metod", "MSE"),
                        "reads no key 'calibration_metod' in quant (did you mean 'calibration_method'?)"),
        "unreadable value": (build("--quant.layer_configs", "[{op_type: Conv"),
                             "--quant.layer_configs: cannot read the value"),
        "value of the wrong type": (build("--quant.calibration_size", "many"),
                                    "quant.calibration_size must be an integer, got 'many'"),
        "malformed input_shapes": (build("--input_shapes", "images=16x1x8x8"), "the entry 'images=16x1x8x8'"),
        "input_shapes naming a non-input": (build("--input_shapes", "pixels:16x1x8x8"),
                                            "--input_shapes names ['pixels'], which is not an input"),
        "QuantONNX given a float model": (build("--model_type", "QuantONNX"), "m.onnx is a float model"),
        "forms mixed": (["build", cfg, "--input", model, "--output_dir", out], "do not mix"),
        "no output_dir": (["build", "--input", model, "--config", cfg], "--output_dir DIR is required"),
    }


@pytest.mark.no_tf_math
@pytest.mark.parametrize("case", ["missing input file", "unknown model type", "misspelt model type",
                                  "unknown section", "unknown key", "unreadable value", "value of the wrong type",
                                  "malformed input_shapes", "input_shapes naming a non-input",
                                  "QuantONNX given a float model", "forms mixed", "no output_dir"])
def test_bad_input_exits_2_naming_it_and_writes_nothing(untrained, tmp_path, case):
    argv, expected = _bad_cases(untrained, tmp_path)[case]
    code, out, err = call(argv)
    assert code == 2, err
    assert expected in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "error" in line]) == 1
    assert _files(tmp_path / "out") == []
