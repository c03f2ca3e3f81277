"""Writing merged statistics as one snapshot file, and the exact EMA of ordered batches.

Used where statistics recorded by several processes are merged on one machine and the
result must read back exactly as if one process had recorded every batch (the Ray
executor, docs/distributed.md).  The file is format version 1 of docs/statistics.md, byte
for byte as ``ops/core/stats_format.cc`` writes it (floats with ``%.9g``, histogram bins
with runs of zeros as ``-k``, CRC-32 of the payload), written whole and atomically
(temporary dot-file, fsync, rename, directory fsync) so that a reader never sees a part.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import zlib
from pathlib import Path
from typing import Iterable, Mapping, Optional, Tuple, Union

from .histogram import encode_bins
from .stats import FORMAT_VERSION, HEADER_MAGIC, STATS_SUFFIX, TensorStats, statistics_dir


def _float(value: float) -> str:
    return "%.9g" % float(value)


def encode_statistics(tensors: Mapping[str, TensorStats]) -> bytes:
    """The ``.rstats`` file contents (header and payload) of ``tensors``, in name order."""
    entries = []
    for name in sorted(tensors):
        s = tensors[name]
        entry = (f"{json.dumps(name)}: {{\"min\": {_float(s.min)}, \"max\": {_float(s.max)}, "
                 f"\"ema_min\": {_float(s.ema_min)}, \"ema_max\": {_float(s.ema_max)}, "
                 f"\"batches\": {int(s.batches)}, \"count\": {int(s.count)}")
        if s.histogram is not None:
            bins = ", ".join(str(b) for b in encode_bins(s.histogram.bins))
            entry += f", \"hist\": {{\"range_exp\": {s.histogram.range_exp}, \"bins\": [{bins}]}}"
        entries.append(entry + "}")
    payload = ("{\"tensors\": {" + ", ".join(entries) + "}}\n").encode("utf-8")
    header = f"{HEADER_MAGIC} {FORMAT_VERSION} {zlib.crc32(payload):08x} {len(payload)}\n"
    return header.encode("ascii") + payload


def write_statistics(output_dir: Union[str, Path], tensors: Mapping[str, TensorStats],
                     name: Optional[str] = None) -> Path:
    """Write ``tensors`` as one new snapshot file under ``output_dir`` (docs/statistics.md,
    "Files"): ``.<name>.tmp``, fsync, rename, fsync of the directory.  Returns its path."""
    directory = statistics_dir(output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    name = name or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(8)}{STATS_SUFFIX}"
    path = directory / name
    tmp = directory / f".{name}.tmp"
    data = encode_statistics(tensors)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def ordered_ema(batch_values: Iterable[float], decay: float) -> float:
    """The moving average ``RatelMinMax`` keeps (``ops/core/stats_store.cc``) over per-batch
    values in recording order: the first batch's value, then ``decay * ema + (1 - decay) *
    value`` in double.  ``decay`` as the op holds it (a float32 attribute, widened)."""
    ema = None
    for value in batch_values:
        value = float(value)
        ema = value if ema is None else decay * ema + (1.0 - decay) * value
    if ema is None:
        raise ValueError("no batches")
    return ema


def ordered_emas(ranges: Iterable[Tuple[float, float]], decay: float) -> Tuple[float, float]:
    """``(ema_min, ema_max)`` of per-batch ``(min, max)`` pairs in recording order."""
    ranges = list(ranges)
    return ordered_ema((r[0] for r in ranges), decay), ordered_ema((r[1] for r in ranges), decay)
