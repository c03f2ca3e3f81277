"""How long building a Keras application takes, step by step, and how often it is quantized.

    python bench/build_time.py                         # ResNet50, prints the table
    python bench/build_time.py --doc                   # and writes it into docs/benchmarks.md
    python bench/build_time.py --models ResNet50,MobileNetV2 --images 16

For each model (random weights, 224x224x3, batch 1, the default config: ``accuracy_auto`` on)
the steps of a build are timed, wall and process CPU seconds: ``converter`` (import and
passes), ``calibrate`` (``to_cal`` and its runs on ``--images`` random images, uniform in
[-1, 1]), ``to_quant``, ``to_npu``.  ``quantize calls``: how many times the build ran the
quantizer (:func:`ratelnn.quantization.quantizer.quantize`) and their wall seconds, counted
by wrapping it.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _report import cpu_name, write_section  # noqa: E402
from emulator_speed import keras_model, random_images  # noqa: E402

STEPS = ("converter", "calibrate", "to_quant", "to_npu")


class CountedQuantize:
    """The quantizer function wrapped to count its calls and their wall seconds (installed while a build runs)."""

    def __init__(self) -> None:
        from ratelnn.quantization import quantizer
        self.module, self.original, self.calls, self.seconds = quantizer, quantizer.quantize, 0, 0.0

    def __enter__(self) -> "CountedQuantize":
        def counted(*args, **kwargs):
            self.calls += 1
            start = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        self.module.quantize = counted
        return self

    def __exit__(self, *exc) -> None:
        self.module.quantize = self.original


def build_times(arch: str, images: int) -> dict:
    """``{step: (wall s, CPU s)}`` of one build of the Keras ``arch``, plus ``quantize calls``."""
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    model = keras_model(arch)
    graph_def, inputs, outputs = freeze_keras(model)
    shape = tuple(int(d) for d in model.input_shape[1:])
    data = random_images(images, 1, shape)
    out = {}
    with tempfile.TemporaryDirectory(prefix="ratelnn-build-") as d, CountedQuantize() as counter:
        config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[1, *shape]], "output_dir": d}
        conv = None

        def make():
            nonlocal conv
            conv = converter(graph_def, config)
        for step, fn in (("converter", make), ("calibrate", lambda: conv.calibrate(data, batch_size=1, progress=False)),
                         ("to_quant", lambda: conv.to_quant()), ("to_npu", lambda: conv.to_npu())):
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            out[step] = (time.perf_counter() - start, time.process_time() - cpu)
            print(f"{arch} {step:10s} {out[step][0]:7.2f} s wall {out[step][1]:7.2f} s CPU", file=sys.stderr, flush=True)
        out["quantize calls"] = (counter.calls, counter.seconds)
    out["total"] = tuple(sum(out[s][i] for s in STEPS) for i in (0, 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="ResNet50")
    ap.add_argument("--images", type=int, default=16, help="random calibration images (batches of 1)")
    ap.add_argument("--machine", default=None, help="the machine's name in the heading (default: the CPU model)")
    ap.add_argument("--doc", action="store_true", help="write the table into docs/benchmarks.md")
    args = ap.parse_args()
    import ratelnn
    ratelnn.tf_init()
    rows = [(arch, build_times(arch, args.images)) for arch in args.models.split(",")]
    command = "python bench/build_time.py" + (f" --models {args.models}" if args.models != "ResNet50" else "") + (
        f" --images {args.images}" if args.images != 16 else "") + (
        f" --machine '{args.machine}'" if args.machine else "") + " --doc"
    lines = ["## Build time: converter, calibrate, to_quant, to_npu", "", f"### {args.machine or cpu_name()}", "",
             f"`{command}`: seconds of wall time (CPU seconds of the process) of each step of one build at "
             f"batch 1, default config, calibrated on {args.images} random images; quantize calls: how many "
             "times the build ran the quantizer (their wall seconds).", "",
             "| model | " + " | ".join(STEPS) + " | total | quantize calls |", "|---|" + "---:|" * (len(STEPS) + 2)]
    for arch, r in rows:
        lines.append(f"| {arch} | " + " | ".join(f"{r[k][0]:.2f} ({r[k][1]:.2f})" for k in STEPS + ("total",))
                     + f" | {r['quantize calls'][0]} ({r['quantize calls'][1]:.2f}) |")
    print("\n".join(lines))
    if args.doc:
        write_section("build-time", "\n".join(lines))


if __name__ == "__main__":
    main()
