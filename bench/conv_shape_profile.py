"""Where a compiled model's engine time goes, by convolution shape.

The engines of a Keras model of bench/emulator_speed.py (random weights, compiled at batch 1,
cached in ``--engines`` so runs of other code time the same engines) run ``--repeats`` times
with ``RATELNN_NPU_PROFILE=1`` in a child process (``Engine.run(backend="native")``); each
instruction's time is its minimum over the runs (the machine may be shared).  Printed: the sum
of the instructions, the time per opcode, and per CONV2D / FULLY_CONNECTED shape (kernel,
M = output pixels of the batch, K = multiply-adds per output, C = output channels) the time, the
count and GMAC/s.  A fused instruction (an ADD or REQUANT run in a conv's epilogue, a PAD
folded into the padding of the instruction after it) reads 0 us; its time is on the line that
runs it.

    python bench/conv_shape_profile.py [--model ResNet50] [--batch 1] [--threads 2] [--repeats 20]
                                       [--engines /tmp/resnet50.pkl] [--top 25]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from emulator_speed import PROFILE_PREFIX, cached_engine_bytes  # noqa: E402

CHILD = """
import json, pickle, sys
import numpy as np
from ratelnn.npu.engine import OPCODES, Engine
path, batch, threads, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
gemm = {OPCODES["CONV2D"], OPCODES["FULLY_CONNECTED"]}
engines = [Engine.from_bytes(b) for b in pickle.load(open(path, "rb"))]
shapes = {}
for e in engines:
    for i, ins in enumerate(e.instructions):
        if ins.opcode in gemm:
            w, y = e.constants[ins.consts[0]].shape, e.tensors[ins.outputs[0]].shape
            kernel = "x".join(map(str, w[:2])) if len(w) == 4 else "fc"
            shapes[f"{e.name}:{i}"] = [kernel, int(np.prod(y[1:-1])) * batch, int(np.prod(w[:-1])), int(y[-1])]
print(json.dumps(shapes))
rng = np.random.default_rng(0)
for e in engines:
    xs = [rng.integers(0, 100, (batch,) + s.shape[1:]).astype(s.dtype) for s in e.inputs]
    for _ in range(repeats):
        e.run(xs, backend="native", num_threads=threads)
"""


def profile(engines: Path, batch: int, threads: int, repeats: int):
    """``(shapes, rows)``: ``{engine:index: [kernel, M, K, C]}`` of the GEMM instructions and
    ``[(engine:index, opcode, name, min us)]`` of every instruction."""
    env = dict(os.environ, RATELNN_NPU_PROFILE="1", PYTHONPATH=str(BENCH.parent))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(engines), str(batch), str(threads), str(repeats)],
                          env=env, capture_output=True, text=True, check=True)
    shapes = json.loads(proc.stdout.strip().splitlines()[-1])
    times, labels = collections.defaultdict(list), {}
    for line in proc.stderr.splitlines():
        if line.startswith(PROFILE_PREFIX):
            _, engine, _, index, opcode, name, us = line.split("\t")
            key = f"{engine}:{index}"
            times[key].append(float(us))
            labels[key] = (opcode, name)
    return shapes, [(key, *labels[key], min(us)) for key, us in times.items()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ResNet50")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--engines", type=Path, help="engine cache (default: /tmp/ratelnn-<model>-engines.pkl)")
    ap.add_argument("--top", type=int, default=25, help="shapes to list")
    args = ap.parse_args()
    path = args.engines or Path(f"/tmp/ratelnn-{args.model.lower()}-engines.pkl")
    cached_engine_bytes(args.model, path)
    shapes, rows = profile(path, args.batch, args.threads, args.repeats)
    total = sum(us for *_, us in rows)
    by_op = collections.Counter()
    for _, opcode, _, us in rows:
        by_op[opcode] += us
    print(f"{args.model} batch {args.batch}, {args.threads} threads, load average {os.getloadavg()[0]:.1f}: "
          f"sum of instructions {total:.0f} us (min of {args.repeats} runs each)")
    print("by opcode: " + ", ".join(f"{op} {us:.0f} us ({100 * us / total:.0f} %)" for op, us in by_op.most_common()))
    groups = collections.defaultdict(lambda: [0.0, 0, 0])  # us, MACs, count
    for key, _, _, us in rows:
        if key in shapes:
            kernel, m, k, c = shapes[key]
            g = groups[f"{kernel} M={m} K={k} C={c}"]
            g[0] += us
            g[1] += m * k * c
            g[2] += 1
    print("| shape | count | us | share | GMAC/s |\n|---|---:|---:|---:|---:|")
    for shape, (us, macs, count) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"| {shape} | {count} | {us:.0f} | {100 * us / total:.0f} % | {macs / us / 1e3:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
