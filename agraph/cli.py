"""``python -m agraph`` (docs/agraph.md, "Command line"):
``list | datasets | prepare KEY.. [--from SRC] | eval NAME --stage S [--weights FILE] | eval --all
| eval --imagenet | build NAME | check FOLDER | export ARCHIVE | import ARCHIVE``.  Errors print one line and exit 2; ``check`` exits 1 when
a rule is broken."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from ratelnn.errors import RatelError

DOCS = Path(__file__).resolve().parent.parent / "docs" / "agraph.md"
TABLE_BEGIN, TABLE_END = "<!-- agraph-table:begin -->", "<!-- agraph-table:end -->"


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title or None)
    for h in header:
        table.add_column(h)
    for r in rows:
        table.add_row(*[str(c) for c in r])
    Console(width=200).print(table)


def cmd_list(args) -> int:
    from . import registry

    entries = registry.list_models()
    if args.json:
        print(json.dumps([registry.describe(e) for e in entries], indent=1))
        return 0
    rows = [[e.name, e.framework, e.weights, e.dataset, "x".join(map(str, e.input_shapes()[0])),
             "x".join(map(str, e.input_shapes("test")[0])) if e.model.TEST_INPUT_SHAPES else "-",
             "zoo" if e.builtin else str(e.folder)] for e in entries]
    _print_table(["model", "framework", "weights", "dataset", "input", "test input", "folder"], rows)
    counts = registry.counts(entries)
    print(", ".join(f"{k}: {v}" for k, v in counts.items()) + f", total: {len(entries)}")
    return 0


def cmd_datasets(args) -> int:
    from . import datasets, paths

    print(f"data root: {paths.data_dir()}")
    rows = [[k, datasets.DATASETS[k].archive, status]
            for k, status in datasets.check_all().items()]
    _print_table(["dataset", "archive", "status"], rows)
    return 0


def cmd_prepare(args) -> int:
    from . import datasets

    from .imagenet import KEY as IMAGENET

    keys = sorted(datasets.DATASETS) if args.all else args.keys
    if not keys:
        raise SystemExit("prepare: name datasets or pass --all")
    for key in keys:
        if key == IMAGENET and args.all and args.source is None:
            print(f"{key}: skipped, built from your copy: python -m agraph prepare {key} --from DIR_OR_TAR")
            continue
        start = time.perf_counter()
        path = datasets.prepare(key, source=args.source if key == IMAGENET else None, labels=args.labels)
        print(f"{key}: {path} ({path.stat().st_size} bytes, sha256 {datasets.sha256_file(path)[:16]}..., "
              f"{time.perf_counter() - start:.1f} s)")
    return 0


def _stage_options(args) -> dict:
    return {"calibration_samples": args.calibration_samples, "batch_size": args.batch_size}


def _use_weights(args, names: Sequence[str]) -> None:
    """``--weights FILE``: the one named ImageNet-architecture model loads it."""
    from . import registry, weights

    if len(names) != 1:
        raise SystemExit("eval: --weights FILE needs exactly one model name")
    e = registry.entry(names[0])
    if getattr(e.model, "IMAGENET", None) is None:
        raise SystemExit(f"eval: {e.name} is not an ImageNet architecture; --weights applies to "
                         f"the models `python -m agraph eval --imagenet` lists")
    weights.use(e.name, args.weights, e.framework)


def cmd_eval(args) -> int:
    from . import flow, imagenet_report, registry

    every = args.all or args.imagenet
    stages = args.stage.split(",") if args.stage else (["fp32", "quant", "npu"] if every else ["fp32"])
    names = args.names or ([e.name for e in registry.list_models()] if every else [])
    if not names:
        raise SystemExit("eval: name models or pass --all / --imagenet")
    if args.weights:
        _use_weights(args, names)
    if args.imagenet:  # ImageNet architectures; random-weight ones are listed, not run
        entries = imagenet_report.imagenet_entries(registry.list_models(names))
        names = [e.name for e in entries if e.weights == "imagenet"]
    results, failures = [], {}
    for name in names:
        for stage in stages:
            try:
                m = flow.evaluate(name, stage, limit=args.limit, size=args.size, progress=not args.quiet,
                                  **_stage_options(args))
            except RatelError as e:
                if not every:
                    raise
                failures[name] = f"{type(e).__name__}: {e}"
                print(f"{name} {stage}: {failures[name]}", file=sys.stderr)
                break
            results.append(m)
            print(" | ".join(m.row()), flush=True)
    from .metrics import ModelMetrics

    _print_table(ModelMetrics.HEADER, [m.row() for m in results])
    if every:
        entries = registry.list_models(args.names)
        print("\nImageNet top-1 beside the published figures (docs/agraph.md, 'ImageNet accuracy'):\n")
        print(imagenet_report.markdown(imagenet_report.rows(entries, results)))
    if args.json:
        Path(args.json).write_text(json.dumps([m.to_dict() for m in results], indent=1) + "\n")
    if args.all and not args.no_docs:
        docs = Path(args.docs)
        write_docs_table(docs, names, results, failures, args)
        print(f"table written to {docs}")
    return 1 if failures else 0


def converter_label(entry) -> str:
    """The table's converter column: "defaults" (int8, auto_int16 promoting weak layers to
    int16) or the precision of the model's own ``CONVERTER_CONFIG`` (its published config)."""
    config = getattr(entry.model, "CONVERTER_CONFIG", None)
    if not config:
        return "defaults (int8)"
    types = sorted({lc["data_type"] for lc in config.get("layer_configs", []) if "data_type" in lc})
    return f"{'/'.join(types) or 'int8'} (CONVERTER_CONFIG)"


