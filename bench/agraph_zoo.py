"""The AGraph zoo folders with shipped or random weights (``agraph/models/<name>/``) through
FP32 -> quant -> npu at full input size, each evaluated by its own eval.py at every stage.

Calibration: the left-right mirrored samples of the model's dataset (all of them, one
batch); the metric is measured on the samples themselves. Shipped-weight models (MTCNN,
fer) are scored on lfw_face_nonface, random-weight ones by agreement with FP32 on
scikit-image's 15 sample photos (``agraph.stages.measure``; datasets prepared by
``agraph.datasets`` into a temporary data root). Prints a rich table and writes its section
of docs/agraph.md ("Zoo table").

    python bench/agraph_zoo.py [--only NAME ...] [--size full|test] [--no-write]
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _report import cpu_name, write_section  # noqa: E402

MODELS = ["mtcnn_pnet_tf", "mtcnn_rnet_tf", "mtcnn_onet_tf", "fer_emotion_tf",
          "mtcnn_pnet_mx", "mtcnn_rnet_mx", "mtcnn_onet_mx", "fer_emotion_mx",
          "mobilenet_v2_keras", "resnet50_keras", "densenet121_keras", "mobilenet_v3_small_keras",
          "efficientnet_b0_keras", "mobilenet_v2_gluon", "resnet18_v1_gluon", "squeezenet_gluon"]


def run_one(name: str, size: str, workdir: Path, datasets: dict, model_config: bool = True) -> dict:
    from agraph import datasets as zoo_datasets
    from agraph.stages import measure
    model = importlib.import_module(f"agraph.models.{name}.model")
    evaluation = importlib.import_module(f"agraph.models.{name}.eval")
    shapes = model.TEST_INPUT_SHAPES if size == "test" else None
    if model.DATASET not in datasets:
        zoo_datasets.prepare(model.DATASET, workdir / "data")
        datasets[model.DATASET] = zoo_datasets.get(model.DATASET, workdir / "data")
    dataset = datasets[model.DATASET]
    row = {"name": name, "framework": model.FRAMEWORK, "weights": model.WEIGHTS, "dataset": model.DATASET,
           "shape": "x".join(map(str, (shapes or model.INPUT_SHAPES)[0][1:]))}
    start = time.time()
    try:
        result = measure(model, evaluation, workdir / f"{name}-{model_config}", dataset, input_shapes=shapes,
                         model_config=model_config)
    except Exception as e:   # a failing model is a finding: report it in the table
        traceback.print_exc()
        return {**row, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", "seconds": time.time() - start}
    metric, _ = result["fp32"].primary
    second = [k for k in result["fp32"].metrics if k != metric][:1]
    return {**row, "metric": metric, **{s: result[s].metrics[metric] for s in ("fp32", "quant", "npu")},
            "second": second[0] if second else "", "npu_second": result["npu"].metrics[second[0]] if second else None,
            "samples": result["npu"].samples, "seconds": time.time() - start,
            "config": "int16 (CONVERTER_CONFIG)" if model_config and hasattr(model, "CONVERTER_CONFIG") else "defaults"}


HEADER = ["model", "framework", "weights", "dataset", "input", "converter", "metric", "fp32", "quant", "npu",
          "npu 2nd metric", "samples", "s"]


def cells(r: dict) -> list:
    if "error" in r:
        return [r["name"], r["framework"], r["weights"], r["dataset"], r["shape"], "", r["error"], "", "", "",
                "", "", f"{r['seconds']:.0f}"]
    second = f"{r['second']} {r['npu_second']:.4f}" if r["second"] else ""
    return [r["name"], r["framework"], r["weights"], r["dataset"], r["shape"], r["config"], r["metric"],
            f"{r['fp32']:.4f}", f"{r['quant']:.4f}", f"{r['npu']:.4f}", second, str(r["samples"]),
            f"{r['seconds']:.0f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=MODELS)
    parser.add_argument("--size", choices=("full", "test"), default="full")
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/agraph.md alone")
    args = parser.parse_args()
    import ratelnn
    from rich.console import Console
    from rich.table import Table
    ratelnn.tf_init()
    ratelnn.mx_init()
    rows, datasets, start = [], {}, time.time()
    with tempfile.TemporaryDirectory(prefix="agraph-zoo-") as tmp:
        for name in args.only:
            rows.append(run_one(name, args.size, Path(tmp), datasets))
            print(" | ".join(cells(rows[-1])), flush=True)
            if "error" not in rows[-1] and rows[-1]["config"] != "defaults":   # also the int8 defaults
                rows.append(run_one(name, args.size, Path(tmp), datasets, model_config=False))
                print(" | ".join(cells(rows[-1])), flush=True)
    table = Table(title=f"AGraph zoo, {args.size} size: FP32 -> quant -> npu")
    for h in HEADER:
        table.add_column(h)
    for r in rows:
        table.add_row(*cells(r))
    Console(width=220).print(table)
    if args.no_write:
        return
    lines = ["## Zoo table: shipped and random-weight models, FP32 -> quant -> npu", "",
             f"Command: `python bench/agraph_zoo.py{' --size test' if args.size == 'test' else ''}`", "",
             f"Machine: {cpu_name()}. Calibration on the left-right mirrored samples of each model's "
             "dataset, metric on the samples themselves. `shipped` weights come from the `mtcnn` 1.0.0 and "
             "`fer` 25.10.3 packages (MIT); `random` ones are seeded random initialisations, scored by "
             "agreement with FP32 only (top-1 agreement over 15 photos is coarse: random nets give "
             "near-uniform logits; the mean cosine is the informative figure).", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    lines += ["", f"Total time {time.time() - start:.0f} s."]
    write_section("agraph_zoo", "\n".join(lines), doc=ROOT / "docs" / "agraph.md")


if __name__ == "__main__":
    main()
