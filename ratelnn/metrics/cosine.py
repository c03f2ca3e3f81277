"""Agreement of a model's outputs with the float model's, output by output.

:func:`output_cosines` / :func:`lowest_cosine`: the cosine similarity, the figure ``tune()``
judges by.  :func:`output_agreements` / :func:`lowest_agreement`: the cosine made scale-aware,
the figure the automatic default step and the accuracy passes judge by (docs/quantization.md,
"Automatic defaults").  :func:`cosine_gap_interval`: how far the gap between two models'
lowest cosine moves with the choice of evaluation inputs (bootstrap)."""
from __future__ import annotations

from typing import List, Sequence, Tuple

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


def norm_ratios(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> List[float]:
    """``||output|| / ||reference||`` of each output (all its values); 1.0 where both are all
    zeros, ``inf`` where only the reference is."""
    result = []
    for q, f in zip(outputs, reference, strict=True):
        nq, nf = np.linalg.norm(np.asarray(q, np.float64)), np.linalg.norm(np.asarray(f, np.float64))
        result.append(float(nq / nf) if nf > 0 else (1.0 if nq == 0 else float("inf")))
    return result


def output_agreements(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> List[float]:
    """Each output's cosine (:func:`output_cosines`), lowered to its :func:`norm_ratios` where
    that is lower: the cosine is blind to an output that shrinks, which a consumer comparing
    values with a threshold (a detector's score against 0.5) is not.  Zero-mean noise grows
    the norm (by 1/cosine when uncorrelated with the output), so a ratio of 1 or more is left
    to the cosine; a shrunk output reads its ratio."""
    return [min(c, r) for c, r in zip(output_cosines(outputs, reference), norm_ratios(outputs, reference))]


def lowest_agreement(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    """The lowest of :func:`output_agreements` (1.0 without outputs)."""
    return min(output_agreements(outputs, reference), default=1.0)


def cosine_gap_interval(reference: Sequence[np.ndarray], first: Sequence[np.ndarray], second: Sequence[np.ndarray],
                        confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> Tuple[float, float]:
    """The bootstrap interval ``(low, high)`` (``confidence``, percentile method) of
    ``lowest_cosine(first, reference) - lowest_cosine(second, reference)``: the samples (axis 0
    of every output, ``n`` of them) resampled with replacement ``resamples`` times, the same
    rows for both models (paired).  How far the gap between two models moves with the choice
    of evaluation inputs: an interval holding 0 does not tell them apart."""
    from scipy.stats import bootstrap   # scipy comes with scikit-learn
    n = len(reference[0])
    columns = []
    for f, a, b in zip(reference, first, second, strict=True):
        f, a, b = (np.asarray(v, np.float64).reshape(n, -1) for v in (f, a, b))
        columns += [np.sum(f * f, 1), np.sum(f * a, 1), np.sum(a * a, 1), np.sum(f * b, 1), np.sum(b * b, 1)]

    def gap(*cols, axis=-1):
        ff, fa, aa, fb, bb = (np.stack([np.sum(c, axis=axis) for c in cols[k::5]]) for k in range(5))
        return np.min(fa / np.sqrt(ff * aa), axis=0) - np.min(fb / np.sqrt(ff * bb), axis=0)

    interval = bootstrap(columns, gap, paired=True, vectorized=True, n_resamples=resamples,
                         confidence_level=confidence, method="percentile",
                         random_state=np.random.default_rng(seed)).confidence_interval
    return float(interval.low), float(interval.high)
