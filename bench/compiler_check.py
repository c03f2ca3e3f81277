"""``compiler_check: 2`` (all equal) on correct builds of real architectures
(docs/multi-batch.md, "Compiler check").

Keras applications (TensorFlow, NHWC) and Gluon model zoo networks (MXNet, NCHW), with
random weights (seed 0: the check compares two integer forms of the same quantized model,
so trained weights change nothing it measures), calibrated on 8 uniform [-1, 1] inputs and
compiled with ``static_batch_sizes`` [1, 2] (the batch split runs too).  Per model:
whether level 2 passes in CheckPerLayer mode, how many engine layers it compared and the
fraction of their values equal, how far the quantized model's layer-by-layer integer form
is from the QDQ model (largest difference in codes), and the seconds ``to_npu()`` takes
without the check, with CheckOutput and with CheckPerLayer.  The result replaces the
``compiler-check`` section of docs/benchmarks.md.

    python bench/compiler_check.py [--models NAME,...] [--machine TEXT]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]   # this checkout's ratelnn and the report helper
from _report import cpu_name, write_section  # noqa: E402
from ratelnn.npu import native_isa  # noqa: E402

BATCH = 2


def _keras(build):
    def make(workdir):
        import tensorflow as tf

        import ratelnn
        from ratelnn.frontend.tensorflow import converter, freeze_keras
        ratelnn.tf_init()
        tf.keras.utils.set_random_seed(0)
        graph_def, ins, outs = freeze_keras(build(tf.keras.applications))
        return lambda config: converter(graph_def, {"input_nodes": ins, "output_nodes": outs,
                                                    "input_shapes": [[BATCH, 64, 64, 3]], **config}), (64, 64, 3)
    return make


def _gluon(architecture, size):
    def make(workdir):
        import ratelnn
        from agraph import kinds
        from ratelnn.frontend.mxnet import converter
        ratelnn.mx_init()
        files = kinds.gluon_model_zoo(workdir, architecture.replace(".", "_"), architecture, [[BATCH, 3, size, size]])
        prefix = str(files[0]).replace("-symbol.json", "")
        return lambda config: converter(prefix, {"input_nodes": ["data"], "output_nodes": ["logits"],
                                                 "input_shapes": [[BATCH, 3, size, size]], **config}), (3, size, size)
    return make


MODELS = {
    "mobilenet_v2_0.35 (Keras)": _keras(lambda a: a.MobileNetV2((64, 64, 3), alpha=0.35, weights=None,
                                                                       classes=10)),
    "mobilenet_v3_small (Keras)": _keras(lambda a: a.MobileNetV3Small(input_shape=(64, 64, 3), weights=None,
                                                                      classes=10)),
    "efficientnet_b0 (Keras)": _keras(lambda a: a.EfficientNetB0(input_shape=(64, 64, 3), weights=None, classes=10)),
    "resnet18_v1 (Gluon)": _gluon("resnet18_v1", 64),
    "mobilenetv2_0.25 (Gluon)": _gluon("mobilenetv2_0.25", 64),
    "squeezenet1.1 (Gluon)": _gluon("squeezenet1.1", 224),
}


def measure(name: str) -> dict:
    """The row of ``name`` (module docstring)."""
    workdir = tempfile.mkdtemp()
    make, sample_shape = MODELS[name](workdir)
    c = make({"output_dir": os.path.join(workdir, "out"), "static_batch_sizes": [1, BATCH]})
    c.calibrate(np.random.default_rng(0).uniform(-1, 1, (8, *sample_shape)).astype(np.float32), progress=False)
    from ratelnn.compiler import CompileError
    seconds = {}
    for mode, level in (("none", 0), ("CheckOutput", 2), ("CheckPerLayer", 2)):
        c.config.update(compiler_check=level, compiler_check_mode="CheckOutput" if level == 0 else mode)
        start = time.perf_counter()
        try:
            c.to_npu()
        except CompileError as e:
            print(f"{name}: {e}", file=sys.stderr)
            return {"name": name, "passed": False, "failure": str(e)}
        seconds[mode] = time.perf_counter() - start
    report = c.compiler_check_report
    return {"name": name, "passed": True, "layers": len(report.layers),
            "equal": min(r.equal for r in report.layers + report.outputs),
            "qdq": max(r.max_diff for r in report.quantized), "seconds": seconds, "sample": report.sample}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names (default: all)")
    parser.add_argument("--machine", help="the machine's heading (default: the CPU model and kernel path)")
    args = parser.parse_args()
    rows = [measure(name) for name in args.models.split(",")]
    command = "python bench/compiler_check.py" + (f' --machine "{args.machine}"' if args.machine else "")
    lines = ["## Compiler check: level 2 (all equal) on correct builds", "",
             f"### {args.machine or cpu_name()}", "",
             f"`{command}`, kernel path {native_isa()}, CPUs shared with other jobs (seconds are "
             f"indicative). Random weights, calibrated on 8 uniform inputs, `static_batch_sizes: [1, {BATCH}]`; "
             f"the check's sample: {next((r['sample'] for r in rows if r['passed']), 'none')}. "
             "*layers*: engine layers compared (CheckPerLayer); *equal*: "
             "the smallest fraction of values equal over the layers and outputs; *QDQ*: the largest difference, in "
             "codes, between the quantized model's layer-by-layer integer form and the QDQ model, each layer fed the "
             "QDQ model's codes (at most 1 allowed); seconds of `to_npu()` with the check off, and at level 2 in "
             "either mode.", "",
             "| model | level 2 | layers | equal | QDQ (codes) | to_npu s, check off | CheckOutput | CheckPerLayer |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if not r["passed"]:
            lines.append(f"| {r['name']} | FAIL: {r['failure']} | | | | | | |")
            continue
        s = r["seconds"]
        lines.append(f"| {r['name']} | pass | {r['layers']} | {r['equal']:.4f} | "
                     f"{r['qdq']} | {s['none']:.1f} | {s['CheckOutput']:.1f} | {s['CheckPerLayer']:.1f} |")
    text = "\n".join(lines)
    print(text)
    write_section("compiler-check", text)


if __name__ == "__main__":
    main()
