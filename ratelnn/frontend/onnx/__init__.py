"""ONNX frontend: ``onnx.ModelProto`` <-> IR and the converters (docs/architecture.md §2,
docs/onnx.md).

A model is an ``onnx.ModelProto`` or the path of a ``.onnx`` file (external data is read from
its folder); every converter method returns a ``ModelProto`` that ONNX Runtime runs: the
quantized form with standard ``QuantizeLinear``/``DequantizeLinear`` only, the calibration and
compiled forms with ratelnn's ops of the domain ``ratelnn`` (``ratelnn.onnx_session``).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from ...convert import ConvertImpl
from ...joint.convert import JointConvertImpl
from .exporter import export_model
from .handler import ONNXModelHandler
from .importer import import_model
from .model_io import load_model, save_model
from .session import onnx_session


def converter(model: Any, config: Mapping[str, Any], device_info: Optional[Dict[int, Any]] = None) -> ConvertImpl:
    """Converter of one ONNX model (``to_cal``/``to_quant``/``to_npu``)."""
    return ConvertImpl(ONNXModelHandler(), model, config, device_info or {})


def joint_converter(model_list: Sequence[Any], config_list: Sequence[Mapping[str, Any]],
                    device_info: Optional[Dict[int, Any]] = None) -> JointConvertImpl:
    """Joint converter of several ONNX models; ``device_info`` is the target (it may name
    devices this machine lacks); empty means every locally configured device."""
    return JointConvertImpl(ONNXModelHandler(), model_list, config_list, device_info or {})


__all__ = ["converter", "joint_converter", "ONNXModelHandler", "import_model", "export_model", "load_model",
           "save_model", "onnx_session"]
