"""Cosine similarity of a model's outputs to the float model's, output by output: the figure
the automatic default step, the accuracy passes and ``tune()`` judge by (docs/quantization.md,
"Automatic defaults")."""
from __future__ import annotations

from typing import List, Sequence

import numpy as np


def output_cosines(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> List[float]:
    """The cosine similarity of every value of each output (any shape) to the float model's
    output in the same place of ``reference``; 1.0 / 0.0 where either is all zeros and they
    are equal / differ."""
    result = []
    for q, f in zip(outputs, reference, strict=True):
        q, f = np.asarray(q, np.float64).ravel(), np.asarray(f, np.float64).ravel()
        norm = np.linalg.norm(q) * np.linalg.norm(f)
        result.append(float(q @ f / norm) if norm > 0 else float(np.array_equal(q, f)))
    return result


def lowest_cosine(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    """The lowest of :func:`output_cosines` (1.0 without outputs): an output that loses is
    not hidden by a larger one that keeps its values."""
    return min(output_cosines(outputs, reference), default=1.0)
