"""The ImageNet table of ``python -m agraph eval --imagenet`` / ``--all``: measured top-1 of
the zoo's ImageNet architectures at fp32 / quant / npu beside the published FP32 top-1 and
published int8 post-training-quantization drops (docs/agraph.md, "ImageNet accuracy").
Random-weight models get no number beside the published one."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from .metrics import ModelMetrics

NOT_COMPARABLE = "random weights: not comparable"
HEADER = ["model", "weights", "fp32 top-1 %", "quant top-1 %", "npu top-1 %", "npu - fp32",
          "published fp32 %", "published int8 drops", "samples"]


def imagenet_entries(entries) -> list:
    """The entries of ImageNet architectures (model.py declares ``IMAGENET``)."""
    return [e for e in entries if getattr(e.model, "IMAGENET", None) is not None]


def _drops(spec) -> str:
    return "; ".join(f"{d:+.2f} ({source})" for d, source in spec.int8_drops) or "-"


def rows(entries, results: Sequence[ModelMetrics]) -> List[List[str]]:
    """One row per ImageNet-architecture entry: its measured top-1 (percent) per stage from
    ``results`` (ImageNet ones only), the published figures beside them."""
    by: Dict[Tuple[str, str], ModelMetrics] = {(m.model, m.stage): m for m in results if "top1" in m.metrics}
    table = []
    for e in imagenet_entries(entries):
        spec = e.model.IMAGENET
        published = [f"{spec.top1:g} ({spec.source})", _drops(spec)]
        if e.weights != "imagenet":
            table.append([e.name, "random", NOT_COMPARABLE, NOT_COMPARABLE, NOT_COMPARABLE, "-", *published, "-"])
            continue
        top1 = {s: by[(e.name, s)].metrics["top1"] * 100 for s in ("fp32", "quant", "npu") if (e.name, s) in by}
        cells = [f"{top1[s]:.2f}" if s in top1 else "-" for s in ("fp32", "quant", "npu")]
        drop = f"{top1['npu'] - top1['fp32']:+.2f}" if {"fp32", "npu"} <= set(top1) else "-"
        samples = next((str(by[(e.name, s)].samples) for s in ("fp32", "quant", "npu") if (e.name, s) in by), "-")
        table.append([e.name, f"imagenet ({e.weights_file.name})", *cells, drop, *published, samples])
    return table


def markdown(table: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in table]
    return "\n".join(lines)
