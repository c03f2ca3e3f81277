"""Shared code of the zoo model tests (tests/agraph/test_zoo_*.py): load a zoo folder's
model.py / eval.py, get a zoo dataset prepared into a temporary data root, and measure a
model through FP32 -> quant -> npu with ratelnn directly (``ratelnn.testing.zoo``)."""
from __future__ import annotations

import importlib
from pathlib import Path

from ratelnn.testing.zoo import load_fp32, runner  # noqa: F401  (re-exported)
from ratelnn.testing.zoo import measure as _measure


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
    """:func:`ratelnn.testing.zoo.measure` of zoo model ``name``."""
    return _measure(*zoo_modules(name), workdir, dataset, input_shapes=input_shapes, limit=limit)
