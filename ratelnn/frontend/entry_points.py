"""The two entry points every frontend offers, made for its model handler:
``converter(model, config, device_info=None)`` and
``joint_converter(model_list, config_list, device_info=None)``."""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from ..convert import ConvertImpl
from ..joint.convert import JointConvertImpl
from ..model_handler import ModelHandler


def converters(handler: Callable[[], ModelHandler], models: str) -> Tuple[Callable[..., ConvertImpl],
                                                                          Callable[..., JointConvertImpl]]:
    """``(converter, joint_converter)`` of the frontend whose handler ``handler()`` makes;
    ``models`` names its models in the docstrings (e.g. "frozen GraphDef")."""

    def converter(model: Any, config: Mapping[str, Any],
                  device_info: Optional[Dict[int, Any]] = None) -> ConvertImpl:
        return ConvertImpl(handler(), model, config, device_info or {})

    def joint_converter(model_list: Sequence[Any], config_list: Sequence[Mapping[str, Any]],
                        device_info: Optional[Dict[int, Any]] = None) -> JointConvertImpl:
        return JointConvertImpl(handler(), model_list, config_list, device_info or {})

    converter.__doc__ = f"Converter of one {models} (``to_cal``/``to_quant``/``to_npu``)."
    joint_converter.__doc__ = (f"Joint converter of several {models}s; ``device_info`` is the target (it may "
                               "name devices this machine lacks); empty means every locally configured device.")
    return converter, joint_converter
