"""AMCT's calibration config file (Ascend ``CONFIG_FILE``) -> native settings (docs/config-forms.md).

:func:`read_amct_config` reads either form AMCT writes: the simple config in protobuf text
(``batch_num: 2``, ``skip_layers: "conv1"``, ``common_config { arq_quantize { channel_wise:
true } }``, ``#`` comments) or the JSON config (``{"batch_num": 2, "conv1": {"quant_enable": true,
"activation_quant_params": {...}, "weight_quant_params": {...}}}``), into one shape: every field a
list of its values, messages as such dicts.  :func:`map_amct_config` maps the documented keys
ratelnn has a meaning for (table :data:`AMCT_KEYS`) and names the rest.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .config_forms import DEFAULT_LAYER, IGNORED, MAPPED, ConfigError

Message = Dict[str, List[Any]]

_SEARCH = ("ratelnn's `mse` picks the threshold among every bin edge of its 2048-bin histogram: no "
           "search range or step")
_SYMMETRIC = ("ratelnn quantizes symmetrically (zero point 0; uint8 for non-negative tensors, else int8 "
              "or int16)")
_PER_ROLE = "set per role (quant_cfg), not per layer or layer type"
# key (``a.b`` inside messages; ``<block>``: common_config, override_layer_*.calibration_config or a
# JSON layer entry) -> (status, what ratelnn makes of it): the rows of docs/config-forms.md
AMCT_KEYS: Dict[str, Tuple[str, str]] = {
    "batch_num": (MAPPED, "`calibration_size` = batch_num x the batch of `input_shapes` (samples)"),
    "skip_layers": (MAPPED, "`layer_configs` `{layer_name: [...], data_type: fp32}`"),
    "skip_layer_types": (MAPPED, "`layer_configs` `{op_type: [...], data_type: fp32}` (TensorFlow, MXNet, "
                                 "ONNX or IR spelling)"),
    "activation_offset": (MAPPED, "`false`: ratelnn's symmetric activations; `true` (asymmetric): ignored "
                                  "with warning, " + _SYMMETRIC),
    "do_fusion": (MAPPED, "`true`: ratelnn folds BatchNorm always; `false`: ignored with warning"),
    "common_config": (MAPPED, "the whole model: its keys below"),
    "override_layer_types": (MAPPED, "`{layer_type, calibration_config}`: that op type, its keys below"),
    "override_layer_configs": (MAPPED, "`{layer_name, calibration_config}`: that layer, its keys below"),
    "<layer>.quant_enable": (MAPPED, "(JSON config, per layer) `false`: `layer_configs` `{layer_name, "
                                     "data_type: fp32}`"),
    "<block>.arq_quantize.channel_wise": (MAPPED, "whole model: `quant_cfg` `conv_weights`/`matmul_weights` "
                                                  "`is_per_channel`; per layer or type: ignored with warning "
                                                  "(" + _PER_ROLE + ")"),
    "<block>.weight_quant_params.channel_wise": (MAPPED, "as `arq_quantize.channel_wise`"),
    "<block>.weight_quant_params.wts_algo": (MAPPED, "`arq_quantize`: ratelnn's weights (max abs per channel); "
                                                     "others: ignored with warning"),
    "<block>.weight_quant_params.num_bits": (MAPPED, "8 or 16 (whole model): `quant_cfg` weight roles "
                                                     "`num_bits`; other widths refused"),
    "<block>.ifmr_quantize": (MAPPED, "whole model: `quantize_algorithm: mse` (a clipping threshold "
                                      "minimizing the quantization error); its parameters ignored with "
                                      "warning (" + _SEARCH + ")"),
    "<block>.hfmg_quantize": (MAPPED, "as `ifmr_quantize`"),
    "<block>.activation_quant_params.act_algo": (MAPPED, "`ifmr`, `hfmg`: as `ifmr_quantize`"),
    "<block>.activation_quant_params.num_bits": (MAPPED, "8: the default; 16: `layer_configs` `data_type: "
                                                         "int16` for the block's layers; other widths refused"),
    "<block>.activation_quant_params.asymmetric": (MAPPED, "as `activation_offset`"),
    "<block>.activation_quant_params.max_percentile": (IGNORED, _SEARCH),
    "<block>.activation_quant_params.min_percentile": (IGNORED, _SEARCH),
    "<block>.activation_quant_params.search_range": (IGNORED, _SEARCH),
    "<block>.activation_quant_params.search_step": (IGNORED, _SEARCH),
    "<block>.activation_quant_params.num_of_bins": (IGNORED, _SEARCH),
    "joint_quant": (MAPPED, "`false`: as here; `true` (Add inputs share a scale): ignored with warning, "
                            "each input is requantized to the output's scale here"),
    "skip_fusion_layers": (IGNORED, "ratelnn folds every BatchNorm it can"),
    "skip_approximation_layers": (IGNORED, "no calibrated approximation here"),
    "fakequant_precision_mode": (IGNORED, "ratelnn's quantized model keeps float32 scales"),
    "nuq_config": (IGNORED, "no non-uniform quantization here"),
    "tensor_quantize": (IGNORED, "MaxPool/Add inputs are quantized where the NPU runs them"),
    "version": (IGNORED, "the file's format version"),
}
_BLOCK_FIELDS = ("arq_quantize", "ifmr_quantize", "hfmg_quantize", "activation_quant_params",
                 "weight_quant_params")
_ALGORITHMS = {"ifmr": "mse", "hfmg": "mse", "ifmr_quantize": "mse", "hfmg_quantize": "mse"}
_WEIGHT_ROLES = ("conv_weights", "matmul_weights")
# keys meaning what ratelnn does at one value -> (that value, why another is ignored)
_DEFAULT_ONLY = {"do_fusion": (True, "ratelnn folds BatchNorm always"),
                 "joint_quant": (False, "each Add input is requantized to the output's scale here")}


# ================================================================== reading
def read_amct_config(path: str) -> Message:
    """The file at ``path`` as a :data:`Message`; a ConfigError naming it when it cannot be read
    or parsed (JSON when it starts with ``{``, else protobuf text)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"CONFIG_FILE {path!r}: cannot read it ({e.__class__.__name__}: {e})") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"CONFIG_FILE {path!r}: not valid JSON ({e})") from None
        return _listed(data)
    return _ProtoText(text, path).message()