def docs_table(names: Sequence[str], results, failures, args) -> str:
    """The markdown table of ``eval --all``: one row per model, its primary metric per stage."""
    from . import registry

    by = {(m.model, m.stage): m for m in results}
    lines = ["| model | framework | weights | dataset | converter | metric | fp32 | quant | npu | npu ms | npu fps "
             "| samples |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        e = registry.entry(name)
        if name in failures:
            lines.append(f"| {name} | {e.framework} | {e.weights} | {e.dataset} | {converter_label(e)} | failed: "
                         f"{failures[name][:120].replace('|', '/')} | | | | | | |")
            continue
        fp32 = by.get((name, "fp32"))
        metric = fp32.primary[0] if fp32 else "-"
        cells = [f"{by[(name, s)].metrics.get(metric, float('nan')):.4f}" if (name, s) in by else "-"
                 for s in ("fp32", "quant", "npu")]
        npu = by.get((name, "npu"))
        figures = npu.npu if npu and npu.npu else {}
        latency, fps = figures.get("latency_ms", float("nan")), figures.get("throughput_fps", float("nan"))
        lines.append(f"| {name} | {e.framework} | {e.weights} | {e.dataset} | {converter_label(e)} | {metric} | "
                     f"{' | '.join(cells)} | "
                     f"{latency:.3f} | {fps:.0f} | {fp32.samples if fp32 else '-'} |")
    limit = "the whole dataset" if args.limit is None else f"the first {args.limit} samples of each dataset"
    lines.append("")
    command = "python -m agraph eval --all" + ("" if args.limit is None else f" --limit {args.limit}")
    lines.append(f"Regenerated by `{command}` "
                 f"on {time.strftime('%Y-%m-%d', time.gmtime())}: {limit}, size {args.size}, "
                 f"calibration on {args.calibration_samples} samples; npu ms / fps: cost-model latency of "
                 "one sample and throughput with all cores of the default device.")
    return "\n".join(lines)


def write_docs_table(docs: Path, names, results, failures, args) -> None:
    text = docs.read_text() if docs.is_file() else f"{TABLE_BEGIN}\n{TABLE_END}\n"
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise SystemExit(f"{docs} has no {TABLE_BEGIN} ... {TABLE_END} markers")
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    from ratelnn.fileio import write_atomic

    write_atomic(docs, (head + TABLE_BEGIN + "\n" + docs_table(names, results, failures, args) + "\n"
                        + TABLE_END + tail).encode())


def cmd_build(args) -> int:
    from . import flow

    for name in args.names:
        flow.get(name, "npu", size=args.size, progress=not args.quiet, force=args.force, **_stage_options(args))
        for stage in ("fp32", "quant", "npu"):  # all stored now: these only read
            model = flow.get(name, stage, size=args.size, **_stage_options(args))
            print(f"{name} {stage}: {', '.join(str(f) for f in model.files)}")
        figures = flow.npu_figures(model.graph)
        print(f"{name} npu: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in figures.items()))
    return 0


def cmd_check(args) -> int:
    from .check import check

    violations = check(args.folder, static=args.static)
    for v in violations:
        print(f"{args.folder}: {v}")
    if not violations:
        print(f"{args.folder}: ok, every rule holds" + (" (static checks only)" if args.static else ""))
    return 1 if violations else 0


def cmd_export(args) -> int:
    from .store import Store

    path = Store().export(args.archive, args.names)
    print(f"exported the store to {path} ({path.stat().st_size} bytes)")
    return 0


def cmd_import(args) -> int:
    from .store import Store

    for folder in Store().import_archive(args.archive):
        print(f"imported {folder}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agraph", description="AGraph model zoo (docs/agraph.md)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("list", help="the registered models, their framework and weight source")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_list)
    s = sub.add_parser("datasets", help="status of every registered dataset archive")
    s.set_defaults(func=cmd_datasets)
    s = sub.add_parser("prepare", help="build dataset archives from what exists offline")
    s.add_argument("keys", nargs="*")
    s.add_argument("--all", action="store_true")
    s.add_argument("--from", dest="source", help="imagenet: your copy of the validation images (folder or tar)")
    s.add_argument("--labels", help="imagenet: the label file of flat images (devkit ground truth, "
                                    "'filename label' text, LOC_val_solution.csv)")
    s.set_defaults(func=cmd_prepare)

    def stage_flags(s):
        s.add_argument("--size", choices=["full", "test"], default="full")
        s.add_argument("--calibration-samples", type=int, default=256)
        s.add_argument("--batch-size", type=int, default=32)
        s.add_argument("--quiet", action="store_true", help="no progress bars")

    s = sub.add_parser("eval", help="evaluate models at stages fp32/quant/npu")
    s.add_argument("names", nargs="*")
    s.add_argument("--all", action="store_true", help="every model, every stage; rewrites the docs table")
    s.add_argument("--imagenet", action="store_true",
                   help="the ImageNet architectures with pretrained weights, every stage, beside the published top-1")
    s.add_argument("--weights", help="the pretrained weights file of the one model named (Keras .h5, Gluon .params)")
    s.add_argument("--stage", help="fp32, quant, npu or a comma list (default fp32; all with --all)")
    s.add_argument("--limit", type=int, help="first N samples of each dataset")
    s.add_argument("--json", help="write the ModelMetrics list here")
    s.add_argument("--docs", default=str(DOCS), help="markdown file whose table --all rewrites")
    s.add_argument("--no-docs", action="store_true")
    stage_flags(s)
    s.set_defaults(func=cmd_eval)
    s = sub.add_parser("build", help="build fp32, quant and npu models into the store")
    s.add_argument("names", nargs="+")
    s.add_argument("--force", action="store_true", help="rebuild every stage even if stored")
    stage_flags(s)
    s.set_defaults(func=cmd_build)
    s = sub.add_parser("check", help="validate a model folder against the add-model rules")
    s.add_argument("folder")
    s.add_argument("--static", action="store_true", help="do not build or run the model")
    s.set_defaults(func=cmd_check)
    s = sub.add_parser("export", help="pack the store into one archive")
    s.add_argument("archive")
    s.add_argument("names", nargs="*")
    s.set_defaults(func=cmd_export)
    s = sub.add_parser("import", help="verify and unpack a store archive into the store")
    s.add_argument("archive")
    s.set_defaults(func=cmd_import)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except RatelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
