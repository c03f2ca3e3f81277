"""MXNet frontend: symbol + params <-> IR and the converters (docs/architecture.md §2, docs/mxnet.md).

An MXNet model is a ``(symbol, arg_params, aux_params)`` tuple or a checkpoint prefix
(``<prefix>-symbol.json`` + ``<prefix>-0000.params``); every converter method returns the
tuple form.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from ...convert import ConvertImpl
from ...joint.convert import JointConvertImpl
from .exporter import export_json, export_symbol
from .handler import MXModelHandler
from .importer import import_symbol
from . import model_io


def converter(graph_def: Any, config: Mapping[str, Any], device_info: Optional[Dict[int, Any]] = None) -> ConvertImpl:
    """Converter of one MXNet model (``to_cal``/``to_quant``/``to_npu``)."""
    return ConvertImpl(MXModelHandler(), graph_def, config, device_info or {})


def joint_converter(graph_def_list: Sequence[Any], config_list: Sequence[Mapping[str, Any]],
                    device_info: Optional[Dict[int, Any]] = None) -> JointConvertImpl:
    """Joint converter of several MXNet models; ``device_info`` is the target (it may name
    devices this machine lacks); empty means every locally configured device."""
    return JointConvertImpl(MXModelHandler(), graph_def_list, config_list, device_info or {})


__all__ = ["converter", "joint_converter", "MXModelHandler", "import_symbol", "export_symbol", "export_json",
           "model_io"]
