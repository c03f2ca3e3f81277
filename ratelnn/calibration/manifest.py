"""Which model the statistics of an ``output_dir`` belong to (docs/statistics.md, "Owner").

``to_cal()`` (and so ``calibrate()``) records in ``<output_dir>/ratel_stats/manifest.json``
the model whose calibration writes there: its name, a fingerprint of its float graph
(:func:`graph_fingerprint`) and the tensors its calibration model records.  Reading
statistics for another model, or starting a second model's calibration in the same
directory, is a :class:`CalibrationError` naming both, unless the config sets
``merge_statistics``.  Directories without a manifest (written by ratelnn before 0.3) stay
readable; a warning says their owner cannot be checked.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Union

import numpy as np

from ..errors import CalibrationError
from ..fileio import write_atomic
from ..ir import Graph

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
_SUBDIR = "ratel_stats"  # == stats.STATS_SUBDIR (stats imports this module)


def graph_fingerprint(graph: Graph) -> str:
    """SHA-256 (hex) of a float IR graph: every node's op, inputs, outputs and attributes,
    the graph's inputs and outputs, and every parameter's dtype, shape and bytes.  Input
    shapes (the batch) are left out: statistics do not depend on them."""
    h = hashlib.sha256()

    def canon(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return ["ndarray", str(value.dtype), list(value.shape),
                    hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()]
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, (bytes, bytearray)):
            return ["bytes", hashlib.sha256(bytes(value)).hexdigest()]
        if isinstance(value, dict):
            return {str(k): canon(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
        if isinstance(value, (list, tuple)):
            return [canon(v) for v in value]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return repr(value)

    h.update(json.dumps({"inputs": graph.inputs, "outputs": graph.outputs}).encode())
    for node in graph.nodes:
        h.update(json.dumps([node.op, node.inputs, node.outputs, canon(node.attrs)],
                            sort_keys=True).encode())
    for name in sorted(graph.params):
        value = np.ascontiguousarray(graph.params[name])
        h.update(json.dumps([name, str(value.dtype), list(value.shape)]).encode())
        h.update(value.tobytes())
    return h.hexdigest()


def manifest_path(output_dir: Union[str, Path]) -> Path:
    return Path(output_dir) / _SUBDIR / MANIFEST_NAME


def _describe(entry: Dict[str, Any]) -> str:
    return f"model {entry.get('model')!r} (fingerprint {str(entry.get('fingerprint'))[:12]})"


def read_manifest(output_dir: Union[str, Path]) -> Optional[Dict[str, Any]]:
    """The manifest of ``output_dir``, None if there is none. CalibrationError if unreadable."""
    path = manifest_path(output_dir)
    if not path.is_file():
        if path.exists():
            raise CalibrationError(f"{path} is not a file: remove it")
        return None
    try:
        doc = json.loads(path.read_text())
        models = doc["models"]
        if doc.get("version") != MANIFEST_VERSION or not isinstance(models, list) or not all(
                isinstance(m, dict) and isinstance(m.get("fingerprint"), str)
                and isinstance(m.get("tensors"), list) for m in models):
            raise ValueError("unexpected structure")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CalibrationError(f"corrupt calibration statistics manifest {path}: {e}; delete "
                               f"{path.parent} to start fresh") from None
    return doc


def _mismatch(output_dir, theirs: List[Dict[str, Any]], mine: Dict[str, Any]) -> CalibrationError:
    others = ", ".join(_describe(m) for m in theirs)
    return CalibrationError(
        f"output_dir {output_dir} holds the calibration statistics of {others}, not of "
        f"{_describe(mine)}: use another output_dir, delete {Path(output_dir) / _SUBDIR} to "
        "start fresh, or set the config key merge_statistics=True to merge them")


@contextlib.contextmanager
def _locked(stats_dir: Path):
    """An exclusive lock over the manifest's read-modify-write (several processes may start
    calibrating into one output_dir at once)."""
    stats_dir.mkdir(parents=True, exist_ok=True)
    with open(stats_dir / "manifest.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _stats_files(stats_dir: Path) -> List[Path]:
    return sorted(p for p in stats_dir.glob("*.rstats") if not p.name.startswith(".")) \
        if stats_dir.is_dir() else []


def claim(output_dir: Union[str, Path], model: str, fingerprint: str,
          tensors: Iterable[str], merge: bool = False) -> None:
    """Record that the model ``model`` (``fingerprint``) calibrates into ``output_dir``
    recording ``tensors``.  Raises CalibrationError naming both models if the directory
    holds another model's statistics and ``merge`` is false.

    A directory with neither statistics files nor a manifest is a fresh start: statistics
    this process still holds in memory for it (its files were deleted) are dropped."""
    from ..oplib import flush_statistics, forget_statistics

    stats_dir = Path(output_dir) / _SUBDIR
    mine = {"model": model, "fingerprint": fingerprint, "tensors": sorted(set(tensors))}
    with _locked(stats_dir):
        doc = read_manifest(output_dir)
        if doc is None:
            if _stats_files(stats_dir):
                flush_statistics(output_dir)
                warnings.warn(
                    f"ratelnn: calibration statistics in {stats_dir} have no manifest (written "
                    f"by an older ratelnn); they are taken as {_describe(mine)}'s",
                    UserWarning, stacklevel=3)
            else:
                forget_statistics(output_dir)
            doc = {"version": MANIFEST_VERSION, "models": []}
        models = doc["models"]
        same = [m for m in models if m["fingerprint"] == fingerprint]
        if models and not same and not merge:
            raise _mismatch(output_dir, models, mine)
        if same and set(mine["tensors"]) <= set(same[0]["tensors"]) and same[0].get("model") == model:
            return
        if same:
            same[0]["tensors"] = sorted(set(same[0]["tensors"]) | set(mine["tensors"]))
            same[0]["model"] = model
        else:
            models.append(mine)
        write_atomic(manifest_path(output_dir), (json.dumps(doc, indent=1) + "\n").encode())


def check_owner(output_dir: Union[str, Path], model: str, fingerprint: str,
                merge: bool = False) -> None:
    """Before quantizing ``model`` from the statistics of ``output_dir``: CalibrationError
    naming both models if they belong to another model (or to several, without ``merge``);
    a warning if the directory has no manifest (older ratelnn)."""
    doc = read_manifest(output_dir)
    mine = {"model": model, "fingerprint": fingerprint}
    if doc is None:
        if _stats_files(Path(output_dir) / _SUBDIR):
            warnings.warn(
                f"ratelnn: calibration statistics in {Path(output_dir) / _SUBDIR} have no "
                f"manifest (written by an older ratelnn): cannot check that they belong to "
                f"{_describe(mine)}; calibrate again (to_cal()/calibrate()) to record one",
                UserWarning, stacklevel=3)
        return
    others = [m for m in doc["models"] if m["fingerprint"] != fingerprint]
    if others and not merge:
        raise _mismatch(output_dir, others, mine)


def known_tensors(doc: Dict[str, Any]) -> set:
    """Every tensor the models of a manifest record."""
    return {t for m in doc["models"] for t in m["tensors"]}


def statistics_files(output_dir: Union[str, Path]) -> List[Path]:
    """The ``.rstats`` files of ``output_dir`` (temporaries left out)."""
    return _stats_files(Path(output_dir) / _SUBDIR)


def start_fresh(output_dir: Union[str, Path]) -> None:
    """Delete the statistics of ``output_dir`` (its ``ratel_stats`` directory, and the kept
    calibration samples ``ratel_sample``) and the statistics this process holds in memory for
    it: the next calibration starts over."""
    import shutil

    from ..oplib import forget_statistics

    forget_statistics(output_dir)
    sample_dir = Path(output_dir) / "ratel_sample"   # == sample.SAMPLE_SUBDIR
    if sample_dir.is_dir() and not sample_dir.is_symlink():
        shutil.rmtree(sample_dir)
    stats_dir = Path(output_dir) / _SUBDIR
    if stats_dir.is_dir() and not stats_dir.is_symlink():
        shutil.rmtree(stats_dir)
    elif stats_dir.exists() or stats_dir.is_symlink():
        stats_dir.unlink()
