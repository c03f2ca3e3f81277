"""Agreement of fer_emotion_tf with its FP32 model on the faces of lfw_face_nonface (no emotion
labels exist offline)."""
from __future__ import annotations

from agraph import kinds
from agraph.metrics import ModelMetrics

from . import model


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """``top1_agreement`` and ``mean_cosine`` of the emotion probabilities against ``reference``
    over the face samples (``agraph.kinds.fer_agreement``)."""
    return kinds.fer_agreement(model, run, dataset, stage, limit=limit, batch_size=batch_size, reference=reference)
