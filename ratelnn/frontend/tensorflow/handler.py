"""The TensorFlow model handler: GraphDef <-> IR for :class:`ratelnn.ConvertImpl`."""
from __future__ import annotations

from typing import Any

from ...config import QuantConfig
from ... import oplib
from ..handler import ModelHandler
from ...ir import Graph
from .exporter import export_graphdef
from .importer import import_graphdef


class TFModelHandler(ModelHandler):
    """Frozen TF GraphDefs to and from the IR."""

    framework = "tensorflow"

    def ensure_ops(self) -> None:
        oplib.tf_init()

    def translate(self, model: Any, config: QuantConfig) -> Graph:
        return import_graphdef(model, config["input_nodes"], config["output_nodes"], config["input_shapes"],
                               config.get("max_expanded_constant_bytes"))

    def export_graph(self, graph: Graph) -> Any:
        return export_graphdef(graph)
