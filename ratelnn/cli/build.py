"""``ratelnn build``: calibrate one model, write its cal/quant/npu forms with the per-layer
quantization table (and, with ``--analyze`` or the config's ``precision_analysis``, the precision
report) as one set, print the NPU profile and the quantization tables.

Two forms of the command line (docs/cli.md): the native ``CONFIG --model PATH [--set KEY=VALUE]``
and Pulsar2's ``--input MODEL --config CFG --output_dir DIR [--quant.KEY VALUE ...]``
(:mod:`.pulsar2`); they do not mix.  A quantized ONNX (QDQ) model is compiled with its own
scales: no calibration, its forms are the model as given and the compiled one."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ..fileio import write_atomic
from . import pulsar2, tables
from .common import (EXIT_OK, FRAMEWORKS, BuildJob, UsageError, check_model_path, detect_framework, existing,
                     form_writer, frontend, load_config, load_model, model_name_option, parse_device_info, say,
                     effective_config)

FORMS = ("cal", "quant", "npu")
QUANTIZED_FORMS = ("quant", "npu")   # a QDQ model's: the model as given, the compiled model
ANALYZE_BATCHES = 2        # default batches of the per-layer precision table
USAGE = """ratelnn build CONFIG --model PATH [--set KEY.SUB=VALUE ...] [options]
       ratelnn build --input MODEL [--config CFG] --output_dir DIR [--model_type TYPE]
                     [--input_shapes NAME:1x3x224x224[;...]] [--quant.KEY VALUE ...] [--compiler.KEY VALUE ...]
                     [options]"""
EPILOG = """Pulsar2 form: --quant.KEY VALUE / --compiler.KEY VALUE override a key of the config's quant or
compiler section; VALUE is read as YAML (1, true, MSE, [1,4]); several values make a list, none
means true."""


def add_parser(sub, parents) -> None:
    p = sub.add_parser("build", parents=parents, usage=USAGE, epilog=EPILOG,
                       help="calibrate one model and write its cal/quant/npu forms")
    p.add_argument("config", metavar="CONFIG", nargs="?", help="config file (.json, .yaml, .toml); native form")
    p.add_argument("--model", help="frozen GraphDef .pb, .onnx, or MXNet checkpoint prefix; native form")
    p.add_argument("--framework", choices=FRAMEWORKS, help="default: from the model path; native form")
    p.add_argument("--set", action="append", default=[], metavar="KEY.SUB=VALUE",
                   help="override a config value (parsed as JSON when possible); repeatable; native form")
    p.add_argument("--input", metavar="MODEL", help="the model (.onnx, .pb, MXNet prefix); Pulsar2 form")
    p.add_argument("--config", dest="config_file", metavar="CFG",
                   help="Pulsar2 (or native) config file (.json, .yaml, .toml); Pulsar2 form")
    p.add_argument("--output_dir", "--output-dir", dest="output_dir", metavar="DIR",
                   help="where the forms go; Pulsar2 form")
    p.add_argument("--model_type", "--model-type", dest="model_type", metavar="TYPE",
                   help=f"{' | '.join(pulsar2.MODEL_TYPES)} (default: from the model file; a .onnx holding "
                        "QuantizeLinear/DequantizeLinear is QuantONNX); Pulsar2 form")
    p.add_argument("--input_shapes", "--input-shapes", dest="input_shapes", metavar="NAME:DIMS[;...]",
                   help="input shapes, e.g. images:1x3x224x224 (default: the config's, else the model's "
                        "with a free batch as 1); Pulsar2 form")
    p.add_argument("--data", help="calibration data: .npy (array or dict of arrays), .bin, or a tar of images "
                                  "(default: the config's calibration_data / input_processors datasets)")
    p.add_argument("--work_dir", "--work-dir", dest="work_dir", metavar="DIR",
                   help="where calibration statistics go (sets output_dir; Pulsar2 form: default --output_dir)")
    p.add_argument("--output_name", "--output-name", dest="output_name", metavar="NAME",
                   help="name of the written models (sets model_name; a .pb/.json/.onnx suffix is dropped)")
    p.add_argument("--forms", help="forms to write (default: cal,quant,npu; a QDQ model: quant,npu)")
    p.add_argument("--device-info", help="JSON {device_id: cores}, e.g. '{\"0\": 2}'")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--fresh", action="store_true",
                   help="delete the calibration statistics already in output_dir first "
                        "(default: the new data is added to them)")
    p.add_argument("--analyze", action="store_true",
                   help="print the per-layer precision table (float vs npu, or quant without npu)")
    p.add_argument("--analyze-batches", type=int, default=ANALYZE_BATCHES, metavar="N",
                   help=f"batches the analysis runs (default {ANALYZE_BATCHES})")
    p.set_defaults(handler=build, section_overrides=[])


def form_of(args) -> str:
    """``"pulsar2"`` or ``"native"``: the form the options belong to; UsageError for a mix."""
    pulsar2_given = [o for o, v in (("--input", args.input), ("--config", args.config_file),
                                    ("--output_dir", args.output_dir), ("--model_type", args.model_type),
                                    ("--input_shapes", args.input_shapes)) if v is not None]
    pulsar2_given += [f"--{dotted}" for dotted, _ in args.section_overrides]
    native_given = [o for o, v in (("CONFIG", args.config), ("--model", args.model),
                                   ("--framework", args.framework)) if v is not None] + ["--set"] * bool(args.set)
    if pulsar2_given and native_given:
        raise UsageError(f"{native_given[0]} (native form: CONFIG --model PATH) and {pulsar2_given[0]} (Pulsar2 "
                         "form: --input MODEL --config CFG --output_dir DIR) do not mix: use one form")
    if pulsar2_given:
        return "pulsar2"
    if args.config is None:
        raise UsageError("give CONFIG --model PATH, or --input MODEL --config CFG --output_dir DIR")
    if args.model is None:
        raise UsageError("--model PATH is required with CONFIG")
    return "native"


def native_job(args) -> BuildJob:
    """The build of the native form's options."""
    framework = detect_framework(args.model, args.framework)
    check_model_path(args.model, framework)
    extra: Dict[str, Any] = {}
    if args.work_dir:
        extra["output_dir"] = args.work_dir
    if args.output_name:
        extra["model_name"] = model_name_option(args.output_name)
    config = load_config(args.config, framework, args.set, extra)
    model = load_model(args.model, framework)
    quantized = framework == "onnx" and pulsar2.is_quantized("ONNX", None, model, args.model)
    return BuildJob(framework, args.model, model, config, Path(config["output_dir"]), quantized)


