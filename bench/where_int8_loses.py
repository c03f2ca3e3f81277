"""Where a real pretrained graph loses in int8: bit width or range, and which tensors.

For each graph named, of agraph/pretrained.py or the layout detector ``layout_cdla`` of
agraph/detectors.py (their calibration and evaluation inputs), the quantized model (QDQ, run
by TensorFlow or ONNX Runtime; ``accuracy_auto`` and ``auto_int16`` off) against FP32 on the
evaluation inputs: lowest cosine over the outputs, lowest scale-aware agreement (the automatic
step's judge, :func:`ratelnn.metrics.lowest_agreement`) and, for the detector, its boxes
(:func:`ratelnn.metrics.compare_detections`: lost of the FP32 detections >= 0.5, mean matched
IoU):

- int8 as configured, calibrated on the calibration inputs (the plain build);
- every quant_cfg role in 16 bits (activations and weights), calibrated on the calibration
  inputs: what is left is range (values beyond the calibrated thresholds);
- the same calibrated on the evaluation inputs themselves (no value beyond its range);
- int8 calibrated on the evaluation inputs;

then ``analyze(method="PerLayer")`` of the plain int8 build and of the 16-bit build on the
evaluation inputs: the layers losing most when fed float inputs (``alone``), their cosine
through the whole quantized model (``e2e``) and the share of their values beyond the
calibrated range (``saturated``).

    python bench/where_int8_loses.py --models openpose_mobilenet_thin deepbrain layout_cdla
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

ROWS = 8   # layers listed per analysis


@dataclasses.dataclass
class Subject:
    """One graph taken apart: ``name``, its inputs, ``converter(config)`` (the framework's,
    float graph and input/output names set), ``run(model, x)`` -> its outputs on ``x`` (a
    framework model: the float one, or a quantized one), the float model, the batch and the
    config keys the graph needs; ``boxes(outputs)`` -> a text judging a detector's outputs
    against the float model's (None: not a detector)."""

    name: str
    x_cal: np.ndarray
    x_test: np.ndarray
    converter: Callable[[dict], Any]
    run: Callable[[Any, np.ndarray], list]
    float_model: Any
    batch: int
    config: dict
    boxes: Optional[Callable[[list], str]] = None


def tf_subject(name: str) -> Subject:
    """A TensorFlow graph of agraph/pretrained.py."""
    import ratelnn
    from agraph import pretrained
    from agraph.pretrained import run_batches
    from ratelnn.frontend.tensorflow import converter
    ratelnn.tf_init()
    model = next(m for m in pretrained.models() if m.name == name)
    graph_def, inputs, outputs = model.freeze()
    x_cal, x_test = model.data()
    return Subject(name, x_cal, x_test,
                   lambda config: converter(graph_def, dict(config, input_nodes=inputs, output_nodes=outputs)),
                   lambda graph, x: run_batches(graph, inputs[0], outputs, x, model.batch),
                   graph_def, model.batch, model.config)


def layout_subject() -> Subject:
    """The layout detector of agraph/detectors.py, run by ONNX Runtime one page at a time,
    its boxes decoded by the package's post-processing."""
    import ratelnn
    from agraph import detectors
    from onnx_models import ort_session
    from real_models import run_onnx
    from ratelnn.frontend.onnx import converter
    from ratelnn.metrics import compare_detections
    proto = detectors.layout_load()
    outputs = detectors.layout_outputs(proto)
    pages = detectors.layout_pages()
    x_cal, x_test = ([detectors.layout_input(p) for p in pages[part]] for part in ("calibration", "evaluation"))
    shapes = [p.shape for p in pages["evaluation"]]

    def run(model, x):
        session = ort_session(model) if model is proto else ratelnn.onnx_session(model)
        return run_onnx(session, "image", outputs, x, 1)

    reference = detectors.layout_detections(run(proto, np.stack(x_test)), shapes)

    def boxes(got):
        result = compare_detections(reference, detectors.layout_detections(got, shapes))
        return f"lost {result.lost}/{result.reference}, IoU {result.mean_iou:.4f}"

    return Subject("layout_cdla", np.stack(x_cal), np.stack(x_test),
                   lambda config: converter(proto, dict(config, input_nodes=["image"], output_nodes=outputs)),
                   run, proto, 1, {}, boxes)


def build(subject: Subject, data, extra):
    """A calibrated converter of ``subject`` (plain: no automatic step, no auto_int16)."""
    config = {"input_shapes": [[subject.batch, *data.shape[1:]]],
              "output_dir": tempfile.mkdtemp(prefix=f"int8-loss-{subject.name}-"), **subject.config,
              "accuracy_auto": False, "auto_int16": False, **extra}
    conv = subject.converter(config)
    conv.calibrate(data, batch_size=subject.batch, progress=False)
    return conv


def analysis_lines(label, report) -> list:
    """The ``ROWS`` layers losing most alone, in ``report`` (PerLayer)."""
    rows = sorted(report.rows, key=lambda r: 1.0 if r.per_layer_cosine is None else r.per_layer_cosine)[:ROWS]
    return [f"| {label} | `{r.name}` | {r.op} {r.dtype} | {r.per_layer_cosine:.4f} | {r.cosine:.4f} | "
            f"{r.saturated_percent:.2f} |" for r in rows]


def one_model(name: str) -> str:
    from agraph.pretrained import cosine
    from ratelnn.config import QUANT_CFG_ROLES
    from ratelnn.metrics import lowest_agreement
    subject = layout_subject() if name == "layout_cdla" else tf_subject(name)
    x_cal, x_test = subject.x_cal, subject.x_test
    fp32 = subject.run(subject.float_model, x_test)
    wide = {"quant_cfg": {r: {"num_bits": 16, "is_per_channel": "weights" in r} for r in QUANT_CFG_ROLES}}
    boxes_head = ("", "") if subject.boxes is None else (" boxes (FP32 >= 0.5) |", "---|")
    lines = [f"### {name} ({len(x_cal)} calibration / {len(x_test)} evaluation inputs)", "",
             f"| quantized model | calibrated on | cosine to FP32 (evaluation inputs) | scale-aware |{boxes_head[0]}",
             f"|---|---|---:|---:|{boxes_head[1]}"]
    convs = {}
    for label, data, where, extra in (("int8 (plain build)", x_cal, "calibration inputs", {}),
                                      ("every role 16 bits", x_cal, "calibration inputs", wide),
                                      ("every role 16 bits", x_test, "evaluation inputs", wide),
                                      ("int8", x_test, "evaluation inputs", {})):
        conv = build(subject, data, extra)
        got = subject.run(conv.to_quant(), x_test)
        boxes = "" if subject.boxes is None else f" {subject.boxes(got)} |"
        lines.append(f"| {label} | {where} | {min(cosine(f, q) for f, q in zip(fp32, got)):.5f} | "
                     f"{lowest_agreement(got, fp32):.5f} |{boxes}")
        print(lines[-1], flush=True)
        if data is x_cal:
            convs[label] = conv
    lines += ["", "| build (calibration inputs) | layer | op, dtype | alone | e2e | saturated % |",
              "|---|---|---|---:|---:|---:|"]
    for label, conv in convs.items():
        lines += analysis_lines(label, conv.analyze(x_test, against="quant", method="PerLayer"))
        print("\n".join(lines[-ROWS:]), flush=True)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", required=True, help="names in agraph/pretrained.py, or layout_cdla")
    args = parser.parse_args()
    print("\n\n".join(one_model(name) for name in args.models))
    return 0


if __name__ == "__main__":
    sys.exit(main())
