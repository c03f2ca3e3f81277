"""The accuracy passes (docs/quantization.md, "Accuracy passes") on a depthwise-separable
Keras CNN trained here on scikit-learn's digits (ratelnn.testing.dwsep_digits), its
depthwise/pointwise channels then imbalanced without changing its float function:

- equalization leaves the FP32 outputs unchanged and wins back the int8 accuracy that the
  imbalance costs; its statistics cannot be mixed with an unequalized calibration;
- with per-tensor weights, empirical bias correction and AdaRound raise the int8 cosine and
  never lower top-1 on the held-out split (the calibration sample is the train split)."""
from __future__ import annotations

import tempfile
import warnings

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")

BATCH = 64
PER_TENSOR = {"conv_weights": {"is_per_channel": False}, "matmul_weights": {"is_per_channel": False}}


@pytest.fixture(scope="module")
def digits_models(request):
    """(imbalanced frozen graph (spread 1000), mildly imbalanced one (spread 30), input, output,
    calibration images, held-out images, labels)."""
    import ratelnn
    from ratelnn.datasets import load_digits_images
    from ratelnn.frontend.tensorflow import freeze_keras
    from ratelnn.testing.dwsep_digits import cached_dwsep, imbalance
    ratelnn.tf_init()
    (x_train, y_train), (x_test, y_test) = load_digits_images()
    cache = request.config.cache.mkdir("ratelnn-models")
    graphs = []
    for spread in (1000.0, 30.0):
        graph_def, inputs, outputs = freeze_keras(imbalance(cached_dwsep(cache, x_train, y_train), spread),
                                                  [[None, 8, 8, 1]])
        graphs.append(graph_def)
    return graphs[0], graphs[1], inputs[0], outputs[0], x_train[:512], x_test, y_test


def _config(inp, out, **extra):
    return {"input_nodes": [inp], "output_nodes": [out], "input_shapes": [[BATCH, 8, 8, 1]],
            "output_dir": tempfile.mkdtemp(prefix="accuracy-passes-"), "auto_int16": False,
            "accuracy_auto": False, **extra}   # each pass measured against plain int8


def _run(graph_def, inp, out, x):
    from ratelnn.runners import run_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_model("tensorflow", graph_def, {inp: x}, [out])[0]


def _cosine(f, q) -> float:
    return float(np.mean(np.sum(f * q, 1) / np.linalg.norm(f, axis=1) / np.linalg.norm(q, axis=1)))


def test_equalization_is_exact_in_fp32_and_wins_back_int8(digits_models):
    from ratelnn.errors import CalibrationError
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.ir.evaluate import evaluate
    graph_def, _, inp, out, x_cal, x_test, y_test = digits_models
    fp32 = _run(graph_def, inp, out, x_test)
    assert np.mean(fp32.argmax(1) == y_test) > 0.93
    plain = converter(graph_def, _config(inp, out))
    plain.calibrate(x_cal, progress=False)
    naive = _run(plain.to_quant(), inp, out, x_test)
    eq = converter(graph_def, _config(inp, out, equalization=True))
    ir_out = eq.graph.outputs[0]
    np.testing.assert_allclose(evaluate(eq.graph, {inp: x_test})[ir_out], fp32, atol=2e-5)
    np.testing.assert_allclose(_run(eq.handler.export_graph(eq.graph), inp, out, x_test), fp32, atol=2e-5)
    eq.calibrate(x_cal, progress=False)
    quant, npu = (_run(m, inp, out, x_test) for m in (eq.to_quant(), eq.to_npu()))
    acc = {k: float(np.mean(v.argmax(1) == y_test)) for k, v in
           {"fp32": fp32, "naive": naive, "cle": quant, "cle_npu": npu}.items()}
    # imbalanced channels a thousandfold apart: int8 collapses (0.14 top-1 here) and CLE restores it
    assert acc["naive"] < acc["fp32"] - 0.3, acc
    assert acc["cle"] >= acc["fp32"] - 0.01 and acc["cle_npu"] >= acc["fp32"] - 0.015, acc
    assert _cosine(fp32, quant) > 0.99 > _cosine(fp32, naive) + 0.3
    # the equalized graph is another graph: its statistics are not the unequalized model's
    with pytest.raises(CalibrationError, match="holds the calibration statistics"):
        converter(graph_def, dict(plain.config, equalization=True)).to_quant()


@pytest.mark.parametrize("passes", [{"bias_correction": "empirical"}, {"adaround_iterations": 200},
                                    {"adaround_iterations": 200, "bias_correction": "empirical"}])
def test_bias_correction_and_adaround_help_on_held_out_data(digits_models, passes):
    from ratelnn.frontend.tensorflow import converter
    _, graph_def, inp, out, x_cal, x_test, y_test = digits_models
    fp32 = _run(graph_def, inp, out, x_test)
    base = converter(graph_def, _config(inp, out, quant_cfg=PER_TENSOR))
    base.calibrate(x_cal, progress=False)
    before = _run(base.to_quant(), inp, out, x_test)
    tuned = converter(graph_def, dict(base.config, **passes))     # same statistics, no recalibration
    q = tuned.quantized_ir()
    after = _run(tuned.to_quant(), inp, out, x_test)
    top1 = lambda v: float(np.mean(v.argmax(1) == y_test))
    assert top1(after) >= top1(before), (passes, top1(fp32), top1(before), top1(after))
    assert _cosine(fp32, after) > _cosine(fp32, before) + 0.02, (_cosine(fp32, before), _cosine(fp32, after))
    # only integer values changed: same dtypes and scales as without the passes
    plain = base.quantized_ir()
    for name, qp in plain.qparams.items():
        assert q.qparams[name].dtype == qp.dtype and np.array_equal(q.qparams[name].scale, qp.scale), name
    assert sum(not np.array_equal(plain.params[k], q.params[k]) for k in plain.params) > 0
    check = q.meta["accuracy_passes"]   # chosen on the held-out quarter of the kept sample
    assert check["applied"] != "none" and check["held_out_agreement"][check["applied"]] >= check["held_out_agreement"]["none"]
    npu = _run(tuned.to_npu(), inp, out, x_test)
    assert np.mean(npu.argmax(1) == after.argmax(1)) > 0.98


def test_passes_needing_data_name_the_missing_sample(digits_models):
    from ratelnn.errors import CalibrationError
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.runners import run_model
    _, graph_def, inp, out, x_cal, _, _ = digits_models
    conv = converter(graph_def, _config(inp, out, bias_correction="empirical"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_model("tensorflow", conv.to_cal(), {inp: x_cal[:BATCH]}, [out])   # the user's own run
    with pytest.raises(CalibrationError, match="'bias_correction' needs the calibration sample"):
        conv.to_quant()
    assert conv.keep_sample(x_cal[:100]) == 64     # accuracy_samples
    conv.to_quant()
