"""Section forms of other NPU toolchains -> the flat native keys (docs/architecture.md §14).

:func:`resolve` turns a Pulsar2/Ascend-style config (``quant:``, ``input_processors:``,
``compiler:`` sections, ``U8``/``S16``/``FP32`` data types, ``"name:1x3x224x224"`` input
shapes) into the flat keys of docs/quantization.md, which is what every other module reads.
A flat config passes through unchanged, so resolving twice is harmless.  A setting given in
both forms with different values is a :class:`ConfigError` naming both; a flat key still at
its default does not count as given.  Unknown keys inside the sections are returned (as
``quant.<key>``...) for the one unknown-keys warning of :func:`ratelnn.config.normalize`.
"""
from __future__ import annotations

import copy
import difflib
import numbers
import re
from typing import Any, Callable, Dict, Iterable, List, Mapping, Sequence, Tuple

from .errors import RatelError


class ConfigError(RatelError, ValueError):
    """A configuration value is missing or invalid."""


SECTIONS = ("quant", "input_processors", "compiler")
# what ratelnn makes of another toolchain's key (the tables of docs/config-forms.md)
MAPPED, IGNORED, REFUSED = "mapped", "ignored with warning", "refused"

# quant.calibration_method -> quantize_algorithm
CALIBRATION_METHODS = {"minmax": "naive", "percentile": "percentile", "mse": "mse", "kl": "kld"}
# Pulsar2 data types -> native (docs/quantization.md); U16 is refused (REFUSED_DATA_TYPES)
DATA_TYPE_NAMES = {"u8": "uint8", "s8": "int8", "s16": "int16", "fp32": "fp32",
                   "uint8": "uint8", "int8": "int8", "int16": "int16", "float32": "fp32"}
# (key, value) -> why ratelnn refuses it
REFUSED_VALUES = {
    ("quant.conv_bias_data_type", "fp32"): "FP32 biases are not supported: the NPU adds the bias in the int32 "
                                           "accumulator (use S32)",
    ("quant.layer_configs[].weight_data_type", "fp32"): "the weights of a layer on the NPU are int8 (S8); to keep "
                                                        "the whole layer float give it data_type FP32",
}
PULSAR2_DATA_TYPES = ("u8", "s8", "s16", "fp32")   # the spellings of DATA_TYPE_NAMES that are Pulsar2's
REFUSED_DATA_TYPES = {
    "u16": "U16 is unsigned 16-bit (codes 0..65535); the NPU's 16-bit tensors are int16 (codes "
           "-32768..32767, zero at code 0), which cannot hold it exactly: use S16 (int16; a "
           "non-negative tensor keeps 15 bits of magnitude)"}
EIGHT_BIT = ("uint8", "int8")   # ratelnn's default activation precision (sign from the statistics)
SRC_DTYPES = {"u8": "uint8", "uint8": "uint8", "fp32": "float32", "float32": "float32"}
LAYOUTS = ("NHWC", "NCHW")
CHANNEL_ORDERS = {"rgb": "RGB", "bgr": "BGR"}   # 1-channel inputs read grayscale anyway
# what the compiled model takes under src_dtype uint8 (docs/architecture.md §6, "Input processors")
SRC_FORMATS = {"rgb": "RGB", "bgr": "BGR", "gray": "GRAY", "yuv420sp": "YUV420SP", "yuv420sp_vu": "YUV420SP_VU"}
CSC_MODES = {m.lower(): m for m in ("FullRange_BT601", "LimitedRange_BT601", "FullRange_BT709", "LimitedRange_BT709")}
PRECISION_METHODS = ("PerLayer", "EndToEnd")
PRECISION_MODES = ("Reference", "NPUBackend")
CHECK_LEVELS = (0, 1, 2, 3)   # compiler.check: no check, all close, all equal, cosine
CHECK_MODES = ("CheckOutput", "CheckPerLayer")
BIAS_TYPES = {"s32": "int32", "int32": "int32"}

_BOOL = (bool, "true or false")
_INT = (numbers.Integral, "an integer")
_STR = (str, "a string")
_LIST = ((list, tuple), "a list")
_MAP = (Mapping, "a mapping")
_NUM = (numbers.Real, "a number")
_NUMS = ((numbers.Real, list, tuple), "a number or a list of numbers (one per channel)")

