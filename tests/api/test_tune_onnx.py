"""ConvertImpl.tune on an ONNX model: the digits CNN trained in the test (tests/helpers/
onnx_digits.py), tuned on 64 training digits for the cosine of its logits to FP32.  The tuned
configuration is at least as close to FP32 as plain int8 on the 497 held-out digits, and
result.config rebuilds the chosen model without calibrating (identical engines and figures)."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")

from helpers.onnx_digits import TRAIN, trained_digits_onnx  # noqa: E402
from ratelnn.frontend.onnx import converter  # noqa: E402
from ratelnn.runners import run_model  # noqa: E402

BATCH, SAMPLES = 8, 64
TARGET = 0.9999


def _config(folder, **extra):
    return {"input_nodes": ["images"], "output_nodes": ["logits"], "input_shapes": [[BATCH, 1, 8, 8]],
            "output_dir": str(folder), **extra}


def _cosine(a, b):
    """The tuning metric's cosine: of all the outputs, flattened."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _logits(model, x):
    return run_model("onnx", model, {"images": x}, ["logits"])[0]


def _files(folder):
    """path -> SHA-256 of every file under ``folder``."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                found[os.path.join(root, name)] = hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    model, x, _ = trained_digits_onnx()
    tmp = tmp_path_factory.mktemp("tune_onnx")
    result = converter(model, _config(tmp / "stats")).tune(x[:SAMPLES], target=TARGET, max_evals=10,
                                                           progress=False)
    return model, x, tmp, result


def test_tuned_onnx_config_is_at_least_as_close_to_fp32_as_plain_int8_on_held_out_digits(tuned):
    model, x, tmp, r = tuned
    assert r.met and r.metric >= TARGET and r.latency_s <= 1.3 * r.baseline_latency_s
    plain = converter(model, _config(tmp / "plain", quantize_algorithm="naive", auto_int16=False,
                                     accuracy_auto=False))
    plain.calibrate(x[:SAMPLES][np.arange(SAMPLES) % 4 != 3], progress=False)   # the part tune calibrates on
    held_out = x[TRAIN:]
    fp32 = _logits(model, held_out)
    tuned_npu = converter(model, _config(tmp / "stats", **r.config)).to_npu()
    plain_figure, tuned_figure = (_cosine(_logits(m, held_out), fp32) for m in (plain.to_npu(), tuned_npu))
    print(f"\nheld-out cosine to FP32: plain int8 {plain_figure:.6f}, tuned ({r.chosen.label}) {tuned_figure:.6f}")
    assert tuned_figure >= plain_figure


def test_onnx_config_reproduces_without_recalibrating(tuned):
    model, x, tmp, r = tuned
    before = _files(tmp)
    graph_npu = converter(model, _config(tmp / "stats", **r.config)).to_npu()
    assert _files(tmp) == before                                  # no statistics written
    engines = [n for n in graph_npu.graph.node if n.op_type == "RatelEngineOp"]
    assert engines
    digest = hashlib.sha256(b"".join(onnx.helper.get_attribute_value(a) for n in engines for a in n.attribute
                                     if a.name == "engine")).hexdigest()
    assert digest == r.chosen.engines_sha256
    data = x[:SAMPLES]
    scores, fp32 = _logits(graph_npu, data), _logits(model, data)
    held = np.arange(SAMPLES) % 4 == 3          # every 4th sample is held out
    for rows, figure in ((~held, r.metric), (held, r.held_out_metric)):
        assert _cosine(scores[rows], fp32[rows]) == pytest.approx(figure, abs=1e-9)
