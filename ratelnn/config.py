"""Converter configuration (docs/architecture.md §3).

:class:`QuantConfig` is a ``dict`` with the documented defaults filled in; a plain dict is
accepted everywhere and normalised by :func:`normalize`.  Unknown keys are kept untouched
(users keep their own paths and commands in the same dict) and reported once as a warning.
"""
from __future__ import annotations

import copy
import difflib
import json
import math
import numbers
import os
import warnings
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from .config_ascend import resolve_ascend
from .config_forms import CHECK_LEVELS, CHECK_MODES, PULSAR2_IGNORED, ConfigError, resolve

FRONTENDS = ("tensorflow", "mxnet", "onnx")
ALGORITHMS = ("naive", "kld", "naive_kld_mix", "percentile", "mse")
DATA_TYPES = ("int8", "uint8", "int16", "fp32")
MAX_COMPILED_BATCH = 4096   # largest batch an engine set is compiled for (docs/multi-batch.md)
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
    "full_range_outputs": True,   # model outputs at max |x| whatever the method (docs/quantization.md §3)
    "quant_cfg": {},
    "layer_configs": [],
    "auto_int16": True,
    "auto_int16_sqnr_db": 25.0,
    "auto_int16_max_fraction": 0.1,
    "remove_input_quant": False,
    "static_batch_sizes": [],
    "max_dynamic_batch_size": 0,   # docs/multi-batch.md; 0 = off
    # compiler check (docs/multi-batch.md): 0 off, 1 all close, 2 all equal, 3 cosine, against
    # the quantized model's integer form, on compiler_check_data (else the calibration sample)
    "compiler_check": 0,
    "compiler_check_mode": "CheckOutput",   # CheckOutput | CheckPerLayer
    "compiler_check_rtol": 1e-5,
    "compiler_check_atol": 0.0,
    "compiler_check_cosine": 0.999,
    "compiler_check_data": None,
    # precision analysis (docs/quantization.md)
    "precision_analysis": False,
    "precision_analysis_method": "PerLayer",
    "precision_analysis_mode": "Reference",
    "precision_analysis_data": None,   # data analyze() and the CLI use (default: the calibration data)
    "conv_bias_data_type": "int32",   # the NPU adds the bias in the int32 accumulator
    # graph patches applied right after import (docs/quantization.md "Graph patches")
    "op_processors": [],
    "const_processors": [],
    "round_mode": "half_away_from_zero",
    "invocations_per_frame": 1,
    "model_name": None,
    # accuracy passes (docs/quantization.md, "Accuracy passes")
    "equalization": False,             # cross-layer equalization of the float IR before calibration
    "equalization_iterations": 8,      # sweeps over the equalized pairs
    "bias_correction": "none",         # none | empirical | analytic
    "adaround_iterations": 0,          # AdaRound steps per layer; 0: round to nearest
    "accuracy_samples": 64,            # calibration samples calibrate() keeps for the two above
    # automatic defaults (docs/quantization.md "Automatic defaults"): the default build checks
    # itself on the held-out part of the kept sample and, below accuracy_auto_cosine, applies
    # the cheapest remedies within accuracy_auto_latency_ratio x the all-int8 latency
    "accuracy_auto": True,
    "accuracy_auto_cosine": 0.99,
    "accuracy_auto_latency_ratio": 1.3,
    "merge_statistics": False,   # accept other models' statistics in output_dir (docs/statistics.md)
    # refuse GraphDefs whose compressed (splat) constants expand beyond this (docs/reliability.md)
    "max_expanded_constant_bytes": 256 << 20,
    # engines: elements of one activation tensor, bytes of all at the compiled batch (docs/reliability.md)
    "max_tensor_elements": (1 << 31) - 1,
    "max_total_bytes": 1 << 33,
    # image calibration data (docs/calibration-data.md)
    "image_size": None,
    "mean": None,
    "std": None,
    "channel_order": "RGB",
    "data_format": None,
    # calibration data named in the config (docs/calibration-data.md): a path or {input: path},
    # at most calibration_size samples (None or -1: all), src_dtype: what array files hold,
    # calibration_format: what an archive's or folder's members are (None: told by their suffixes)
    "calibration_data": None,
    "calibration_size": None,
    "src_dtype": None,
    "calibration_format": None,
    # under src_dtype uint8 the compiled model takes the raw image in src_format / src_layout
    # (default: channel_order / data_format); csc_mode or csc_mat convert YUV to RGB
    # (docs/architecture.md §6, "Input processors")
    "src_format": None,
    "src_layout": None,
    "csc_mode": None,
    "csc_mat": None,
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

