"""The emulated NPU: engine format, executors, device, cost model (docs/architecture.md §6, §7)."""
from .engine import (Engine, EngineBuilder, EngineError, make_lut, make_softmax_table,
                     quantize_multiplier)
from .native import ISA_PATHS, force_isa, native_isa, supported_isas
from .device_time import DeviceTime, device_time, device_times, reset_device_time

__all__ = ["Engine", "EngineBuilder", "EngineError", "make_lut", "make_softmax_table",
           "quantize_multiplier", "ISA_PATHS", "force_isa", "native_isa", "supported_isas", "DeviceTime", "device_time", "device_times", "reset_device_time"]

