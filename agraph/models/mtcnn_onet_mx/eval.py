"""Face/non-face accuracy of mtcnn_onet_mx on lfw_face_nonface (and agreement with FP32)."""
from __future__ import annotations

from agraph import kinds
from agraph.metrics import ModelMetrics

from . import model


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """``face_accuracy`` of argmax(prob) against the labels, ``fp32_agreement`` with ``reference``
    (``agraph.kinds.mtcnn_face_accuracy``)."""
    return kinds.mtcnn_face_accuracy(model, model.SIDE, run, dataset, stage, limit=limit, batch_size=batch_size,
                                     reference=reference)
