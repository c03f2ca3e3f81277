"""Face/non-face accuracy of mtcnn_pnet_mx on lfw_face_nonface (and agreement with FP32)."""
from __future__ import annotations

from agraph.metrics import ModelMetrics, top1_accuracy, top1_agreement
from ratelnn.testing import zoo

NAME, DATASET, FRAMEWORK, SIDE, PROB = "mtcnn_pnet_mx", "lfw_face_nonface", "mxnet", 12, 1


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """``face_accuracy``: argmax of the face probabilities (output ``prob``) against the
    labels (1 face, 0 non-face); ``fp32_agreement`` of that argmax when ``reference`` is given."""
    prob, ref, labels = zoo.collect(run, dataset, lambda s: zoo.mtcnn_input(s, SIDE, FRAMEWORK), PROB,
                                    limit=limit, batch_size=batch_size, reference=reference)
    metrics = {"face_accuracy": top1_accuracy(prob, labels)}
    if ref is not None:
        metrics["fp32_agreement"] = top1_agreement(prob, ref)
    return ModelMetrics(NAME, DATASET, stage, metrics, samples=len(prob))
