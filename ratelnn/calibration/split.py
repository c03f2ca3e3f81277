"""The held-out rule (docs/quantization.md "Held-out judgement"): which samples of the data a
choice is made on are held out to judge it. ``tune()`` (:mod:`ratelnn.tune.holdout`), the
default build's check (:mod:`ratelnn.tune.auto`) and the accuracy passes
(:mod:`ratelnn.quantization.accuracy`) all split by it.

Deterministic: sample ``i`` (in the order the data yields them) is held out when
``i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1`` (every 4th: 25 %); with fewer than
:data:`MIN_SPLIT_SAMPLES` samples nothing is held out.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import numpy as np

HELD_OUT_EVERY = 4          # every 4th sample is held out (25 %)
MIN_SPLIT_SAMPLES = 8       # fewer samples: nothing held out


def split_rows(n: int) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """(tuning rows, held-out rows or None) of ``n`` samples (module docstring)."""
    rows = np.arange(n)
    if n < MIN_SPLIT_SAMPLES:
        return rows, None
    held = rows % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
    return rows[~held], rows[held]


def split_sample(sample: Mapping[str, np.ndarray]) -> Tuple[Dict[str, np.ndarray], Optional[Dict[str, np.ndarray]]]:
    """(fit part, held-out part or None) of ``sample`` (input name -> ``[n, ...]``) by
    :func:`split_rows`; None: too few samples, the fit part is all of it."""
    fit, held = split_rows(min(len(v) for v in sample.values()))
    if held is None:
        return dict(sample), None
    return {k: np.asarray(v)[fit] for k, v in sample.items()}, {k: np.asarray(v)[held] for k, v in sample.items()}