# section key -> (flat key, expected type, converter); None as flat key: handled by code
QUANT_KEYS: Dict[str, Tuple[Any, Tuple[Any, str], Any]] = {
    "calibration_method": ("quantize_algorithm", _STR, "method"),
    "calibration_size": ("calibration_size", _INT, None),
    "layer_configs": ("layer_configs", _LIST, "layers"),
    "precision_analysis": ("precision_analysis", _BOOL, None),
    "precision_analysis_method": ("precision_analysis_method", _STR, None),
    "precision_analysis_mode": ("precision_analysis_mode", _STR, None),
    "conv_bias_data_type": ("conv_bias_data_type", _STR, "bias"),
    "input_sample_dir": ("precision_analysis_data", _STR, None),
    "input_configs": (None, _LIST, None),
}
COMPILER_KEYS = {
    "static_batch_sizes": ("static_batch_sizes", _LIST, None),
    "max_dynamic_batch_size": ("max_dynamic_batch_size", _INT, None),
    "check": ("compiler_check", _INT, None),
    "check_mode": ("compiler_check_mode", _STR, None),
    "check_rtol": ("compiler_check_rtol", _NUM, None),
    "check_atol": ("compiler_check_atol", _NUM, None),
    "check_cosine_simularity": ("compiler_check_cosine", _NUM, None),   # Pulsar2's spelling
    "check_cosine_similarity": ("compiler_check_cosine", _NUM, None),
    "input_sample_dir": ("compiler_check_data", _STR, None),
}
# the mapping sections a command-line override ``--<section>.<key> value`` may set
SECTION_KEYS = {"quant": QUANT_KEYS, "compiler": COMPILER_KEYS}
# input_processors[i] / quant.input_configs[i] key -> per-input flat key
INPUT_KEYS = {
    "tensor_name": (None, _STR),
    "calibration_dataset": ("calibration_data", _STR),
    "calibration_size": (None, _INT),
    "calibration_mean": ("mean", _NUMS),
    "mean": ("mean", _NUMS),
    "calibration_std": ("std", _NUMS),
    "std": ("std", _NUMS),
    "tensor_layout": ("data_format", _STR),
    "tensor_format": ("channel_order", _STR),
    "src_dtype": ("src_dtype", _STR),
    "calibration_format": ("calibration_format", _STR),
    "src_format": ("src_format", _STR),
    "src_layout": ("src_layout", _STR),
    "csc_mode": ("csc_mode", _STR),
    "csc_mat": ("csc_mat", _LIST),
}
# calibration_format spellings (Pulsar2's Image, Numpy, Binary, NumpyObject; any case) -> native
CALIBRATION_FORMATS = {"image": "image", "numpy": "numpy", "binary": "binary", "numpyobject": "numpy_object",
                       "numpy_object": "numpy_object"}
# per-input flat key -> its spellings (any case) -> native value
INPUT_CHOICES = {"data_format": {v.lower(): v for v in LAYOUTS}, "src_layout": {v.lower(): v for v in LAYOUTS},
                 "channel_order": CHANNEL_ORDERS, "src_dtype": SRC_DTYPES, "calibration_format": CALIBRATION_FORMATS,
                 "src_format": SRC_FORMATS, "csc_mode": CSC_MODES}
LAYER_KEYS = {"layer_name": ((str, list, tuple), "a name or a list of names"),
              "op_type": ((str, list, tuple), "an op type or a list of op types"),
              "layer_names": _LIST, "op_types": _LIST,
              "start_tensor_names": ((str, list, tuple), "a list of tensor names"),
              "end_tensor_names": ((str, list, tuple), "a list of tensor names"),
              "data_type": _STR, "output_data_type": _STR, "weight_data_type": _STR}
LAYER_PLURALS = {"layer_names": "layer_name", "op_types": "op_type"}   # Pulsar2's list spellings
WEIGHT_DATA_TYPES = {"s8": None}   # weight_data_type -> native (None: the default, int8 weights)
DEFAULT_LAYER = "DEFAULT"   # layer_name / tensor names meaning the whole model

