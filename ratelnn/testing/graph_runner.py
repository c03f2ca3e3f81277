"""Run a model (float, calibration, quantized or compiled form) over a whole dataset in
fixed-size batches, on top of :func:`ratelnn.runners.run_model`."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ..runners import run_model


def _batches(x: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Consecutive batches of exactly ``batch_size`` rows; the last one is zero-padded."""
    for start in range(0, len(x), batch_size):
        batch = x[start:start + batch_size]
        if len(batch) < batch_size:
            pad = np.zeros((batch_size - len(batch),) + batch.shape[1:], batch.dtype)
            batch = np.concatenate([batch, pad])
        yield batch


def run_graph(model: Any, input_name: str, output_name: str, x: np.ndarray, batch_size: int,
              framework: str = "tensorflow") -> np.ndarray:
    """Outputs of ``model`` for every row of ``x``, fed ``batch_size`` rows at a time.

    ``input_name``/``output_name``: node or tensor names (``"images"``, ``"images:0"``).
    Models made for a fixed batch get exactly ``batch_size`` rows per run: the last batch is
    zero-padded and the padding rows are dropped. Returns ``len(x)`` rows of output.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    outputs = [run_model(framework, model, {input_name: batch}, [output_name])[0]
               for batch in _batches(x, batch_size)]
    return np.concatenate(outputs)[:len(x)]


def graph_accuracy(model: Any, input_name: str, output_name: str, x: np.ndarray,
                   labels: np.ndarray, batch_size: int, framework: str = "tensorflow") -> float:
    """Top-1 accuracy (fraction in [0, 1]) of a classifier whose output is [N, classes]."""
    scores = run_graph(model, input_name, output_name, x, batch_size, framework)
    return float(np.mean(np.argmax(scores, axis=1) == labels))
