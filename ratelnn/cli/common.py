"""What the commands share: option values (``--set``, ``device_info``, paths, config files),
models on disk through the frontends' model I/O, and the output helpers."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

from ..config import STRING_KEYS, ConfigError, QuantConfig, normalize, set_dotted
from ..errors import RatelError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
FRAMEWORKS = ("tensorflow", "mxnet", "onnx")


class UsageError(RatelError, ValueError):
    """The command line is wrong: a missing file, a malformed ``--set`` or option value."""


# ================================================================== option values
def parse_override(text: str) -> Tuple[str, Any]:
    """``"a.b=value"`` -> ``("a.b", value parsed as JSON when it parses, else the string)``;
    raises UsageError naming the problem."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UsageError(f"--set expects key.sub=value, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def apply_overrides(config: Dict[str, Any], overrides: Sequence[str]) -> None:
    """Apply ``--set key.sub=value`` overrides to ``config`` in place."""
    for text in overrides:
        key, value = parse_override(text)
        if key in STRING_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = text.partition("=")[2].strip()  # a folder named 12345
        node: Any = config
        for part in key.split(".")[:-1]:
            node = node.get(part, {})
            if not isinstance(node, dict):
                raise UsageError(f"--set {key}: {part!r} holds a {type(node).__name__}, not a mapping")
        set_dotted(config, key, value)