# keys that hold text: ``--set output_dir=12345`` means the folder "12345", not a number
STRING_KEYS = ("output_dir", "model_name", "quantize_algorithm", "round_mode", "channel_order",
               "data_format", "bias_correction", "compiler_check_mode", "compiler_check_data",
               "precision_analysis_data")

BIAS_CORRECTIONS = ("none", "empirical", "analytic")
ROUND_MODES = ("half_away_from_zero", "half_to_even", "floor", "ceil", "trunc")


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
    flat, unknown_sections = resolve(config, DEFAULTS)   # docs/architecture.md §14
    flat, without_effect = resolve_ascend(flat, DEFAULTS)
    cfg.update(flat)
    for key in REQUIRED:
        if cfg.get(key) in (None, "", []):
            raise ConfigError(f"config key {key!r} is required")
    for key in ("input_nodes", "output_nodes"):
        if isinstance(cfg[key], str):
            cfg[key] = [cfg[key]]
        if not isinstance(cfg[key], (list, tuple)) or not all(isinstance(n, str) and n for n in cfg[key]):
            raise ConfigError(f"config key {key!r} must be a list of node names, got {cfg[key]!r}")
        cfg[key] = list(cfg[key])
        seen = [_node_key(n) for n in cfg[key]]
        dup = sorted({n for n in seen if seen.count(n) > 1})
        if dup:
            raise ConfigError(f"config key {key!r} names {dup} more than once: {cfg[key]!r}")
    both = sorted(set(map(_node_key, cfg["input_nodes"])) & set(map(_node_key, cfg["output_nodes"])))
    if both:
        raise ConfigError(f"output_nodes {both} are also input_nodes: an output must be computed "
                          "by the model, not fed to it")
    cfg["input_shapes"] = _input_shapes(cfg["input_shapes"], len(cfg["input_nodes"]))
    cfg["output_dir"] = _output_dir(cfg["output_dir"])
    if cfg["quantize_algorithm"] not in ALGORITHMS:
        raise ConfigError(f"quantize_algorithm must be one of {ALGORITHMS}, got {cfg['quantize_algorithm']!r}")
    if cfg["round_mode"] not in ROUND_MODES:
        raise ConfigError(f"round_mode must be one of {ROUND_MODES}, got {cfg['round_mode']!r}")
    if cfg["bias_correction"] not in BIAS_CORRECTIONS:
        raise ConfigError(f"bias_correction must be one of {BIAS_CORRECTIONS}, got {cfg['bias_correction']!r}")
    _check_scalars(cfg)
    cfg["static_batch_sizes"] = _batch_sizes(cfg)
    if not isinstance(cfg["layer_configs"], (list, tuple)):
        raise ConfigError(f"layer_configs must be a list of mappings, got {cfg['layer_configs']!r}")
    for i, lc in enumerate(cfg["layer_configs"]):
        if not isinstance(lc, Mapping):
            raise ConfigError(f"layer_configs[{i}] must be a mapping like "
                              f"{{'name': ..., 'data_type': 'int16'}}, got {lc!r}")
        if lc.get("data_type") not in DATA_TYPES:  # resolve() maps U8/S16/FP32...
            raise ConfigError(f"layer_configs entry {lc!r}: data_type must be one of {DATA_TYPES}")
    if not isinstance(cfg["quant_cfg"], Mapping):
        raise ConfigError(f"quant_cfg must map tensor roles to settings, got {cfg['quant_cfg']!r}")
    for role, settings in cfg["quant_cfg"].items():
        if role not in QUANT_CFG_ROLES:
            close = difflib.get_close_matches(str(role), QUANT_CFG_ROLES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"quant_cfg role {role!r} is unknown{hint}; known roles: "
                              f"{', '.join(QUANT_CFG_ROLES)}")
        if not isinstance(settings, Mapping):
            raise ConfigError(f"quant_cfg[{role!r}] must be a mapping of settings, got {settings!r}")
        bits = settings.get("num_bits", 8)
        if bits not in (8, 16) or isinstance(bits, bool):
            raise ConfigError(f"quant_cfg[{role!r}].num_bits must be 8 or 16, got {bits!r}")
    _check_choices(cfg)
    unknown = sorted(set(cfg) - set(DEFAULTS)) + _unknown_quant_cfg(cfg["quant_cfg"]) + unknown_sections
    _warn_ignored([k for k in unknown if k not in PULSAR2_IGNORED],
                  without_effect + [f"{k}: {PULSAR2_IGNORED[k]}" for k in unknown if k in PULSAR2_IGNORED])
    return cfg


