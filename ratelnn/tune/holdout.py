"""Held-out judgement (docs/quantization.md "Held-out judgement"): the one rule splitting data
into a part choices are made on and a held-out part they are judged on, for ``tune()`` (its
``data``: tuning part, calibrated on and searched on; held-out part, the chosen configuration
judged once more on it), for the default build's check (:mod:`.auto`) and for the accuracy
passes (:mod:`ratelnn.quantization.accuracy`; both: the kept calibration sample, fit part and
held-out part), and the warning when the two figures differ.

The split itself is :mod:`ratelnn.calibration.split` (every 4th sample held out), kept below
the quantization layer that also uses it.
"""
from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..calibration.split import HELD_OUT_EVERY, MIN_SPLIT_SAMPLES, split_rows, split_sample  # noqa: F401  (the rule)

HELD_OUT_BOUND = 0.005      # tuning and held-out figures further apart than this: HeldOutWarning


class HeldOutWarning(UserWarning):
    """A figure measured on the data a choice was made on differs from the same figure on
    held-out data by more than :data:`HELD_OUT_BOUND`: the choice may not generalise."""


@dataclasses.dataclass
class Part:
    """One part of a search's data: ``samples`` (input name -> ``[n, ...]``), ``rows`` (their
    indices in the data as given), ``data`` (what a user metric receives: the given array or
    dict of arrays restricted to ``rows``, else ``samples``) and, once the float model has run
    on it, its ``reference`` outputs."""

    samples: Dict[str, np.ndarray]
    rows: np.ndarray
    data: Any
    reference: Optional[List[np.ndarray]] = None

    def __len__(self) -> int:
        return len(self.rows)


def split_data(data: Any, samples: Dict[str, np.ndarray], hold_out: bool = True) -> Tuple[Part, Optional[Part]]:
    """(tuning part, held-out part or None) of ``data``, whose samples in order are
    ``samples``; ``hold_out`` False: all of it is the tuning part."""
    n = min(len(v) for v in samples.values())
    tuning, held = split_rows(n) if hold_out else (np.arange(n), None)
    return _part(data, samples, tuning), None if held is None else _part(data, samples, held)


def _part(data: Any, samples: Dict[str, np.ndarray], rows: np.ndarray) -> Part:
    mine = {k: np.asarray(v)[rows] for k, v in samples.items()}
    if isinstance(data, np.ndarray) and len(data) >= len(rows):
        given: Any = data[rows]
    elif isinstance(data, dict) and all(isinstance(v, np.ndarray) for v in data.values()):
        given = {k: v[rows] for k, v in data.items()}
    else:
        given = mine
    return Part(mine, rows, given)


def call_metric(metric: Callable, outputs: List[np.ndarray], part: Part) -> Any:
    """``metric(outputs, data)``, or ``metric(outputs, data, rows)`` when it takes three
    arguments (``rows``: the indices of these samples in the data given to the search, for a
    metric holding labels for all of them)."""
    try:
        params = inspect.signature(metric).parameters.values()
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes_rows = len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)
    except (TypeError, ValueError):   # a builtin without a signature
        takes_rows = False
    return metric(outputs, part.data, part.rows) if takes_rows else metric(outputs, part.data)


def gap_warning(what: str, tuned: float, held: Optional[float], tuned_n: int, held_n: int) -> Optional[str]:
    """The :class:`HeldOutWarning` message (also warned) when ``tuned`` and ``held`` differ by
    more than :data:`HELD_OUT_BOUND`; None when they agree or nothing was held out."""
    if held is None or abs(tuned - held) <= HELD_OUT_BOUND:
        return None
    message = (f"{what}: the figure on the {tuned_n} samples it was chosen on ({tuned:.5f}) and on "
               f"the {held_n} held-out samples ({held:.5f}) differ by {abs(tuned - held):.5f} "
               f"(> {HELD_OUT_BOUND}): the choice may not hold on other data; give more, or more "
               "varied, data")
    warnings.warn(message, HeldOutWarning, stacklevel=3)
    return message
