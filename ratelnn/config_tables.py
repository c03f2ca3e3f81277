"""The Pulsar2 -> ratelnn and Ascend -> ratelnn tables of docs/config-forms.md, rendered from the
tables the resolvers read (``ratelnn/config_forms.py``, ``config_ascend.py``, ``amct_config.py``).

``python -m ratelnn.config_tables --markdown`` prints them; tests/api/test_config_forms.py checks
that the committed doc is up to date.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Tuple

from . import config_forms as forms
from .amct_config import AMCT_KEYS
from .config_ascend import ASCEND_KEYS
from .config_forms import IGNORED, MAPPED, REFUSED

Row = Tuple[str, str, str]   # (key as the other toolchain writes it, what ratelnn makes of it, status)

# keys resolve() handles in code rather than through a key table -> what they become
PULSAR2_TOP_KEYS = {
    "input_shapes": "`input_shapes`: `\"a:1x3x224x224;b:1x10\"` (also `,` between dims), a list of such "
                    "strings or `{a: [1, 3, 224, 224]}` -> one shape per `input_nodes` entry",
    "output_dir": "`output_dir` (also `ratelnn build --work_dir`)",
    "const_processors": "`const_processors` (docs/quantization.md \"Graph patches\")",
    "op_processors": "`op_processors` (docs/quantization.md \"Graph patches\")",
}
# extra words for table keys whose values are converted (the value maps come from the tables)
_VALUES: Dict[str, Mapping[str, Any]] = {
    "quant.calibration_method": forms.CALIBRATION_METHODS,
    "quant.conv_bias_data_type": forms.BIAS_TYPES,
    "input_processors[].tensor_layout": {v.lower(): v for v in forms.LAYOUTS},
    "input_processors[].tensor_format": forms.CHANNEL_ORDERS,
    "input_processors[].src_dtype": forms.SRC_DTYPES,
    "input_processors[].calibration_format": forms.CALIBRATION_FORMATS,
}
# words after the native key of a table row
_SUFFIX = {
    "quant.layer_configs": ": entries as in the `quant.layer_configs[]` rows",
    "quant.calibration_size": " (samples; `-1`: all)",
    "compiler.check": " (0, 1 or 2)",
    "quant.layer_configs[].layer_name": " (a node, one of its output tensors or a graph input; `DEFAULT`: "
                                        "the whole model)",
    "quant.layer_configs[].op_type": " (TensorFlow, MXNet, ONNX or IR spelling; docs/npu-supported-ops.md)",
}
# the whole text of rows whose key the resolver handles in code (or maps to another key)
_WHOLE = {
    "quant.input_configs": "per input, as the `input_processors[]` rows",
    "input_processors[].tensor_name": "the input the entry is for (`DEFAULT` or none: every input); its "
                                      "settings become `{input: value}`",
    "input_processors[].calibration_size": "`calibration_size` (every input's must agree)",
    "quant.layer_configs[].layer_names": "`layer_name` (a list)",
    "quant.layer_configs[].op_types": "`op_type` (a list)",
    "quant.layer_configs[].output_data_type": "`data_type`: the layer's data type (its output's); a "
                                              "`data_type` beside it is the layer's input precision, which "
                                              "ratelnn takes from the producing layer: 8-bit (`U8`, `S8`, the "
                                              "default) accepted, other values refused. `FP32` keeps the layer "
                                              "float (on the CPU, its input dequantized): the NPU writes integer "
                                              "tensors only",
    "quant.layer_configs[].weight_data_type": "`S8`: the NPU's int8 weights, nothing to set",
}


def _code(text: Any) -> str:
    return f"`{text}`"


def _mapping(table: Mapping[str, Any]) -> str:
    return ", ".join(f"{_code(k)} -> {_code(v)}" for k, v in table.items()) + " (any case)"


def pulsar2_rows() -> Iterator[Row]:
    """One row per Pulsar2 key: the keys of the resolver's tables, then the keys it ignores."""
    for key, text in PULSAR2_TOP_KEYS.items():
        yield _code(key), text, MAPPED
    sections = [("quant.", forms.QUANT_KEYS), ("compiler.", forms.COMPILER_KEYS),
                ("input_processors[].", forms.INPUT_KEYS), ("quant.layer_configs[].", forms.LAYER_KEYS)]
    for prefix, table in sections:
        for key, spec in table.items():
            name = prefix + key
            flat = key if table is forms.LAYER_KEYS else spec[0]
            yield _code(name), _described(name, flat), MAPPED
    yield ("`data_type`, `output_data_type` values",
           ", ".join(f"{_code(k.upper())} -> {_code(forms.DATA_TYPE_NAMES[k])}" for k in forms.PULSAR2_DATA_TYPES),
           MAPPED)
    for value, why in forms.REFUSED_DATA_TYPES.items():
        yield f"`data_type: {value.upper()}`", why, REFUSED
    for (key, value), why in forms.REFUSED_VALUES.items():
        yield f"`{key}: {value.upper()}`", why, REFUSED
    for key, why in forms.PULSAR2_IGNORED.items():
        yield _code(key), why, IGNORED
    yield "any other key", "named in the unknown-keys warning", IGNORED


def _described(name: str, flat: Any) -> str:
    """The ratelnn side of a table row: its flat key, value map and notes."""
    if name in _WHOLE or flat is None:
        return _WHOLE.get(name, "read by the resolver")
    text = _code(flat) + (": " + _mapping(_VALUES[name]) if name in _VALUES else "")
    return text + _SUFFIX.get(name, "")


def ascend_rows() -> Iterator[Row]:
    """One row per key of Ascend's calibration (quantizeConfigs), then per key of its CONFIG_FILE."""
    for key, (status, text) in ASCEND_KEYS.items():
        yield _code(key), text, status
    for key, (status, text) in AMCT_KEYS.items():
        yield _code(f"CONFIG_FILE {key}"), text, status
    yield "any other key of the CONFIG_FILE", "named in the warning", IGNORED


def markdown_table(rows: Iterator[Row], toolchain: str) -> str:
    lines: List[str] = [f"| {toolchain} | ratelnn | |", "|---|---|---|"]
    lines += [f"| {key} | {text.replace('|', '/')} | {status} |" for key, text, status in rows]
    return "\n".join(lines) + "\n"


def markdown_tables() -> str:
    """Both tables, as docs/config-forms.md holds them between its markers."""
    return ("### Pulsar2 -> ratelnn\n\n" + markdown_table(pulsar2_rows(), "Pulsar2 key")
            + "\n### Ascend -> ratelnn\n\n" + markdown_table(ascend_rows(), "Ascend key"))


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m ratelnn.config_tables --markdown")
    sys.stdout.write(markdown_tables())
