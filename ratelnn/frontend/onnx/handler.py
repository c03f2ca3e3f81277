"""The ONNX model handler: ``onnx.ModelProto`` <-> IR for :class:`ratelnn.ConvertImpl`."""
from __future__ import annotations

from typing import Any

from ...config import QuantConfig
from ...ir import Graph
from ..handler import ModelHandler
from .exporter import export_model
from .importer import import_model


class ONNXModelHandler(ModelHandler):
    """ONNX models (opset 13 and newer) to and from the IR (NCHW layout); ONNX Runtime runs
    every form."""

    framework = "onnx"

    def ensure_ops(self) -> None:
        """The float and quantized forms need no custom op; the calibration and compiled
        forms register ratelnn's ops when their session is made (``ratelnn.onnx_session``)."""

    def translate(self, model: Any, config: QuantConfig) -> Graph:
        return import_model(model, config["input_nodes"], config["output_nodes"], config["input_shapes"])

    def export_graph(self, graph: Graph) -> Any:
        return export_model(graph)
