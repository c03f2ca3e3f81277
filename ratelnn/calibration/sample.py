"""The calibration sample: the first ``accuracy_samples`` calibration inputs, kept by
``calibrate()`` for the passes that need data at ``to_quant()`` time (empirical bias
correction, AdaRound; docs/quantization.md, "Accuracy passes").

One ``.npz`` per model in ``<output_dir>/ratel_sample/<fingerprint[:16]>.npz`` (input name ->
``[N, ...]`` float array), so that a sample is never used for another graph (an equalized
graph has another fingerprint).  Written atomically.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Dict, Mapping, Optional, Union

import numpy as np

from ..errors import CalibrationError
from ..fileio import write_atomic

SAMPLE_SUBDIR = "ratel_sample"


def sample_path(output_dir: Union[str, Path], fingerprint: str) -> Path:
    return Path(output_dir) / SAMPLE_SUBDIR / f"{fingerprint[:16]}.npz"


def read_sample(output_dir, fingerprint: str) -> Optional[Dict[str, np.ndarray]]:
    """The kept sample (input name -> array), None if there is none."""
    path = sample_path(output_dir, fingerprint)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError) as e:
        raise CalibrationError(f"corrupt calibration sample {path}: {e}; delete it and calibrate "
                               "again") from None


def keep_sample(output_dir, fingerprint: str, feeds: Mapping[str, np.ndarray], limit: int) -> int:
    """Append ``feeds`` (input name -> ``[n, ...]``) to the kept sample, up to ``limit``
    samples in all; returns how many are kept."""
    old = read_sample(output_dir, fingerprint) or {}
    have = len(next(iter(old.values()))) if old else 0
    take = min(limit - have, min(len(v) for v in feeds.values())) if feeds else 0
    if take <= 0:
        return have
    merged = {k: np.concatenate([old[k], np.asarray(v[:take])]) if k in old else np.asarray(v[:take])
              for k, v in feeds.items()}
    path = sample_path(output_dir, fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, **merged)
    write_atomic(path, buf.getvalue())
    return have + take
