"""The compiler: quantized IR -> engines -> compiled graph (docs/architecture.md §6).

``compile_graph(qgraph, config, device_info)`` (:mod:`.compile`), ``find_regions``
(:mod:`.partition`), ``lower_region`` (:mod:`.lower`), ``run_compiled`` (:mod:`.run`), why engines
split (:mod:`.splits`).
"""
from .compile import (INPUT_SCALE_FILE, CompileError, compile_graph, engine_regions, engine_sets, is_npu_supported,
                      npu_refusal, write_input_scales)
from .lower import is_lowerable, lower_region, lowering_refusal
from .run import run_compiled
from .splits import SPLITS_META, split_causes

__all__ = ["INPUT_SCALE_FILE", "CompileError", "compile_graph", "engine_regions", "engine_sets", "is_npu_supported",
           "npu_refusal", "write_input_scales", "is_lowerable", "lower_region", "lowering_refusal", "run_compiled", "SPLITS_META",
           "split_causes"]
