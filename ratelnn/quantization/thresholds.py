"""Calibration thresholds: statistics of one tensor -> the largest magnitude to represent.

One function per ``quantize_algorithm`` (DESIGN §4); :func:`threshold_for` picks it.  A
statistics object has the fields of ``ratelnn.calibration.stats.TensorStats``: ``min``,
``max`` (over all calibration data), ``ema_min``, ``ema_max`` (moving average of the
per-batch extremes), ``batches``, ``count``.  Thresholds are in the tensor's float units.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Mapping, Optional

from ..config import ConfigError
from ..errors import CalibrationError


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


def naive_threshold(tensor: str, stats: Any, config: Mapping[str, Any]) -> float:
    """``max(|low|, |high|)`` of the EMA extremes when ``enable_EMA``, else of min/max."""
    low, high = value_range(tensor, stats, bool(config.get("enable_EMA", True)))
    return max(abs(low), abs(high))


def _not_implemented(algorithm: str) -> Callable[..., float]:
    def threshold(tensor: str, stats: Any, config: Mapping[str, Any]) -> float:
        raise ConfigError(f"quantize_algorithm {algorithm!r} is not implemented yet "
                          f"(needed for tensor {tensor!r}); use 'naive'")
    return threshold


THRESHOLD_METHODS: Dict[str, Callable[[str, Any, Mapping[str, Any]], float]] = {
    "naive": naive_threshold,
    "kld": _not_implemented("kld"),
    "percentile": _not_implemented("percentile"),
    "mse": _not_implemented("mse"),
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
                  node_name: Optional[str] = None) -> float:
    """Threshold (float, >= 0) of ``tensor`` from its statistics under ``config``."""
    _finite(tensor, "min", stats.min)
    _finite(tensor, "max", stats.max)
    return THRESHOLD_METHODS[method_for(tensor, config, node_name)](tensor, stats, config)