def _warn_ignored(unknown: list, without_effect: list) -> None:
    """One UserWarning naming the keys not seen before in this process: ``unknown`` ones and
    other toolchains' keys ``without_effect`` here (``"KEY: reason"``, docs/config-forms.md)."""
    unknown = [k for k in unknown if k not in _warned_unknown]
    without_effect = [k for k in without_effect if k not in _warned_unknown]
    _warned_unknown.update(unknown + without_effect)
    parts = ([f"unknown config keys kept and ignored: {', '.join(unknown)}"] if unknown else []) + \
        ([f"keys of other toolchains without effect here: {'; '.join(without_effect)}"] if without_effect else [])
    if parts:
        warnings.warn(f"ratelnn: {'; '.join(parts)}".replace("`", ""), UserWarning, stacklevel=4)


def _node_key(name: str) -> str:
    """``x`` and ``x:0`` name one tensor."""
    return name[:-2] if name.endswith(":0") else name


def _input_shapes(shapes: Any, n_inputs: int) -> list:
    """``input_shapes`` as a list of lists of positive ints (None for a free dim)."""
    expect = "a list of shapes, one per input node, like [[1, 224, 224, 3]]"
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, (list, tuple)) or not shapes:
        raise ConfigError(f"input_shapes must be {expect}, got {shapes!r}")
    if not isinstance(shapes[0], (list, tuple)):
        shapes = [shapes]
    if len(shapes) != n_inputs:
        raise ConfigError(f"input_shapes has {len(shapes)} shapes for {n_inputs} input nodes")
    out = []
    for shape in shapes:
        if not isinstance(shape, (list, tuple)):
            raise ConfigError(f"input_shapes must be {expect}, got {shapes!r}")
        dims = []
        for d in shape:
            if d is None:
                dims.append(None)
                continue
            integral = isinstance(d, numbers.Integral) or (isinstance(d, float) and d.is_integer())
            if isinstance(d, bool) or not isinstance(d, numbers.Real) or not integral or d <= 0:
                raise ConfigError(f"input_shapes {list(shape)!r}: dimension {d!r} is not a positive "
                                  "integer (None leaves a dimension free)")
            dims.append(int(d))
        out.append(dims)
    return out


def _batch_sizes(cfg: Mapping[str, Any]) -> list:
    """``static_batch_sizes`` as a sorted list of distinct positive ints; not together with
    ``max_dynamic_batch_size`` (docs/multi-batch.md)."""
    sizes = cfg.get("static_batch_sizes")
    if sizes is None:
        sizes = []
    expect = f"a list of batch sizes in 1..{MAX_COMPILED_BATCH}, like [1, 4, 16]"
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, (list, tuple)):
        raise ConfigError(f"config key 'static_batch_sizes' must be {expect}, got {sizes!r}")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or not 1 <= s <= MAX_COMPILED_BATCH:
            raise ConfigError(f"config key 'static_batch_sizes' must be {expect}, got {list(sizes)!r} "
                              f"(entry {s!r})")
    if sizes and cfg.get("max_dynamic_batch_size"):
        raise ConfigError("config keys 'static_batch_sizes' and 'max_dynamic_batch_size' exclude each other: "
                          "set one of them")
    return sorted({int(s) for s in sizes})


