"""Speed of the residual ADD (+ ReLU REQUANT) on the native executor: the narrow 8-bit path
(ops/core/npu_add_narrow.h) against the code of another checkout (the double path), as
alternating processes on the same engines.

- ``add``: ADD + REQUANT alone, 8x56x56x256 int8 + int8 -> int8 sum -> uint8 ReLU;
- ``conv+add``: a 1x1 conv 8x56x56x64 -> 256 (uint8 in, int8 out) with that ADD + REQUANT
  fused into its epilogue;
- ``resnet50 load``: ``Engine.from_bytes`` of those engines (decode, validation, weight packing
  and the narrow plans' search and check);
- ``resnet50 b1`` / ``b8``: the engines of the compiled Keras ResNet50 (random weights,
  compiled once and cached in ``--engines``), ``Engine.run`` on the native executor.

Each process prints the minimum of ``--repeat`` runs per case; the driver alternates the two
checkouts ``--rounds`` times and reports, per case, the minimum over rounds of each side, with
the 1-minute load average (the machine may be shared).  Also prints how many of ResNet50's
ADDs take the narrow path (this checkout).

    python bench/add_narrow_speed.py --other /work/main [--rounds 3] [--repeat 10] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def _min_time(fn, repeat):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def block_engine(conv: bool):
    """(engine, inputs): [1x1 conv ->] ADD(conv or tensor, residual) -> ReLU REQUANT, 8x56x56x256."""
    from ratelnn.npu.engine import EngineBuilder, quantize_multiplier
    rng = np.random.default_rng(0)
    shape = (8, 56, 56, 256)
    b = EngineBuilder("block", 8)
    r = rng.integers(-128, 128, shape).astype(np.int8)
    tr = b.tensor("r", shape, "int8", 0.1)
    tc = b.tensor("c", shape, "int8", 0.12)
    if conv:
        x = rng.integers(0, 256, shape[:3] + (64,)).astype(np.uint8)
        tx = b.tensor("x", x.shape, "uint8", 0.05)
        w = rng.integers(-127, 128, (1, 1, 64, 256)).astype(np.int8)
        m, sh = quantize_multiplier(0.05 * 0.01 / 0.12, 64 * 255 * 128 + 1000)
        consts = [b.const("w", w), b.const("bias", rng.integers(-999, 999, 256).astype(np.int32)),
                  b.const("m", np.full(256, m, np.int32)), b.const("s", np.full(256, sh, np.int32))]
        b.add("CONV2D", [tx], [tc], consts, name="conv", strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1)
        inputs, tins = [x, r], [tx, tr]
    else:
        c = rng.integers(-128, 128, shape).astype(np.int8)
        inputs, tins = [c, r], [tc, tr]
    ty, tq = b.tensor("sum", shape, "int8", 0.15), b.tensor("relu", shape, "uint8", 0.08)
    b.add("ADD", [tc, tr], [ty], name="add", multipliers=[int(round(0.12 / 0.15 * 2 ** 31)), int(round(0.1 / 0.15 * 2 ** 31))],
          shifts=[31])
    m, s = quantize_multiplier(0.15 / 0.08, 128)
    b.add("REQUANT", [ty], [tq], name="relu", multipliers=[m], shifts=[s], act_min=0)
    b.set_io(tins, [tq])
    return b.build(), inputs


def resnet50_engines(path: Path):
    """The engine bytes of the compiled Keras ResNet50 (random weights), cached in ``path``."""
    sys.path.insert(0, str(BENCH))
    from emulator_speed import cached_engine_bytes
    return cached_engine_bytes("ResNet50", path)


def measure(args):
    """One process: {case: min seconds} on the checkout it imports."""
    from ratelnn.npu.engine import Engine
    times = {}
    for label, conv in (("add", False), ("conv+add", True)):
        eng, xs = block_engine(conv)
        times[label] = _min_time(lambda: eng.run(xs, backend="native", num_threads=args.threads), args.repeat)
    blobs = pickle.loads(Path(args.engines).read_bytes())
    times["resnet50 load"] = _min_time(lambda: [Engine.from_bytes(b) for b in blobs], 3)
    engines = [Engine.from_bytes(b) for b in blobs]
    for n in (1, 8):
        xs = [[np.zeros((n,) + s.shape[1:], s.dtype) for s in e.inputs] for e in engines]
        times[f"resnet50 b{n}"] = _min_time(
            lambda: [e.run(x, backend="native", num_threads=args.threads) for e, x in zip(engines, xs)], args.repeat)
    if hasattr(Engine, "narrow_adds"):
        adds = sum(1 for e in engines for i in e.instructions if i.opcode in (3, 4))
        times["narrow"] = f"{sum(len(e.narrow_adds()) for e in engines)} of {adds}"
    print(json.dumps(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", type=Path, help="the checkout to compare with (its root directory)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engines", type=Path, default=Path(tempfile.gettempdir()) / "ratelnn-r50-engines.pkl")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        return measure(args)
    resnet50_engines(args.engines)  # compile once, before any timing
    sides = {"this": ROOT} if args.other is None else {"other": args.other, "this": ROOT}
    best, notes = {}, {}
    print(f"load average at the start {os.getloadavg()[0]:.2f}", flush=True)
    for rnd in range(args.rounds):
        for side, root in sides.items():
            env = dict(os.environ, PYTHONPATH=f"{root}:{BENCH}")
            cmd = [sys.executable, str(BENCH / "add_narrow_speed.py"), "--measure", "--repeat", str(args.repeat),
                   "--threads", str(args.threads), "--engines", str(args.engines)]
            out = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
            for case, v in out.items():
                if isinstance(v, str):
                    notes[side] = v
                else:
                    best[(side, case)] = min(best.get((side, case), v), v)
            print(f"round {rnd + 1} {side}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" if not isinstance(v, str) else f"narrow {v}"
                                                     for k, v in out.items()), flush=True)
    for case in ("add", "conv+add", "resnet50 load", "resnet50 b1", "resnet50 b8"):
        print(f"{case}: " + ", ".join(f"{side} {best[(side, case)] * 1e3:.2f} ms" for side in sides))
    for side, v in notes.items():
        print(f"ResNet50 ADDs on the narrow path ({side}): {v}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
