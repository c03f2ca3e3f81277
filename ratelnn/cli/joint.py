"""``ratelnn joint LIST.json``: calibrate several models, compile them jointly, write the compiled
models, ``scheme.json`` and ``timeline.png``."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Tuple

from ..config import QuantConfig, normalize
from .common import (EXIT_OK, UsageError, apply_overrides, check_model_path, detect_framework,
                     existing, frontend, load_config, load_model, one_line, parse_device_info, say, table,
                     write_effective_config)


def add_parser(sub, parents) -> None:
    p = sub.add_parser("joint", parents=parents, help="calibrate and compile several models jointly")
    p.add_argument("config_list", metavar="CONFIG_LIST.json",
                   help="list of {model, config, data, framework} (or {models, device_info, output_dir})")
    p.add_argument("--device-info", help="JSON {device_id: cores}; overrides the file's device_info")
    p.add_argument("--output-dir", help="where scheme.json and timeline.png go")
    p.add_argument("--frames", type=int, default=200, help="frames simulated by the comparison")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=joint)


def joint_entries(list_path: Path) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """(model entries, the file's other keys) of a joint list: a JSON list of entries or
    ``{"models": [...], "device_info": ..., "output_dir": ...}``."""
    try:
        raw = json.loads(list_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{list_path}: not valid JSON: {one_line(e)}") from None
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
        if not isinstance(entry, dict) or not {"model", "config"} <= set(entry):
            raise UsageError(f"{list_path}: entry {i} must be an object with model, config and data "
                             "(data may be left to the config's calibration_data)")
        bad = sorted(set(entry) - {"model", "config", "data", "framework", "set"})
        if bad:
            raise UsageError(f"{list_path}: entry {i} has unknown keys {bad}")
    return raw, extra


def joint_inputs(list_path: Path, entries: List[Dict[str, Any]]):
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
        if isinstance(entry["config"], dict):
            config = QuantConfig(framework, **entry["config"])
            apply_overrides(config, entry.get("set", []))
            config = normalize(config, framework)
        else:
            config = load_config(resolve(entry["config"]), framework, entry.get("set", []))
        source = resolve(entry["data"]) if entry.get("data") is not None else config["calibration_data"]
        if source is None:
            raise UsageError(f"{list_path}: model {entry['model']!r} has no data (an entry's data, or the "
                             "config's calibration_data / input_processors calibration_dataset)")
        for path in source.values() if isinstance(source, dict) else [source]:
            existing(str(path), "calibration data")
        data.append(source if isinstance(source, dict) else str(source))
        models.append(model)
        configs.append(config)
    if len(frameworks) > 1:
        raise UsageError(f"{list_path}: joint compilation needs models of one framework, got {sorted(frameworks)}")
    return frameworks.pop(), models, configs, data


def joint(args) -> int:
    """Calibrate each model, compile jointly, write models + scheme."""
    list_path = existing(args.config_list, "joint model list")
    entries, extra = joint_entries(list_path)
    framework, model_paths, configs, data = joint_inputs(list_path, entries)
    device_info = parse_device_info(args.device_info) or parse_device_info(extra.get("device_info"))
    out_dir = Path(args.output_dir) if args.output_dir else list_path.parent / extra.get("output_dir", ".")
    jc = frontend(framework).joint_converter([load_model(p, framework) for p in model_paths], configs, device_info)
    for conv, x in zip(jc.converters, data):
        say(f"calibrating {conv.graph.name} on {x}")
        conv.calibrate(x, progress=not args.no_progress)
    say("compiling jointly")
    compiled = jc.to_npu()
    for conv, model in zip(jc.converters, compiled):
        target = Path(conv.config["output_dir"])
        target.mkdir(parents=True, exist_ok=True)
        print(f"wrote {write_effective_config(target, conv.graph.name, conv.built_config)}")
        for path in frontend(framework).model_io.save_model(model, target / f"{conv.graph.name}_npu"):
            print(f"wrote {path}")
    out_dir.mkdir(parents=True, exist_ok=True)
    jc.scheme.to_json(str(out_dir / "scheme.json"))
    print(f"wrote {out_dir / 'scheme.json'}")
    print(f"wrote {jc.scheme.save_timeline(str(out_dir / 'timeline.png'))}")
    print(jc.scheme.summary())
    print(table(("strategy", "predicted fps", "simulated fps", "p50 latency ms", "p99 latency ms"),
                [(name, f"{r.scheme.predicted_fps:,.1f}", f"{r.fps:,.1f}", f"{r.simulation.latency_p50_s * 1e3:.4f}",
                  f"{r.simulation.latency_p99_s * 1e3:.4f}") for name, r in jc.compare(frames=args.frames).items()]))
    return EXIT_OK