def _listed(obj: Dict[str, Any]) -> Message:
    """A JSON object in the :data:`Message` shape (every field a list; objects as messages)."""
    out: Message = {}
    for key, value in obj.items():
        values = value if isinstance(value, list) else [value]
        out[key] = [_listed(v) if isinstance(v, dict) else v for v in values]
    return out


_TOKEN = re.compile(r"\s*(?:#[^\n]*\n?|(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')|(?P<punct>[:{}\[\],;])"
                    r"|(?P<word>[^\s:{}\[\],;\"'#]+))", re.S)


class _ProtoText:
    """A parser of protobuf text without a schema: ``name: value``, ``name { ... }`` (or
    ``name: { ... }``), ``name: [a, b]``; repeated names collect; strings are stripped (AMCT's
    examples put names on lines of their own inside the quotes)."""

    def __init__(self, text: str, path: str) -> None:
        self.path, self.tokens = path, []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip():
                    self._fail(f"unexpected {text[pos:pos + 10]!r}", text.count("\n", 0, pos) + 1)
                break
            line = text.count("\n", 0, m.start(m.lastgroup) if m.lastgroup else m.end()) + 1
            if m["str"] is not None:
                self.tokens.append(("str", m["str"][1:-1].strip(), line))
            elif m["punct"] is not None or m["word"] is not None:
                self.tokens.append(("punct" if m["punct"] else "word", m["punct"] or m["word"], line))
            pos = m.end()
        self.i = 0

    def _fail(self, what: str, line: int) -> None:
        raise ConfigError(f"CONFIG_FILE {self.path!r} line {line}: {what} (AMCT's calibration config is "
                          "protobuf text, 'name: value' and 'name { ... }', or JSON)")

    def _peek(self) -> Optional[Tuple[str, str, int]]:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _next(self, what: str) -> Tuple[str, str, int]:
        tok = self._peek()
        if tok is None:
            self._fail(f"the file ends where {what} was expected", self.tokens[-1][2] if self.tokens else 1)
        self.i += 1
        return tok

    def message(self, nested: bool = False) -> Message:
        out: Message = {}
        while True:
            tok = self._peek()
            if tok is None:
                if nested:
                    self._fail("a '{' is never closed", self.tokens[-1][2])
                return out
            if tok[1] == "}" and tok[0] == "punct":
                if not nested:
                    self._fail("a '}' closes nothing", tok[2])
                self.i += 1
                return out
            kind, name, line = self._next("a field name")
            if kind != "word":
                self._fail(f"expected a field name, got {name!r}", line)
            if self._peek() and self._peek()[1] == ":":
                self.i += 1
            out.setdefault(name, []).extend(self._values(name))
            if self._peek() and self._peek()[1] in (",", ";"):
                self.i += 1

    def _values(self, name: str) -> List[Any]:
        kind, text, line = self._next(f"the value of {name}")
        if (kind, text) == ("punct", "{"):
            return [self.message(nested=True)]
        if (kind, text) == ("punct", "["):
            values: List[Any] = []
            while True:
                if self._peek() and self._peek()[1] == "]":
                    self.i += 1
                    return values
                values += self._values(name)
                if self._peek() and self._peek()[1] == ",":
                    self.i += 1
        if kind == "punct":
            self._fail(f"expected the value of {name}, got {text!r}", line)
        return [text if kind == "str" else _scalar(text)]


