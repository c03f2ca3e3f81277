"""Converter configuration (docs/architecture.md §3).

:class:`QuantConfig` is a ``dict`` with the documented defaults filled in; a plain dict is
accepted everywhere and normalised by :func:`normalize`.  Unknown keys are kept untouched
(users keep their own paths and commands in the same dict) and reported once as a warning.
"""
from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from .errors import RatelError

FRONTENDS = ("tensorflow", "mxnet")
ALGORITHMS = ("naive", "kld", "naive_kld_mix", "percentile", "mse")
DATA_TYPES = ("int8", "uint8", "int16", "fp32")
REQUIRED = ("input_nodes", "output_nodes", "input_shapes", "output_dir")

DEFAULTS: Dict[str, Any] = {
    "input_nodes": None,
    "output_nodes": None,
    "input_shapes": None,
    "output_dir": None,
    "quantize_algorithm": "naive",
    "kld_nodes": [],
    "enable_EMA": True,
    "ema_decay": 0.9,
    "percentile": 99.99,
    "quant_cfg": {},
    "layer_configs": [],
    "auto_int16": True,
    "auto_int16_sqnr_db": 25.0,
    "auto_int16_max_fraction": 0.1,
    "remove_input_quant": False,
    "static_batch_sizes": [],
    "round_mode": "half_away_from_zero",
    "invocations_per_frame": 1,
    "model_name": None,
    # image calibration data (docs/calibration-data.md)
    "image_size": None,
    "mean": None,
    "std": None,
    "channel_order": "RGB",
    "data_format": None,
}

# quant_cfg defaults per tensor role: weights per output channel, everything 8 bit.
QUANT_CFG_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "conv_activations": {"is_per_channel": False, "num_bits": 8},
    "conv_weights": {"is_per_channel": True, "num_bits": 8},
    "conv_output": {"is_per_channel": False, "num_bits": 8},
    "matmul_activations": {"is_per_channel": False, "num_bits": 8},
    "matmul_weights": {"is_per_channel": True, "num_bits": 8},
    "matmul_output": {"is_per_channel": False, "num_bits": 8},
    "avgpool_input": {"is_per_channel": False, "num_bits": 8},
    "activations": {"is_per_channel": False, "num_bits": 8},
}

# Every quant_cfg role the quantizer reads (docs/quantization.md); "activations" is the rest.
QUANT_CFG_ROLES = tuple(QUANT_CFG_DEFAULTS) + (
    "avgpool_output", "maxpool_input", "maxpool_output", "mean_input", "mean_output",
    "reshape_input", "reshape_output")
# Settings of a role; data_format only documents the layout (the SDK reads it from the graph).
QUANT_CFG_SETTINGS = ("is_per_channel", "num_bits", "data_format")

ROUND_MODES = ("half_away_from_zero", "half_to_even", "floor", "ceil", "trunc")


class ConfigError(RatelError, ValueError):
    """A configuration value is missing or invalid."""


class QuantConfig(dict):
    """Configuration of a converter: a dict with defaults (docs/architecture.md §3).

    ``QuantConfig("tensorflow")`` starts from the defaults; keys are then set like a dict.
    """

    def __init__(self, frontend: str = "tensorflow", version: Optional[str] = None, **values: Any):
        if frontend not in FRONTENDS:
            raise ConfigError(f"frontend must be one of {FRONTENDS}, got {frontend!r}")
        super().__init__(copy.deepcopy(DEFAULTS))
        self.frontend = frontend
        self.version = version
        self.update(values)

    @classmethod
    def from_file(cls, path, frontend: str = "tensorflow") -> "QuantConfig":
        """Read a JSON, YAML or TOML file (chosen by extension)."""
        path = Path(path)
        text = path.read_text()
        suffix = path.suffix.lower()
        if suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml
            data = yaml.safe_load(text)
        elif suffix == ".toml":
            import tomllib
            data = tomllib.loads(text)
        else:
            raise ConfigError(f"{path}: unknown config file type {suffix!r} (use .json, .yaml or .toml)")
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the file must hold a mapping of keys to values")
        return cls(frontend, **data)

    def quant_cfg_for(self, role: str) -> Dict[str, Any]:
        """Settings (``is_per_channel``, ``num_bits``, ...) for a tensor role."""
        base = dict(QUANT_CFG_DEFAULTS.get(role, QUANT_CFG_DEFAULTS["activations"]))
        base.update(self.get("quant_cfg", {}).get(role, {}))
        return base


