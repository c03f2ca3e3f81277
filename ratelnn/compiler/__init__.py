"""The compiler: quantized IR -> engines -> compiled graph (docs/architecture.md §6).

``compile_graph(qgraph, config, device_info)`` (:mod:`.compile`), ``find_regions``
(:mod:`.partition`), ``lower_region`` (:mod:`.lower`), ``run_compiled`` (:mod:`.run`).
"""
from .compile import (INPUT_SCALE_FILE, CompileError, compile_graph, engine_sets, is_npu_supported,
                      write_input_scales)
from .lower import is_lowerable, lower_region
from .run import run_compiled

__all__ = ["INPUT_SCALE_FILE", "CompileError", "compile_graph", "engine_sets", "is_npu_supported", "write_input_scales",
           "is_lowerable", "lower_region", "run_compiled"]
