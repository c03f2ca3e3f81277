"""ModelMetrics, the one result type of every zoo model's ``evaluate()``, and metric helpers
(docs/agraph.md).  Helpers take numpy arrays and return floats in [0, 1]."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Optional, Tuple

import numpy as np

STAGES = ("fp32", "quant", "npu")


@dataclasses.dataclass
class ModelMetrics:
    """What one evaluation of one model at one stage measured.

    ``metrics``: metric name -> value (the first is the primary one); ``samples``: how many
    dataset samples were evaluated; ``wall_time_s``: seconds the evaluation took (filled by
    :func:`agraph.evaluate`); ``npu``: cost-model figures of the compiled model
    (``latency_ms`` of one sample, ``throughput_fps`` with all cores, ``device``, ``cores``,
    ``engines``), filled for the ``npu`` stage."""

    model: str
    dataset: str
    stage: str
    metrics: Dict[str, float]
    samples: int
    wall_time_s: float = 0.0
    npu: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"ModelMetrics stage must be one of {STAGES}, got {self.stage!r}")
        if not self.metrics:
            raise ValueError(f"ModelMetrics of {self.model!r} holds no metric")
        self.metrics = {str(k): float(v) for k, v in self.metrics.items()}
        self.samples = int(self.samples)

    @property
    def primary(self) -> Tuple[str, float]:
        """``(name, value)`` of the first metric."""
        name = next(iter(self.metrics))
        return name, self.metrics[name]

    def row(self) -> list:
        """Table cells: model, dataset, stage, metrics, samples, wall time, NPU latency/fps."""
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in self.metrics.items())
        npu = self.npu or {}
        latency = f"{npu['latency_ms']:.3f}" if "latency_ms" in npu else "-"
        fps = f"{npu['throughput_fps']:.1f}" if "throughput_fps" in npu else "-"
        return [self.model, self.dataset, self.stage, metrics, str(self.samples),
                f"{self.wall_time_s:.1f}", latency, fps]

    HEADER = ["model", "dataset", "stage", "metrics", "samples", "wall s", "npu ms", "npu fps"]

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: Optional[str] = None) -> str:
        """The metrics as JSON text; also written to ``path`` if given."""
        text = json.dumps(self.to_dict(), indent=1, sort_keys=True)
        if path is not None:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    @classmethod
    def from_json(cls, text_or_dict: Any) -> "ModelMetrics":
        data = json.loads(text_or_dict) if isinstance(text_or_dict, str) else dict(text_or_dict)
        return cls(**data)


def _check_pair(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{what}: {len(a)} outputs but {len(b)} references/labels")


def top1_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of rows of ``logits`` [N, C] whose argmax equals ``labels`` [N]."""
    logits, labels = np.asarray(logits), np.asarray(labels).reshape(-1)
    logits = logits.reshape(len(logits), -1)
    _check_pair(logits, labels, "top1_accuracy")
    return float(np.mean(np.argmax(logits, axis=1) == labels)) if len(labels) else 0.0


def top1_agreement(outputs: np.ndarray, reference_outputs: np.ndarray) -> float:
    """Fraction of rows whose argmax equals the reference's argmax ([N, C] each)."""
    a, b = np.asarray(outputs), np.asarray(reference_outputs)
    _check_pair(a, b, "top1_agreement")
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1))) if len(a) else 0.0


def mean_cosine(outputs: np.ndarray, reference_outputs: np.ndarray) -> float:
    """Mean over rows of the cosine similarity to the reference, clipped to [0, 1] (two
    all-zero rows count as 1, one all-zero row as 0)."""
    a = np.asarray(outputs, dtype=np.float64)
    b = np.asarray(reference_outputs, dtype=np.float64)
    _check_pair(a, b, "mean_cosine")
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    dot = np.sum(a * b, axis=1)
    cos = np.where((na == 0) & (nb == 0), 1.0, dot / np.maximum(na * nb, 1e-300))
    return float(np.clip(cos, 0.0, 1.0).mean()) if len(a) else 0.0


def collect(run, dataset, preprocess, *, limit=None, batch_size: int = 32, reference=None, output: int = 0):
    """Run ``run`` (and ``reference`` if given) over ``dataset.batches(batch_size, limit)``.

    Returns ``(outputs, labels, reference_outputs)``: model output ``output`` (default the
    first) of every batch concatenated [N, ...], the labels [N] (None if unlabelled) and the
    reference's same output (None without ``reference``).  ``preprocess``: samples -> model
    input batch."""
    outputs, labels, references = [], [], []
    for samples, batch_labels in dataset.batches(batch_size, limit):
        inputs = preprocess(samples)
        inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
        outputs.append(np.asarray(run(inputs)[output]))
        if reference is not None:
            references.append(np.asarray(reference(inputs)[output]))
        if batch_labels is not None:
            labels.append(np.asarray(batch_labels))
    if not outputs:
        raise ValueError(f"dataset {getattr(dataset, 'key', '?')!r} gave no samples (limit={limit})")
    return (np.concatenate(outputs), np.concatenate(labels) if labels else None,
            np.concatenate(references) if references else None)
