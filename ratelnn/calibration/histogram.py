"""Histogram of |x| recorded by calibration (docs/statistics.md, "Histogram").

``BINS`` (2048) equal bins over ``[0, 2**range_exp)``. The range is the smallest power of
two strictly above every recorded ``|x|`` (exponent clamped to ``[MIN_RANGE_EXP,
MAX_RANGE_EXP]``), and a value's bin is ``floor(|x| * 2**(11 - range_exp))`` computed in
float32 (a power-of-two product below 2**11, hence exact). Doubling the range sums adjacent
pairs of bins, and ``floor(floor(y) / 2) == floor(y / 2)`` for ``y >= 0``, so re-binning is
exact: the histogram of a set of values does not depend on how it was split into batches,
on the batches' order, or on how many processes recorded it. The C++ recorder
(``ops/core/minmax.cc``) and :meth:`AbsHistogram.of_values` compute identical counts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Sequence

import numpy as np

BINS_LOG2 = 11
BINS = 1 << BINS_LOG2
MIN_RANGE_EXP = -64
MAX_RANGE_EXP = 128


def range_exp_for(max_abs: float) -> int:
    """Smallest ``e`` in ``[MIN_RANGE_EXP, MAX_RANGE_EXP]`` with ``max_abs < 2**e``
    (``max_abs`` a finite float32 >= 0; 0 gives ``MIN_RANGE_EXP``)."""
    max_abs = np.float32(max_abs)
    if not max_abs > 0:
        return MIN_RANGE_EXP
    _, e = np.frexp(max_abs)  # max_abs = f * 2**e, f in [0.5, 1)
    return int(min(max(int(e), MIN_RANGE_EXP), MAX_RANGE_EXP))


@dataclass(frozen=True, eq=False)
class AbsHistogram:
    """``bins[k]`` = number of recorded values with ``|x|`` in ``[k*w, (k+1)*w)``,
    ``w = 2**range_exp / BINS`` (int64 array of length ``BINS``)."""

    range_exp: int
    bins: np.ndarray

    def __post_init__(self) -> None:
        bins = np.asarray(self.bins, dtype=np.int64)
        if bins.shape != (BINS,):
            raise ValueError(f"a histogram has {BINS} bins, got shape {bins.shape}")
        if np.any(bins < 0):
            raise ValueError("histogram counts must be >= 0")
        if not MIN_RANGE_EXP <= self.range_exp <= MAX_RANGE_EXP:
            raise ValueError(f"range_exp {self.range_exp} outside [{MIN_RANGE_EXP}, "
                             f"{MAX_RANGE_EXP}]")
        bins.setflags(write=False)
        object.__setattr__(self, "bins", bins)

    @property
    def range(self) -> float:
        """Upper end of the histogram, ``2**range_exp``."""
        return float(2.0 ** self.range_exp)

    @property
    def bin_width(self) -> float:
        return float(2.0 ** (self.range_exp - BINS_LOG2))

    @property
    def total(self) -> int:
        return int(self.bins.sum())

    def centers(self) -> np.ndarray:
        """Bin centres, float64, shape ``[BINS]``."""
        return (np.arange(BINS, dtype=np.float64) + 0.5) * self.bin_width

    def widened(self, range_exp: int) -> "AbsHistogram":
        """The same values binned over ``[0, 2**range_exp)``, ``range_exp >= self.range_exp``."""
        if range_exp < self.range_exp:
            raise ValueError(f"cannot narrow a histogram from 2**{self.range_exp} to "
                             f"2**{range_exp}")
        bins = self.bins.copy()
        for _ in range(min(range_exp - self.range_exp, BINS_LOG2 + 1)):
            bins = np.concatenate([bins.reshape(-1, 2).sum(axis=1), np.zeros(BINS // 2, np.int64)])
        return AbsHistogram(range_exp, bins)

    def merged(self, other: "AbsHistogram") -> "AbsHistogram":
        """Histogram of the values of both (the smaller range widened first)."""
        e = max(self.range_exp, other.range_exp)
        return AbsHistogram(e, self.widened(e).bins + other.widened(e).bins)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, AbsHistogram) and self.range_exp == other.range_exp
                and bool(np.array_equal(self.bins, other.bins)))

    __hash__ = None  # mutable-looking value object: compare, do not hash

    @classmethod
    def of_values(cls, values: np.ndarray) -> "AbsHistogram":
        """Histogram of float32 ``values`` (any shape, finite), as the C++ recorder makes it."""
        a = np.abs(np.asarray(values, dtype=np.float32)).reshape(-1)
        if not np.all(np.isfinite(a)):
            raise ValueError("values contain NaN or Inf")
        e = range_exp_for(a.max(initial=np.float32(0)))
        scale = np.float32(2.0 ** (BINS_LOG2 - e))
        index = np.minimum((a * scale).astype(np.int64), BINS - 1)
        return cls(e, np.bincount(index, minlength=BINS).astype(np.int64))

    def to_json(self) -> dict:
        """``{"range_exp": e, "bins": [...]}`` with runs of zeros as ``-(run length)``."""
        return {"range_exp": self.range_exp, "bins": encode_bins(self.bins)}


def encode_bins(bins: Sequence[int]) -> List[int]:
    """Counts with every run of ``k`` zero bins written as ``-k``."""
    out: List[int] = []
    zeros = 0
    for count in (int(c) for c in bins):
        if count == 0:
            zeros += 1
            continue
        if zeros:
            out.append(-zeros)
            zeros = 0
        out.append(count)
    if zeros:
        out.append(-zeros)
    return out


MAX_BIN_COUNT = 1 << 51


def decode_bins(encoded: Iterable[object]) -> np.ndarray:
    """Inverse of :func:`encode_bins`; raises ValueError unless it yields exactly BINS
    non-negative integer counts of at most :data:`MAX_BIN_COUNT`."""
    items = list(encoded)
    bad = next((x for x in items if type(x) is not int and (isinstance(x, bool) or not isinstance(x, int))), None)
    if bad is not None:
        raise ValueError(f"histogram entry {bad!r} is not an integer")
    large = next((x for x in items if x > MAX_BIN_COUNT), None) if items and max(items) > MAX_BIN_COUNT else None
    if large is not None:  # BINS such counts sum below 2^62: no int64 overflow
        raise ValueError(f"histogram entry {large} is larger than 2^51")
    if items and min(items) < -BINS:
        raise ValueError(f"histogram has more than {BINS} bins")
    entries = np.asarray(items, dtype=np.int64)
    widths = np.where(entries < 0, -entries, 1)   # a run of k zero bins, or one count
    ends = np.cumsum(widths)
    size = int(ends[-1]) if items else 0
    if size > BINS:
        raise ValueError(f"histogram has more than {BINS} bins")
    if size != BINS:
        raise ValueError(f"histogram has {size} bins, expected {BINS}")
    counts = np.zeros(BINS, np.int64)
    counts[(ends - 1)[entries >= 0]] = entries[entries >= 0]
    return counts
