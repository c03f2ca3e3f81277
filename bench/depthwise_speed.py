"""Speed of the native depthwise convolution: one layer per MobileNetV2 shape, and the whole
compiled MobileNetV2 (Keras, random weights) with its depthwise share of the engine time.

- micro: single-instruction engines (int8 in, uint8 ReLU out, 3x3, bench/npu_kernels.py's
  ``conv_engine``) at batch 1 and 8, on every kernel path the CPU has, ms and GMAC/s;
- model: the engines of MobileNetV2 compiled once (cached in ``--engines``, so a run on
  other code times the same engines), ``Engine.run(backend="native")`` at batch 1 and 8, and
  the depthwise share of the per-instruction profile (``RATELNN_NPU_PROFILE=1``).

Times are the minimum of ``--repeat`` runs (the machine may be shared); the 1-minute load
average is printed with them.

    python bench/depthwise_speed.py [--threads 2] [--repeat 20] [--engines /tmp/mv2.pkl] [--skip-model]
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from _report import cpu_name  # noqa: E402
from npu_kernels import SHAPES, conv_engine, timeit  # noqa: E402
from ratelnn.npu import force_isa, supported_isas  # noqa: E402


def micro(threads, repeat):
    rng = np.random.default_rng(0)
    for label, kind, h, w, cin, cout, k, s in [shape for shape in SHAPES if shape[1] == "dw"]:
        for n in (1, 8):
            eng, _ = conv_engine(kind, n, h, w, cin, cout, k, s, rng)
            x = rng.integers(-128, 128, (n, h, w, cin)).astype(np.int8)
            oh, ow = eng.outputs[0].shape[1:3]
            macs = n * oh * ow * cout * k * k
            cells = []
            for path in supported_isas():
                with force_isa(path):
                    t = timeit(lambda: eng.run([x], backend="native", num_threads=threads), repeat)
                cells.append(f"{path} {1e3 * t:.3f} ms ({macs / t / 1e9:.1f} GMAC/s)")
            print(f"{label} b{n}: " + ", ".join(cells), flush=True)


def mobilenet_engines(path: Path):
    """The engine bytes of the compiled Keras MobileNetV2 (random weights), cached in ``path``."""
    from emulator_speed import cached_engine_bytes
    return cached_engine_bytes("MobileNetV2", path)


def profile_shares(engine_file: Path, batch: int, threads: int):
    """{opcode: median us summed over instructions}, depthwise CONV2D counted apart."""
    code = ("import pickle, sys, numpy as np\n"
            "from ratelnn.npu.engine import Engine\n"
            f"for b in pickle.load(open({str(engine_file)!r}, 'rb')):\n"
            "    e = Engine.from_bytes(b)\n"
            f"    xs = [np.zeros(({batch},) + s.shape[1:], s.dtype) for s in e.inputs]\n"
            "    for _ in range(5): e.run(xs, backend='native', num_threads=" + str(threads) + ")\n")
    env = dict(os.environ, RATELNN_NPU_PROFILE="1", PYTHONPATH=str(BENCH.parent))
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    samples = collections.defaultdict(list)
    for line in err.splitlines():
        if line.startswith("npu-profile\t"):
            _, engine, _, index, opcode, name, us = line.split("\t")
            key = "CONV2D depthwise" if opcode == "CONV2D" and "depthwise" in name else opcode
            samples[(engine, int(index), key)].append(float(us))
    total = collections.Counter()
    for (_, _, key), v in samples.items():
        total[key] += min(v)
    return total


def model(engine_file: Path, threads: int, repeat: int):
    from ratelnn.npu.engine import Engine
    engines = [Engine.from_bytes(b) for b in mobilenet_engines(engine_file)]
    for n in (1, 8):
        xs = [[np.zeros((n,) + s.shape[1:], s.dtype) for s in e.inputs] for e in engines]
        t = timeit(lambda: [e.run(x, backend="native", num_threads=threads) for e, x in zip(engines, xs)], repeat)
        shares = profile_shares(engine_file, n, threads)
        whole = sum(shares.values())
        parts = ", ".join(f"{k} {v / 1e3:.1f} ms ({100 * v / whole:.0f} %)" for k, v in shares.most_common(4))
        print(f"MobileNetV2 engines b{n}: {1e3 * t:.1f} ms (min of {repeat}); profile: {parts}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--engines", type=Path, default=Path(tempfile.gettempdir()) / "ratelnn-mv2-engines.pkl")
    ap.add_argument("--skip-model", action="store_true")
    args = ap.parse_args()
    print(f"{cpu_name()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    micro(args.threads, args.repeat)
    if not args.skip_model:
        model(args.engines, args.threads, args.repeat)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