def _scalar(word: str) -> Any:
    """``true``/``false``, an int, a float, or the word itself (an enum value)."""
    if word in ("true", "false"):
        return word == "true"
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


# ================================================================== mapping
@dataclasses.dataclass
class AmctSettings:
    """What an AMCT config means here: flat ``settings`` (``calibration_size``,
    ``quantize_algorithm``), ``quant_cfg`` role settings, ``layer_configs`` entries, and the
    ``ignored`` keys by reason."""

    settings: Dict[str, Any] = dataclasses.field(default_factory=dict)
    quant_cfg: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
    layer_configs: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    ignored: Dict[str, List[str]] = dataclasses.field(default_factory=dict)   # reason -> keys

    def ignore(self, key: str, reason: str = "") -> None:
        self.ignored.setdefault(reason, []).append(key)

    def ignored_items(self) -> List[str]:
        """``"key, key: reason"`` per reason (``"key"`` for keys without one)."""
        return [f"{', '.join(keys)}: {reason}" if reason else ", ".join(keys) for reason, keys in self.ignored.items()]


def map_amct_config(config: Message, batch: Any) -> AmctSettings:
    """Map a :func:`read_amct_config` message; ``batch``: the first input's batch (None when
    the config does not fix it), which ``batch_num`` multiplies."""
    out = AmctSettings()
    for key, values in config.items():
        value = values[-1] if values else None
        if key == "batch_num":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"CONFIG_FILE batch_num must be a positive integer, got {value!r}")
            if not isinstance(batch, int):
                raise ConfigError("CONFIG_FILE batch_num counts batches: input_shapes (or INPUT_SHAPE) must fix "
                                  f"the batch, got {batch!r}")
            out.settings["calibration_size"] = value * batch
        elif key in ("skip_layers", "skip_layer_types"):
            names = [str(v) for v in values if str(v)]
            if names:
                field = "layer_name" if key == "skip_layers" else "op_type"
                out.layer_configs.append({field: names, "data_type": "fp32"})
        elif key == "activation_offset":
            _offset(out, key, value)
        elif key in _DEFAULT_ONLY:
            if value is not _DEFAULT_ONLY[key][0]:
                out.ignore(key, _DEFAULT_ONLY[key][1])
        elif key == "common_config":
            if not isinstance(value, dict):
                raise ConfigError(f"CONFIG_FILE common_config must be a message ({{ ... }}), got {value!r}")
            _block(out, value, None, key)
        elif key in _BLOCK_FIELDS:
            _block(out, {key: values}, None, "")
        elif key in ("override_layer_types", "override_layer_configs"):
            field = "layer_type" if key == "override_layer_types" else "layer_name"
            for i, entry in enumerate(values):
                name = (entry.get(field) or [None])[-1] if isinstance(entry, dict) else None
                if not name:
                    raise ConfigError(f"CONFIG_FILE {key}[{i}] has no {field}")
                scope = ("op_type" if field == "layer_type" else "layer_name", str(name))
                block = (entry.get("calibration_config") or [{}])[-1]
                _block(out, block, scope, f"{key}[{name}].calibration_config")
        elif key in AMCT_KEYS or not isinstance(value, dict):
            out.ignore(key, AMCT_KEYS.get(key, (None, ""))[1])
        else:                                                 # a layer of the JSON config
            _layer(out, key, value)
    return out