def parse_device_info(text: Any) -> Dict[int, Any]:
    """``'{"0": 4}'`` or ``'{"0": [0, 1]}'`` (JSON text, or the parsed dict) -> ``{0: 4}`` /
    ``{0: [0, 1]}``; None -> ``{}``.  Checked against the devices (DeviceConfigError), so that a
    bad device_info is a usage error found before any work."""
    from ..npu.device import resolve_device_info
    if text is None:
        return {}
    try:
        raw = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as e:
        raise UsageError(f"device_info must be JSON like '{{\"0\": 4}}': {e}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"device_info must be a JSON object {{device_id: cores}}, got {raw!r}")
    try:
        device_info = {int(k): v for k, v in raw.items()}
    except ValueError:
        raise UsageError(f"device_info keys must be device ids (integers), got {sorted(raw)}") from None
    resolve_device_info(device_info)
    return device_info


def existing(path: str, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} {path} does not exist")
    return p


def detect_framework(model_path: str, given: Optional[str]) -> str:
    """``given``, else ``tensorflow`` for ``.pb`` files, ``onnx`` for ``.onnx`` files,
    ``mxnet`` for checkpoint prefixes."""
    if given:
        return given
    if model_path.endswith(".pb"):
        return "tensorflow"
    if model_path.endswith(".onnx"):
        return "onnx"
    if model_path.endswith("-symbol.json") or Path(f"{model_path}-symbol.json").exists():
        return "mxnet"
    raise UsageError(f"cannot tell the framework of {model_path}: give a .pb, a .onnx, an MXNet checkpoint "
                     "prefix (<prefix>-symbol.json + <prefix>-0000.params) or --framework")


def mx_prefix(model_path: str) -> str:
    return model_path[:-len("-symbol.json")] if model_path.endswith("-symbol.json") else model_path


def check_model_path(model_path: str, framework: str) -> None:
    """UsageError if the model's file(s) do not exist."""
    if framework != "mxnet":
        existing(model_path, "model file")
    else:
        existing(f"{mx_prefix(model_path)}-symbol.json", "MXNet symbol file")


def read_config(path: str, framework: str = "tensorflow") -> QuantConfig:
    """The config file ``path`` (JSON/YAML/TOML) as written (defaults filled, not resolved);
    UsageError for a missing file or one that does not parse."""
    existing(path, "config file")
    try:
        return QuantConfig.from_file(path, framework)
    except ConfigError:
        raise
    except Exception as e:  # JSON/TOML decode errors are ValueErrors, YAML's are not
        raise UsageError(f"config file {path}: cannot parse it: {one_line(e)}") from None


def load_config(path: str, framework: str, overrides: Sequence[str] = (),
                extra: Optional[Dict[str, Any]] = None) -> QuantConfig:
    """Config file (JSON/YAML/TOML) plus ``--set`` overrides, then the ``extra`` values of
    options (``--work_dir``...), resolved to the flat keys and validated (ConfigError)."""
    config = read_config(path, framework)
    apply_overrides(config, overrides)
    config.update(extra or {})
    return normalize(config, framework)


def model_name_option(text: str) -> str:
    """``--output_name`` as the config's ``model_name``: a model file suffix (``.pb``,
    ``-symbol.json``, ``.json``, ``.onnx``, ``.axmodel``) dropped."""
    return re.sub(r"(\.pb|-symbol\.json|\.json|\.onnx|\.axmodel)$", "", text)


class BuildJob(NamedTuple):
    """What ``build`` works on, from either form of its command line: the model (as
    ``load_model`` reads it), its resolved config, where the forms go, and whether it is a
    quantized (QDQ) model compiled with its own scales."""
    framework: str
    model_path: str
    model: Any
    config: QuantConfig
    output_dir: Path
    quantized: bool


def effective_config(config: Dict[str, Any]) -> bytes:
    """The JSON of ``<name>_effective_config.json``: the flat config a build used, every
    default filled in, whatever form it was written in (docs/cli.md)."""
    return (json.dumps(dict(config), indent=1, sort_keys=True, default=str) + "\n").encode()


def write_effective_config(output_dir: Path, name: str, config: Dict[str, Any]) -> Path:
    """Write :func:`effective_config` as ``<output_dir>/<name>_effective_config.json``."""
    from ..fileio import write_atomic
    path = Path(output_dir) / f"{name}_effective_config.json"
    write_atomic(path, effective_config(config))
    return path


# ================================================================== models on disk
def frontend(framework: str):
    """The frontend package of ``framework`` (its ``converter``, ``model_io``...), the
    frameworks' informational logs silenced (the user's settings win)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
    if framework == "tensorflow":
        from ..frontend import tensorflow as module
    elif framework == "onnx":
        from ..frontend import onnx as module
    else:
        from ..frontend import mxnet as module
    return module


def load_model(model_path: str, framework: str) -> Any:
    """A frozen GraphDef (TensorFlow ``.pb``), an ONNX ``ModelProto`` (its external data read)
    or an MXNet checkpoint prefix (``str``)."""
    check_model_path(model_path, framework)
    if framework == "mxnet":
        return mx_prefix(model_path)
    if framework == "onnx":
        return frontend(framework).model_io.load_model(model_path)[0]
    return frontend(framework).model_io.read_graphdef(model_path)


def form_writer(framework: str):
    """``save(model, base) -> [paths]``: how ``build`` writes a form of ``framework``
    (``<base>.pb``, ``<base>.onnx``, ``<base>-symbol.json`` + ``<base>-0000.params``)."""
    model_io = frontend(framework).model_io
    return model_io.write_model if framework == "onnx" else model_io.save_model


def model_structure(model_path: str, framework: str, model: Any) -> Dict[str, Any]:
    """Inputs, outputs, engines (:func:`engine_summary`) and framework ops outside engines of
    the model read from ``model_path`` by :func:`load_model` (``model``)."""
    from ..npu.batching import expand_engine_set
    from ..npu.engine import Engine
    if framework == "mxnet":
        existing(f"{model}-0000.params", "MXNet params file")
    info = frontend(framework).model_io.describe(model)
    sets = dict(info.pop("engine_sets"))
    info["engines"] = [engine_summary(n, Engine.from_bytes(data, label=n)) for n, data in info["engines"]]
    for e in info["engines"]:   # the engine set (docs/multi-batch.md): one row per compiled batch size
        engines = [Engine.from_bytes(b, label=e["name"]) for b in sets.get(e["name"], [])]
        e["batch_sizes"] = [engine_summary(e["name"], x) for x in expand_engine_set(engines)] or [e]
        e["batch_sizes"] = [{"batch_size": x["batch_size"], "sram_bytes": x["sram_bytes"], "cycles": x["cycles"]}
                            for x in e["batch_sizes"]]
    roles = {op["role"] for op in info["ops"]}
    kind = ("compiled" if info["engines"] else "calibration" if "calibration" in roles
            else "quantized" if "quantize" in roles else "float")
    return {"path": model_path, "framework": framework, "kind": kind, **info}


def engine_summary(name: str, engine) -> Dict[str, Any]:
    """What ``inspect`` shows of one engine (sizes in bytes, cycles of one core at the
    compiled batch)."""
    from ..proto import engine_pb2 as pb

    def tensors(specs):
        return [{"name": t.name, "dtype": str(t.dtype), "shape": list(t.shape), "scale": t.scale} for t in specs]

    p = engine.proto
    return {"name": name, "device_id": int(p.device_id), "core_ids": [int(c) for c in p.core_ids],
            "split_mode": pb.SplitMode.Name(p.split_mode), "batch_size": engine.batch_size,
            "instructions": len(p.instructions), "constants_bytes": sum(len(c.data) for c in p.constants),
            "sram_bytes": int(p.sram_bytes), "cycles": int(sum(i.cycles for i in p.instructions)),
            "format_version": ".".join(map(str, engine.format_version)),
            "inputs": tensors(engine.inputs), "outputs": tensors(engine.outputs)}


# ================================================================== output
def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def say(text: str) -> None:
    """Progress of a command, on stderr (stdout holds the results)."""
    print(text, file=sys.stderr, flush=True)


def table(head: Sequence[str], rows: Sequence[Sequence[Any]], right_from: int = 1) -> str:
    cells = [[str(c) for c in head]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i < right_from else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
