"""Top-1 accuracy on the held-out scikit-learn digits (agreement with FP32 as a second metric)."""
from agraph import kinds
from agraph.metrics import ModelMetrics

from . import model


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    return kinds.classifier_accuracy(model, run, dataset, stage, limit=limit, batch_size=batch_size,
                                     reference=reference)
