"""The ``ratelnn`` command line (DESIGN §10, docs/cli.md).

- ``ratelnn build CONFIG --model PATH --data PATH``: calibrate one model and write its
  calibration, quantized and compiled forms; print the NPU profile and, with ``--analyze``,
  the per-layer precision table (float vs quant/npu).
- ``ratelnn run MODEL --input X.npy``: run a compiled model (engines on the emulated NPU).
- ``ratelnn inspect MODEL``: engines, framework ops, inputs/outputs, sizes; or a scheme JSON.
- ``ratelnn joint LIST.json``: calibrate and compile several models jointly.

Exit codes: 0 ok, 2 usage or configuration errors (:class:`UsageError`, ConfigError,
DeviceConfigError: bad options, ``--set`` or config values, missing files), 1 any other
error (the model does not match its config, bad data contents...), 130 interrupted.
Errors print one line on stderr; ``--debug`` adds the traceback.  Every file is written atomically (a temporary file renamed into place).
TensorFlow and MXNet are imported only by the commands that need them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .config import ConfigError, QuantConfig, normalize, set_dotted
from .errors import RatelError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
FORMS = ("cal", "quant", "npu")
FRAMEWORKS = ("tensorflow", "mxnet")
ANALYZE_BATCHES = 2        # default batches of the per-layer precision table
# TensorFlow nodes that are no computation (left out of the op listing of ``inspect``)
_TF_STRUCTURAL_OPS = {"Const", "Placeholder", "NoOp"}
# role of the ratelnn framework ops that sit outside engines
_OP_ROLES = {"RatelQuant": "quantize", "ratel_quant": "quantize", "RatelDequant": "dequantize",
             "ratel_dequant": "dequantize", "RatelMinMax": "calibration", "ratel_minmax": "calibration"}
_ENGINE_OPS = ("RatelEngineOp", "ratel_engine_op")
_MX_DTYPES = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8", 6: "int64"}


class UsageError(RatelError, ValueError):
    """The command line is wrong: a missing file, a malformed ``--set`` or option value."""


def _usage_errors() -> tuple:
    from .npu.device import DeviceConfigError
    return (UsageError, ConfigError, DeviceConfigError)


# ================================================================== arguments
def _parse_value(text: str) -> Any:
    """A ``--set`` value: JSON when it parses (numbers, lists, true/null...), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_override(text: str) -> Tuple[str, Any]:
    """``"a.b=value"`` -> ``("a.b", parsed value)``; raises UsageError naming the problem."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UsageError(f"--set expects key.sub=value, got {text!r}")
    return key, _parse_value(value)


def apply_overrides(config: Dict[str, Any], overrides: Sequence[str]) -> None:
    """Apply ``--set key.sub=value`` overrides to ``config`` in place."""
    for text in overrides:
        key, value = parse_override(text)
        node: Any = config
        for part in key.split(".")[:-1]:
            node = node.get(part, {})
            if not isinstance(node, dict):
                raise UsageError(f"--set {key}: {part!r} holds a {type(node).__name__}, not a mapping")
        set_dotted(config, key, value)


def parse_device_info(text: Any) -> Dict[int, Any]:
    """``'{"0": 4}'`` or ``'{"0": [0, 1]}'`` (JSON text, or the parsed dict) -> ``{0: 4}`` /
    ``{0: [0, 1]}``; None -> ``{}``."""
    if text is None:
        return {}
    try:
        raw = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as e:
        raise UsageError(f"device_info must be JSON like '{{\"0\": 4}}': {e}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"device_info must be a JSON object {{device_id: cores}}, got {raw!r}")
    try:
        return {int(k): v for k, v in raw.items()}
    except ValueError:
        raise UsageError(f"device_info keys must be device ids (integers), got {sorted(raw)}") from None


def _existing(path: str, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} {path} does not exist")
    return p


def detect_framework(model_path: str, given: Optional[str]) -> str:
    """``given``, else ``tensorflow`` for ``.pb`` files, ``mxnet`` for checkpoint prefixes."""
    if given:
        return given
    if model_path.endswith(".pb"):
        return "tensorflow"
    if model_path.endswith("-symbol.json") or Path(f"{model_path}-symbol.json").exists():
        return "mxnet"
    raise UsageError(f"cannot tell the framework of {model_path}: give a .pb, an MXNet checkpoint "
                     "prefix (<prefix>-symbol.json + <prefix>-0000.params) or --framework")


def _mx_prefix(model_path: str) -> str:
    return model_path[:-len("-symbol.json")] if model_path.endswith("-symbol.json") else model_path


def check_model_path(model_path: str, framework: str) -> None:
    """UsageError if the model's file(s) do not exist."""
    if framework == "tensorflow":
        _existing(model_path, "model file")
    else:
        _existing(f"{_mx_prefix(model_path)}-symbol.json", "MXNet symbol file")


