"""Calibration thresholds: statistics of one tensor -> the largest magnitude to represent.

One function per ``quantize_algorithm`` (docs/architecture.md §4, docs/quantization.md §3);
:func:`threshold_for` picks it. A statistics object has the fields of
``ratelnn.calibration.stats.TensorStats``: ``min``, ``max`` (over all calibration data),
``ema_min``, ``ema_max`` (moving average of the per-batch extremes), ``batches``, ``count``
and ``histogram`` (``ratelnn.calibration.histogram.AbsHistogram`` of ``|x|``, or None).
Thresholds are in the tensor's float units and never exceed the observed ``max |x|``.

``naive`` with ``enable_EMA`` reads the EMA extremes, which depend on the batch split; every
other method reads only the absolute min/max and the histogram, which do not.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

from ..config import ConfigError
from ..errors import CalibrationError
from ..ir import arith

DEFAULT_PERCENTILE = 99.99
# KL candidates evaluated at once (memory: chunk x levels float64 per array).
_KLD_CHUNK = 512
# Probability given to a bin the candidate distribution cannot represent (KL smoothing).
_KLD_EPSILON = 1e-4


class KLDDegenerateWarning(UserWarning):
    """The KL-divergence search kept the whole range: the threshold is max |x|."""


def _finite(tensor: str, name: str, value: Any) -> float:
    if value is None:
        raise CalibrationError(f"statistics of tensor {tensor!r} have no {name}")
    value = float(value)
    if not math.isfinite(value):
        raise CalibrationError(f"statistics of tensor {tensor!r}: {name} is {value} "
                               "(the calibration data produced NaN or Inf)")
    return value


def value_range(tensor: str, stats: Any, use_ema: bool) -> "tuple[float, float]":
    """(low, high) used for the threshold: the EMA extremes or the absolute ones."""
    if use_ema:
        return (_finite(tensor, "ema_min", stats.ema_min), _finite(tensor, "ema_max", stats.ema_max))
    return _finite(tensor, "min", stats.min), _finite(tensor, "max", stats.max)


def max_abs(stats: Any) -> float:
    """Largest |x| seen during calibration."""
    return max(abs(float(stats.min)), abs(float(stats.max)))


def _histogram(tensor: str, stats: Any, method: str):
    histogram = getattr(stats, "histogram", None)
    if histogram is None:
        raise CalibrationError(
            f"quantize_algorithm {method!r} needs the histogram of tensor {tensor!r}, but its "
            "statistics have none (recorded by an op library without histograms, or only "
            "partly): delete <output_dir>/ratel_stats and calibrate again")
    return histogram


def _levels(dtype: str) -> int:
    """Positive quantization levels of ``dtype``: 128 (int8), 256 (uint8), 32768 (int16)."""
    return arith.qmax_of(dtype) + 1


# --- naive -------------------------------------------------------------------------------

def naive_threshold(tensor: str, stats: Any, config: Mapping[str, Any], dtype: str = "int8") -> float:
    """``max(|low|, |high|)`` of the EMA extremes when ``enable_EMA``, else of min/max."""
    low, high = value_range(tensor, stats, bool(config.get("enable_EMA", True)))
    return max(abs(low), abs(high))


# --- kld ---------------------------------------------------------------------------------

def _xlogx(v: np.ndarray) -> np.ndarray:
    return v * np.log(np.where(v > 0, v, 1.0))


def _kl_divergences(bins: np.ndarray, candidates: np.ndarray, levels: int) -> np.ndarray:
    """KL(P || Q) per candidate ``i`` (bins kept, ``levels <= i <= len(bins)``), TensorRT style.

    P: ``bins[:i]`` with the counts of ``bins[i:]`` (clipped values) added to bin ``i-1``.
    Q: ``bins[:i]`` merged into ``levels`` groups (bin b in group ``b*levels // i``, i.e.
    group j is ``[ceil(j*i/levels), ceil((j+1)*i/levels))``), each group's count spread
    evenly over its bins where P is non-zero. Both normalised; a bin with P > 0 and Q = 0
    gets Q = ``_KLD_EPSILON``. Computed per group from prefix sums (O(levels) per
    candidate); the last bin, which holds the clipped values, is added separately.
    """
    def prefix(v: np.ndarray) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(v)])

    count, nonzero, xlogx = prefix(bins), prefix(bins > 0), prefix(_xlogx(bins))
    total = count[-1]
    out = np.empty(len(candidates))
    j = np.arange(levels + 1)
    for first in range(0, len(candidates), _KLD_CHUNK):
        i = candidates[first:first + _KLD_CHUNK]
        edges = (j[None, :] * i[:, None] + levels - 1) // levels  # [C, levels+1]
        lo, hi = edges[:, :-1], edges[:, 1:]
        last_edge = np.minimum(hi, (i - 1)[:, None])  # group sums without bin i-1
        group = count[hi] - count[lo]
        group_nonzero = nonzero[hi] - nonzero[lo]
        kept_sum = count[i]  # sum of Q before normalisation
        last_p = bins[i - 1] + (total - count[i])
        group_nonzero[:, -1] += (bins[i - 1] == 0) & (last_p > 0)
        q_level = np.divide(group, np.maximum(group_nonzero, 1) * kept_sum[:, None],
                            out=np.zeros_like(group), where=kept_sum[:, None] > 0)
        body = count[last_edge] - count[lo]  # P's mass on the bins other than i-1
        body_xlogx = xlogx[last_edge] - xlogx[lo]
        log_q = np.log(np.where(q_level > 0, q_level, 1.0))
        regular = np.sum(np.where(body > 0, body_xlogx - body * (np.log(total) + log_q), 0.0), axis=1)
        p_last = last_p / total
        q_last = np.where(q_level[:, -1] > 0, q_level[:, -1], _KLD_EPSILON)
        edge_term = np.where(last_p > 0, p_last * np.log(np.where(last_p > 0, p_last, 1.0) / q_last), 0.0)
        out[first:first + len(i)] = regular / total + edge_term
    return out


def kld_threshold(tensor: str, stats: Any, config: Mapping[str, Any], dtype: str = "int8") -> float:
    """Threshold minimising KL(P || Q) over the candidates ``i * bin_width`` for ``i`` from
    the number of levels (128 int8, 256 uint8) to the last occupied bin; capped at max |x|.

    Bin 0 (|x| below one bin width, including the exact zeros a ReLU makes in bulk) is left
    out of P and Q: every candidate represents it by code 0 or 1, and its mass spread over
    the first level of Q would dominate the divergence and pull the threshold down.

    Warns :class:`KLDDegenerateWarning`, naming the tensor, when the whole range wins (the
    result is plain min/max). int16 tensors (32768 levels, finer than the histogram) use
    max |x| without a warning.
    """
    histogram = _histogram(tensor, stats, "kld")
    top = max_abs(stats)
    levels = _levels(dtype)
    occupied = np.nonzero(histogram.bins)[0]
    stop = int(occupied[-1]) + 1 if len(occupied) else 0
    if stop <= levels:
        return top
    candidates = np.arange(levels, stop + 1)
    bins = histogram.bins[:stop].astype(np.float64)
    bins[0] = 0.0  # zeros (bulk ReLU output) and values below one bin: see docstring
    divergences = _kl_divergences(bins, candidates, levels)
    best = int(candidates[int(np.argmin(divergences))])
    threshold = min(best * histogram.bin_width, top)
    if threshold >= top:
        warnings.warn(f"kld threshold of tensor {tensor!r} is its max |x| = {top:g}: the KL "
                      "search clips nothing and degenerates to min/max (too little calibration "
                      "data, or a distribution without outliers)", KLDDegenerateWarning,
                      stacklevel=3)
    return threshold


# --- percentile --------------------------------------------------------------------------

def percentile_threshold(tensor: str, stats: Any, config: Mapping[str, Any],
                         dtype: str = "int8") -> float:
    """Upper edge of the histogram bin holding the ``percentile`` (config, default 99.99)
    of |x|, capped at max |x|: within one bin width of ``numpy.percentile(|x|, p)``."""
    p = config.get("percentile", DEFAULT_PERCENTILE)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 100:
        raise ConfigError(f"config key 'percentile' must be a number in (0, 100], got {p!r}")
    histogram = _histogram(tensor, stats, "percentile")
    cumulative = np.cumsum(histogram.bins)
    k = int(np.searchsorted(cumulative, p / 100.0 * cumulative[-1], side="left"))
    return min((k + 1) * histogram.bin_width, max_abs(stats))


# --- mse ---------------------------------------------------------------------------------

def expected_squared_errors(histogram, thresholds: np.ndarray, qmax: int) -> np.ndarray:
    """Expected quantization MSE per value, for each threshold (float64 ``[K]``).

    Each bin's values sit at its centre ``c``. With ``s = T / qmax``: a value above ``T`` is
    clipped, error ``(c - T)^2``; below ``s / 2`` it rounds to 0, error ``c^2``; otherwise
    the rounding error is uniform, ``s^2 / 12``.
    """
    n = histogram.bins.astype(np.float64)
    c = histogram.centers()
    count = np.concatenate([[0.0], np.cumsum(n)])
    first = np.concatenate([[0.0], np.cumsum(n * c)])
    second = np.concatenate([[0.0], np.cumsum(n * c * c)])
    t = np.asarray(thresholds, dtype=np.float64)
    s = t / qmax
    inside = np.searchsorted(c, t, side="right")
    to_zero = np.minimum(np.searchsorted(c, s / 2, side="left"), inside)
    clipped = ((second[-1] - second[inside]) - 2 * t * (first[-1] - first[inside])
               + t * t * (count[-1] - count[inside]))
    rounded = second[to_zero] + s * s / 12 * (count[inside] - count[to_zero])
    return (clipped + rounded) / max(count[-1], 1.0)


def mse_threshold(tensor: str, stats: Any, config: Mapping[str, Any], dtype: str = "int8") -> float:
    """The threshold among ``k * bin_width`` (k = 1..2048) and max |x| minimising
    :func:`expected_squared_errors` at the dtype's ``qmax``; the smallest on ties."""
    histogram = _histogram(tensor, stats, "mse")
    top = max_abs(stats)
    if top == 0:
        return 0.0
    edges = np.arange(1, len(histogram.bins) + 1) * histogram.bin_width
    candidates = np.append(edges[edges < top], top)
    errors = expected_squared_errors(histogram, candidates, arith.qmax_of(dtype))
    return float(candidates[int(np.argmin(errors))])


