"""The face pipeline of examples/face_pipeline.py (``agraph.face``) end to end: MTCNN
P/R/O-Net + fer's emotion model, pretrained, compiled jointly and run in TensorFlow through
RatelEngineOp on real photos, find the same faces (IoU >= 0.8) with the same emotions as the
FP32 pipeline; the scheme's predicted frame rate is within 10 % of its simulation and beats the baselines."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from agraph import face

# tests marked no_tf_math check numpy helpers of agraph/face.py (tests/conftest.py)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    start = time.time()
    result = face.run(str(tmp_path_factory.mktemp("face")), frames=200)
    result.wall_seconds = time.time() - start
    return result


def test_compiled_models_run_engines_in_tensorflow(report):
    assert set(report.engine_ops) == {e.name for e in face.model_entries()}
    assert all(count >= 1 for count in report.engine_ops.values()), report.engine_ops


def test_same_faces_and_emotions_as_fp32(report):
    assert report.faces_fp32 == {"astronaut": 1, "camera": 1, "pair": 2}
    assert report.faces_npu == report.faces_fp32
    for row in report.rows:
        assert row.iou >= 0.8, row
        assert row.npu_emotion == row.fp32_emotion, row
    assert [r.fp32_emotion for r in report.rows if r.photo == "astronaut"] == ["happy"]


def test_scheme_prediction_matches_simulation_and_beats_baselines(report):
    predicted, simulated = report.scheme.predicted_fps, report.simulation.fps
    assert abs(predicted - simulated) <= 0.10 * simulated, (predicted, simulated)
    chosen = report.comparison["chosen"]
    for name in ("serial_all_cores", "round_robin", "first_fit_sram"):
        baseline = report.comparison[name]
        assert chosen.scheme.predicted_fps >= baseline.scheme.predicted_fps, name
        # equal predictions (e.g. the all-cores-in-series layout is optimal here) simulate
        # within the simulator's scheduling noise of each other
        assert chosen.simulation.fps >= 0.99 * baseline.simulation.fps, name
    models = {m.name: m.invocations_per_frame for m in report.scheme.models}
    assert models == report.invocations and models["rnet"] > 1


def test_timeline_written(report):
    assert Path(report.timeline).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.no_tf_math
def test_box_helpers():
    boxes = np.array([[0, 0, 9, 9], [1, 1, 10, 10], [20, 20, 29, 29]], np.float64)
    assert face.nms(boxes, np.array([0.5, 0.9, 0.7]), 0.5).tolist() == [1, 2]
    assert face.iou(boxes[0], boxes[:1]).tolist() == [1.0]
    assert face.to_square(np.array([[0.0, 0.0, 4.0, 10.0]])).tolist() == [[-3.0, 0.0, 7.0, 10.0]]
    assert face.match(boxes[:1], boxes[1:]) == [(0, pytest.approx(64 / 98))]
    assert face.match(boxes[:1], boxes[:0]) == [(-1, 0.0)]


@pytest.mark.no_tf_math
def test_pyramid_covers_the_face_sizes():
    levels = face.pyramid((512, 512), min_face=40, max_face=200, factor=0.6)
    faces = [face.PNET_CELL / scale for scale, _ in levels]
    assert faces[0] == pytest.approx(40) and faces[-1] <= 200 < faces[-1] / 0.6
    assert levels[0][1] == (154, 154)


@pytest.mark.no_tf_math
def test_wrong_frame_shape_is_refused():
    with pytest.raises(ValueError, match="frames must be RGB 512x512x3"):
        face.run_pipeline(np.zeros((480, 640, 3), np.uint8), lambda name, x: [])
