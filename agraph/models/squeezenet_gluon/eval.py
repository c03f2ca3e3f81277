"""Agreement of squeezenet_gluon (random weights) with its FP32 model on sample_photos."""
from __future__ import annotations

from agraph.metrics import ModelMetrics, mean_cosine, top1_agreement
from ratelnn.testing import zoo

NAME, DATASET, FRAMEWORK = "squeezenet_gluon", "sample_photos", "mxnet"
INPUT_SHAPES = [[1, 3, 224, 224]]


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """``top1_agreement`` and ``mean_cosine`` of the logits against ``reference`` (the FP32
    model; ``run`` itself when None), the model at :data:`INPUT_SHAPES`."""
    return evaluate_at(INPUT_SHAPES, run, dataset, stage, limit=limit, batch_size=batch_size, reference=reference)


def evaluate_at(input_shapes, run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """:func:`evaluate` of the model built at ``input_shapes`` (e.g. its TEST_INPUT_SHAPES)."""
    side = zoo.side_of(input_shapes, FRAMEWORK)
    logits, ref, _ = zoo.collect(run, dataset, lambda s: zoo.photo_input(s, side, FRAMEWORK), 0, limit=limit,
                                 batch_size=batch_size, reference=reference)
    ref = logits if ref is None else ref
    metrics = {"top1_agreement": top1_agreement(logits, ref), "mean_cosine": mean_cosine(logits, ref)}
    return ModelMetrics(NAME, DATASET, stage, metrics, samples=len(logits))
