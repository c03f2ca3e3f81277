"""The compiler: quantized IR -> engines -> compiled graph (DESIGN §6).

``compile_graph(qgraph, config, device_info)`` (:mod:`.compile`), ``lower_region``
(:mod:`.lower`), ``instruction_layer_cost`` (:mod:`.costs`), ``run_compiled`` (:mod:`.run`).
"""
from .compile import INPUT_SCALE_FILE, CompileError, compile_graph, is_npu_supported, write_input_scales
from .costs import instruction_layer_cost
from .lower import is_lowerable, lower_region
from .run import run_compiled

__all__ = ["INPUT_SCALE_FILE", "CompileError", "compile_graph", "is_npu_supported", "write_input_scales",
           "instruction_layer_cost", "is_lowerable", "lower_region", "run_compiled"]