def set_dotted(cfg: Dict[str, Any], dotted_key: str, value: Any) -> None:
    """Set ``cfg['a']['b'] = value`` for ``dotted_key='a.b'`` (command-line overrides)."""
    parts = dotted_key.split(".")
    d = cfg
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


_warned_unknown: set = set()


def normalize(config: Mapping[str, Any], frontend: str) -> QuantConfig:
    """Validate ``config`` (a dict or QuantConfig) and return a QuantConfig with defaults.

    Raises :class:`ConfigError` naming the offending key; warns once about unknown keys.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"config must be a dict or QuantConfig, got {type(config).__name__}")
    cfg = QuantConfig(frontend)
    cfg.update(copy.deepcopy(dict(config)))
    for key in REQUIRED:
        if cfg.get(key) in (None, "", []):
            raise ConfigError(f"config key {key!r} is required")
    for key in ("input_nodes", "output_nodes"):
        if isinstance(cfg[key], str):
            cfg[key] = [cfg[key]]
        if not all(isinstance(n, str) for n in cfg[key]):
            raise ConfigError(f"config key {key!r} must be a list of node names")
    shapes = cfg["input_shapes"]
    if shapes and not isinstance(shapes[0], (list, tuple)):
        shapes = [shapes]
    if len(shapes) != len(cfg["input_nodes"]):
        raise ConfigError(f"input_shapes has {len(shapes)} shapes for {len(cfg['input_nodes'])} input nodes")
    cfg["input_shapes"] = [[int(d) if d is not None else None for d in s] for s in shapes]
    if cfg["quantize_algorithm"] not in ALGORITHMS:
        raise ConfigError(f"quantize_algorithm must be one of {ALGORITHMS}, got {cfg['quantize_algorithm']!r}")
    if cfg["round_mode"] not in ROUND_MODES:
        raise ConfigError(f"round_mode must be one of {ROUND_MODES}, got {cfg['round_mode']!r}")
    for lc in cfg["layer_configs"]:
        if lc.get("data_type") not in DATA_TYPES:
            raise ConfigError(f"layer_configs entry {lc!r}: data_type must be one of {DATA_TYPES}")
    if not isinstance(cfg["quant_cfg"], Mapping):
        raise ConfigError(f"quant_cfg must map tensor roles to settings, got {cfg['quant_cfg']!r}")
    for role, settings in cfg["quant_cfg"].items():
        if not isinstance(settings, Mapping):
            raise ConfigError(f"quant_cfg[{role!r}] must be a mapping of settings, got {settings!r}")
        bits = settings.get("num_bits", 8)
        if bits not in (8, 16):
            raise ConfigError(f"quant_cfg[{role!r}].num_bits must be 8 or 16, got {bits!r}")
    unknown = sorted(set(cfg) - set(DEFAULTS)) + _unknown_quant_cfg(cfg["quant_cfg"])
    new = [k for k in unknown if k not in _warned_unknown]
    if new:
        _warned_unknown.update(new)
        warnings.warn(f"ratelnn: unknown config keys kept and ignored: {', '.join(new)}",
                      UserWarning, stacklevel=3)
    return cfg


def _unknown_quant_cfg(quant_cfg: Mapping[str, Any]) -> list:
    """``quant_cfg.<role>`` / ``quant_cfg.<role>.<setting>`` entries the quantizer does not read."""
    out = []
    for role, settings in quant_cfg.items():
        if role not in QUANT_CFG_ROLES:
            out.append(f"quant_cfg.{role}")
            continue
        out += [f"quant_cfg.{role}.{k}" for k in settings if k not in QUANT_CFG_SETTINGS]
    return sorted(out)
