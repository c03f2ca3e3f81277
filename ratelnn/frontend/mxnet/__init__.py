"""MXNet frontend: symbol + params <-> IR and the converters (docs/architecture.md §2, docs/mxnet.md).

An MXNet model is a ``(symbol, arg_params, aux_params)`` tuple or a checkpoint prefix
(``<prefix>-symbol.json`` + ``<prefix>-0000.params``); every converter method returns the
tuple form.
"""
from __future__ import annotations

from ..entry_points import converters
from .exporter import export_json, export_symbol, recorded_meta
from .handler import MXModelHandler
from .importer import import_symbol
from . import model_io


converter, joint_converter = converters(MXModelHandler, "MXNet model")


__all__ = ["converter", "joint_converter", "MXModelHandler", "import_symbol", "export_symbol", "export_json",
           "model_io", "recorded_meta"]
