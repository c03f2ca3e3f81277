"""Read the calibration statistics that ``RatelMinMax`` ops persisted (docs/statistics.md).

Each process that ran a calibration model left one snapshot file
``<output_dir>/ratel_stats/<host>-<pid>-<random>.rstats``; :func:`load_statistics` verifies
every file and merges them into one :class:`TensorStats` per tensor, histograms of ``|x|``
(:mod:`.histogram`) included.
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union

import numpy as np

from ..errors import CalibrationError
from .histogram import MAX_RANGE_EXP, MIN_RANGE_EXP, AbsHistogram, decode_bins

STATS_SUBDIR = "ratel_stats"
STATS_SUFFIX = ".rstats"
HEADER_MAGIC = "RATELSTATS"
FORMAT_VERSION = 1
_FLOAT_FIELDS = ("min", "max", "ema_min", "ema_max")
_INT_FIELDS = ("batches", "count")


@dataclass(frozen=True)
class TensorStats:
    """Statistics of one tensor, in the tensor's own units (float32 values as Python floats).

    ``min``/``max`` over every element of every batch; ``ema_min``/``ema_max`` the
    exponential moving average of the per-batch min/max; ``batches`` non-empty batches
    seen; ``count`` elements seen; ``histogram`` of ``|x|`` over all ``count`` elements, or
    None when some batch was recorded without one (files of older recorders). Equality
    compares the scalar fields only; compare histograms with ``a.histogram == b.histogram``.
    """

    min: float
    max: float
    ema_min: float
    ema_max: float
    batches: int
    count: int
    histogram: Optional[AbsHistogram] = field(default=None, compare=False)


def statistics_dir(output_dir: Union[str, Path]) -> Path:
    """The directory holding the ``.rstats`` files of ``output_dir``."""
    return Path(output_dir) / STATS_SUBDIR


def _corrupt(path: Path, reason: str) -> CalibrationError:
    return CalibrationError(f"corrupt calibration statistics file {path}: {reason}")


def _parse_header(path: Path, data: bytes) -> bytes:
    """Checks the header line and the payload's length and CRC; returns the payload."""
    newline = data.find(b"\n")
    if newline < 0:
        raise _corrupt(path, "no header line")
    fields = data[:newline].decode("ascii", errors="replace").split()
    if len(fields) != 4 or fields[0] != HEADER_MAGIC:
        raise _corrupt(path, f"bad header {data[:newline][:80]!r}")
    try:
        version, crc, length = int(fields[1]), int(fields[2], 16), int(fields[3])
    except ValueError:
        raise _corrupt(path, f"bad header {data[:newline][:80]!r}") from None
    if version != FORMAT_VERSION:
        raise _corrupt(path, f"format version {version} is not supported (this ratelnn reads "
                             f"version {FORMAT_VERSION})")
    payload = data[newline + 1:]
    if len(payload) != length:
        raise _corrupt(path, f"payload is {len(payload)} bytes, header says {length} "
                             "(truncated or overwritten)")
    if zlib.crc32(payload) != crc:
        raise _corrupt(path, f"CRC mismatch (header {crc:08x}, payload "
                             f"{zlib.crc32(payload):08x})")
    return payload


def _histogram(path: Path, name: str, entry: dict, count: int) -> Optional[AbsHistogram]:
    """The tensor's histogram, or None if absent or covering fewer than ``count`` values."""
    hist = entry.get("hist")
    if hist is None:
        return None
    range_exp = hist.get("range_exp") if isinstance(hist, dict) else None
    if isinstance(range_exp, bool) or not isinstance(range_exp, int) \
            or not MIN_RANGE_EXP <= range_exp <= MAX_RANGE_EXP:
        raise _corrupt(path, f"tensor {name!r}: histogram range_exp {range_exp!r} is not an "
                             f"integer in [{MIN_RANGE_EXP}, {MAX_RANGE_EXP}]")
    try:
        bins = decode_bins(hist.get("bins") or [])
    except (TypeError, ValueError) as e:
        raise _corrupt(path, f"tensor {name!r}: histogram bins: {e}") from None
    total = int(bins.sum())
    if total > count:
        raise _corrupt(path, f"tensor {name!r}: histogram holds {total} values, more than "
                             f"count = {count}")
    return AbsHistogram(range_exp, bins) if total == count else None


