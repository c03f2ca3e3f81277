"""String attributes of MXNet symbol nodes (docs/mxnet.md).

MXNet stores every operator attribute as a string, both in symbol JSON and in the
``lib_api.h`` custom ops.  This module parses MXNet's own attribute strings (``"(3, 3)"``,
``"True"``, ``"1e-05"``) and encodes/decodes the attributes of the ratelnn custom ops
``ratel_minmax``, ``ratel_quant``, ``ratel_dequant`` and ``ratel_engine_op`` to and from the
attrs of the IR ops ``MinMax``, ``Quant``, ``Dequant`` and ``Engine``.
"""
from __future__ import annotations

import ast
import base64
import json
from typing import Any, Dict, Mapping, Optional, Tuple

from ...errors import ModelError
from ...ir import registry

# IR quantization op <-> MXNet custom op
CUSTOM_OPS = {op.name: op.mx[0] for op in registry.OPS if op.custom_op}
IR_OF_CUSTOM_OP = {v: k for k, v in CUSTOM_OPS.items()}


def full_extra(size: int, k: int, s: int, p: int) -> int:
    """Cells MXNet's ``pooling_convention="full"`` (ceil mode) adds after the end pad."""
    out = 1 + -(-(size + 2 * p - k) // s)
    return max((out - 1) * s + k - (size + 2 * p), 0)


# ---------------------------------------------------------------- MXNet attribute strings
def node_attrs(node: Mapping[str, Any]) -> Dict[str, str]:
    """The attribute dict of a symbol-JSON node (``attrs``; ``attr``/``param`` in old files)."""
    for key in ("attrs", "attr", "param"):
        if key in node:
            raw = node[key] or {}
            if not isinstance(raw, Mapping):
                raise ModelError(f"malformed symbol JSON: node {node.get('name')!r} has {key} that are not an object")
            return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    return {}


def as_bool(value: Optional[str], default: bool) -> bool:
    if value is None or value == "None":
        return default
    return value.strip().lower() in ("true", "1")


def as_int(value: Optional[str], default: int) -> int:
    try:
        return default if value is None or value == "None" else int(value)
    except (TypeError, ValueError):
        raise ModelError(f"attribute value {value!r} is not an integer") from None


def as_float(value: Optional[str], default: Optional[float]) -> Optional[float]:
    try:
        return default if value is None or value == "None" else float(value)
    except (TypeError, ValueError):
        raise ModelError(f"attribute value {value!r} is not a number") from None


def as_tuple(value: Optional[str], default: Tuple[int, ...] = ()) -> Tuple[int, ...]:
    """``"(3, 3)"`` / ``"[3,3]"`` / ``"3"`` -> ``(3, 3)`` / ``(3,)``; ``None`` -> default."""
    if value is None or value in ("None", ""):
        return tuple(default)
    try:
        parsed = ast.literal_eval(value)
        if isinstance(parsed, (list, tuple)):
            return tuple(int(v) for v in parsed)
        return (int(parsed),)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ModelError(f"attribute value {value!r} is not an integer or a tuple of integers") from None


def tuple_str(values) -> str:
    """``(1, 2)`` -> ``"(1, 2)"``, MXNet's tuple spelling (``"(1,)"`` for one element)."""
    values = tuple(int(v) for v in values)
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


def float_str(value: float) -> str:
    """Shortest string that parses back to the same double (float32 values stay exact)."""
    return repr(float(value))


# ---------------------------------------------------------------- custom-op attrs
def _scale_attrs(attrs: Mapping[str, Any]) -> Dict[str, str]:
    if attrs.get("scales") is not None:
        return {"scales": json.dumps([float(s) for s in attrs["scales"]]), "axis": str(int(attrs["axis"]))}
    return {"scale": float_str(attrs["scale"])}


def _decode_scale(attrs: Mapping[str, str]) -> Dict[str, Any]:
    if "scales" in attrs:
        return {"scales": [float(s) for s in json.loads(attrs["scales"])], "axis": int(attrs["axis"])}
    return {"scale": float(attrs["scale"])}


def encode_custom_attrs(op: str, attrs: Mapping[str, Any]) -> Dict[str, str]:
    """String attrs of the MXNet custom op for an IR ``MinMax``/``Quant``/``Dequant``/``Engine``."""
    if op == "MinMax":
        out = {"tensor_name": str(attrs["tensor_name"]), "output_dir": str(attrs["output_dir"])}
        if "ema_decay" in attrs:
            out["ema_decay"] = float_str(attrs["ema_decay"])
        if "record" in attrs:
            out["record"] = str(attrs["record"])
        return out
    if op == "Quant":
        return {"dtype": str(attrs["dtype"]), "round_mode": str(attrs.get("round_mode", "half_away_from_zero")),
                **_scale_attrs(attrs)}
    if op == "Dequant":
        return _scale_attrs(attrs)
    if op == "Engine":
        return {"engine": base64.b64encode(bytes(attrs["engine"])).decode("ascii"),
                "engine_name": str(attrs["engine_name"]), "device_id": str(int(attrs.get("device_id", 0))),
                "core_ids": json.dumps([int(c) for c in attrs.get("core_ids", [])]),
                "num_outputs": str(int(attrs["num_outputs"])),
                **({"batch_engines": json.dumps([base64.b64encode(bytes(b)).decode("ascii")
                                                 for b in attrs["batch_engines"]])}
                   if attrs.get("batch_engines") else {})}
    raise ValueError(f"{op} is not a ratelnn custom op")


def decode_custom_attrs(op: str, attrs: Mapping[str, str]) -> Dict[str, Any]:
    """IR attrs of IR op ``op`` from the string attrs of its MXNet custom op (inverse of
    :func:`encode_custom_attrs`)."""
    if op == "MinMax":
        out: Dict[str, Any] = {"tensor_name": attrs["tensor_name"], "output_dir": attrs["output_dir"]}
        if "ema_decay" in attrs:
            out["ema_decay"] = float(attrs["ema_decay"])
        if "record" in attrs:
            out["record"] = attrs["record"]
        return out
    if op == "Quant":
        return {"dtype": attrs["dtype"], "round_mode": attrs.get("round_mode", "half_away_from_zero"),
                **_decode_scale(attrs)}
    if op == "Dequant":
        return _decode_scale(attrs)
    if op == "Engine":
        return {"engine": base64.b64decode(attrs["engine"]), "engine_name": attrs["engine_name"],
                "device_id": int(attrs.get("device_id", "0")), "core_ids": json.loads(attrs.get("core_ids", "[]")),
                "num_outputs": int(attrs["num_outputs"]),
                **({"batch_engines": [base64.b64decode(b) for b in json.loads(attrs["batch_engines"])]}
                   if attrs.get("batch_engines") else {})}
    raise ValueError(f"{op} is not a ratelnn custom op")
