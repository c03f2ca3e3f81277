"""How the IR passes scale (docs/reliability.md "Bounded work").

    python bench/pass_scaling.py            # prints a table; --doc writes it into docs/reliability.md

Times each default pass (ratelnn/ir/passes.py run_default_passes, then Graph.prune) on
(a) one block of growing constant size: a constant-only subgraph (Mul, Add of params),
Conv2D -> BatchNorm -> BiasAdd -> Relu with weights of N elements, and (b) growing node
counts: chains of such blocks.  The fitted exponent of time against size should be about
1 (linear); a pass above 1.3 is super-linear.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ratelnn.ir import Graph, Node, TensorInfo  # noqa: E402
from ratelnn.ir import passes  # noqa: E402

from _report import cpu_name, write_section  # noqa: E402

F32 = np.float32
PASSES = [("remove_identity", passes.remove_identity), ("fold_constants", passes.fold_constants),
          ("fold_batchnorm", passes.fold_batchnorm), ("fuse_bias_activation", passes.fuse_bias_activation),
          ("fuse_prelu", passes.fuse_prelu), ("prune", lambda g: g.prune())]


def block(g: Graph, x: str, k: int, channels: int, const_elems: int) -> str:
    """x [1, 8, 8, channels] -> conv (3x3, weights ~const_elems) -> BN -> BiasAdd -> Relu -> Add of
    Mean(Mul(c1, c2)) (params of ~const_elems elements each: folded by fold_constants)."""
    rng = np.random.default_rng(k)
    cout = channels
    cin = max(1, const_elems // (9 * cout))
    p = f"b{k}"
    if g.shape(x)[-1] != cin:
        g.add_param(f"{p}/proj", rng.normal(0, 1, (1, 1, g.shape(x)[-1], cin)).astype(F32))
        g.add_node(Node(f"{p}/pconv", "Conv2D", [x, f"{p}/proj"], [f"{p}/pconv"],
                        dict(strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1, layout="NHWC", act="none")),
                   [TensorInfo((1, 8, 8, cin))])
        x = f"{p}/pconv"
    g.add_param(f"{p}/w", rng.normal(0, 1, (3, 3, cin, cout)).astype(F32))
    g.add_node(Node(f"{p}/conv", "Conv2D", [x, f"{p}/w"], [f"{p}/conv"],
                    dict(strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1, layout="NHWC", act="none")),
               [TensorInfo((1, 8, 8, cout))])
    for name in ("gamma", "beta", "mean", "var"):
        g.add_param(f"{p}/{name}", np.abs(rng.normal(1, 0.1, cout)).astype(F32))
    g.add_node(Node(f"{p}/bn", "BatchNorm", [f"{p}/conv", f"{p}/gamma", f"{p}/beta", f"{p}/mean", f"{p}/var"],
                    [f"{p}/bn"], {"eps": 1e-3, "axis": -1}), [TensorInfo((1, 8, 8, cout))])
    g.add_param(f"{p}/b", rng.normal(0, 1, cout).astype(F32))
    g.add_node(Node(f"{p}/bias", "BiasAdd", [f"{p}/bn", f"{p}/b"], [f"{p}/bias"], {}), [TensorInfo((1, 8, 8, cout))])
    g.add_node(Node(f"{p}/relu", "Relu", [f"{p}/bias"], [f"{p}/relu"], {}), [TensorInfo((1, 8, 8, cout))])
    n = max(1, const_elems // cout)   # a constant-only subgraph of ~const_elems elements, folded to [cout]
    g.add_param(f"{p}/c1", rng.normal(0, 1, (n, cout)).astype(F32))
    g.add_param(f"{p}/c2", rng.normal(0, 1, (n, cout)).astype(F32))
    g.add_node(Node(f"{p}/cm", "Mul", [f"{p}/c1", f"{p}/c2"], [f"{p}/cm"], {}), [TensorInfo((n, cout))])
    g.add_node(Node(f"{p}/cr", "Mean", [f"{p}/cm"], [f"{p}/cr"], {"axes": (0,), "keepdims": False}),
               [TensorInfo((cout,))])
    g.add_node(Node(f"{p}/out", "Add", [f"{p}/relu", f"{p}/cr"], [f"{p}/out"], {}), [TensorInfo((1, 8, 8, cout))])
    return f"{p}/out"


def graph(blocks: int, const_elems: int, channels: int = 16) -> Graph:
    g = Graph("scaling")
    g.add_input("x", (1, 8, 8, channels))
    x = "x"
    for k in range(blocks):
        x = block(g, x, k, channels, const_elems)
    g.outputs = [x]
    return g


def time_passes(g: Graph, repeats: int = 3) -> dict:
    best = {name: float("inf") for name, _ in PASSES}
    for _ in range(repeats):
        h = copy.deepcopy(g)
        for name, fn in PASSES:
            start = time.perf_counter()
            fn(h)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def exponent(sizes, times) -> float:
    return float(np.polyfit(np.log(sizes), np.log(np.maximum(times, 1e-6)), 1)[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--doc", action="store_true")
    a = p.parse_args()
    rows = []
    for label, sizes, make in (("constant elements (1 block)", [1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22],
                                lambda s: graph(1, s)),
                               ("blocks (nodes = 7 x blocks)", [25, 50, 100, 200, 400], lambda s: graph(s, 2304))):
        times = {name: [] for name, _ in PASSES}
        for s in sizes:
            t = time_passes(make(s))
            for name in times:
                times[name].append(t[name])
        for name, ts in times.items():
            rows.append((label, name, sizes, ts, exponent(sizes, ts)))
            print(f"{label:30s} {name:22s} " + " ".join(f"{x * 1e3:8.2f}" for x in ts) + f"  exponent {rows[-1][-1]:.2f}")
    if a.doc:
        lines = ["## Pass scaling", "", f"`python bench/pass_scaling.py --doc` on {cpu_name()}: best of 3, "
                 "milliseconds; exponent = slope of log time against log size (1 = linear).", "",
                 "| grows | pass | times (ms) at the sizes | exponent |", "|---|---|---|---:|"]
        for label, name, sizes, ts, e in rows:
            at = ", ".join(f"{x * 1e3:.2f} @ {s:,}" for s, x in zip(sizes, ts))
            lines.append(f"| {label} | {name} | {at} | {e:.2f} |")
        write_section("pass-scaling", "\n".join(lines), doc=Path(__file__).resolve().parent.parent / "docs" / "reliability.md")


if __name__ == "__main__":
    main()