def load_config(path: str, framework: str, overrides: Sequence[str] = ()) -> QuantConfig:
    """Config file (JSON/YAML/TOML) plus ``--set`` overrides, validated (ConfigError)."""
    _existing(path, "config file")
    try:
        config = QuantConfig.from_file(path, framework)
    except ConfigError:
        raise
    except Exception as e:  # JSON/TOML decode errors are ValueErrors, YAML's are not
        raise UsageError(f"config file {path}: cannot parse it: {_one_line(e)}") from None
    apply_overrides(config, overrides)
    return normalize(config, framework)


# ================================================================== models on disk
def load_model(model_path: str, framework: str) -> Any:
    """A frozen GraphDef (TensorFlow ``.pb``) or an MXNet checkpoint prefix (``str``)."""
    check_model_path(model_path, framework)
    if framework == "mxnet":
        return _mx_prefix(model_path)
    from .errors import ModelError
    graph_pb2 = _tf_graph_pb2()
    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(Path(model_path).read_bytes())
    except Exception as e:  # protobuf's DecodeError
        raise ModelError(f"{model_path} is not a binary TensorFlow GraphDef: {_one_line(e)}") from None
    return graph_def


def _tf_graph_pb2():
    _quiet_frameworks()
    from tensorflow.core.framework import graph_pb2
    return graph_pb2