def _tensor_stats(path: Path, name: str, entry: object) -> TensorStats:
    if not isinstance(entry, dict):
        raise _corrupt(path, f"tensor {name!r}: entry is not an object")
    values = {}
    for key in _FLOAT_FIELDS + _INT_FIELDS:
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _corrupt(path, f"tensor {name!r}: field {key!r} missing or not a number")
        if not math.isfinite(value):
            raise CalibrationError(f"non-finite statistic in {path}: tensor {name!r} "
                                   f"{key} = {value}")
        if key in _INT_FIELDS and (not isinstance(value, int) or value <= 0):
            raise _corrupt(path, f"tensor {name!r}: {key} = {value!r} is not a positive "
                                 "integer")
        # statistics are float32 quantities written with %.9g: round back to float32
        values[key] = float(np.float32(value)) if key in _FLOAT_FIELDS else value
    stats = TensorStats(**values, histogram=_histogram(path, name, entry, values["count"]))
    if stats.min > stats.max:
        raise _corrupt(path, f"tensor {name!r}: min {stats.min} > max {stats.max}")
    return stats


def read_statistics_file(path: Union[str, Path]) -> Dict[str, TensorStats]:
    """The statistics of one ``.rstats`` file, by tensor name. Raises CalibrationError
    naming the file if it is corrupt or holds non-finite values."""
    path = Path(path)
    if path.is_dir():
        raise CalibrationError(f"{path} is a directory, not a calibration statistics file: "
                               "remove or rename it")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CalibrationError(f"cannot read calibration statistics file {path}: "
                               f"{e.strerror or e}") from None
    payload = _parse_header(path, data)
    try:
        document = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _corrupt(path, f"invalid JSON payload ({e})") from None
    tensors = document.get("tensors") if isinstance(document, dict) else None
    if not isinstance(tensors, dict):
        raise _corrupt(path, 'payload has no "tensors" object')
    return {name: _tensor_stats(path, name, entry) for name, entry in tensors.items()}


def merge_stats(parts: Iterable[TensorStats]) -> TensorStats:
    """One tensor's statistics from several processes: min of mins, max of maxes, batches
    and counts summed, EMAs averaged weighted by each process's batch count, histograms
    merged exactly (None if any part has none)."""
    parts = list(parts)
    batches = sum(p.batches for p in parts)
    histogram = None
    if all(p.histogram is not None for p in parts):
        histogram = parts[0].histogram
        for p in parts[1:]:
            histogram = histogram.merged(p.histogram)
    return TensorStats(
        min=min(p.min for p in parts),
        max=max(p.max for p in parts),
        ema_min=sum(p.ema_min * p.batches for p in parts) / batches,
        ema_max=sum(p.ema_max * p.batches for p in parts) / batches,
        batches=batches,
        count=sum(p.count for p in parts),
        histogram=histogram,
    )


def _names_list(names: List[str], limit: int = 20) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def load_statistics(output_dir: Union[str, Path],
                    required: Optional[Iterable[str]] = None) -> Dict[str, TensorStats]:
    """Merged statistics of every calibration process that wrote into ``output_dir``.

    First makes the op library loaded in this process (if any) flush its in-memory
    statistics of ``output_dir``. Raises CalibrationError when no statistics exist, a file
    is corrupt, a file holds tensors that no model of the directory's manifest records
    (statistics of another calibration: docs/statistics.md, "Owner"), or a tensor listed in
    ``required`` is missing.
    """
    from ..oplib import flush_statistics
    from .manifest import known_tensors, read_manifest

    stats_dir = statistics_dir(output_dir)
    if stats_dir.exists() and not stats_dir.is_dir():
        raise CalibrationError(f"{stats_dir} is not a directory: remove it")
    flush_statistics(output_dir)
    files = sorted(p for p in stats_dir.glob("*" + STATS_SUFFIX)
                   if not p.name.startswith(".")) if stats_dir.is_dir() else []
    manifest = read_manifest(output_dir)
    known = known_tensors(manifest) if manifest is not None else None
    per_tensor: Dict[str, List[TensorStats]] = {}
    for path in files:
        stats_of_file = read_statistics_file(path)
        foreign = sorted(set(stats_of_file) - known) if known is not None else []
        if foreign:
            raise CalibrationError(
                f"calibration statistics file {path} holds tensors that no model of "
                f"{stats_dir / 'manifest.json'} records ({_names_list(foreign, 5)}): it is "
                "another calibration's; delete it, or the whole directory to start fresh")
        for name, stats in stats_of_file.items():
            per_tensor.setdefault(name, []).append(stats)
    if not per_tensor:
        raise CalibrationError(
            f"no calibration statistics found in {stats_dir}: run the calibration model "
            "(to_cal()) on calibration data first, with this output_dir")
    merged = {name: merge_stats(parts) for name, parts in sorted(per_tensor.items())}
    missing = [name for name in (required or ()) if name not in merged]
    if missing:
        raise CalibrationError(
            f"calibration statistics in {stats_dir} lack {len(missing)} required tensor(s): "
            f"{_names_list(missing)}; run the calibration model on data that reaches them")
    return merged
