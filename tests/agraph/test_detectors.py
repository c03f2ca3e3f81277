"""The detection metric on a real detector end to end: the pretrained MTCNN pipeline, each
model compiled alone and calibrated on photos without the test faces, finds the FP32
pipeline's faces (matched IoU >= 0.9, none lost) on a photo and an lfw_subset mosaic it never
saw; and the same comparison catches a pipeline whose face scores collapse."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mtcnn")


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    """``(fp32 runner, compiled runner, evaluation frames)`` of the face pipeline."""
    import ratelnn
    from agraph import detectors, face
    from ratelnn.frontend.tensorflow import converter

    ratelnn.tf_init()
    frozen = face.freeze_models(face.model_entries())
    fp32 = face.GraphRunner({name: m.graph_def for name, m in frozen.items()}, frozen)
    samples, _ = face.calibration_samples(list(face.calibration_photos().values()), fp32)
    compiled = {}
    for name, model in frozen.items():
        conv = converter(model.graph_def, model.config(str(tmp_path_factory.mktemp(name))))
        conv.calibrate(samples[name], progress=False)
        compiled[name] = conv.to_npu()
    frames = detectors.face_test_frames()
    yield fp32, face.GraphRunner(compiled, frozen), [frames["astronaut"], frames["lfw_mosaic_1"]]
    fp32.close()


def test_compiled_pipeline_finds_the_fp32_faces(pipelines):
    from agraph.detectors import face_detections
    from ratelnn.metrics import compare_detections

    fp32, npu, frames = pipelines
    reference = face_detections(frames, fp32)
    assert len(reference[0].boxes) == 1 and len(reference[1].boxes) >= 10   # the astronaut; most lfw faces
    result = compare_detections(reference, face_detections(frames, npu))
    assert result.passed, result.summary()
    assert result.lost == 0 and result.mean_iou >= 0.9 and result.reference == sum(len(r.boxes) for r in reference)


def test_collapsed_face_scores_are_reported_lost(pipelines):
    """O-Net's face probability halved (every face below the pipeline's 0.8): all lost."""
    from agraph.detectors import face_detections
    from ratelnn.metrics import compare_detections

    fp32, _, frames = pipelines

    def damaged(name, x):
        outputs = fp32(name, x)
        if name == "onet":
            outputs[-1] = outputs[-1] * np.array([1.0, 0.5], np.float32)
        return outputs

    reference = face_detections(frames, fp32)
    result = compare_detections(reference, face_detections(frames, damaged))
    assert not result.passed
    assert result.lost == result.reference > 0