def read_mx_checkpoint(prefix: str) -> Tuple[str, Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """``(symbol JSON text, arg_params, aux_params)`` (numpy) of ``<prefix>-symbol.json`` +
    ``<prefix>-0000.params``.  A compiled model whose weights all live in its engines has
    no params (empty dicts)."""
    from .frontend.mxnet.model import read_checkpoint
    _existing(f"{prefix}-0000.params", "MXNet params file")
    sym_json, arg_params, aux_params = read_checkpoint(prefix)
    return json.dumps(sym_json), arg_params, aux_params


def load_mx_tuple(prefix: str) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """``(symbol, arg_params, aux_params)`` of an MXNet checkpoint (ratelnn ops loaded)."""
    from . import mx_init
    from .mxnet_compat import import_mxnet
    _quiet_frameworks()
    mx = import_mxnet()
    mx_init()
    text, arg_params, aux_params = read_mx_checkpoint(prefix)
    symbol = mx.sym.load_json(text)
    return (symbol, {k: mx.nd.array(v, dtype=v.dtype) for k, v in arg_params.items()},
            {k: mx.nd.array(v, dtype=v.dtype) for k, v in aux_params.items()})


def write_atomic(path: Path, write: Callable[[str], None]) -> Path:
    """Call ``write(temporary path)`` then rename the file to ``path``: a reader never sees a
    partial file, and a failure leaves neither ``path`` nor the temporary file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _write_bytes(path: Path, data: bytes) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
    return write_atomic(path, write)


def save_model(model: Any, framework: str, base: Path) -> List[Path]:
    """Write ``model`` as ``<base>.pb`` (TensorFlow) or ``<base>-symbol.json`` +
    ``<base>-0000.params`` (MXNet tuple); returns the paths written."""
    if framework == "tensorflow":
        return [_write_bytes(base.with_name(base.name + ".pb"), model.SerializeToString())]
    from .mxnet_compat import import_mxnet
    mx = import_mxnet()
    symbol, arg_params, aux_params = model
    params = {**{f"arg:{k}": v for k, v in arg_params.items()}, **{f"aux:{k}": v for k, v in aux_params.items()}}
    params_path = write_atomic(base.with_name(base.name + "-0000.params"), lambda tmp: mx.nd.save(tmp, params))
    return [_write_bytes(base.with_name(base.name + "-symbol.json"), symbol.tojson().encode()), params_path]


def _quiet_frameworks() -> None:
    """Silence TensorFlow's and MXNet's informational logs (the user's settings win)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")


def _converter_module(framework: str):
    _quiet_frameworks()
    if framework == "tensorflow":
        from .frontend import tensorflow as frontend
    else:
        from .frontend import mxnet as frontend
    return frontend


# ================================================================== model structure
def engine_summary(name: str, engine) -> Dict[str, Any]:
    """What ``inspect`` shows of one engine (sizes in bytes, cycles of one core at the
    compiled batch)."""
    from .proto import engine_pb2 as pb

    def tensors(specs):
        return [{"name": t.name, "dtype": str(t.dtype), "shape": list(t.shape), "scale": t.scale} for t in specs]

    p = engine.proto
    return {"name": name, "device_id": int(p.device_id), "core_ids": [int(c) for c in p.core_ids],
            "split_mode": pb.SplitMode.Name(p.split_mode), "batch_size": engine.batch_size,
            "instructions": len(p.instructions), "constants_bytes": sum(len(c.data) for c in p.constants),
            "sram_bytes": int(p.sram_bytes), "cycles": int(sum(i.cycles for i in p.instructions)),
            "format_version": ".".join(map(str, engine.format_version)),
            "inputs": tensors(engine.inputs), "outputs": tensors(engine.outputs)}


def _tf_structure(graph_def) -> Dict[str, Any]:
    from .profile import model_engines
    consumed = {ref.lstrip("^").split(":")[0] for nd in graph_def.node for ref in nd.input}
    inputs = [{"name": nd.name, "dtype": _tf_dtype(nd.attr["dtype"].type),
               "shape": None if nd.attr["shape"].shape.unknown_rank else
               [None if d.size < 0 else int(d.size) for d in nd.attr["shape"].shape.dim]}
              for nd in graph_def.node if nd.op == "Placeholder"]
    outputs = [{"name": nd.name} for nd in graph_def.node
               if nd.name not in consumed and nd.op not in _TF_STRUCTURAL_OPS]
    ops = [{"name": nd.name, "op": nd.op, "role": _OP_ROLES.get(nd.op, "float")} for nd in graph_def.node
           if nd.op not in _TF_STRUCTURAL_OPS and nd.op not in _ENGINE_OPS]
    constants = sum(nd.attr["value"].tensor.ByteSize() for nd in graph_def.node if nd.op == "Const")
    return {"inputs": inputs, "outputs": outputs, "ops": ops, "constants_bytes": constants,
            "engines": [engine_summary(n, e) for n, e in model_engines(graph_def)]}


def _tf_dtype(code: int) -> str:
    import tensorflow as tf
    return tf.dtypes.as_dtype(code).name


def _mx_engine(node: Dict[str, Any]) -> Tuple[str, Any]:
    """``(engine name, Engine)`` of a ``ratel_engine_op`` node of symbol JSON."""
    from .frontend.mxnet.attrs import decode_custom_attrs, node_attrs
    from .npu.engine import Engine
    decoded = decode_custom_attrs("Engine", node_attrs(node))
    name = decoded["engine_name"] or node["name"]
    return name, Engine.from_bytes(decoded["engine"], label=name)


def _mx_structure(prefix: str) -> Dict[str, Any]:
    from .frontend.mxnet.attrs import as_int, as_tuple, node_attrs
    from .frontend.mxnet.importer import tensor_name
    from .frontend.mxnet.model import load_model as load_mx_model
    model = load_mx_model(read_mx_checkpoint(prefix))
    params = set(model.arg_params) | set(model.aux_params)
    inputs, ops, engines = [], [], []
    for node in model.nodes:
        attrs = node_attrs(node)
        if node["op"] == "null":
            if node["name"] not in params:
                shape = attrs.get("__shape__")
                inputs.append({"name": node["name"], "dtype": _MX_DTYPES.get(as_int(attrs.get("__dtype__"), 0), "?"),
                               "shape": list(as_tuple(shape)) if shape else None})
        elif node["op"] in _ENGINE_OPS:
            engines.append(engine_summary(*_mx_engine(node)))
        else:
            ops.append({"name": node["name"], "op": node["op"], "role": _OP_ROLES.get(node["op"], "float")})
    outputs = [{"name": tensor_name(model, ref)} for ref in model.heads]
    constants = sum(v.nbytes for v in (*model.arg_params.values(), *model.aux_params.values()))
    return {"inputs": inputs, "outputs": outputs, "ops": ops, "constants_bytes": constants, "engines": engines}


def model_structure(model_path: str, framework: str, model: Any) -> Dict[str, Any]:
    """Inputs, outputs, engines and framework ops outside engines of the model read from
    ``model_path`` by :func:`load_model` (``model``)."""
    info = _tf_structure(model) if framework == "tensorflow" else _mx_structure(model)
    roles = {op["role"] for op in info["ops"]}
    kind = ("compiled" if info["engines"] else "calibration" if "calibration" in roles
            else "quantized" if "quantize" in roles else "float")
    return {"path": model_path, "framework": framework, "kind": kind, **info}


def _engines_of(model: Any, framework: str) -> List[Tuple[str, Any]]:
    """``(engine name, Engine)`` of a compiled model object (GraphDef or MXNet tuple)."""
    if framework == "tensorflow":
        from .profile import model_engines
        return model_engines(model)
    return [_mx_engine(node) for node in json.loads(model[0].tojson())["nodes"] if node["op"] in _ENGINE_OPS]


def predicted_profile(model: Any, framework: str, batch_size: int, device_info: Optional[Dict[int, Any]] = None):
    """Cost-model profile of a compiled model (``ratelnn.profile.profile``); None without engines."""
    from .npu.costmodel import profile_layers
    from .profile import engine_layers
    engines = _engines_of(model, framework)
    if not engines:
        return None
    if not device_info:
        device_id = int(engines[0][1].proto.device_id)
        from .npu.device import get_device
        device_info = {device_id: get_device(device_id).num_cores}
    return profile_layers({name: engine_layers(e) for name, e in engines}, batch_size, device_info)


# ================================================================== output helpers
def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _say(text: str) -> None:
    """Progress of a command, on stderr (stdout holds the results)."""
    print(text, file=sys.stderr, flush=True)


def _profile_summary(profile) -> str:
    lines = [f"NPU profile (batch {profile.batch_size}): latency {profile.latency_s * 1e3:.4f} ms, "
             f"throughput {profile.throughput:,.0f} inferences/s"]
    return "\n".join(lines + ["  " + profile.engine_line(e) for e in profile.engines])


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], right_from: int = 1) -> str:
    cells = [[str(c) for c in head]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i < right_from else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ================================================================== build
def _parse_forms(text: str) -> List[str]:
    forms = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in forms if f not in FORMS]
    if unknown or not forms:
        raise UsageError(f"--forms takes a comma-separated subset of {','.join(FORMS)}, got {text!r}")
    return [f for f in FORMS if f in forms]