def _output_dir(value: Any) -> str:
    """``output_dir`` as a string; a str or os.PathLike that is not an existing file."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"output_dir must be a path (str or os.PathLike), got {value!r} "
                          f"({type(value).__name__})")
    path = os.fspath(value)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"output_dir {path!r} exists and is not a directory")
    return path


# key -> (accepted types, check, expectation) of the scalar keys
_SCALARS = {
    "enable_EMA": (bool, None, "true or false"),
    "auto_int16": (bool, None, "true or false"),
    "full_range_outputs": (bool, None, "true or false"),
    "remove_input_quant": (bool, None, "true or false"),
    "merge_statistics": (bool, None, "true or false"),
    "ema_decay": (numbers.Real, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    "percentile": (numbers.Real, lambda v: 0 < v <= 100, "a number in (0, 100]"),
    "auto_int16_sqnr_db": (numbers.Real, lambda v: math.isfinite(v), "a finite number"),
    "auto_int16_max_fraction": (numbers.Real, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    "invocations_per_frame": (numbers.Integral, lambda v: v >= 1, "a positive integer"),
    "max_expanded_constant_bytes": (numbers.Integral, lambda v: v >= 0, "a byte count >= 0"),
    "max_tensor_elements": (numbers.Integral, lambda v: 1 <= v <= (1 << 31) - 1, "an integer in [1, 2^31-1]"),
    "max_total_bytes": (numbers.Integral, lambda v: 1 <= v <= 1 << 40, "a byte count in [1, 2^40]"),
    "equalization": (bool, None, "true or false"),
    "equalization_iterations": (numbers.Integral, lambda v: v >= 1, "a positive integer"),
    "adaround_iterations": (numbers.Integral, lambda v: v >= 0, "an integer >= 0"),
    "accuracy_samples": (numbers.Integral, lambda v: v >= 0, "an integer >= 0"),
    "accuracy_auto": (bool, None, "true or false"),
    "accuracy_auto_cosine": (numbers.Real, lambda v: -1 <= v <= 1, "a number in [-1, 1]"),
    "accuracy_auto_latency_ratio": (numbers.Real, lambda v: 1 <= v < math.inf, "a finite number >= 1"),
    "precision_analysis": (bool, None, "true or false"),
    "max_dynamic_batch_size": (numbers.Integral, lambda v: 0 <= v <= MAX_COMPILED_BATCH,
                               f"an integer in 0..{MAX_COMPILED_BATCH} (0 = off)"),
    "compiler_check": (numbers.Integral, lambda v: v in CHECK_LEVELS, "0, 1, 2 or 3"),
    "compiler_check_rtol": (numbers.Real, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    "compiler_check_atol": (numbers.Real, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    "compiler_check_cosine": (numbers.Real, lambda v: -1 <= v <= 1, "a number in [-1, 1]"),
}

# key -> accepted values of the keys with a few choices (docs/architecture.md §14)
_CHOICES = {
    "precision_analysis_method": ("PerLayer", "EndToEnd"),
    "precision_analysis_mode": ("Reference", "NPUBackend"),
    "conv_bias_data_type": ("int32",),
    "compiler_check_mode": CHECK_MODES,
}


def _check_scalars(cfg: Mapping[str, Any]) -> None:
    for key, (kind, check, expect) in _SCALARS.items():
        value = cfg.get(key)
        wrong_bool = isinstance(value, bool) and kind is not bool
        if wrong_bool or not isinstance(value, kind) or (check is not None and not check(value)):
            raise ConfigError(f"config key {key!r} must be {expect}, got {value!r}")
    for key in ("model_name",):
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            raise ConfigError(f"config key {key!r} must be a string, got {cfg[key]!r}")


def _check_choices(cfg: Dict[str, Any]) -> None:
    """Keys with a few choices, the optional calibration keys and the patch lists."""
    from .config_forms import CALIBRATION_FORMATS, SRC_DTYPES, bias_data_type
    cfg["conv_bias_data_type"] = bias_data_type("conv_bias_data_type", cfg["conv_bias_data_type"])
    for key, choices in _CHOICES.items():
        if cfg[key] not in choices:
            raise ConfigError(f"config key {key!r} must be one of {choices}, got {cfg[key]!r}")
    size = cfg["calibration_size"]
    if size is not None and (isinstance(size, bool) or not isinstance(size, numbers.Integral) or
                             (size < 1 and size != -1)):
        raise ConfigError(f"config key 'calibration_size' must be a positive integer (samples), or "
                          f"-1 or null (all), got {size!r}")
    if size == -1:
        cfg["calibration_size"] = None
    fmt = cfg["calibration_format"]
    for value in (fmt.values() if isinstance(fmt, Mapping) else [fmt]):
        if value is not None and value not in set(CALIBRATION_FORMATS.values()):
            raise ConfigError(f"config key 'calibration_format' must be one of "
                              f"{sorted(set(CALIBRATION_FORMATS.values()))} (or a mapping of "
                              f"input name -> one of them), got {fmt!r}")
    for key in ("calibration_data", "precision_analysis_data", "compiler_check_data"):
        data = cfg[key]
        paths = data.values() if isinstance(data, Mapping) else [data]
        if data is not None and not all(isinstance(p, (str, os.PathLike)) for p in paths):
            raise ConfigError(f"config key {key!r} must be a path or a mapping of input name "
                              f"-> path, got {data!r}")
    src = cfg["src_dtype"]
    for value in (src.values() if isinstance(src, Mapping) else [src]):
        if value is not None and value not in set(SRC_DTYPES.values()):
            raise ConfigError(f"config key 'src_dtype' must be 'uint8' or 'float32' (or a mapping of "
                              f"input name -> one of them), got {src!r}")
    _check_input_processors(cfg)
    for key in ("op_processors", "const_processors"):
        value = cfg[key]
        if not isinstance(value, (list, tuple)) or not all(isinstance(e, Mapping) for e in value):
            raise ConfigError(f"config key {key!r} must be a list of mappings, got {value!r}")


def _check_input_processors(cfg: Dict[str, Any]) -> None:
    """``src_format``, ``src_layout``, ``csc_mode`` (one of their names, or ``{input: name}``)
    and ``csc_mat`` (12 numbers, or ``{input: [...]}``)."""
    from .config_forms import INPUT_CHOICES
    for key in ("src_format", "src_layout", "csc_mode"):
        value = cfg[key]
        allowed = sorted(set(INPUT_CHOICES[key].values()))
        for v in (value.values() if isinstance(value, Mapping) else [value]):
            if v is not None and v not in allowed:
                raise ConfigError(f"config key {key!r} must be one of {allowed} (or a mapping of input name "
                                  f"-> one of them), got {value!r}")
    mat = cfg["csc_mat"]
    for v in (mat.values() if isinstance(mat, Mapping) else [mat]):
        if v is not None and (not isinstance(v, (list, tuple)) or len(v) != 12 or
                              not all(isinstance(e, numbers.Real) and not isinstance(e, bool) for e in v)):
            raise ConfigError(f"config key 'csc_mat' must be 12 numbers (R, G, B rows of [y, u, v, offset]) "
                              f"or a mapping of input name -> such a list, got {mat!r}")


def _unknown_quant_cfg(quant_cfg: Mapping[str, Any]) -> list:
    """``quant_cfg.<role>`` / ``quant_cfg.<role>.<setting>`` entries the quantizer does not read."""
    out = []
    for role, settings in quant_cfg.items():
        if role not in QUANT_CFG_ROLES:
            out.append(f"quant_cfg.{role}")
            continue
        out += [f"quant_cfg.{role}.{k}" for k in settings if k not in QUANT_CFG_SETTINGS]
    return sorted(out)
