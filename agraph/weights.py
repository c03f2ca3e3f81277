"""Pretrained ImageNet weights for the zoo's ImageNet architectures (docs/agraph.md, "ImageNet
accuracy"): a file the user names (``python -m agraph eval NAME --weights FILE``,
:func:`use`) or the framework's own local cache (Keras: ``$KERAS_HOME/models`` or
``~/.keras/models``; Gluon: ``$MXNET_HOME/models`` or ``~/.mxnet/models``), under the file
name the framework gives it.  Nothing is downloaded: the models are built with random
weights (Keras ``weights=None``, Gluon ``pretrained=False``) and the file is loaded into them.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from pathlib import Path
from typing import Dict, Optional, Tuple

from .errors import AGraphError

SUFFIXES = {"tensorflow": (".h5",), "mxnet": (".params",)}
_chosen: Dict[str, Path] = {}


class WeightsError(AGraphError, ValueError):
    """A weights file is missing, of the wrong kind, or does not fit the model's architecture."""


@dataclasses.dataclass(frozen=True)
class ImageNetWeights:
    """Where a zoo model's pretrained weights come from and what they were published at.

    ``cache_file``: the file name in the framework's cache; ``pixels``: the input scaling the
    weights were trained with (:data:`agraph.inputs.IMAGENET_PIXELS`); ``top1``: the published
    FP32 top-1 (percent) and ``source`` the table it comes from; ``int8_drops``: published
    int8 post-training-quantization top-1 changes (points) of the architecture, with their
    sources; ``sha1``: the framework's published sha1 of ``cache_file`` (checked when known)."""

    framework: str
    cache_file: str
    pixels: str
    top1: float
    source: str
    int8_drops: Tuple[Tuple[float, str], ...] = ()
    sha1: Optional[str] = None


def use(name: str, path: os.PathLike, framework: str) -> Path:
    """Make model ``name`` load its weights from ``path`` in this process (instead of the
    framework's cache); returns the resolved path."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise WeightsError(f"model {name!r}: weights file {path} does not exist")
    if not path.name.endswith(SUFFIXES[framework]):
        raise WeightsError(f"model {name!r} ({framework}): weights file {path.name} should end with "
                           f"{' or '.join(SUFFIXES[framework])} (Keras .h5 / .weights.h5, Gluon .params)")
    _chosen[name] = path
    return path


def forget(name: Optional[str] = None) -> None:
    """Undo :func:`use` for ``name`` (all models when None)."""
    if name is None:
        _chosen.clear()
    else:
        _chosen.pop(name, None)


def cache_dir(framework: str) -> Path:
    """The framework's local model cache."""
    if framework == "tensorflow":
        return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras").expanduser() / "models"
    return Path(os.environ.get("MXNET_HOME") or Path.home() / ".mxnet").expanduser() / "models"


def find(name: str, spec: ImageNetWeights) -> Optional[Path]:
    """The weights file of model ``name``: the one given with :func:`use`, else the
    framework's cached ``spec.cache_file`` if present, else None (random weights)."""
    if name in _chosen:
        return _chosen[name]
    cached = cache_dir(spec.framework) / spec.cache_file
    return cached if cached.is_file() else None


@functools.lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (cached while its size and mtime stay)."""
    stat = Path(path).stat()
    return _digest(str(path), stat.st_size, stat.st_mtime_ns, algorithm)


def checked(name: str, spec: ImageNetWeights, path: Path) -> Path:
    """``path``, after checking a cached Gluon file against the framework's published sha1."""
    if spec.sha1 and path.name == spec.cache_file and digest(path, "sha1") != spec.sha1:
        raise WeightsError(f"model {name!r}: {path} does not match the Gluon model zoo's sha1 {spec.sha1} "
                           f"(corrupt or another file); replace it or pass --weights FILE")
    return path