def cmd_build(args) -> int:
    """``ratelnn build``: calibrate, write the requested forms, profile, analyze."""
    forms = _parse_forms(args.forms)
    framework = detect_framework(args.model, args.framework)
    check_model_path(args.model, framework)
    if args.data is None and (forms != ["cal"] or args.analyze):
        raise UsageError("--data is required to calibrate (only --forms cal can do without)")
    if args.data is not None:
        _existing(args.data, "calibration data")
    config = load_config(args.config, framework, args.set)
    device_info = parse_device_info(args.device_info)
    from .npu.device import resolve_device_info
    resolve_device_info(device_info)   # a bad device_info is a usage error, found before any work
    progress = not args.no_progress

    _say(f"loading {framework} model {args.model}")
    conv = _converter_module(framework).converter(load_model(args.model, framework), config, device_info)
    output_dir = Path(conv.config["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    if args.data is not None:
        conv.calibrate(args.data, progress=progress)
    models = {}
    for form in forms:
        _say(f"making the {form} model")
        models[form] = getattr(conv, f"to_{form}")()
    for form, model in models.items():
        for path in save_model(model, framework, output_dir / f"{conv.graph.name}_{form}"):
            print(f"wrote {path}")
    if "npu" in models:
        batch = conv.config["input_shapes"][0][0] or 1
        profile = predicted_profile(models["npu"], framework, batch, device_info)
        print(_profile_summary(profile) if profile else "the compiled model has no NPU engine")
    if args.analyze:
        against = "npu" if "npu" in forms else "quant"
        report = conv.analyze(args.data, against=against, max_batches=args.analyze_batches, progress=progress)
        print(report.table())
        path = output_dir / f"{conv.graph.name}_analysis_{against}.json"
        _write_bytes(path, report.to_json().encode())
        print(f"wrote {path}")
    return EXIT_OK


# ================================================================== run
def _load_input(path: str) -> Any:
    """An array, a ``.npz`` archive, or the dict of arrays of a pickled ``np.save(path, {...})``
    (unpickled: trusted files only); archives and dicts give ``{input name: array}``."""
    _existing(path, "input file")
    try:
        value = np.load(path, allow_pickle=False)
        if isinstance(value, np.lib.npyio.NpzFile):
            with value:
                return {k: value[k] for k in value.files}
        return value
    except ValueError as e:
        if "allow_pickle" not in str(e):
            raise UsageError(f"input file {path}: not a .npy array: {_one_line(e)}") from None
    value = np.load(path, allow_pickle=True)
    if value.shape == () and isinstance(value.item(), dict):
        return {str(k): np.asarray(v) for k, v in value.item().items()}
    raise UsageError(f"input file {path}: holds objects; expected an array or a dict of arrays")


def _feeds(data: Any, inputs: List[Dict[str, Any]], names: Optional[List[str]]) -> Dict[str, np.ndarray]:
    """Feed dict for the model inputs ``inputs`` (from :func:`model_structure`); ``names``
    (``--input-node``) may also name other tensors to feed."""
    dtypes = {i["name"]: i["dtype"] for i in inputs}
    if isinstance(data, dict):
        feeds = data
    else:
        names = names or [i["name"] for i in inputs]
        if len(names) != 1:
            raise UsageError(f"the model has inputs {names}: give --input-node, or a .npy dict of "
                             "input name -> array")
        feeds = {names[0]: data}
    unknown = [k for k in feeds if k.split(":")[0] not in dtypes and k not in (names or [])]
    if unknown:
        raise UsageError(f"unknown input(s) {unknown}; the model's inputs are {sorted(dtypes)}")
    out = {}
    for k, v in feeds.items():
        dtype = dtypes.get(k.split(":")[0], "")
        v = np.asarray(v)
        # float inputs are converted to the input's float type (np.save keeps float64)
        out[k] = v.astype(dtype) if v.dtype.kind == "f" and dtype.startswith("float") else v
    return out


def cmd_run(args) -> int:
    """``ratelnn run``: run a model on numpy input, save/print outputs and device time."""
    framework = detect_framework(args.model, args.framework)
    stored = load_model(args.model, framework)
    structure = model_structure(args.model, framework, stored)
    data = _load_input(args.input)
    feeds = _feeds(data, structure["inputs"], args.input_node)
    fetches = args.output_node or [o["name"] for o in structure["outputs"]]
    from .npu import device_time, reset_device_time
    from .runners import run_model
    if framework == "tensorflow":
        from . import tf_init
        tf_init()
        model = stored
    else:
        model = load_mx_tuple(stored)
    reset_device_time()
    fixed = {i["shape"][0] for i in structure["inputs"] if i["shape"] and i["shape"][0] is not None}
    batch = fixed.pop() if len(fixed) == 1 else None
    outputs = run_in_batches(lambda chunk: run_model(framework, model, chunk, fetches), feeds, batch)
    spent = device_time()
    for name, value in zip(fetches, outputs):
        print(f"output {name}: shape {list(value.shape)} {value.dtype}, min {value.min():.6g}, "
              f"max {value.max():.6g}, mean {value.mean():.6g}")
        if args.output is None:
            print(np.array2string(value, threshold=40, precision=5))
    if args.output is not None:
        result = outputs[0] if len(outputs) == 1 else dict(zip(fetches, outputs))
        _write_bytes(Path(args.output), _npy_bytes(result))
        print(f"wrote {args.output}")
    if spent.runs:
        print(f"device time (recorded): {spent.seconds * 1e3:.4f} ms for {spent.runs} engine runs, "
              f"{spent.samples} samples, {spent.cycles:,.0f} cycles")
    batch = batch or len(next(iter(feeds.values())))
    profile = predicted_profile(model, framework, batch) if structure["engines"] else None
    if profile is not None:
        print(f"device time (cost model): {profile.latency_s * 1e3:.4f} ms per batch of {batch}, "
              f"throughput {profile.throughput:,.0f} inferences/s")
    else:
        print("no NPU engine in this model: everything ran in the framework")
    return EXIT_OK


def run_in_batches(run: Callable[[Dict[str, np.ndarray]], List[np.ndarray]], feeds: Dict[str, np.ndarray],
                   batch: Optional[int]) -> List[np.ndarray]:
    """``run(feeds)``, or, for a model whose inputs fix the batch to ``batch`` rows, ``run``
    on consecutive slices of ``batch`` rows (the last one completed by repeating its own
    rows) with the real rows of each output concatenated."""
    rows = {len(v) for v in feeds.values()}
    if len(rows) != 1:
        raise UsageError(f"the inputs have different numbers of rows: { {k: len(v) for k, v in feeds.items()} }")
    n = rows.pop()
    if batch is None or n == batch:
        return run(feeds)
    parts: List[List[np.ndarray]] = []
    for start in range(0, n, batch):
        real = min(batch, n - start)
        take = start + np.arange(batch) % real
        outputs = run({k: v[take] for k, v in feeds.items()})
        parts.append([o[:real] for o in outputs])
    return [np.concatenate(chunks) for chunks in zip(*parts)]


def _npy_bytes(value: Any) -> bytes:
    import io
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=isinstance(value, dict))
    return buffer.getvalue()


# ================================================================== inspect
def _scheme_if_any(path: str):
    """The execution scheme in ``path`` if it is a scheme JSON file, else None."""
    if not path.endswith(".json") or path.endswith("-symbol.json"):
        return None
    from .joint.scheme import SCHEME_FORMAT, Scheme
    try:
        data = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not valid JSON: {_one_line(e)}") from None
    if isinstance(data, dict) and data.get("format") == SCHEME_FORMAT:
        return Scheme.from_dict(data)
    return None


def _structure_text(info: Dict[str, Any]) -> str:
    lines = [f"{info['path']}: {info['framework']} {info['kind']} model, "
             f"{info['constants_bytes']:,} bytes of framework constants"]
    lines.append("inputs:")
    lines += [f"  {i['name']}  {i['dtype']}  {i['shape']}" for i in info["inputs"]]
    lines.append("outputs:")
    lines += [f"  {o['name']}" for o in info["outputs"]]
    engines = info["engines"]
    lines.append(f"engines ({len(engines)}):")
    if engines:
        lines.append("  " + _table(
            ("name", "device", "cores", "split", "batch", "instructions", "constants B", "SRAM plan B", "cycles"),
            [(e["name"], e["device_id"], ",".join(map(str, e["core_ids"])), e["split_mode"], e["batch_size"],
              e["instructions"], f"{e['constants_bytes']:,}", f"{e['sram_bytes']:,}", f"{e['cycles']:,}")
             for e in engines]).replace("\n", "\n  "))
        for e in engines:
            for kind in ("inputs", "outputs"):
                for t in e[kind]:
                    lines.append(f"  {e['name']} {kind[:-1]} {t['name']}: {t['dtype']} {t['shape']} "
                                 f"scale {t['scale']:.6g}")
    by_op: Dict[Tuple[str, str], List[str]] = {}
    for op in info["ops"]:
        by_op.setdefault((op["role"], op["op"]), []).append(op["name"])
    lines.append(f"framework ops outside engines ({len(info['ops'])}):")
    for (role, op), names in sorted(by_op.items()):
        shown = ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "")
        lines.append(f"  {role:<11} {op} x{len(names)}: {shown}")
    return "\n".join(lines)


