"""Agreement of fer_emotion_tf with its FP32 model on the faces of lfw_face_nonface (no emotion
labels exist offline)."""
from __future__ import annotations

from agraph.metrics import ModelMetrics, mean_cosine, top1_agreement
from ratelnn.testing import zoo

NAME, DATASET, FRAMEWORK = "fer_emotion_tf", "lfw_face_nonface", "tensorflow"


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """``top1_agreement`` and ``mean_cosine`` of the emotion probabilities against
    ``reference`` (the FP32 model; ``run`` itself when None, i.e. at the fp32 stage) over the
    face samples (label 1) of the first ``limit`` samples."""
    prob, ref, labels = zoo.collect(run, dataset, lambda s: zoo.fer_input(s, FRAMEWORK), 0, limit=limit,
                                    batch_size=batch_size, reference=reference)
    faces = labels == 1
    ref = prob if ref is None else ref
    metrics = {"top1_agreement": top1_agreement(prob[faces], ref[faces]),
               "mean_cosine": mean_cosine(prob[faces], ref[faces])}
    return ModelMetrics(NAME, DATASET, stage, metrics, samples=int(faces.sum()))
