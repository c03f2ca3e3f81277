"""Content digests of a model's calibration files (statistics, manifest, kept sample): what a
result built from them is keyed by (``ConvertImpl.quantized_ir``).

A file's digest is remembered under its stat marks (inode, size, mtime, ctime) once the file
was older than :data:`SETTLED_NS` when read: a later rewrite then carries a later mtime, so
the same marks mean the same bytes.  A younger file (it might be rewritten within one
timestamp tick, keeping its marks) is read again every time.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Dict, List, Tuple, Union

from .sample import sample_path
from .stats import statistics_dir

SETTLED_NS = 2_000_000_000   # 2 s, far above any file system's timestamp granularity
MEMO_SIZE = 256              # files whose digests are remembered
_memo: Dict[Tuple, str] = {}


def file_digest(path: Union[str, Path]) -> str:
    """SHA-256 (hex) of the file's bytes; raises OSError when it cannot be read."""
    marks = os.stat(path)
    key = (str(path), marks.st_ino, marks.st_size, marks.st_mtime_ns, marks.st_ctime_ns)
    if key in _memo:
        return _memo[key]
    with open(path, "rb") as stream:
        digest = hashlib.file_digest(stream, "sha256").hexdigest()
    if time.time_ns() - max(marks.st_mtime_ns, marks.st_ctime_ns) > SETTLED_NS:
        if len(_memo) >= MEMO_SIZE:
            _memo.pop(next(iter(_memo)))
        _memo[key] = digest
    return digest


def calibration_digests(output_dir: Union[str, Path], fingerprint: str) -> List[Tuple[str, str]]:
    """(path, digest) of every file under ``output_dir`` that statistics are read from, and of
    the calibration sample kept for the model ``fingerprint``, in path order.  Statistics this
    process still holds in memory for ``output_dir`` are written first."""
    from ..oplib import flush_statistics
    flush_statistics(output_dir)
    folder = statistics_dir(output_dir)
    files = sorted(f for f in folder.iterdir() if not f.name.startswith(".")) if folder.is_dir() else []
    out = []
    for f in files + [sample_path(output_dir, fingerprint)]:
        try:
            out.append((str(f), file_digest(f)))
        except (FileNotFoundError, IsADirectoryError):   # no sample, or a file removed meanwhile
            continue
    return out
