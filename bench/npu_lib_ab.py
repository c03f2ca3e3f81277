"""Two (or more) builds of the native executor library side by side, in one process.

Each library (a ``libratelnn_npu-*.so`` copied out of the build cache, e.g. before and after a
kernel change: ``python -c "from ratelnn.npu import native; print(native.library_path())"``
at each commit) gets its own engines; the rounds alternate between the libraries, each round
keeping the best of ``--calls`` calls made through the C API directly (no Python allocation
per call), and the median of ``--rounds`` rounds is reported with the spread.  Every output is
compared: the libraries must give the same bits.

    python bench/npu_lib_ab.py OLD.so NEW.so [--only expand] [--threads 1] [--batch 1]
    python bench/npu_lib_ab.py OLD.so NEW.so --network /tmp/mv2.pkl   # a cached_engine_bytes file

Shapes: MobileNetV2's 1x1 convs (bench/npu_kernels.py's ``conv_engine``: ``conv`` int8 in,
uint8 ReLU out, as the expansions; ``proj`` uint8 in, int8 out, as the projections), then the
stem convs of npu_kernels.SHAPES (labels with "conv1": ResNet50's 7x7/2, MobileNetV2's 3x3/2).
"""
from __future__ import annotations

import argparse
import ctypes
import pickle
import statistics
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from npu_kernels import SHAPES, conv_engine, mobilenetv2_layers, random_codes  # noqa: E402
from ratelnn.npu import native  # noqa: E402
from ratelnn.npu.engine import Engine  # noqa: E402


def pointwise_shapes():
    """(label, kind, H, Cin, Cout) of every distinct 1x1 conv of MobileNetV2 1.0 at 224: the
    projections as ``proj`` engines, the expansions and the last conv as ``conv`` ones."""
    seen = {}
    for label, kind, h, _, cin, cout, k, _ in mobilenetv2_layers():
        if kind == "conv" and k == 1:
            seen.setdefault((h, cin, cout), (label, "proj" if label.startswith("project") else "conv", h, cin, cout))
    return list(seen.values())


def load_library(path: str):
    """The ctypes library at ``path``, set up by ratelnn.npu.native (then made current)."""
    native._lib = None
    native.library_path = lambda: Path(path)
    return native._load()


class Runner:
    """One engine on one library with fixed inputs and outputs: ``run()`` is one C API call."""

    def __init__(self, lib, data: bytes, view: Engine, inputs, batch: int, threads: int):
        native._lib = lib
        self.lib, self.engine, self.batch, self.threads = lib, native.NativeEngine(data), batch, threads
        self.inputs = inputs
        self.outputs = [np.empty((batch,) + s.shape[1:], s.dtype) for s in view.outputs]
        ptrs = lambda arrs: (ctypes.c_void_p * len(arrs))(*[a.ctypes.data for a in arrs])  # noqa: E731
        sizes = lambda arrs: (ctypes.c_int64 * len(arrs))(*[a.nbytes for a in arrs])  # noqa: E731
        self.args = (ptrs(inputs), sizes(inputs), len(inputs), ptrs(self.outputs), sizes(self.outputs), len(self.outputs))
        self.err = ctypes.create_string_buffer(4096)

    def run(self):
        if self.lib.ratel_npu_engine_run(self.engine._handle, self.batch, *self.args, self.threads, self.err, 4096):
            raise RuntimeError(self.err.value.decode())


def random_inputs(view: Engine, batch: int, rng):
    """npu_kernels.random_codes of every input of ``view``."""
    return [random_codes(rng, s, batch) for s in view.inputs]


def compare(label: str, steps, rounds: int, calls: int, macs: float = 0.0, statistic: str = "best"):
    """steps[i]: the Runners of library i (run in order as one call).  Prints one line: per
    library the median over rounds of each round's best call (``statistic="best"``), or the
    median of every call but each round's first (``"median"``: what stalls cost, e.g. with
    another process busy on a core)."""
    for runners in steps:
        for r in runners:
            r.run()
    first = [o for r in steps[0] for o in r.outputs]
    for runners in steps[1:]:
        if not all(np.array_equal(a, b) for a, b in zip(first, [o for r in runners for o in r.outputs])):
            raise SystemExit(f"{label}: the libraries' outputs differ")
    best = [[] for _ in steps]
    for _ in range(rounds):
        for i, runners in enumerate(steps):
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                for r in runners:
                    r.run()
                times.append(time.perf_counter() - start)
            if statistic == "best":
                best[i].append(min(times))
            else:
                best[i].extend(times[1:])
    cells = []
    for b in best:
        med = statistics.median(b)
        rate = f" {macs / med / 1e9:6.1f} GMAC/s" if macs else ""
        cells.append(f"{med * 1e3:8.4f} ms [{min(b) * 1e3:.4f}-{max(b) * 1e3:.4f}]{rate}")
    ratio = statistics.median(best[-1]) / statistics.median(best[0])
    print(f"{label:22s} | " + " | ".join(cells) + f" | last/first {ratio:.3f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("libs", nargs="+", help="library files (.so), the first is the baseline")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--only", default="", help="pointwise shapes whose label contains this text")
    ap.add_argument("--statistic", choices=("best", "median"), default="best",
                    help="per round its best call, or every call but the first")
    ap.add_argument("--network", type=Path, help="a pickled list of engine bytes (emulator_speed.cached_engine_bytes)")
    args = ap.parse_args(argv)
    if len(args.libs) < 2:
        raise SystemExit("give at least two libraries")
    libs = [load_library(p) for p in args.libs]
    how = f"best of {args.calls} calls" if args.statistic == "best" else f"{args.calls} calls, the first left out"
    print(f"batch {args.batch}, {args.threads} threads; median of {args.rounds} rounds ({how}); "
          + " | ".join(Path(p).name for p in args.libs))
    rng = np.random.default_rng(0)
    n = args.batch
    if args.network:
        blobs = pickle.loads(args.network.read_bytes())
        views = [Engine.from_bytes(b) for b in blobs]
        inputs = [random_inputs(v, n, rng) for v in views]
        steps = [[Runner(lib, b, v, x, n, args.threads) for b, v, x in zip(blobs, views, inputs)] for lib in libs]
        return compare(f"{args.network.name} b{n}", steps, args.rounds, args.calls, statistic=args.statistic)
    for label, kind, h, cin, cout in pointwise_shapes():
        if args.only in label:
            view, _ = conv_engine(kind, n, h, h, cin, cout, 1, 1, rng)
            x = random_inputs(view, n, rng)
            steps = [[Runner(lib, view.to_bytes(), view, x, n, args.threads)] for lib in libs]
            compare(label, steps, args.rounds, args.calls, n * h * h * cin * cout, args.statistic)
    for label, kind, h, w, cin, cout, k, s in SHAPES:
        if "conv1" in label and args.only in label:
            view, _ = conv_engine(kind, n, h, w, cin, cout, k, s, rng)
            x = random_inputs(view, n, rng)
            oh, ow = view.outputs[0].shape[1:3]
            steps = [[Runner(lib, view.to_bytes(), view, x, n, args.threads)] for lib in libs]
            compare(label, steps, args.rounds, args.calls, n * oh * ow * k * k * cin * cout, args.statistic)


if __name__ == "__main__":
    main()
