"""The emulated NPU: engine format, executors, device, cost model (DESIGN §6, §7)."""
from .engine import (Engine, EngineBuilder, EngineError, make_lut, make_softmax_table,
                     quantize_multiplier)

__all__ = ["Engine", "EngineBuilder", "EngineError", "make_lut", "make_softmax_table",
           "quantize_multiplier"]