def sqnr_db(stats: Any, threshold: float, dtype: str) -> float:
    """Signal-to-quantization-noise ratio (dB) of quantizing the tensor at ``threshold``
    with ``dtype``: ``10 log10(E[x^2] / expected MSE)``, both from ``stats.histogram``
    (which must not be None); +inf when the expected error is 0."""
    histogram = stats.histogram
    n = histogram.bins.astype(np.float64)
    signal = float(np.sum(n * histogram.centers() ** 2) / max(n.sum(), 1.0))
    noise = float(expected_squared_errors(histogram, np.array([threshold]), arith.qmax_of(dtype))[0])
    if noise <= 0:
        return math.inf
    return 10.0 * math.log10(max(signal, 1e-300) / noise)


THRESHOLD_METHODS: Dict[str, Callable[..., float]] = {
    "naive": naive_threshold,
    "kld": kld_threshold,
    "percentile": percentile_threshold,
    "mse": mse_threshold,
}


def method_for(tensor: str, config: Mapping[str, Any], node_name: Optional[str] = None) -> str:
    """The threshold method of one tensor: ``naive_kld_mix`` uses kld for ``kld_nodes``
    (matched by tensor or producing node name) and naive elsewhere."""
    algorithm = config.get("quantize_algorithm", "naive")
    if algorithm == "naive_kld_mix":
        kld_nodes = set(config.get("kld_nodes") or [])
        return "kld" if tensor in kld_nodes or node_name in kld_nodes else "naive"
    if algorithm not in THRESHOLD_METHODS:
        raise ConfigError(f"unknown quantize_algorithm {algorithm!r}")
    return algorithm


def threshold_for(tensor: str, stats: Any, config: Mapping[str, Any],
                  node_name: Optional[str] = None, dtype: str = "int8") -> float:
    """Threshold (float, >= 0) of ``tensor`` quantized as ``dtype`` under ``config``."""
    _finite(tensor, "min", stats.min)
    _finite(tensor, "max", stats.max)
    return THRESHOLD_METHODS[method_for(tensor, config, node_name)](tensor, stats, config, dtype)
