"""Ascend's calibration keys -> the flat native keys (docs/config-forms.md).

The keys of Ascend's graph calibration (``aclgrphCalibration``'s quantizeConfigs:
``INPUT_SHAPE``, ``INPUT_DATA_DIR``, ``CONFIG_FILE``, ``SOC_VERSION``...) may stand at the top
of a config.  :func:`resolve_ascend` runs on the flat config :func:`ratelnn.config_forms.resolve`
returns: it takes them out, sets the native keys they mean (``CONFIG_FILE``: through
:mod:`ratelnn.amct_config`) and returns the keys without meaning here, each with its reason,
for the one warning of :func:`ratelnn.config.normalize`.  A native key given with another value
than an Ascend key sets is a ConfigError naming both.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Tuple

from .amct_config import map_amct_config, read_amct_config
from .config_forms import IGNORED, LAYOUTS, MAPPED, REFUSED, ConfigError, input_shapes

# key -> (status, what ratelnn makes of it): the rows of docs/config-forms.md
ASCEND_KEYS: Dict[str, Tuple[str, str]] = {
    "INPUT_SHAPE": (MAPPED, "`input_shapes` (`\"a:16,224,224,3;b:16,10\"`, ',' between dims, ';' between "
                            "inputs); its names become `input_nodes` when the config has none"),
    "INPUT_DATA_DIR": (MAPPED, "`calibration_data` (a folder of `.bin` files is a `binary` folder, or one "
                               "`.bin` file; ',' between the inputs' paths, in `INPUT_SHAPE` order); a missing "
                               "path is a ConfigError"),
    "INPUT_FORMAT": (MAPPED, "`data_format` (`NCHW`, `NHWC`; `ND`: none)"),
    "CONFIG_FILE": (MAPPED, "AMCT's calibration config (proto text `.cfg` or JSON `config.json`), key by key "
                            "in the table below; an unreadable file is a ConfigError"),
    "SOC_VERSION": (IGNORED, "the Ascend chip to calibrate for, no meaning here: ratelnn builds for its "
                             "own NPU (`device_info`)"),
    "LOG_LEVEL": (IGNORED, "AMCT's log level: ratelnn reports through warnings and its progress bar"),
    "INPUT_FP16_NODES": (REFUSED, "float16 `.bin` inputs: ratelnn reads `.bin` files as float32 (or uint8 "
                                  "with `src_dtype`); convert the files"),
}
INPUT_FORMATS = {**{v.lower(): v for v in LAYOUTS}, "nd": None}


def resolve_ascend(flat: Mapping[str, Any], defaults: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """``(flat config without the Ascend keys, "KEY: reason" of each key ignored)``."""
    out = dict(flat)
    given = {k: out.pop(k) for k in ASCEND_KEYS if k in flat}
    ignored = [f"{k}: {ASCEND_KEYS[k][1]}" for k in given if ASCEND_KEYS[k][0] == IGNORED]
    for key in [k for k in given if ASCEND_KEYS[k][0] == REFUSED]:
        raise ConfigError(f"{key} = {given[key]!r}: {ASCEND_KEYS[key][1]}")

    def put(key: str, where: str, value: Any) -> None:
        """Set native ``key`` from the Ascend spelling ``where`` unless the config gives it otherwise."""
        if key in out and out[key] != defaults.get(key) and out[key] != value:
            raise ConfigError(f"{key} = {out[key]!r} and {where} = {value!r} set the same thing differently: "
                              "give one of them")
        out[key] = value

    if "INPUT_SHAPE" in given:
        _input_shape(given["INPUT_SHAPE"], out, put)
    if "INPUT_DATA_DIR" in given:
        _input_data_dir(given["INPUT_DATA_DIR"], out, put)
    if "INPUT_FORMAT" in given:
        text = _text("INPUT_FORMAT", given["INPUT_FORMAT"])
        if text.lower() not in INPUT_FORMATS:
            raise ConfigError(f"INPUT_FORMAT {text!r} is not one of NCHW, NHWC, ND")
        if INPUT_FORMATS[text.lower()]:
            put("data_format", "INPUT_FORMAT", INPUT_FORMATS[text.lower()])
    if "CONFIG_FILE" in given:
        path = _text("CONFIG_FILE", given["CONFIG_FILE"])
        mapped = map_amct_config(read_amct_config(path), _batch(out))
        for key, value in mapped.settings.items():
            put(key, f"CONFIG_FILE {path}", value)
        if mapped.quant_cfg:
            out["quant_cfg"] = _merged_quant_cfg(out.get("quant_cfg") or {}, mapped.quant_cfg, path)
        if mapped.layer_configs:   # the config's own entries come later, so they win
            out["layer_configs"] = mapped.layer_configs + list(out.get("layer_configs") or [])
        ignored += [f"CONFIG_FILE {path} {item}" for item in mapped.ignored_items()]
    return out, ignored


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def _input_shape(value: Any, out: Dict[str, Any], put: Callable[[str, str, Any], None]) -> None:
    """INPUT_SHAPE -> input_shapes (and input_nodes from its names when the config has none)."""
    text = _text("INPUT_SHAPE", value)
    names = [part.rsplit(":", 1)[0].strip() for part in text.split(";") if ":" in part]
    if not out.get("input_nodes"):
        if not names:
            raise ConfigError(f"INPUT_SHAPE {text!r} names no input and the config has no input_nodes: "
                              "write it as 'name:16,224,224,3'")
        out["input_nodes"] = names
    try:
        shapes = input_shapes(text, out["input_nodes"])
    except ConfigError as e:
        raise ConfigError(f"INPUT_SHAPE {text!r}: {e}") from None
    if isinstance(out.get("input_shapes"), str):   # still a string: its input_nodes came from here
        out["input_shapes"] = input_shapes(out["input_shapes"], out["input_nodes"])
    put("input_shapes", "INPUT_SHAPE", shapes)


def _input_data_dir(value: Any, out: Dict[str, Any], put: Callable[[str, str, Any], None]) -> None:
    """INPUT_DATA_DIR ("a" or "a,b": one path per input) -> calibration_data (and
    calibration_format binary for folders)."""
    paths = [p.strip() for p in _text("INPUT_DATA_DIR", value).split(",") if p.strip()]
    for path in paths:
        if not os.path.exists(path):
            raise ConfigError(f"INPUT_DATA_DIR {path!r}: no such folder or file (a folder of .bin files, "
                              "or a .bin file)")
    nodes = list(out.get("input_nodes") or [])
    if len(paths) > 1 and len(paths) != len(nodes):
        raise ConfigError(f"INPUT_DATA_DIR gives {len(paths)} paths for {len(nodes)} inputs {nodes}: one path "
                          "per input, in INPUT_SHAPE order")
    folders = [os.path.isdir(p) for p in paths]
    if len(paths) == 1:
        put("calibration_data", "INPUT_DATA_DIR", paths[0])
        if folders[0]:
            put("calibration_format", "INPUT_DATA_DIR", "binary")
        return
    put("calibration_data", "INPUT_DATA_DIR", dict(zip(nodes, paths)))
    if any(folders):
        put("calibration_format", "INPUT_DATA_DIR", {n: "binary" for n, d in zip(nodes, folders) if d})


def _batch(flat: Mapping[str, Any]) -> Any:
    """The batch of the first input shape (None when not fixed or not given yet)."""
    shapes = flat.get("input_shapes")
    if isinstance(shapes, (list, tuple)) and shapes and isinstance(shapes[0], (list, tuple)) and shapes[0]:
        return shapes[0][0]
    return None


def _merged_quant_cfg(own: Mapping[str, Any], mapped: Mapping[str, Mapping[str, Any]], path: str) -> Dict[str, Any]:
    """``own`` quant_cfg with the CONFIG_FILE's role settings added; a setting given both ways
    with different values is a ConfigError."""
    merged = {role: dict(settings) for role, settings in own.items()}
    for role, settings in mapped.items():
        for key, value in settings.items():
            mine = merged.get(role, {}).get(key)
            if mine is not None and mine != value:
                raise ConfigError(f"quant_cfg.{role}.{key} = {mine!r} and CONFIG_FILE {path} (= {value!r}) set "
                                  "the same thing differently: give one of them")
            merged.setdefault(role, {})[key] = value
    return merged
