"""The tables ``ratelnn build`` prints after a build, with ``rich`` (docs/cli.md,
"Quantization tables"): the effective quantization config (Quant Config Table, Layer Config
Table) and the per-layer quantization table, with the precision analysis' cosine and SQNR
when it ran; and the JSON of that table, written beside the model."""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, Dict, List, Mapping, Optional

from rich.console import Console
from rich.table import Table

from ..analysis import Report
from ..calibration.data import for_input
from ..quantization.summary import LayerQuant

WIDE = 1000   # console width off a terminal: tables keep their natural width, names whole


def print_tables(*tables: Optional[Table]) -> None:
    """Print ``tables`` (None skipped) on stdout; off a terminal without wrapping or colour."""
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else WIDE, highlight=False)
    for table in tables:
        if table is not None:
            console.print(table)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def quant_config_table(config: Mapping[str, Any], data: Any) -> Table:
    """One row per input: shape, the calibration data, how it is read and normalised; the
    caption: calibration method and size, precision analysis and compiler check settings."""
    analysis = (f"{config['precision_analysis_method']} {config['precision_analysis_mode']}"
                if config.get("precision_analysis") else "off")
    check = (f"{config['compiler_check']} {config['compiler_check_mode']}" if config.get("compiler_check") else "off")
    table = Table(title="Quant Config Table",
                  caption=f"calibration {config['quantize_algorithm']}, "
                          f"{config.get('calibration_size') or 'all'} samples; precision analysis {analysis}; "
                          f"compiler check {check}")
    for column in ("Input", "Shape", "Dataset", "Data Format", "Src DType", "Tensor Format", "Layout", "Mean", "Std"):
        table.add_column(column)
    for name, shape in zip(config["input_nodes"], config["input_shapes"]):
        own = for_input(config, name)
        dataset = data.get(name, data.get(name.split(":")[0])) if isinstance(data, Mapping) else data
        table.add_row(name, _text(shape), _text(dataset), own.get("calibration_format") or "by file suffix",
                      own.get("src_dtype") or "float32", own.get("channel_order"), own.get("data_format") or "model's",
                      _text(own.get("mean")), _text(own.get("std")))
    return table


def layer_config_table(config: Mapping[str, Any]) -> Optional[Table]:
    """``layer_configs`` as written (after the spelling is resolved): what each entry selects
    and its precision; None without entries."""
    entries = config.get("layer_configs") or []
    if not entries:
        return None
    table = Table(title="Layer Config Table")
    table.add_column("Op Type / Layer name / Subgraph")
    table.add_column("Precision")
    for entry in entries:
        if "layer_name" in entry:
            what = f"layer {_text(entry['layer_name'])}"
        elif "op_type" in entry:
            what = f"op type {_text(entry['op_type'])}"
        else:
            what = f"subgraph {_text(entry.get('start_tensor_names'))} -> {_text(entry.get('end_tensor_names'))}"
        table.add_row(what, str(entry.get("data_type")))
    return table


def _measured(report: Optional[Report]) -> Dict[str, Any]:
    return {r.name: r for r in report.rows} if report is not None else {}


def quant_layer_table(rows: List[LayerQuant], report: Optional[Report]) -> Table:
    """Layer, op, output tensor and shape, dtype, scale, weights; with ``report`` its cosine
    and SQNR per layer (PerLayer: each layer fed the float inputs; and end to end)."""
    per_layer = report is not None and report.method == "PerLayer"
    title = "Quant Layer Table" if report is None else \
        f"Quant Precision Table [{report.method} {'Reference' if report.against == 'quant' else 'NPUBackend'}]"
    caption = None if report is None else f"float vs {report.against} on {report.num_samples} samples" + (
        "; Cosine, SQNR: each layer fed the float model's inputs; EndToEnd: the model's own values"
        if per_layer else "")
    table = Table(title=title, caption=caption)
    for column in ("Layer", "Op", "Output", "Shape", "DType", "Scale", "Weights"):
        table.add_column(column, overflow="fold")
    if report is not None:
        for column in ("Cosine", "SQNR dB") + (("EndToEnd cos", "EndToEnd SQNR") if per_layer else ()):
            table.add_column(column, justify="right")
    measured = _measured(report)
    for row in rows:
        cells = [row.layer, row.op, row.tensor, "x".join("?" if d is None else str(d) for d in row.shape),
                 row.dtype, "" if row.scale is None else f"{row.scale:.6g}", row.weight_text()]
        m = measured.get(row.layer)
        if report is not None and m is None:
            cells += [""] * (4 if per_layer else 2)
        elif report is not None:
            cos, sqnr = (m.per_layer_cosine, m.per_layer_sqnr_db) if per_layer else (m.cosine, m.sqnr_db)
            cells += [f"{cos:.6f}", f"{sqnr:.2f}"] + ([f"{m.cosine:.6f}", f"{m.sqnr_db:.2f}"] if per_layer else [])
        table.add_row(*cells)
    return table


def quant_table_json(config: Mapping[str, Any], rows: List[LayerQuant], report: Optional[Report]) -> bytes:
    """``<name>_quant_table.json``: the effective quantization settings, the layer configs
    and one entry per layer (:class:`LayerQuant` fields, plus ``cosine``, ``sqnr_db``,
    ``per_layer_cosine``, ``per_layer_sqnr_db`` when the precision analysis ran, else null)."""
    measured = _measured(report)
    layers = []
    for row in rows:
        m = measured.get(row.layer)
        layers.append({**dataclasses.asdict(row), **{k: getattr(m, k) if m is not None else None for k in
                                                    ("cosine", "sqnr_db", "per_layer_cosine", "per_layer_sqnr_db")}})
    settings = {k: config.get(k) for k in ("quantize_algorithm", "calibration_size", "precision_analysis",
                                           "precision_analysis_method", "precision_analysis_mode",
                                           "compiler_check", "compiler_check_mode")}
    analysis = None if report is None else {"method": report.method, "against": report.against,
                                            "num_samples": report.num_samples}
    return (json.dumps({"settings": settings, "layer_configs": list(config.get("layer_configs") or []),
                        "analysis": analysis, "layers": layers}, indent=1, default=str) + "\n").encode()
