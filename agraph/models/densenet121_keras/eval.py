"""Agreement of densenet121_keras (random weights) with its FP32 model on sample_photos."""
from __future__ import annotations

from agraph.metrics import ModelMetrics, mean_cosine, top1_agreement
from ratelnn.testing import zoo

NAME, DATASET, FRAMEWORK = "densenet121_keras", "sample_photos", "tensorflow"
INPUT_SHAPES = [[1, 224, 224, 3]]


def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None, input_shapes=None) -> ModelMetrics:
    """``top1_agreement`` and ``mean_cosine`` of the logits against ``reference`` (the FP32
    model; ``run`` itself when None). ``input_shapes``: the size the model was built at
    (default :data:`INPUT_SHAPES`; the tests use the model's TEST_INPUT_SHAPES)."""
    side = zoo.side_of(input_shapes or INPUT_SHAPES, FRAMEWORK)
    logits, ref, _ = zoo.collect(run, dataset, lambda s: zoo.photo_input(s, side, FRAMEWORK), 0, limit=limit,
                                 batch_size=batch_size, reference=reference)
    ref = logits if ref is None else ref
    metrics = {"top1_agreement": top1_agreement(logits, ref), "mean_cosine": mean_cosine(logits, ref)}
    return ModelMetrics(NAME, DATASET, stage, metrics, samples=len(logits))
