"""``ratelnn build CONFIG --model PATH --data PATH``: calibrate one model, write its cal/quant/npu
forms with the per-layer quantization table (and, with ``--analyze`` or the config's
``precision_analysis``, the precision report) as one set, print the NPU profile and the
quantization tables (docs/cli.md)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ..fileio import write_atomic
from . import tables
from .common import (EXIT_OK, FRAMEWORKS, UsageError, check_model_path, detect_framework,
                     existing, frontend, load_config, load_model, parse_device_info, say,
                     effective_config)

FORMS = ("cal", "quant", "npu")
ANALYZE_BATCHES = 2        # default batches of the per-layer precision table


def add_parser(sub, parents) -> None:
    p = sub.add_parser("build", parents=parents, help="calibrate one model and write its cal/quant/npu forms")
    p.add_argument("config", metavar="CONFIG", help="config file (.json, .yaml, .toml)")
    p.add_argument("--model", required=True, help="frozen GraphDef .pb, or MXNet checkpoint prefix")
    p.add_argument("--framework", choices=FRAMEWORKS, help="default: from the model path")
    p.add_argument("--data", help="calibration data: .npy (array or dict of arrays), .bin, or a tar of images "
                                  "(default: the config's calibration_data / input_processors datasets)")
    p.add_argument("--work_dir", "--work-dir", dest="work_dir", metavar="DIR",
                   help="where statistics and outputs go (sets output_dir)")
    p.add_argument("--output_name", "--output-name", dest="output_name", metavar="NAME",
                   help="name of the written models (sets model_name; a .pb/.json suffix is dropped)")
    p.add_argument("--set", action="append", default=[], metavar="KEY.SUB=VALUE",
                   help="override a config value (parsed as JSON when possible); repeatable")
    p.add_argument("--forms", default=",".join(FORMS), help="forms to write (default: cal,quant,npu)")
    p.add_argument("--device-info", help="JSON {device_id: cores}, e.g. '{\"0\": 2}'")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--fresh", action="store_true",
                   help="delete the calibration statistics already in output_dir first "
                        "(default: the new data is added to them)")
    p.add_argument("--analyze", action="store_true",
                   help="print the per-layer precision table (float vs npu, or quant without npu)")
    p.add_argument("--analyze-batches", type=int, default=ANALYZE_BATCHES, metavar="N",
                   help=f"batches the analysis runs (default {ANALYZE_BATCHES})")
    p.set_defaults(handler=build)


def parse_forms(text: str) -> List[str]:
    forms = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in forms if f not in FORMS]
    if unknown or not forms:
        raise UsageError(f"--forms takes a comma-separated subset of {','.join(FORMS)}, got {text!r}")
    return [f for f in FORMS if f in forms]


def write_forms(output_dir: Path, name: str, models: Dict[str, Any],
                save: Callable[[Any, Path], List[str]], files: Optional[Dict[str, bytes]] = None) -> List[str]:
    """Write the forms of one build as a set: every file is written into a staging
    directory inside ``output_dir`` first; then ``<name>_build.json`` (the set's manifest)
    is removed, the files are renamed into place, and a new manifest listing each file's
    SHA-256 is written last.  So a manifest present names files of one build only (a kill
    between renames leaves no manifest); :func:`check_build` verifies one.  ``files``: more
    files of the set, file name -> bytes (the effective config)."""
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-build-", dir=output_dir))
    try:
        staged = [Path(p) for form, model in models.items() for p in save(model, staging / f"{name}_{form}")]
        for file, data in (files or {}).items():
            write_atomic(staging / file, data)
            staged.append(staging / file)
        digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in staged}
        manifest = output_dir / f"{name}_build.json"
        if manifest.exists():
            manifest.unlink()
        for p in staged:
            os.replace(p, output_dir / p.name)
        write_atomic(manifest, (json.dumps({"build": uuid.uuid4().hex, "files": digests},
                                           indent=1) + "\n").encode())
        return [str(output_dir / p.name) for p in staged]
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_build(output_dir: Path, name: str) -> List[str]:
    """Problems of the build set ``<output_dir>/<name>_build.json`` ([] if whole and of one
    build): a missing manifest, missing files, or files whose SHA-256 differs."""
    manifest = Path(output_dir) / f"{name}_build.json"
    if not manifest.is_file():
        return [f"{manifest} is missing: the build did not complete"]
    problems = []
    for file, digest in json.loads(manifest.read_text())["files"].items():
        path = Path(output_dir) / file
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(f"{path} is not the file of this build")
    return problems


def build(args) -> int:
    """Calibrate, write the requested forms, profile, analyze."""
    forms = parse_forms(args.forms)
    framework = detect_framework(args.model, args.framework)
    check_model_path(args.model, framework)
    extra: Dict[str, Any] = {}
    if args.work_dir:
        extra["output_dir"] = args.work_dir
    if args.output_name:
        extra["model_name"] = re.sub(r"(\.pb|-symbol\.json|\.json)$", "", args.output_name)
    config = load_config(args.config, framework, args.set, extra)
    data = args.data if args.data is not None else config["calibration_data"]
    analysis = args.analyze or config["precision_analysis"]
    if data is None and (forms != ["cal"] or analysis):
        raise UsageError("--data (or the config's calibration_data / input_processors "
                         "calibration_dataset) is required to calibrate (only --forms cal can do without)")
    analysis_data = config["precision_analysis_data"] or data   # Pulsar2's quant.input_sample_dir
    for path, what in ((data, "calibration data"), (analysis_data if analysis else None, "precision analysis data")):
        for p in (path.values() if isinstance(path, dict) else [path] if path is not None else []):
            existing(p, what)
    device_info = parse_device_info(args.device_info)
    progress = not args.no_progress

    say(f"loading {framework} model {args.model}")
    conv = frontend(framework).converter(load_model(args.model, framework), config, device_info)
    output_dir = Path(conv.config["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    if data is not None:
        from ..calibration.manifest import start_fresh, statistics_files
        previous = statistics_files(output_dir)
        if previous and args.fresh:
            say(f"--fresh: deleting the calibration statistics in {output_dir / 'ratel_stats'}")
            start_fresh(output_dir)
        elif previous:
            say(f"reusing the calibration statistics in {output_dir / 'ratel_stats'} "
                f"({len(previous)} file(s)): the new data is added to them; --fresh starts over")
        conv.calibrate(data, progress=progress)
    models = {}
    for form in forms:
        say(f"making the {form} model")
        models[form] = getattr(conv, f"to_{form}")()
    name = conv.graph.name
    files = {f"{name}_effective_config.json": effective_config(conv.config)}  # docs/cli.md
    report = None
    if analysis:
        # --analyze: against the compiled model when it is built; precision_analysis alone:
        # precision_analysis_mode (Reference: the quantized model, NPUBackend: the compiled one)
        against = ("npu" if "npu" in forms else "quant") if args.analyze else None
        report = _analyze(conv, analysis_data, against, args.analyze_batches, progress)
        if report is not None:
            files[f"{name}_analysis_{report.against}.json"] = report.to_json().encode()
    layers = None
    if data is not None:
        from ..quantization.summary import layer_quants
        layers = layer_quants(conv.quantized_ir(), conv.config)
        files[f"{name}_quant_table.json"] = tables.quant_table_json(conv.config, layers, report)
    for path in write_forms(output_dir, name, models, frontend(framework).model_io.save_model, files):
        print(f"wrote {path}")
    if "npu" in models:
        from ..profile import compiled_batch_sizes, model_engines, profile, profile_batch_sizes
        if model_engines(models["npu"]):
            p = profile(models["npu"], conv.config["input_shapes"][0][0] or 1, device_info)
            print(f"NPU profile (batch {p.batch_size}): latency {p.latency_s * 1e3:.4f} ms, "
                  f"throughput {p.throughput:,.0f} inferences/s")
            print("\n".join("  " + p.engine_line(e) for e in p.engines))
            sizes = compiled_batch_sizes(models["npu"])
            if len(sizes) > 1:   # an engine set per node (docs/multi-batch.md)
                for b, q in profile_batch_sizes(models["npu"], device_info).items():
                    print(f"  compiled batch {b}: latency {q.latency_s * 1e3:.4f} ms, "
                          f"throughput {q.throughput:,.0f} inferences/s")
        else:
            print("the compiled model has no NPU engine")
    if getattr(conv, "compiler_check_report", None) is not None:
        print(conv.compiler_check_report.table())
    if layers is not None:
        tables.print_tables(tables.quant_config_table(conv.config, data), tables.layer_config_table(conv.config),
                            tables.quant_layer_table(layers, report))
    if report is not None:
        print("\n".join(report.summary_lines()))
    return EXIT_OK


def _analyze(conv, data: Any, against: Optional[str], batches: int, progress: bool):
    """The precision report (``ConvertImpl.analyze``) on the first ``batches`` batches; None,
    with a message on stderr, when the numpy evaluator cannot run the model."""
    from ..ir.evaluate import EvaluationError
    try:
        return conv.analyze(data, against=against, max_batches=batches, progress=progress)
    except EvaluationError as e:
        say(f"precision analysis skipped: {e}")
        return None
