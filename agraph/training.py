"""Weights trained here once and cached under ``AGRAPH_WEIGHTS_DIR`` (docs/agraph.md,
"Weight sources"): a cache file is keyed by a hash of the model folder's ``model.py``, the
framework version and the training data, so a change to any retrains and nothing else does."""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from . import paths


def cache_key(source_file: os.PathLike, package: str, arrays: Sequence[np.ndarray]) -> str:
    """16 hex digits of sha256 over the source file, ``package``'s version and ``arrays``."""
    h = hashlib.sha256(Path(source_file).read_bytes())
    h.update(importlib.metadata.version(package).encode())
    for a in arrays:
        h.update(str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def cached_keras(name: str, key: str, train: Callable[[], object]):
    """The Keras model ``<name>-<key>.keras`` from the weights cache, else ``train()``'s result
    saved there atomically."""
    from ratelnn.testing.fashion_cnn import cached_keras_model

    return cached_keras_model(paths.weights_dir() / f"{name}-{key}.keras", train)


def _through_cache(cache_name: str, write: Callable[[Path], object], path: os.PathLike) -> Path:
    """Copy the weights-cache file ``cache_name`` to ``path``, first made by ``write(file)``
    if it is not there."""
    import shutil

    folder = paths.weights_dir()
    folder.mkdir(parents=True, exist_ok=True)
    cached = folder / cache_name
    if not cached.is_file():
        write(cached)
    shutil.copyfile(cached, path)
    return Path(path)


def cached_frozen(name: str, key: str, keras_model: Callable[[], object], output_name: str,
                  path: os.PathLike) -> Path:
    """Write the frozen GraphDef of the Keras model ``keras_model()`` (see :func:`freeze_to_pb`)
    to ``path``, through the cache file ``<name>-<key>.pb`` in the weights cache: a second
    build copies those bytes without loading Keras."""
    return _through_cache(f"{name}-{key}.pb", lambda f: freeze_to_pb(keras_model(), f, output_name), path)


def cached_onnx(name: str, key: str, keras_model: Callable[[], object], output_name: str,
                path: os.PathLike) -> Path:
    """Write the ONNX export of the Keras model ``keras_model()`` (see :func:`export_onnx`) to
    ``path``, through the cache file ``<name>-<key>.onnx`` in the weights cache."""
    return _through_cache(f"{name}-{key}.onnx", lambda f: export_onnx(keras_model(), f, output_name), path)


def export_onnx(model, path: os.PathLike, output_name: str) -> Path:
    """Write the single-input Keras ``model`` as ONNX (tf2onnx, input NCHW, batch dimension
    open: ``ratelnn.testing.keras_to_onnx``) to ``path``, its output tensor renamed
    ``output_name``."""
    from ratelnn.fileio import write_atomic
    from ratelnn.testing import keras_to_onnx

    proto, _, output = keras_to_onnx(model, nchw=True)
    for node in proto.graph.node:
        node.output[:] = [output_name if t == output else t for t in node.output]
    proto.graph.output[0].name = output_name
    write_atomic(path, proto.SerializeToString(deterministic=True))
    return Path(path)


def freeze_to_pb(model, path: os.PathLike, output_name: str) -> Path:
    """Freeze the Keras ``model`` (batch dimension left open) to the binary GraphDef ``path``
    with its output node renamed ``output_name``; same model gives the same bytes."""
    from ratelnn.fileio import write_atomic
    from ratelnn.frontend.tensorflow import freeze_keras

    graph_def, _, outputs = freeze_keras(model)
    for node in graph_def.node:
        if node.name == outputs[0]:
            node.name = output_name
    write_atomic(path, graph_def.SerializeToString(deterministic=True))
    return Path(path)


def save_mx_checkpoint(model, prefix: os.PathLike) -> list:
    """Write an MXNet ``(symbol, arg_params, aux_params)`` as ``<prefix>-symbol.json`` and
    ``<prefix>-0000.params``; returns both paths."""
    from ratelnn.mxnet_compat import import_mxnet

    mx = import_mxnet()
    symbol, arg, aux = model
    mx.model.save_checkpoint(str(prefix), 0, symbol, arg, aux)
    return [Path(f"{prefix}-symbol.json"), Path(f"{prefix}-0000.params")]
