"""The MXNet model handler: ``(symbol, arg_params, aux_params)`` <-> IR for
:class:`ratelnn.ConvertImpl`."""
from __future__ import annotations

from typing import Any

from ...config import QuantConfig
from ... import oplib
from ...model_handler import ModelHandler
from ...ir import Graph
from .exporter import export_symbol
from .importer import import_symbol


class MXModelHandler(ModelHandler):
    """MXNet 1.9 symbols with their params to and from the IR (NCHW layout)."""

    framework = "mxnet"

    def ensure_ops(self) -> None:
        oplib.mx_init()

    def translate(self, model: Any, config: QuantConfig) -> Graph:
        return import_symbol(model, config["input_nodes"], config["output_nodes"], config["input_shapes"])

    def export_graph(self, graph: Graph) -> Any:
        return export_symbol(graph)
