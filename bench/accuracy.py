"""Accuracy of ratelnn's INT8 models against FP32 and TFLite full-integer PTQ.

For each model (the Fashion-MNIST CNN of ratelnn.testing; the pretrained MTCNN R-Net of
bench/real_models.py on scikit-image's lfw_subset face/non-face crops) and each
``quantize_algorithm``: calibrate on the same calibration batches (``ConvertImpl.calibrate``),
then top-1 of the quantized model (``to_quant``) and of the compiled model (``to_npu``,
engines on the emulated NPU), beside TFLite's full-integer post-training quantization with
``representative_dataset`` = the same batches.  A method that fails is reported with its
error.  Then ``analyze()`` on the naive model, and the naive model again with its
suggested ``layer_configs`` (int16/fp32 layers).

Writes docs/benchmarks-accuracy.md.

    python bench/accuracy.py [--fashion-test 2000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "benchmarks-accuracy.md"
METHODS = ("naive", "kld", "percentile", "mse")
BATCH = 20
CALIBRATION_BATCHES = 10


def fashion_case(test_count: int):
    from ratelnn.datasets import load_fashion_mnist
    from ratelnn.testing import cached_fashion_cnn
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist()
    model = cached_fashion_cnn(Path(tempfile.gettempdir()) / "ratelnn-models", x_train, y_train)
    cal = x_train[np.random.default_rng(0).permutation(len(x_train))[:BATCH * CALIBRATION_BATCHES]]
    return "Fashion-MNIST CNN (trained here)", model, cal, x_test[:test_count], y_test[:test_count]


def rnet_case():
    from real_models import lfw_faces, load_rnet
    (x_cal, _), (x_test, y_test) = lfw_faces()
    return "MTCNN R-Net (pretrained), lfw_subset face/non-face", load_rnet(), x_cal, x_test, y_test


def top1(framework_model, input_name, output_name, x, y) -> float:
    from ratelnn.runners import run_model
    scores = []
    for start in range(0, len(x), BATCH):
        batch = x[start:start + BATCH]
        n = len(batch)
        if n < BATCH:
            batch = np.concatenate([batch, np.repeat(batch[-1:], BATCH - n, 0)])
        scores.append(run_model("tensorflow", framework_model, {input_name: batch}, [output_name])[0][:n])
    return 100.0 * float(np.mean(np.argmax(np.concatenate(scores), 1) == y))


def tflite_top1(model, x_cal, x, y) -> float:
    import tensorflow as tf
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([x_cal[i:i + 1]] for i in range(len(x_cal)))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    interp = tf.lite.Interpreter(model_content=conv.convert())
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    s_in, z_in = inp["quantization"]
    preds = []
    for sample in x:
        q = np.clip(np.round(sample / s_in + z_in), -128, 127).astype(np.int8)[None]
        interp.set_tensor(inp["index"], q)
        interp.invoke()
        preds.append(int(np.argmax(interp.get_tensor(out["index"])[0])))
    return 100.0 * float(np.mean(np.array(preds) == y))


def evaluate_case(name, model, x_cal, x_test, y_test, lines):
    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    ratelnn.tf_init()
    graph_def, inputs, outputs = freeze_keras(model, [[BATCH, *x_cal.shape[1:]]])
    inp, out = inputs[0], outputs[0]
    base = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[BATCH, *x_cal.shape[1:]]]}
    fp32 = top1(graph_def, inp, out, x_test, y_test)
    try:
        tfl = f"{tflite_top1(model, x_cal, x_test, y_test):.2f}"
    except Exception as e:  # report, do not hide
        tfl = f"failed: {type(e).__name__}"
    print(f"{name}: FP32 {fp32:.2f}, TFLite {tfl}", flush=True)
    lines.append(f"\n### {name}\n\n{len(x_test)} test images, {len(x_cal)} calibration images "
                 f"(batches of {BATCH}); FP32 top-1 {fp32:.2f}%; TFLite full-integer PTQ {tfl}%.\n")
    lines.append("| method | INT8 quant top-1 | INT8 npu top-1 | quant - FP32 | note |")
    lines.append("|---|---:|---:|---:|---|")
    naive_conv = None
    for method in METHODS:
        cfg = dict(base, output_dir=tempfile.mkdtemp(prefix=f"acc-{method}-"), quantize_algorithm=method)
        try:
            conv = converter(graph_def, cfg)
            conv.calibrate(x_cal, progress=False)
            q = top1(conv.to_quant(), inp, out, x_test, y_test)
            try:
                npu = f"{top1(conv.to_npu(), inp, out, x_test, y_test):.2f}"
            except Exception as e:
                npu = f"failed: {type(e).__name__}: {str(e)[:80]}"
            lines.append(f"| {method} | {q:.2f} | {npu} | {q - fp32:+.2f} | |")
            if method == "naive":
                naive_conv, naive_q = conv, q
        except Exception as e:
            lines.append(f"| {method} | - | - | - | failed: {type(e).__name__}: {str(e)[:100]} |")
        print(lines[-1], flush=True)
    if naive_conv is None:
        return
    report = naive_conv.analyze(x_cal[:BATCH * 4])
    worst = ", ".join(f"{r.name} ({r.sqnr_drop_db:.1f} dB)" for r in report.worst(3))
    lines.append(f"\n`analyze()` on naive: output SQNR {report.output_similarity[out]['sqnr_db']:.1f} dB; "
                 f"worst layers by SQNR drop: {worst}; suggested layer_configs: {report.layer_configs()}.")
    if report.layer_configs():
        cfg = dict(base, output_dir=tempfile.mkdtemp(prefix="acc-fix-"), layer_configs=report.layer_configs())
        conv = converter(graph_def, cfg)
        conv.calibrate(x_cal, progress=False)
        fixed = top1(conv.to_quant(), inp, out, x_test, y_test)
        lines.append(f"With them: INT8 quant top-1 {fixed:.2f}% (naive {naive_q:.2f}%, FP32 {fp32:.2f}%).")
    print("\n".join(lines[-2:]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fashion-test", type=int, default=2000, help="Fashion-MNIST test images")
    args = parser.parse_args()
    lines = ["# Accuracy benchmark", "", "Command: `python bench/accuracy.py`", "",
             "Top-1 in percent. `quant`: the quantized model (Quant/Dequant ops) run by TensorFlow; "
             "`npu`: the compiled model, NPU regions run as engines on the emulated NPU. "
             "TFLite: `TFLiteConverter.from_keras_model`, full-integer (int8 in/out) PTQ with the same "
             "calibration images as `representative_dataset`."]
    start = time.time()
    for case in (fashion_case(args.fashion_test), rnet_case()):
        evaluate_case(*case, lines)
    lines.append(f"\nTotal time {time.time() - start:.0f} s.")
    DOC.write_text("\n".join(lines) + "\n")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
