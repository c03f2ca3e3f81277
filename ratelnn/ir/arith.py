"""Reference arithmetic of Quant and Dequant (docs/quantization.md), in numpy.

This module *defines* the semantics: the C++ kernels of ``RatelQuant``/``RatelDequant``
(ops/core/quant.h) must give the same bits.  All arithmetic is float32.

- ``quantize``: ``q = clamp(round(x / scale), qmin, qmax)`` with ``x / scale`` computed in
  float32; NaN maps to 0; +/-Inf saturate.
- ``dequantize``: ``x = float32(q) * scale``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

def _round_half_away(v: np.ndarray) -> np.ndarray:
    """Exact round-half-away-from-zero (C's ``roundf``): no ``v + 0.5`` double rounding.
    Nearest (``rint``), then the exact ties ``k + 0.5`` moved away from zero (``v ± 0.5`` is
    exact there); zeros are +0.0."""
    v = np.asarray(v)
    flat = v.reshape(-1)
    r = np.rint(flat)
    half = r.dtype.type(0.5)
    with np.errstate(invalid="ignore"):
        gap = np.subtract(flat, r)          # exact: r is within 0.5 of v
        ties = np.flatnonzero(np.abs(gap, out=gap) == half)
    r[ties] = flat[ties] + np.copysign(half, flat[ties])
    return np.add(r, r.dtype.type(0), out=r).reshape(v.shape)[()]


ROUNDERS = {
    "half_away_from_zero": _round_half_away,
    "half_to_even": np.rint,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
}

QRANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
          "int32": (-2147483648, 2147483647)}

Scale = Union[float, Sequence[float], np.ndarray]


def qmax_of(dtype: str) -> int:
    """Largest code of ``dtype``: 127, 255, 32767 or 2**31-1."""
    return QRANGE[dtype][1]


def _broadcast_scale(scale: Scale, ndim: int, axis: Optional[int]) -> np.ndarray:
    s = np.asarray(scale, dtype=np.float32)
    if axis is None or s.ndim == 0:
        return s.reshape(())
    axis = axis % ndim
    shape = [1] * ndim
    shape[axis] = s.size
    return s.reshape(shape)


def quantize(x: np.ndarray, scale: Scale, dtype: str = "int8", axis: Optional[int] = None,
             round_mode: str = "half_away_from_zero") -> np.ndarray:
    """Quantize float ``x`` (any shape) to integer ``dtype``; ``scale`` per tensor or per
    channel along ``axis``."""
    x = np.asarray(x, dtype=np.float32)
    s = _broadcast_scale(scale, x.ndim, axis)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        v = np.divide(x, s, dtype=np.float32)
        r = np.asarray(ROUNDERS[round_mode](v), dtype=np.float32)
    lo, hi = QRANGE[dtype]
    if dtype == "int32" or r.ndim == 0:   # clip in float64 so that int32 limits are exact
        r = np.where(np.isnan(r), np.float32(0), r)
        return np.clip(r.astype(np.float64), lo, hi).astype(dtype)
    np.copyto(r, np.float32(0), where=np.isnan(r))
    return np.clip(r, lo, hi, out=r).astype(dtype)   # 8/16-bit limits are exact in float32


def dequantize(q: np.ndarray, scale: Scale, axis: Optional[int] = None) -> np.ndarray:
    """``float32(q) * scale`` (float32 product)."""
    q = np.asarray(q)
    s = _broadcast_scale(scale, q.ndim, axis)
    return (q.astype(np.float32) * s).astype(np.float32)