def _offset(out: AmctSettings, key: str, value: Any) -> None:
    if value is True:
        out.ignore(key, _SYMMETRIC)
    elif value is not False:
        raise ConfigError(f"CONFIG_FILE {key} must be true or false, got {value!r}")


def _layer(out: AmctSettings, name: str, layer: Dict[str, List[Any]]) -> None:
    """A layer entry of the JSON config: ``quant_enable`` and its parameter blocks."""
    if (layer.get("quant_enable") or [True])[-1] is False:
        out.layer_configs.append({"layer_name": name, "data_type": "fp32"})
        return
    _block(out, {k: v for k, v in layer.items() if k != "quant_enable"}, ("layer_name", name), name)


def _block(out: AmctSettings, block: Dict[str, List[Any]], scope: Optional[Tuple[str, str]], where: str) -> None:
    """One calibration config: the whole model (``scope`` None) or one layer / op type."""
    prefix = f"{where}." if where else ""
    for field, values in block.items():
        params = values[-1] if values else {}
        if field not in _BLOCK_FIELDS or not isinstance(params, dict):
            out.ignore(prefix + field)
            continue
        here = prefix + field
        if field in ("ifmr_quantize", "hfmg_quantize"):
            _algorithm(out, here, field, scope)
            for key in params:
                out.ignore(f"{here}.{key}", _SEARCH)
            continue
        for key, vals in params.items():
            value = vals[-1] if vals else None
            path = f"{here}.{key}"
            if key == "channel_wise":
                _weights(out, path, scope, {"is_per_channel": bool(value)})
            elif key == "num_bits" and field == "weight_quant_params":
                if value not in (8, 16):
                    raise ConfigError(f"CONFIG_FILE {path} = {value!r}: the NPU's weights are 8 or 16 bits")
                _weights(out, path, scope, {"num_bits": value})
            elif key == "wts_algo":
                if value != "arq_quantize":
                    out.ignore(path, "ratelnn's weights are max abs per channel (ARQ)")
            elif key == "num_bits":
                _activation_bits(out, path, scope, value)
            elif key == "act_algo":
                if str(value).lower() not in _ALGORITHMS:
                    out.ignore(path, "no such algorithm here")
                else:
                    _algorithm(out, path, str(value).lower(), scope)
            elif key == "asymmetric":
                _offset(out, path, value)
            else:
                out.ignore(path, AMCT_KEYS.get(f"<block>.{field}.{key}", (None, ""))[1])


def _algorithm(out: AmctSettings, path: str, algo: str, scope: Optional[Tuple[str, str]]) -> None:
    if scope is not None:
        out.ignore(path, "one calibration method for the whole model here")
    else:
        out.settings["quantize_algorithm"] = _ALGORITHMS[algo]


def _weights(out: AmctSettings, path: str, scope: Optional[Tuple[str, str]], settings: Dict[str, Any]) -> None:
    if scope is not None:
        out.ignore(path, _PER_ROLE)
        return
    for role in _WEIGHT_ROLES:
        out.quant_cfg.setdefault(role, {}).update(settings)


def _activation_bits(out: AmctSettings, path: str, scope: Optional[Tuple[str, str]], bits: Any) -> None:
    if bits not in (8, 16):
        raise ConfigError(f"CONFIG_FILE {path} = {bits!r}: the NPU's activations are 8 or 16 bits")
    if bits == 8:
        return
    entry: Dict[str, Any] = ({"start_tensor_names": [DEFAULT_LAYER], "end_tensor_names": [DEFAULT_LAYER]}
                             if scope is None else {scope[0]: scope[1]})
    out.layer_configs.append({**entry, "data_type": "int16"})