def cmd_inspect(args) -> int:
    """``ratelnn inspect``: summary of a model or of an execution scheme JSON file."""
    scheme = _scheme_if_any(args.model) if os.path.isfile(args.model) else None
    if scheme is not None:
        print(json.dumps(scheme.to_dict(), indent=1) if args.json else scheme.summary())
        return EXIT_OK
    framework = detect_framework(args.model, args.framework)
    info = model_structure(args.model, framework, load_model(args.model, framework))
    print(json.dumps(info, indent=1) if args.json else _structure_text(info))
    return EXIT_OK


# ================================================================== joint
def _joint_entries(list_path: Path) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """(model entries, the file's other keys) of a joint list: a JSON list of entries or
    ``{"models": [...], "device_info": ..., "output_dir": ...}``."""
    try:
        raw = json.loads(list_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{list_path}: not valid JSON: {_one_line(e)}") from None
    extra: Dict[str, Any] = {}
    if isinstance(raw, dict):
        extra = {k: v for k, v in raw.items() if k != "models"}
        raw = raw.get("models")
    if not isinstance(raw, list) or not raw:
        raise UsageError(f"{list_path}: expected a non-empty list of {{model, config, data, framework}} "
                         "entries (or an object with a 'models' list)")
    unknown = sorted(set(extra) - {"device_info", "output_dir"})
    if unknown:
        raise UsageError(f"{list_path}: unknown keys {unknown} (allowed: models, device_info, output_dir)")
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not {"model", "config", "data"} <= set(entry):
            raise UsageError(f"{list_path}: entry {i} must be an object with model, config and data")
        bad = sorted(set(entry) - {"model", "config", "data", "framework", "set"})
        if bad:
            raise UsageError(f"{list_path}: entry {i} has unknown keys {bad}")
    return raw, extra


def _joint_inputs(list_path: Path, entries: List[Dict[str, Any]]):
    """(framework, model paths, configs, data paths), paths relative to the list file."""
    base = list_path.parent

    def resolve(p: str) -> str:
        return str(p if os.path.isabs(p) else base / p)

    models, configs, data, frameworks = [], [], [], set()
    for entry in entries:
        model = resolve(entry["model"])
        framework = detect_framework(model, entry.get("framework"))
        check_model_path(model, framework)
        frameworks.add(framework)
        data.append(str(_existing(resolve(entry["data"]), "calibration data")))
        if isinstance(entry["config"], dict):
            config = QuantConfig(framework, **entry["config"])
            apply_overrides(config, entry.get("set", []))
            config = normalize(config, framework)
        else:
            config = load_config(resolve(entry["config"]), framework, entry.get("set", []))
        models.append(model)
        configs.append(config)
    if len(frameworks) > 1:
        raise UsageError(f"{list_path}: joint compilation needs models of one framework, got {sorted(frameworks)}")
    return frameworks.pop(), models, configs, data


def _compare_text(results: Dict[str, Any]) -> str:
    rows = [(name, f"{r.scheme.predicted_fps:,.1f}", f"{r.fps:,.1f}", f"{r.simulation.latency_p50_s * 1e3:.4f}",
             f"{r.simulation.latency_p99_s * 1e3:.4f}") for name, r in results.items()]
    return _table(("strategy", "predicted fps", "simulated fps", "p50 latency ms", "p99 latency ms"), rows)


def cmd_joint(args) -> int:
    """``ratelnn joint``: calibrate each model, compile jointly, write models + scheme."""
    list_path = _existing(args.config_list, "joint model list")
    entries, extra = _joint_entries(list_path)
    framework, model_paths, configs, data = _joint_inputs(list_path, entries)
    device_info = parse_device_info(args.device_info) or parse_device_info(extra.get("device_info"))
    out_dir = Path(args.output_dir) if args.output_dir else list_path.parent / extra.get("output_dir", ".")
    from .npu.device import resolve_device_info
    resolve_device_info(device_info)   # a bad device_info is a usage error, found before any work
    frontend = _converter_module(framework)
    jc = frontend.joint_converter([load_model(p, framework) for p in model_paths], configs, device_info)
    for conv, x in zip(jc.converters, data):
        _say(f"calibrating {conv.graph.name} on {x}")
        conv.calibrate(x, progress=not args.no_progress)
    _say("compiling jointly")
    compiled = jc.to_npu()
    for conv, model in zip(jc.converters, compiled):
        target = Path(conv.config["output_dir"])
        target.mkdir(parents=True, exist_ok=True)
        for path in save_model(model, framework, target / f"{conv.graph.name}_npu"):
            print(f"wrote {path}")
    out_dir.mkdir(parents=True, exist_ok=True)
    jc.scheme.to_json(str(out_dir / "scheme.json"))
    print(f"wrote {out_dir / 'scheme.json'}")
    print(f"wrote {jc.scheme.save_timeline(str(out_dir / 'timeline.png'))}")
    print(jc.scheme.summary())
    print(_compare_text(jc.compare(frames=args.frames)))
    return EXIT_OK


# ================================================================== parser and main
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    common = argparse.ArgumentParser(add_help=False)   # --debug after the command too
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the traceback of an error")
    parser = argparse.ArgumentParser(prog="ratelnn",
                                     description="Quantize and compile TensorFlow/MXNet models for the emulated NPU.")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("build", parents=[common], help="calibrate one model and write its cal/quant/npu forms")
    p.add_argument("config", metavar="CONFIG", help="config file (.json, .yaml, .toml)")
    p.add_argument("--model", required=True, help="frozen GraphDef .pb, or MXNet checkpoint prefix")
    p.add_argument("--framework", choices=FRAMEWORKS, help="default: from the model path")
    p.add_argument("--data", help="calibration data: .npy (array or dict of arrays), .bin, or a tar of images")
    p.add_argument("--set", action="append", default=[], metavar="KEY.SUB=VALUE",
                   help="override a config value (parsed as JSON when possible); repeatable")
    p.add_argument("--forms", default=",".join(FORMS), help="forms to write (default: cal,quant,npu)")
    p.add_argument("--device-info", help="JSON {device_id: cores}, e.g. '{\"0\": 2}'")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--analyze", action="store_true",
                   help="print the per-layer precision table (float vs npu, or quant without npu)")
    p.add_argument("--analyze-batches", type=int, default=ANALYZE_BATCHES, metavar="N",
                   help=f"batches the analysis runs (default {ANALYZE_BATCHES})")
    p.set_defaults(handler=cmd_build)

    p = sub.add_parser("run", parents=[common], help="run a (compiled) model on numpy input")
    p.add_argument("model", metavar="MODEL", help=".pb, or MXNet checkpoint prefix")
    p.add_argument("--input", required=True, help=".npy array (one input) or dict of arrays")
    p.add_argument("--output", help="save outputs here (.npy; a dict of arrays for several outputs)")
    p.add_argument("--framework", choices=FRAMEWORKS)
    p.add_argument("--input-node", action="append", metavar="NAME", help="input to feed (default: the model's)")
    p.add_argument("--output-node", action="append", metavar="NAME", help="output to fetch; repeatable")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("inspect", parents=[common], help="engines, ops, sizes of a model; or a scheme JSON")
    p.add_argument("model", metavar="MODEL", help=".pb, MXNet prefix, or scheme .json")
    p.add_argument("--framework", choices=FRAMEWORKS)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_inspect)

    p = sub.add_parser("joint", parents=[common], help="calibrate and compile several models jointly")
    p.add_argument("config_list", metavar="CONFIG_LIST.json",
                   help="list of {model, config, data, framework} (or {models, device_info, output_dir})")
    p.add_argument("--device-info", help="JSON {device_id: cores}; overrides the file's device_info")
    p.add_argument("--output-dir", help="where scheme.json and timeline.png go")
    p.add_argument("--frames", type=int, default=200, help="frames simulated by the comparison")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=cmd_joint)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:   # --help, or argparse's usage errors (code 2)
        return int(e.code or 0) if isinstance(e.code, int) or e.code is None else EXIT_USAGE
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print(f"ratelnn {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:   # stdout closed early (``ratelnn inspect ... | head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as e:   # noqa: BLE001 - every error becomes one line and an exit code
        code = EXIT_USAGE if isinstance(e, _usage_errors()) else EXIT_ERROR
        if args.debug:
            traceback.print_exc()
        label = "" if isinstance(e, RatelError) else f"{type(e).__name__}: "
        print(f"ratelnn {args.command}: error: {label}{_one_line(e)}", file=sys.stderr)
        return code

