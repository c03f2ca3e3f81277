"""efficientnet_b0_keras: top-1 on the ImageNet archive with pretrained weights, agreement
with its FP32 model on sample_photos with random ones."""
from __future__ import annotations

from agraph import kinds
from agraph.metrics import ModelMetrics

from . import model


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """``top1`` (+ ``fp32_agreement``) on ImageNet, or ``top1_agreement`` and ``mean_cosine``
    of the logits against ``reference`` (the FP32 model; ``run`` itself when None) on
    sample_photos; the model at its INPUT_SHAPES."""
    return evaluate_at(model.INPUT_SHAPES, run, dataset, stage, limit=limit, batch_size=batch_size,
                       reference=reference)


def evaluate_at(input_shapes, run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """:func:`evaluate` of the model built at ``input_shapes`` (e.g. its TEST_INPUT_SHAPES)."""
    return kinds.imagenet_evaluate(model, input_shapes, run, dataset, stage, limit=limit,
                                   batch_size=batch_size, reference=reference)
