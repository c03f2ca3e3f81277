"""Importing MXNet 1.9 under numpy >= 1.24.

MXNet 1.9.1 still reads the alias ``numpy.bool`` that numpy 1.24 removed, so every ratelnn
code path imports MXNet through :func:`import_mxnet`, which restores the alias first.
"""
from __future__ import annotations

import numpy as np

from .frameworks import import_framework


def apply_numpy_shim() -> None:
    """Define ``numpy.bool = bool`` if this numpy no longer has it (idempotent)."""
    if "bool" not in np.__dict__:
        np.bool = bool


def import_mxnet():
    """The ``mxnet`` module, imported after :func:`apply_numpy_shim`
    (``ratelnn.errors.FrameworkNotInstalledError`` naming the extra when it is missing)."""
    apply_numpy_shim()
    return import_framework("mxnet")
