"""Where a real pretrained graph loses in int8: bit width or range, and which tensors.

For each graph of agraph/pretrained.py named (its calibration and evaluation inputs), the
quantized model (QDQ, run by TensorFlow; ``accuracy_auto`` and ``auto_int16`` off) against
FP32 on the evaluation inputs, lowest cosine over the outputs:

- int8 as configured, calibrated on the calibration inputs (the plain build);
- every quant_cfg role in 16 bits (activations and weights), calibrated on the calibration
  inputs: what is left is range (values beyond the calibrated thresholds);
- the same calibrated on the evaluation inputs themselves (no value beyond its range);
- int8 calibrated on the evaluation inputs;

then ``analyze(method="PerLayer")`` of the plain int8 build and of the 16-bit build on the
evaluation inputs: the layers losing most when fed float inputs (``alone``), their cosine
through the whole quantized model (``e2e``) and the share of their values beyond the
calibrated range (``saturated``).

    python bench/where_int8_loses.py --models openpose_mobilenet_thin deepbrain
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROWS = 8   # layers listed per analysis


def build(model, graph_def, inputs, outputs, x_cal, extra):
    """A calibrated converter of ``model`` (plain: no automatic step, no auto_int16)."""
    from ratelnn.frontend.tensorflow import converter
    config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[model.batch, *x_cal.shape[1:]]],
              "output_dir": tempfile.mkdtemp(prefix=f"int8-loss-{model.name}-"), **model.config,
              "accuracy_auto": False, "auto_int16": False, **extra}
    conv = converter(graph_def, config)
    conv.calibrate(x_cal, batch_size=model.batch, progress=False)
    return conv


def analysis_lines(label, report) -> list:
    """The ``ROWS`` layers losing most alone, in ``report`` (PerLayer)."""
    rows = sorted(report.rows, key=lambda r: 1.0 if r.per_layer_cosine is None else r.per_layer_cosine)[:ROWS]
    return [f"| {label} | `{r.name}` | {r.op} {r.dtype} | {r.per_layer_cosine:.4f} | {r.cosine:.4f} | "
            f"{r.saturated_percent:.2f} |" for r in rows]


def one_model(name: str) -> str:
    import ratelnn
    from agraph import pretrained
    from agraph.pretrained import cosine, run_batches
    from ratelnn.config import QUANT_CFG_ROLES
    ratelnn.tf_init()
    model = next(m for m in pretrained.models() if m.name == name)
    graph_def, inputs, outputs = model.freeze()
    x_cal, x_test = model.data()
    fp32 = run_batches(graph_def, inputs[0], outputs, x_test, model.batch)
    wide = {"quant_cfg": {r: {"num_bits": 16, "is_per_channel": "weights" in r} for r in QUANT_CFG_ROLES}}
    lines = [f"### {name} ({len(x_cal)} calibration / {len(x_test)} evaluation inputs)", "",
             "| quantized model | calibrated on | cosine to FP32 (evaluation inputs) |", "|---|---|---:|"]
    convs = {}
    for label, data, where, extra in (("int8 (plain build)", x_cal, "calibration inputs", {}),
                                      ("every role 16 bits", x_cal, "calibration inputs", wide),
                                      ("every role 16 bits", x_test, "evaluation inputs", wide),
                                      ("int8", x_test, "evaluation inputs", {})):
        conv = build(model, graph_def, inputs, outputs, data, extra)
        got = run_batches(conv.to_quant(), inputs[0], outputs, x_test, model.batch)
        lines.append(f"| {label} | {where} | {min(cosine(f, q) for f, q in zip(fp32, got)):.5f} |")
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
    parser.add_argument("--models", nargs="+", required=True, help="names in agraph/pretrained.py")
    args = parser.parse_args()
    print("\n\n".join(one_model(name) for name in args.models))
    return 0


if __name__ == "__main__":
    sys.exit(main())
