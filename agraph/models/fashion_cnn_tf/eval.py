"""Top-1 accuracy on the Fashion-MNIST test split (agreement with FP32 as a second metric)."""
from agraph.metrics import ModelMetrics, collect, top1_accuracy, top1_agreement

from . import model


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    outputs, labels, ref = collect(run, dataset, model.preprocess, limit=limit, batch_size=batch_size,
                                   reference=reference)
    metrics = {"top1": top1_accuracy(outputs, labels)}
    if ref is not None:
        metrics["fp32_agreement"] = top1_agreement(outputs, ref)
    return ModelMetrics(model.NAME, dataset.key, stage, metrics, samples=len(outputs))
