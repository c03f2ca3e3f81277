"""Memory and disk of calibration statistics: 50 versus 500 batches.

For each batch count, a fresh process freezes the (untrained) Fashion-MNIST CNN of
``ratelnn.testing`` (batch 32), runs its calibration model on that many batches of random
images, then quantizes with ``quantize_algorithm="kld"`` from the statistics on disk. It
reports the process's peak RSS, the RSS growth during calibration, and the size of the
``.rstats`` files. Target: peak RSS(500) <= 1.2 x peak RSS(50), and files equally bounded.

Writes its section of docs/benchmarks.md.

    python bench/calibration_memory.py [--batches 50 500]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from _report import demote_headings, write_section

REPO = Path(__file__).resolve().parent.parent
BATCH = 32
TARGET_RATIO = 1.2


def rss_kib() -> int:
    """Current resident set size of this process (KiB), from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(batches: int, output_dir: str) -> dict:
    """Calibrate ``batches`` batches and quantize with kld; returns the measurements."""
    import resource
    import warnings

    import numpy as np

    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing import build_fashion_cnn, run_graph

    ratelnn.tf_init()
    graph_def, inputs, outputs = freeze_keras(build_fashion_cnn())
    config = {"input_nodes": inputs, "output_nodes": outputs,
              "input_shapes": [[BATCH, 28, 28, 1]], "output_dir": output_dir,
              "quantize_algorithm": "kld"}
    conv = converter(graph_def, config)
    graph_cal = conv.to_cal()
    images = np.random.default_rng(0).uniform(0, 1, (BATCH * 10, 28, 28, 1)).astype(np.float32)
    run_graph(graph_cal, inputs[0] + ":0", outputs[0] + ":0", images[:BATCH], BATCH)  # warm up
    before = rss_kib()
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_cal, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        for i in range(batches - 1):
            start = (i % 10) * BATCH
            sess.run(outputs[0] + ":0", {inputs[0] + ":0": images[start:start + BATCH]})
    after_calibration = rss_kib()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conv.to_quant()
    stats_dir = Path(output_dir) / "ratel_stats"
    return {"batches": batches, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "calibration_growth_kib": after_calibration - before,
            "tensors": len(ratelnn.calibration.stats.load_statistics(output_dir)),
            "stats_bytes": sum(p.stat().st_size for p in stats_dir.glob("*.rstats"))}


def measure(batches: int) -> dict:
    import tempfile
    with tempfile.TemporaryDirectory(prefix="ratelnn-memory-") as output_dir:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
        out = subprocess.run([sys.executable, __file__, "--child", str(batches), output_dir],
                             env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"child for {batches} batches failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def report(results, command: str) -> str:
    small, large = results[0], results[-1]
    ratio = large["peak_rss_kib"] / small["peak_rss_kib"]
    size_ratio = large["stats_bytes"] / small["stats_bytes"]
    lines = ["# Calibration memory: statistics stay bounded", "",
             f"Written by `{command}`.", "",
             f"Untrained Fashion-MNIST CNN (`ratelnn.testing.build_fashion_cnn`), batch {BATCH}, "
             "random images; each row is a fresh process that calibrates, then quantizes with "
             "`kld` from the statistics on disk (histograms of 2048 bins per tensor).", "",
             "| batches | tensors | peak RSS (MiB) | RSS growth while calibrating (MiB) | .rstats bytes |",
             "|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['batches']} | {r['tensors']} | {r['peak_rss_kib'] / 1024:.1f} | "
                     f"{r['calibration_growth_kib'] / 1024:.1f} | {r['stats_bytes']} |")
    lines += ["", f"Peak RSS ratio {large['batches']} / {small['batches']} batches: "
              f"**{ratio:.3f}** (target <= {TARGET_RATIO}); statistics file ratio "
              f"**{size_ratio:.3f}**: at most 2048 counts per tensor (under 25 KiB each); the size grows only with the digits of the counts and the number of non-empty bins, never with the number of batches.", ""]
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(int(sys.argv[2]), sys.argv[3])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[50, 500])
    args = parser.parse_args()
    results = [measure(b) for b in sorted(args.batches)]
    text = report(results, "python bench/calibration_memory.py " + " ".join(sys.argv[1:]))
    write_section("calibration-memory", demote_headings(text))
    print(text)
    ratio = results[-1]["peak_rss_kib"] / results[0]["peak_rss_kib"]
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
