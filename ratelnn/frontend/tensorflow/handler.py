"""The TensorFlow model handler: GraphDef <-> IR for :class:`ratelnn.ConvertImpl`."""
from __future__ import annotations

from typing import Any, Optional

from ...config import QuantConfig
from ... import oplib
from ...model_handler import ModelHandler
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

    def import_prequantized(self, graph_quant: Any, config: QuantConfig) -> Optional[Graph]:
        """FakeQuant* / QuantizeAndDequantizeV2-V4 graphs (docs/quantization.md "Importing
        pre-quantized (QAT) graphs"); None for graphs without such nodes."""
        from ...quantization.prequant import quantize_prequantized
        from ...model_handler import checked_float_ir
        from .fake_quant import depthwise_steps, fold_fake_quant, has_fake_quant
        if not has_fake_quant(graph_quant):
            return None
        folded, grids, steps, labels = fold_fake_quant(graph_quant)
        graph = self.translate(folded, config)
        depthwise_steps(graph, folded, steps, labels)
        return quantize_prequantized(checked_float_ir(graph), grids, steps, config, labels)

    def export_graph(self, graph: Graph) -> Any:
        return export_graphdef(graph)
