"""TensorFlow frontend: frozen GraphDef <-> IR, converters and freeze helpers
(docs/architecture.md §2, docs/tensorflow.md)."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from ...convert import ConvertImpl
from ...joint.convert import JointConvertImpl
from .exporter import export_graphdef
from .freeze import freeze_keras, freeze_saved_model
from .handler import TFModelHandler
from .importer import import_graphdef
from . import model_io


def converter(graph_def: Any, config: Mapping[str, Any], device_info: Optional[Dict[int, Any]] = None) -> ConvertImpl:
    """Converter of one frozen GraphDef (``to_cal``/``to_quant``/``to_npu``)."""
    return ConvertImpl(TFModelHandler(), graph_def, config, device_info or {})


def joint_converter(graph_def_list: Sequence[Any], config_list: Sequence[Mapping[str, Any]],
                    device_info: Optional[Dict[int, Any]] = None) -> JointConvertImpl:
    """Joint converter of several GraphDefs; ``device_info`` is the target (it may name devices
    this machine lacks); empty means every locally configured device."""
    return JointConvertImpl(TFModelHandler(), graph_def_list, config_list, device_info or {})


__all__ = ["converter", "joint_converter", "freeze_keras", "freeze_saved_model", "TFModelHandler",
           "import_graphdef", "export_graphdef", "model_io"]
