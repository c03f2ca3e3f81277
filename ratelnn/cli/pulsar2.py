"""The Pulsar2 form of ``ratelnn build`` (docs/cli.md): ``--input MODEL --config CFG --output_dir
DIR [--output_name N] [--work_dir DIR] [--model_type ONNX|QuantONNX|TF|MXNet]
[--input_shapes name:1x3x224x224;...] [--quant.KEY VALUE ...] [--compiler.KEY VALUE ...]``.

A Pulsar2 build config is enough: what the native config requires and the file leaves out
comes from the options and from the model (its inputs, its outputs, its input shapes with a
free batch dimension as 1).  The command line wins over the file.  Override values are read
as YAML scalars or flow values (``1``, ``true``, ``MSE``, ``[1, 4]``); several values after
one option make a list (``--compiler.static_batch_sizes 1 4``), none means true.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..config import normalize
from ..config_forms import ConfigError, did_you_mean, section_override, shape_entries
from .common import (BuildJob, UsageError, check_model_path, detect_framework, frontend, load_model,
                     model_name_option, one_line, read_config, say)

# --model_type -> framework; QuantONNX: a QDQ model compiled with its own scales
MODEL_TYPES = {"ONNX": "onnx", "QuantONNX": "onnx", "TF": "tensorflow", "MXNet": "mxnet"}
DEFAULT_TYPES = {"onnx": "ONNX", "tensorflow": "TF", "mxnet": "MXNet"}
# top-level keys of a Pulsar2 config that are options of the command (the options win)
COMMAND_KEYS = ("input", "model_type", "output_name", "work_dir")
_OVERRIDE = re.compile(r"^--([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:=(.*))?$", re.S)
_OPTION = re.compile(r"^--?[A-Za-z]")


def split_overrides(argv: Sequence[str]) -> Tuple[List[str], List[Tuple[str, List[str]]]]:
    """Take the ``--section.key value...`` options out of a ``build`` command line (argparse
    has no wildcard options): returns (the other arguments, [(``section.key``, [values])]),
    the values being every argument up to the next option (or the text after ``=``).  A
    command line of another command is returned unchanged."""
    argv = list(argv)
    command = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if command is None or argv[command] != "build":
        return argv, []
    rest, found = argv[:command + 1], []
    i = command + 1
    while i < len(argv):
        m = _OVERRIDE.match(argv[i])
        if not m:
            rest.append(argv[i])
            i += 1
            continue
        end = i + 1
        while m[2] is None and end < len(argv) and not _OPTION.match(argv[end]):
            end += 1
        found.append((m[1], [m[2]] if m[2] is not None else argv[i + 1:end]))
        i = end
    return rest, found


def override_value(dotted: str, texts: Sequence[str]) -> Any:
    """The value of ``--<dotted> texts...``: true for none, a YAML value for one, a list for
    several; UsageError naming the option for text YAML cannot read."""
    import yaml
    values = []
    for text in texts:
        try:
            values.append(yaml.safe_load(text))
        except yaml.YAMLError as e:
            raise UsageError(f"--{dotted}: cannot read the value {text!r}: {one_line(e)}") from None
    return True if not values else values[0] if len(values) == 1 else values


def apply_overrides(config: Dict[str, Any], overrides: Sequence[Tuple[str, List[str]]]) -> None:
    """Set each ``--section.key`` override in ``config``'s section; the flat key it resolves
    to is dropped from ``config`` (the command line wins over the file)."""
    for dotted, texts in overrides:
        try:
            value, flat_key = section_override(dotted, override_value(dotted, texts))
        except ConfigError as e:   # it names the override: say it is the option
            raise ConfigError(f"--{e}") from None
        section, _, key = dotted.partition(".")
        held = config.setdefault(section, {})
        if held is None:
            held = config[section] = {}
        if not isinstance(held, Mapping):
            raise ConfigError(f"--{dotted}: the config's {section} is a {type(held).__name__}, not a mapping")
        config[section] = {**held, key: value}
        config.pop(flat_key, None)


def model_type(given: Optional[str], model_path: str, where: str = "--model_type") -> str:
    """The model type ``given`` (``where``: the option or the config key) spelled as Pulsar2
    does (any case given), else the one the path tells (``.onnx``: ONNX, ``.pb``: TF, an
    MXNet checkpoint: MXNet)."""
    if given is None:
        return DEFAULT_TYPES[detect_framework(model_path, None)]
    found = {t.lower(): t for t in MODEL_TYPES}.get(str(given).lower())
    if found is None:
        raise UsageError(f"unknown {where} {given!r}{did_you_mean(str(given), MODEL_TYPES)}: "
                         f"ratelnn builds {', '.join(MODEL_TYPES)}")
    return found


def is_quantized(kind: str, given: Optional[str], model: Any, model_path: str) -> bool:
    """Whether the ONNX ``model`` is built as QuantONNX: said so (``kind``), or found to hold
    QuantizeLinear/DequantizeLinear nodes when no type was ``given`` (else: where the type was
    given, for the messages).  UsageError for a QuantONNX without them (a float model) and
    for an ONNX given explicitly that has them."""
    if MODEL_TYPES[kind] != "onnx":
        return False
    qdq = frontend("onnx").model_io.qdq_nodes(model)
    if kind == "QuantONNX" and not qdq:
        raise UsageError(f"{given} QuantONNX: {model_path} is a float model (no QuantizeLinear/"
                         "DequantizeLinear node); build it as ONNX with calibration data")
    if kind == "ONNX" and qdq and given:
        raise UsageError(f"{given} ONNX: {model_path} is a quantized (QDQ) model ({len(qdq)} QuantizeLinear/"
                         f"DequantizeLinear nodes, e.g. {qdq[0]!r}); build it as QuantONNX")
    if qdq and kind == "ONNX":
        say(f"{model_path} holds QuantizeLinear/DequantizeLinear nodes: building it as QuantONNX "
            "(compiled with its own scales, no calibration)")
    return bool(qdq)


def model_defaults(config: Dict[str, Any], info: Mapping[str, Any], shapes_option: Optional[str],
                   model_path: str) -> None:
    """Fill ``input_nodes``, ``output_nodes`` and ``input_shapes`` from the model's
    description ``info`` (``model_io.describe``) where ``config`` leaves them out; the
    config's and then the ``--input_shapes`` option's shapes (``"name:1x3x224x224;..."``)
    replace those of the inputs they name."""
    inputs = {i["name"]: i["shape"] for i in info["inputs"]}
    if not config.get("input_nodes"):
        config["input_nodes"] = list(inputs)
    if not config.get("output_nodes"):
        config["output_nodes"] = [o["name"] for o in info["outputs"]]
    nodes = [config["input_nodes"]] if isinstance(config["input_nodes"], str) else list(config["input_nodes"])
    shapes: Dict[str, Any] = {}
    for where, value in (("the config's input_shapes", config.get("input_shapes")), ("--input_shapes", shapes_option)):
        if value in (None, "", []):
            continue
        named = _named_shapes(where, value, nodes, model_path)
        if named is None:   # not a shape form (normalize names the problem)
            return
        shapes.update(named)
    for n in nodes:
        if n not in shapes:
            shapes[n] = _model_shape(n, inputs.get(n), model_path)
    config["input_shapes"] = [shapes[n] for n in nodes]


def _named_shapes(where: str, value: Any, nodes: List[str], model_path: str) -> Optional[Dict[str, Any]]:
    """``{input: shape}`` of an ``input_shapes`` value (text forms, or one list shape per
    input); None for anything else.  UsageError for malformed text, a count of unnamed
    shapes other than the inputs', or a name that is no input (naming it)."""
    try:
        entries = shape_entries(value)
    except ConfigError as e:
        raise UsageError(f"{where}: {e}") from None
    if entries is None:
        if not isinstance(value, (list, tuple)) or len(value) != len(nodes):
            return None
        entries = (list(value), {})
    positional, named = entries
    if positional and len(positional) != len(nodes):
        raise UsageError(f"{where} gives {len(positional)} unnamed shape(s) for the inputs {nodes}: "
                         "name them (name:1x3x224x224;...)")
    stray = [n for n in named if n not in nodes]
    if stray:
        raise UsageError(f"{where} names {stray}, which {'is' if len(stray) == 1 else 'are'} not an input "
                         f"of {model_path} (inputs: {', '.join(nodes)})")
    return dict(zip(nodes, positional)) if positional else named