def parse_forms(text: Optional[str], quantized: bool = False) -> List[str]:
    """``--forms`` (None: every form of the model) as a list in build order; a quantized
    (QDQ) model has no calibration form."""
    allowed = QUANTIZED_FORMS if quantized else FORMS
    if text is None:
        return list(allowed)
    forms = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in forms if f not in FORMS]
    if unknown or not forms:
        raise UsageError(f"--forms takes a comma-separated subset of {','.join(allowed)}, got {text!r}")
    if any(f not in allowed for f in forms):
        raise UsageError(f"--forms {text}: a quantized (QDQ) model is compiled with its own scales and has no "
                         f"calibration form; its forms are {','.join(allowed)}")
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
    """Calibrate (not a QDQ model), write the requested forms with the quantization table (and
    the precision report when asked), profile, print the tables."""
    job = pulsar2.job(args) if form_of(args) == "pulsar2" else native_job(args)
    forms = parse_forms(args.forms, job.quantized)
    data = None if job.quantized else args.data if args.data is not None else job.config["calibration_data"]
    if job.quantized and args.analyze:
        raise UsageError("--analyze compares with the float model, which a quantized (QDQ) model build has not")
    if job.quantized and args.data is not None:
        say("the quantized (QDQ) model is compiled with its own scales: --data is not read")
    analysis = args.analyze or (job.config["precision_analysis"] and not job.quantized)
    if job.config["precision_analysis"] and job.quantized:
        say("precision_analysis: skipped, it compares with the float model, which a quantized (QDQ) model "
            "build has not")
    if data is None and not job.quantized and (forms != ["cal"] or analysis):
        raise UsageError("--data (or the config's calibration_data / input_processors "
                         "calibration_dataset) is required to calibrate (only --forms cal can do without)")
    analysis_data = job.config["precision_analysis_data"] or data   # Pulsar2's quant.input_sample_dir
    for path, what in ((data, "calibration data"), (analysis_data if analysis else None, "precision analysis data")):
        for p in (path.values() if isinstance(path, dict) else [path] if path is not None else []):
            existing(p, what)
    device_info = parse_device_info(args.device_info)
    progress = not args.no_progress

    say(f"loading {job.framework} model {job.model_path}")
    conv = frontend(job.framework).converter(job.model, job.config, device_info)
    work_dir, output_dir = Path(conv.config["output_dir"]), job.output_dir
    for folder in (work_dir, output_dir):
        folder.mkdir(parents=True, exist_ok=True)
    if data is not None:
        calibrate(conv, data, work_dir, args.fresh, progress)
    models = {}
    for form in forms:
        say(f"making the {form} model")
        if job.quantized:   # the QDQ model is the quantized form; its own scales compile it
            models[form] = job.model if form == "quant" else conv.to_npu(job.model)
        else:
            models[form] = getattr(conv, f"to_{form}")()
    name = conv.graph.name
    files = {f"{name}_effective_config.json": effective_config(conv.built_config)}  # docs/cli.md
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
        layers = layer_quants(conv.quantized_ir(), conv.built_config)
        files[f"{name}_quant_table.json"] = tables.quant_table_json(conv.built_config, layers, report)
    for path in write_forms(output_dir, name, models, form_writer(job.framework), files):
        print(f"wrote {path}")
    if "npu" in models:
        print_profile(models["npu"], conv.config, device_info)
    if getattr(conv, "compiler_check_report", None) is not None:
        print(conv.compiler_check_report.table())
    if layers is not None:
        tables.print_tables(tables.quant_config_table(conv.built_config, data), tables.layer_config_table(conv.built_config),
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


def calibrate(conv, data: Any, work_dir: Path, fresh: bool, progress: bool) -> None:
    """Run ``conv``'s calibration model on ``data``, adding to the statistics already in
    ``work_dir`` (``fresh``: deleting them first)."""
    from ..calibration.manifest import start_fresh, statistics_files
    previous = statistics_files(work_dir)
    if previous and fresh:
        say(f"--fresh: deleting the calibration statistics in {work_dir / 'ratel_stats'}")
        start_fresh(work_dir)
    elif previous:
        say(f"reusing the calibration statistics in {work_dir / 'ratel_stats'} "
            f"({len(previous)} file(s)): the new data is added to them; --fresh starts over")
    conv.calibrate(data, progress=progress)


def print_profile(model: Any, config: Dict[str, Any], device_info: Dict[int, Any]) -> None:
    """The cost model's profile of the compiled ``model`` at the config's batch size, per
    compiled batch size for an engine set per node (docs/multi-batch.md)."""
    from ..profile import compiled_batch_sizes, model_engines, profile, profile_batch_sizes
    if not model_engines(model):
        print("the compiled model has no NPU engine")
        return
    p = profile(model, config["input_shapes"][0][0] or 1, device_info)
    print(f"NPU profile (batch {p.batch_size}): latency {p.latency_s * 1e3:.4f} ms, "
          f"throughput {p.throughput:,.0f} inferences/s")
    print("\n".join("  " + p.engine_line(e) for e in p.engines))
    if len(compiled_batch_sizes(model)) > 1:
        for b, q in profile_batch_sizes(model, device_info).items():
            print(f"  compiled batch {b}: latency {q.latency_s * 1e3:.4f} ms, "
                  f"throughput {q.throughput:,.0f} inferences/s")