_CLI = "a `ratelnn build` option here"
# Pulsar2 keys ratelnn reads no meaning from -> why (named so in the unknown-keys warning)
PULSAR2_IGNORED = {
    "input": f"the model path: {_CLI}, `--model`",
    "output_name": f"{_CLI}, `--output_name` (sets `model_name`)",
    "work_dir": f"{_CLI}, `--work_dir` (sets `output_dir`)",
    "model_type": "the frontend follows the model file (`--framework`)",
    "target_hardware": "ratelnn builds for its own NPU (`device_info`)",
    "npu_mode": "NPU cores come from `device_info`",
    "onnx_opt": "ratelnn runs its own graph passes",
    "output_processors": "outputs keep the model's layout and float32",
    "quant_op_processors": "patches Pulsar2's quantized ops; ratelnn's graph patches are `op_processors`",
    "quant.highest_mix_precision": "`auto_int16` promotes sensitive tensors to int16",
    "quant.refine_weight_threshold": "weights are quantized per channel at max abs",
    "quant.enable_smooth_quant": "no SmoothQuant here; `equalization` is cross-layer equalization",
    "quant.smooth_quant_threshold": "no SmoothQuant here",
    "quant.smooth_quant_strength": "no SmoothQuant here",
    "quant.transformer_opt_level": "no transformer-specific passes here",
    "quant.ln_scale_data_type": "LayerNormalization stays float",
    "quant.check": "ratelnn checks data types as it quantizes",
    "quant.disable_auto_refine_scale": "no scale refinement pass here",
    "quant.enable_easy_quant": "no EasyQuant here",
    "quant.disable_quant_optimization": "no such pass here",
    "quant.enable_brecq": "no BRECQ here; `adaround_iterations` runs AdaRound",
    "quant.enable_lsq": "no LSQ here",
    "quant.enable_adaround": "set `adaround_iterations` (steps per layer)",
    "quant.finetune_epochs": "set `adaround_iterations`",
    "quant.finetune_block_size": "AdaRound works layer by layer here",
    "quant.finetune_batch_size": "AdaRound uses `accuracy_samples`",
    "quant.finetune_lr": "AdaRound's rate is fixed",
    "quant.device": "calibration runs on the CPU (or on Ray workers: `ratelnn.distributed`)",
    "compiler.ddr_bw_limit": "no DDR bandwidth limit here",
    "compiler.disable_ir_fix": "no such pass here",
    "compiler.npu_perf": "`ratelnn build` prints the NPU profile",
    "compiler.enable_slice_mode": "the compiler chooses the split mode",
    "compiler.enable_tile_mode": "the compiler chooses the split mode",
    "compiler.enable_data_soft_compression": "no weight compression here",
}


