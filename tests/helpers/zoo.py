"""Shared code of the zoo model tests (tests/agraph/test_zoo_*.py): load a zoo folder's
model.py / eval.py, get a zoo dataset prepared into a temporary data root, and measure a
model through FP32 -> quant -> npu with ratelnn directly (``agraph.stages``)."""
from __future__ import annotations

import hashlib
import importlib
import shutil
import time
from pathlib import Path

from agraph.stages import load_fp32, runner  # noqa: F401  (re-exported)
from agraph.stages import mirrored, stages
from agraph.stages import measure as _measure


def zoo_modules(name: str):
    """``(model, eval)`` modules of ``agraph/models/<name>/``."""
    return (importlib.import_module(f"agraph.models.{name}.model"),
            importlib.import_module(f"agraph.models.{name}.eval"))


def zoo_dataset(key: str, data_dir: Path):
    """``agraph.datasets`` dataset ``key``, prepared into ``data_dir`` and loaded (checked)."""
    from agraph import datasets
    datasets.prepare(key, data_dir)
    return datasets.get(key, data_dir)


def measure(name: str, workdir: Path, dataset, input_shapes=None, limit=None):
    """:func:`agraph.stages.measure` of zoo model ``name``."""
    return _measure(*zoo_modules(name), workdir, dataset, input_shapes=input_shapes, limit=limit)


def fp32_cache(cache_root: Path, name: str) -> Path:
    """The folder under ``cache_root`` (the pytest cache) keeping zoo model ``name``'s FP32
    files between both CI passes and reruns (a Keras application takes 10-60 s to build and
    freeze; freezing runs no TF kernel, so the oneDNN setting does not change its bytes).
    Keyed by the model folder's source, ratelnn's sources and the framework's version; the
    folders of other keys of ``name`` are deleted (a ResNet50 is 100 MB)."""
    from agraph import flow, registry
    model, _ = zoo_modules(name)
    if model.FRAMEWORK == "tensorflow":
        import keras
        import tensorflow as tf
        versions = f"tensorflow {tf.__version__} keras {keras.__version__}"
    else:
        from ratelnn.mxnet_compat import import_mxnet
        versions = f"mxnet {import_mxnet().__version__}"
    key = hashlib.sha256(f"{registry.entry(name).source_hash()} {flow.ratelnn_fingerprint()} {versions}"
                         .encode()).hexdigest()[:16]
    for stale in Path(cache_root).glob(f"{name}-{'?' * len(key)}"):
        if stale.name != f"{name}-{key}":
            shutil.rmtree(stale, ignore_errors=True)
    return Path(cache_root) / f"{name}-{key}"


def reduced_agreement(name: str, cache_root: Path, workdir: Path, photos, calibration_samples: int):
    """Random-weight zoo model ``name`` at its TEST_INPUT_SHAPES: FP32 (built once into
    :func:`fp32_cache`, copied to ``workdir``) -> calibrated on the first
    ``calibration_samples`` photos mirrored -> quant -> npu; its eval.py scores the npu model
    against FP32 on every photo.  Returns ``(npu ModelMetrics, wall seconds per step and
    "cpu": this process's CPU seconds in all)``."""
    model, evaluation = zoo_modules(name)
    shapes = model.TEST_INPUT_SHAPES
    cpu, start = time.process_time(), time.time()
    cached = fp32_cache(cache_root, name)
    model.build(cached, input_shapes=shapes)
    shutil.copytree(cached, workdir)
    built = time.time() - start
    calibration = model.preprocess(mirrored(photos.samples[:calibration_samples]), input_shapes=shapes)
    runs = stages(model, workdir, calibration, input_shapes=shapes)
    start = time.time()
    metrics = evaluation.evaluate_at(shapes, runs["npu"], photos, "npu", reference=runs["fp32"])
    seconds = {**runs["seconds"], "build": built, "evaluate": time.time() - start,
               "cpu": time.process_time() - cpu}
    return metrics, seconds
