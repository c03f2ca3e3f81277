"""``ratelnn inspect MODEL``: a model's engines, framework ops, inputs/outputs and sizes; or
the summary of an execution scheme JSON."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Tuple

from .common import (EXIT_OK, FRAMEWORKS, UsageError, detect_framework, frontend, load_model, model_structure,
                     one_line, table)


def add_parser(sub, parents) -> None:
    p = sub.add_parser("inspect", parents=parents, help="engines, ops, sizes of a model; or a scheme JSON")
    p.add_argument("model", metavar="MODEL", help=".pb, .onnx, MXNet prefix, or scheme .json")
    p.add_argument("--framework", choices=FRAMEWORKS)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=inspect)


def scheme_if_any(path: str):
    """The execution scheme in ``path`` if it is a scheme JSON file, else None."""
    if not path.endswith(".json") or path.endswith("-symbol.json"):
        return None
    from ..joint.scheme import SCHEME_FORMAT, Scheme
    try:
        data = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not valid JSON: {one_line(e)}") from None
    if isinstance(data, dict) and data.get("format") == SCHEME_FORMAT:
        return Scheme.from_dict(data)
    return None


def structure_text(info: Dict[str, Any]) -> str:
    lines = [f"{info['path']}: {info['framework']} {info['kind']} model, "
             f"{info['constants_bytes']:,} bytes of framework constants"]
    lines.append("inputs:")
    lines += [f"  {i['name']}  {i['dtype']}  {i['shape']}" for i in info["inputs"]]
    lines.append("outputs:")
    lines += [f"  {o['name']}" for o in info["outputs"]]
    engines = info["engines"]
    lines.append(f"engines ({len(engines)}):")
    if engines:
        lines.append("  " + table(
            ("name", "device", "cores", "split", "batch", "instructions", "constants B", "SRAM plan B", "cycles"),
            [(e["name"], e["device_id"], ",".join(map(str, e["core_ids"])), e["split_mode"], e["batch_size"],
              e["instructions"], f"{e['constants_bytes']:,}", f"{e['sram_bytes']:,}", f"{e['cycles']:,}")
             for e in engines]).replace("\n", "\n  "))
        for e in engines:
            for kind in ("inputs", "outputs"):
                for t in e[kind]:
                    lines.append(f"  {e['name']} {kind[:-1]} {t['name']}: {t['dtype']} {t['shape']} "
                                 f"scale {t['scale']:.6g}")
    if info.get("batch_profile"):   # an engine set per node (docs/multi-batch.md)
        lines.append("compiled batch sizes (predicted by the cost model):")
        lines.append("  " + table(("batch", "latency ms", "throughput /s", "SRAM plan B (per engine)"),
                                  [(b["batch_size"], f"{b['latency_ms']:.4f}", f"{b['throughput']:,.0f}",
                                    ", ".join(f"{e['name']}: {s['sram_bytes']:,}" for e in engines
                                              for s in e["batch_sizes"] if s["batch_size"] == b["batch_size"]))
                                   for b in info["batch_profile"]]).replace("\n", "\n  "))
    by_op: Dict[Tuple[str, str], List[str]] = {}
    for op in info["ops"]:
        by_op.setdefault((op["role"], op["op"]), []).append(op["name"])
    lines.append(f"framework ops outside engines ({len(info['ops'])}):")
    for (role, op), names in sorted(by_op.items()):
        shown = ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "")
        lines.append(f"  {role:<11} {op} x{len(names)}: {shown}")
    return "\n".join(lines)


def inspect(args) -> int:
    """Summary of a model or of an execution scheme JSON file."""
    scheme = scheme_if_any(args.model) if os.path.isfile(args.model) else None
    if scheme is not None:
        print(json.dumps(scheme.to_dict(), indent=1) if args.json else scheme.summary())
        return EXIT_OK
    framework = detect_framework(args.model, args.framework)
    model = load_model(args.model, framework)
    info = model_structure(args.model, framework, model)
    if any(len(e["batch_sizes"]) > 1 for e in info["engines"]):
        from ..profile import profile_batch_sizes
        if framework == "mxnet":
            model = frontend(framework).model_io.load_checkpoint(model)
        info["batch_profile"] = [{"batch_size": b, "latency_ms": p.latency_s * 1e3, "throughput": p.throughput}
                                 for b, p in profile_batch_sizes(model).items()]
    print(json.dumps(info, indent=1) if args.json else structure_text(info))
    return EXIT_OK