def _model_shape(name: str, shape: Optional[List[Any]], model_path: str) -> List[int]:
    """The shape of input ``name`` as the model declares it, a free first (batch) dimension
    as 1; UsageError when the model leaves another dimension or the rank open."""
    if shape is None:
        raise UsageError(f"{model_path} does not declare the shape of input {name!r}: give it with "
                         f"--input_shapes {name}:1x3x224x224 (or the config's input_shapes)")
    dims = [1 if d is None and i == 0 else d for i, d in enumerate(shape)]
    if None in dims:
        raise UsageError(f"input {name!r} of {model_path} has the free dimension {dims.index(None)} "
                         f"({shape}): give its shape with --input_shapes {name}:" + "x".join(
                             str(d or "N") for d in dims))
    return dims


def job(args) -> BuildJob:
    """The build of the Pulsar2 form's options (see the module doc)."""
    raw = read_config(args.config_file) if args.config_file else {}
    command = {k: raw.pop(k) for k in COMMAND_KEYS if k in raw}
    model_path = args.input or command.get("input")
    if not model_path:
        raise UsageError("--input MODEL is required (or the config's input)")
    output_dir = args.output_dir or raw.get("output_dir")
    if not output_dir:
        raise UsageError("--output_dir DIR is required (or the config's output_dir)")
    given = args.model_type or command.get("model_type")
    where = None if given is None else "--model_type" if args.model_type else "the config's model_type"
    kind = model_type(given, str(model_path), where or "--model_type")
    framework = MODEL_TYPES[kind]
    check_model_path(str(model_path), framework)
    apply_overrides(raw, args.section_overrides)
    raw["output_dir"] = args.work_dir or command.get("work_dir") or output_dir
    name = args.output_name or command.get("output_name")
    if name:
        raw["model_name"] = model_name_option(name)
    model = load_model(str(model_path), framework)
    quantized = is_quantized(kind, where, model, str(model_path))
    info = frontend(framework).model_io.describe(model)
    model_defaults(raw, info, args.input_shapes, str(model_path))
    return BuildJob(framework, str(model_path), model, normalize(raw, framework), Path(output_dir), quantized)