def resolve(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """``(flat config, unknown section keys)``; ``defaults`` tells flat keys still at their
    default (which a section may set without conflict)."""
    flat = {k: copy.deepcopy(v) for k, v in config.items() if k not in SECTIONS}
    unknown: List[str] = []
    given: Dict[str, Tuple[str, Any, Any]] = {}   # flat key -> (section spelling, value, as written)

    def put(flat_key: str, where: str, value: Any, written: Any = None) -> None:
        """Set ``flat_key`` from the section spelling ``where`` (``written``: the user's value)."""
        shown = value if written is None else written
        if flat_key in given and given[flat_key][1] != value:
            raise ConfigError(f"{given[flat_key][0]} = {given[flat_key][2]!r} and {where} = {shown!r} "
                              "set the same thing differently")
        if flat_key in flat and flat[flat_key] != defaults.get(flat_key) and flat_key not in given \
                and flat[flat_key] != value:
            raise ConfigError(f"{flat_key} = {flat[flat_key]!r} and {where} = {shown!r} set the same "
                              "thing differently: give one of them")
        given[flat_key] = (where, value, shown)
        flat[flat_key] = value

    quant = _section(config, "quant")
    for key, value in quant.items():
        if key not in QUANT_KEYS:
            unknown.append(f"quant.{key}")
            continue
        flat_key, kind, conv = QUANT_KEYS[key]
        _typed(f"quant.{key}", value, kind)
        if key == "input_configs":
            continue
        resolved = {"method": _method, "layers": _layer_configs, "bias": bias_data_type}[conv](f"quant.{key}", value) \
            if conv else value
        put(flat_key, f"quant.{key}", resolved, value)
    compiler = _section(config, "compiler")
    for key, value in compiler.items():
        if key not in COMPILER_KEYS:
            unknown.append(f"compiler.{key}")
            continue
        flat_key, kind, _ = COMPILER_KEYS[key]
        _typed(f"compiler.{key}", value, kind)
        if key == "check" and value not in CHECK_LEVELS:
            raise ConfigError(f"compiler.check must be 0 (no check), 1 (all close), 2 (all equal) or "
                              f"3 (cosine), got {value!r}")
        if key == "max_dynamic_batch_size" and value < 0:
            raise ConfigError(f"compiler.max_dynamic_batch_size must be an integer >= 0 (0: off), got {value!r}")
        put(flat_key, f"compiler.{key}", value)
    entries = _input_entries(config, quant)
    unknown += _inputs(entries, put)
    if "layer_configs" in flat and "layer_configs" not in given:
        flat["layer_configs"] = _layer_configs("layer_configs", flat["layer_configs"])
    if flat.get("input_shapes") is not None and flat.get("input_nodes"):
        flat["input_shapes"] = input_shapes(flat["input_shapes"], flat.get("input_nodes"))
    return flat, unknown


def _section(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = config.get(name)
    if value is None:
        return {}
    expected = (list, tuple) if name == "input_processors" else Mapping
    if not isinstance(value, expected):
        raise ConfigError(f"config section {name!r} must be "
                          f"{'a list of mappings' if name == 'input_processors' else 'a mapping'}, "
                          f"got {type(value).__name__}")
    return value


def _typed(where: str, value: Any, kind: Tuple[Any, str]) -> None:
    types, expect = kind
    wrong_bool = isinstance(value, bool) and types not in (bool, (bool,))
    if wrong_bool or not isinstance(value, types):
        raise ConfigError(f"{where} must be {expect}, got {value!r} ({type(value).__name__})")


def _choice(where: str, value: str, table: Mapping[str, str]) -> str:
    found = table.get(str(value).lower())
    if found is None:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(sorted(set(table)))}")
    return found


def _method(where: str, value: str) -> str:
    return _choice(where, value, {**CALIBRATION_METHODS, **{a: a for a in CALIBRATION_METHODS.values()}})


def bias_data_type(where: str, value: str) -> str:
    refused = REFUSED_VALUES.get(("quant.conv_bias_data_type", str(value).lower()))
    if refused:
        raise ConfigError(f"{where}: {refused}")
    return _choice(where, value, BIAS_TYPES)


def data_type(where: str, value: Any) -> str:
    """A native data type (``int8``, ``uint8``, ``int16``, ``fp32``) from either spelling."""
    _typed(where, value, _STR)
    return _choice(where, value, DATA_TYPE_NAMES)


def _layer_configs(where: str, entries: Any) -> List[Any]:
    """Entries with native data types; ``layer_name: DEFAULT`` -> the whole-model subgraph;
    ``layer_names``/``op_types`` -> ``layer_name``/``op_type``.  ``output_data_type`` is the
    layer's data type (its output's); a ``data_type`` beside it is the layer's input precision,
    which ratelnn takes from the producing layer: 8-bit (the default) or a ConfigError.
    Entries that are not mappings are left to :func:`ratelnn.config.normalize`'s message."""
    if not isinstance(entries, (list, tuple)):
        return entries
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            out.append(entry)
            continue
        here = f"{where}[{i}]"
        entry = dict(entry)
        for key, kind in LAYER_KEYS.items():
            if key in entry:
                _typed(f"{here}.{key}", entry[key], kind)
        for plural, key in LAYER_PLURALS.items():
            if plural in entry:
                if key in entry:
                    raise ConfigError(f"{here} gives both {key} and {plural}: give one")
                entry[key] = list(entry.pop(plural))
        label = f"{here} ({layer_label(entry)})"
        _weight_data_type(label, entry)
        for key in ("data_type", "output_data_type"):
            refused = REFUSED_DATA_TYPES.get(str(entry.get(key, "")).lower())
            if refused:
                raise ConfigError(f"{label}: {key} {entry[key]!r}: {refused}")
        if "output_data_type" in entry:
            out_type = data_type(f"{here}.output_data_type", entry.pop("output_data_type"))
            if "data_type" in entry:
                in_type = data_type(f"{here}.data_type", entry["data_type"])
                if in_type != out_type and in_type not in EIGHT_BIT:
                    raise ConfigError(
                        f"{label}: data_type {entry['data_type']!r} beside output_data_type {out_type!r} "
                        "is the layer's input precision, which ratelnn takes from the layer producing "
                        "that input (8-bit by default): give that layer the data_type instead")
            entry["data_type"] = out_type
        if "data_type" not in entry:
            raise ConfigError(f"{here} ({entry!r}) has no data_type")
        entry["data_type"] = data_type(f"{here}.data_type", entry["data_type"])
        if entry.get("layer_name") == DEFAULT_LAYER:
            del entry["layer_name"]
            entry["start_tensor_names"] = entry["end_tensor_names"] = [DEFAULT_LAYER]
        out.append(entry)
    return out


def layer_label(entry: Mapping[str, Any]) -> str:
    """What a ``layer_configs`` entry names, for messages: ``op_type 'Conv'``, ``layer_name
    ['a', 'b']``, ``the subgraph ['x'] -> ['y']`` or ``the whole model``."""
    for key in ("layer_name", "op_type"):
        if key in entry:
            return f"{key} {entry[key]!r}"
    starts, ends = entry.get("start_tensor_names"), entry.get("end_tensor_names")
    if starts == ends == [DEFAULT_LAYER]:
        return "the whole model"
    return f"the subgraph {starts!r} -> {ends!r}"


def _weight_data_type(label: str, entry: Dict[str, Any]) -> None:
    """Drop ``weight_data_type: S8`` (the NPU's weights); anything else is a ConfigError."""
    if "weight_data_type" not in entry:
        return
    value = entry.pop("weight_data_type")
    if str(value).lower() not in WEIGHT_DATA_TYPES:
        why = REFUSED_VALUES.get(("quant.layer_configs[].weight_data_type", str(value).lower()), "not one of S8")
        raise ConfigError(f"{label}: weight_data_type {value!r}: {why}")


def _input_entries(config: Mapping[str, Any], quant: Mapping[str, Any]) -> List[Tuple[str, Mapping]]:
    """(spelling, entry) of every ``input_processors`` and ``quant.input_configs`` entry."""
    out = []
    for where, entries in (("input_processors", _section(config, "input_processors")),
                           ("quant.input_configs", quant.get("input_configs") or [])):
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{where}[{i}] must be a mapping, got {entry!r}")
            out.append((f"{where}[{i}]", entry))
    return out


def _inputs(entries: Sequence[Tuple[str, Mapping]], put: Callable[[str, str, Any], None]) -> List[str]:
    """Per-input settings -> ``{input: value}`` flat keys (a single unnamed or ``DEFAULT``
    input -> a plain value); returns the unknown keys."""
    unknown: List[str] = []
    per_key: Dict[str, Dict[str, Any]] = {}
    sizes = {}
    for where, entry in entries:
        name = entry.get("tensor_name", DEFAULT_LAYER)
        for key, value in entry.items():
            if key not in INPUT_KEYS:
                unknown.append(f"{where.split('[')[0]}[].{key}")
                continue
            flat_key, kind = INPUT_KEYS[key]
            _typed(f"{where}.{key}", value, kind)
            if key == "calibration_size":
                sizes[f"{where}.{key}"] = value
                continue
            if flat_key is None:
                continue
            if flat_key in INPUT_CHOICES:
                value = _choice(f"{where}.{key}", value, INPUT_CHOICES[flat_key])
            slot = per_key.setdefault(flat_key, {})
            if name in slot and slot[name][1] != value:
                raise ConfigError(f"{slot[name][0]} = {slot[name][1]!r} and {where}.{key} = {value!r} "
                                  f"set the same thing differently for input {name!r}")
            slot[name] = (f"{where}.{key}", value)
    if len(set(sizes.values())) > 1:
        raise ConfigError(f"calibration sizes differ between inputs ({sizes}): every input needs the "
                          "same number of samples")
    for where, value in sizes.items():
        put("calibration_size", where, value)
    for flat_key, slot in per_key.items():
        if list(slot) == [DEFAULT_LAYER]:
            where, value = slot[DEFAULT_LAYER]
        else:
            if DEFAULT_LAYER in slot:
                raise ConfigError(f"{slot[DEFAULT_LAYER][0]} has no tensor_name while other entries "
                                  "name their input: name every input")
            where = " / ".join(w for w, _ in slot.values())
            value = {name: v for name, (_, v) in slot.items()}
        put(flat_key, where, value)
    return unknown


def section_override(dotted: str, value: Any) -> Tuple[Any, Any]:
    """``("quant.calibration_method", "MSE")`` -> ``(value, the flat key it sets or None)`` for a
    command-line override of a section key.  Pulsar2's scalar spellings are taken: 0/1 for a
    true/false key, one value for a list key (``[value]``).  ConfigError naming a section or
    key ratelnn does not read, with the closest known spelling."""
    section, _, key = dotted.partition(".")
    if section not in SECTION_KEYS:
        raise ConfigError(f"{dotted}: ratelnn reads no section {section!r}{did_you_mean(section, SECTION_KEYS)}; "
                          f"overrides take {' or '.join(f'{s}.<key>' for s in SECTION_KEYS)}")
    keys = SECTION_KEYS[section]
    if key not in keys:
        raise ConfigError(f"{dotted}: ratelnn reads no key {key!r} in {section}{did_you_mean(key, keys)}; "
                          f"it reads {', '.join(keys)}")
    flat_key, (types, _), _ = keys[key]
    if types is bool and isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        value = bool(value)
    elif types == _LIST[0] and value is not None and not isinstance(value, (list, tuple)):
        value = [value]
    return value, flat_key


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the spelling in ``known`` closest to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ---------------------------------------------------------------- input_shapes
_SHAPE = re.compile(r"^\s*(?:(?P<name>[^;]+?):)?(?P<dims>\d+(?:\s*[x,]\s*\d+)*)\s*$")


def input_shapes(value: Any, input_nodes: Any) -> Any:
    """``"a:1x3x224x224;b:1x10"`` (Ascend: ``"a:1,3,224,224;b:1,10"``), ``["a:1x3x224x224", ...]``
    or ``{a: [1, 3, 224, 224]}``
    -> one list shape per input node, in ``input_nodes`` order; other forms are returned
    unchanged for :func:`ratelnn.config.normalize` to check."""
    entries = shape_entries(value)
    if entries is None:
        return value
    positional, named = entries
    if positional:
        return positional
    nodes = [input_nodes] if isinstance(input_nodes, str) else list(input_nodes or [])
    key = {_base(n): n for n in nodes}
    stray = [n for n in named if _base(n) not in key]
    if stray:
        raise ConfigError(f"input_shapes names {stray}, which are not input_nodes {nodes}")
    missing = [n for n in nodes if _base(n) not in {_base(k) for k in named}]
    if missing:
        raise ConfigError(f"input_shapes gives no shape for input_nodes {missing}")
    by_base = {_base(k): v for k, v in named.items()}
    return [by_base[_base(n)] for n in nodes]


def shape_entries(value: Any) -> Any:
    """``(positional shapes, {name: shape})`` of the text forms of :func:`input_shapes`
    (``"a:1x3x224x224;b:1x10"``, a list of such strings, a mapping of name -> shape); None
    for other forms.  ConfigError for a malformed entry or a mix of named and unnamed ones."""
    if isinstance(value, str):
        if not value.strip():
            return None
        items: Any = [v for v in value.split(";") if v.strip()]
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        items = list(value)
    elif isinstance(value, Mapping):
        return [], {str(k): v for k, v in value.items()}
    else:
        return None
    named: Dict[str, Any] = {}
    positional = []
    for text in items:
        m = _SHAPE.match(text)
        if not m:
            raise ConfigError(f"input_shapes must be a list of shapes like [[1, 224, 224, 3]] or "
                              f"strings like 'name:1x224x224x3' or 'name:1,224,224,3' (';' between "
                              f"inputs); the entry {text!r} is neither")
        dims = [int(d) for d in re.split(r"\s*[x,]\s*", m["dims"])]
        if m["name"] is None:
            positional.append(dims)
        else:
            named[m["name"].strip()] = dims
    if positional and named:
        raise ConfigError(f"input_shapes {value!r}: name every shape or none")
    return positional, named


def _base(name: str) -> str:
    return name[:-2] if name.endswith(":0") else name
