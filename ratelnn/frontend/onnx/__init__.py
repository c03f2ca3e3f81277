"""ONNX frontend: ``onnx.ModelProto`` <-> IR and the converters (docs/architecture.md §2,
docs/onnx.md).

A model is an ``onnx.ModelProto`` or the path of a ``.onnx`` file (external data is read from
its folder); every converter method returns a ``ModelProto`` that ONNX Runtime runs: the
quantized form with standard ``QuantizeLinear``/``DequantizeLinear`` only, the calibration and
compiled forms with ratelnn's ops of the domain ``ratelnn`` (``ratelnn.onnx_session``).
"""
from __future__ import annotations

from ..entry_points import converters
from .exporter import export_model, recorded_meta
from .handler import ONNXModelHandler
from .importer import import_model
from .model_io import load_model, save_model
from .session import onnx_session


converter, joint_converter = converters(ONNXModelHandler, "ONNX model")


__all__ = ["converter", "joint_converter", "ONNXModelHandler", "import_model", "export_model", "load_model",
           "save_model", "onnx_session", "recorded_meta"]
