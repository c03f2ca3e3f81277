"""How the IR passes and a whole conversion scale (docs/reliability.md "Bounded work").

    python bench/pass_scaling.py                    # prints the tables
    python bench/pass_scaling.py --doc              # and writes them into docs/benchmarks.md
    python bench/pass_scaling.py --conversion-nodes 20000 --doc   # the conversion at that size

Times each default pass (ratelnn/ir/passes.py run_default_passes, then Graph.prune, then
cross-layer equalization) on (a) one block of growing constant size: a constant-only subgraph
(Mul, Add of params), Conv2D -> BatchNorm -> BiasAdd -> Relu -> Identity with weights of N
elements, and (b) growing node counts: chains of such blocks with small constants, up to
50,000 nodes.  The fitted exponent of time against size should be about 1 (linear).  Each
round times every size once (sizes interleaved), so a change of load between rounds touches
all sizes alike and the best of the rounds is taken at comparable load.

Then converts a deep TensorFlow graph of small blocks (3x3 Conv2D -> FusedBatchNorm -> Relu6,
every fourth block a Reshape -> MatMul -> BiasAdd -> Relu6 -> Reshape on [1, 4, 4, 8]) with
``--conversion-nodes`` GraphDef nodes: converter -> calibrate on a few random batches (the
calibration model) -> to_quant -> to_npu, timing each step, each graph in a fresh process (as a
user converts one model: no heap left behind by the pass series or an earlier conversion).
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ratelnn.ir import Graph, Node, TensorInfo  # noqa: E402
from ratelnn.ir import passes  # noqa: E402
from ratelnn.ir.equalize import equalize  # noqa: E402
from ratelnn.testing.work import lines_run  # noqa: E402

from _report import cpu_name, write_section  # noqa: E402

F32 = np.float32
PASSES = [("remove_identity", passes.remove_identity), ("fold_constants", passes.fold_constants),
          ("fold_batchnorm", passes.fold_batchnorm), ("fuse_bias_activation", passes.fuse_bias_activation),
          ("fuse_prelu", passes.fuse_prelu), ("prune", lambda g: g.prune()),
          ("equalize", equalize)]
NODE_COUNTS = [3125, 6250, 12500, 25000, 50000]
CONVERSION_STEPS = ("converter", "calibrate", "to_quant", "to_npu")


def block(g: Graph, x: str, k: int, channels: int, const_elems: int) -> str:
    """x [1, 8, 8, channels] -> conv (3x3, weights ~const_elems) -> BN -> BiasAdd -> Relu -> Identity
    -> Add of Mean(Mul(c1, c2)) (params of ~const_elems elements each: folded by fold_constants)."""
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
    g.add_node(Node(f"{p}/id", "Identity", [f"{p}/relu"], [f"{p}/id"], {}), [TensorInfo((1, 8, 8, cout))])
    n = max(1, const_elems // cout)   # a constant-only subgraph of ~const_elems elements, folded to [cout]
    g.add_param(f"{p}/c1", rng.normal(0, 1, (n, cout)).astype(F32))
    g.add_param(f"{p}/c2", rng.normal(0, 1, (n, cout)).astype(F32))
    g.add_node(Node(f"{p}/cm", "Mul", [f"{p}/c1", f"{p}/c2"], [f"{p}/cm"], {}), [TensorInfo((n, cout))])
    g.add_node(Node(f"{p}/cr", "Mean", [f"{p}/cm"], [f"{p}/cr"], {"axes": (0,), "keepdims": False}),
               [TensorInfo((cout,))])
    g.add_node(Node(f"{p}/out", "Add", [f"{p}/id", f"{p}/cr"], [f"{p}/out"], {}), [TensorInfo((1, 8, 8, cout))])
    return f"{p}/out"


def graph(blocks: int, const_elems: int, channels: int = 16) -> Graph:
    g = Graph("scaling")
    g.add_input("x", (1, 8, 8, channels))
    x = "x"
    for k in range(blocks):
        x = block(g, x, k, channels, const_elems)
    g.outputs = [x]
    return g


def time_passes(g: Graph, collector: bool) -> dict:
    """CPU seconds of this process (not wall time: the machine is shared) of each pass, run in
    turn on a fresh copy of ``g``; ``collector`` False pauses Python's cyclic garbage collector
    while a pass runs (timeit's convention: the pass's own work), True leaves it on (what a
    conversion pays)."""
    h = g.copy()
    seconds = {}
    for name, fn in PASSES:
        gc.collect()
        if not collector:
            gc.disable()
        try:
            start = time.process_time()
            fn(h)
            seconds[name] = time.process_time() - start
        finally:
            gc.enable()
    return seconds


def best_times(graphs: list, repeats: int, collector: bool) -> list:
    """Per graph of ``graphs``, the best of ``repeats`` :func:`time_passes` per pass; each
    round times every graph once, so the graphs share the load of the round."""
    best = [{name: float("inf") for name, _ in PASSES} for _ in graphs]
    for _ in range(repeats):
        for g, b in zip(graphs, best):
            for name, t in time_passes(g, collector).items():
                b[name] = min(b[name], t)
    return best


def lines_per_pass(g: Graph) -> dict:
    """Python lines each pass executes on a copy of ``g`` (work, independent of the clock and
    of the memory hierarchy)."""
    h = g.copy()
    return {name: lines_run(lambda: fn(h)) for name, fn in PASSES}


def exponent(sizes, times) -> float:
    return float(np.polyfit(np.log(sizes), np.log(np.maximum(times, 1e-6)), 1)[0])


def pass_rows(max_nodes: int, repeats: int) -> list:
    """(grows, pass, sizes, seconds, exponent, exponent with the collector on, lines exponent
    or None) per pass and kind of growth; seconds with the collector paused."""
    rows = []
    node_counts = [n for n in NODE_COUNTS if n <= max_nodes]
    for label, sizes, make in (
            ("constant elements (1 block)", [1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22], lambda s: graph(1, s)),
            # 9 nodes a block with 4 channels and 36-element weights (the block adds a 1x1 projection)
            ("nodes (chains of 9-node blocks)", node_counts, lambda s: graph(s // 9, 36, channels=4))):
        by_nodes = label.startswith("nodes")
        graphs = [make(s) for s in sizes]
        actual = [len(g.nodes) for g in graphs] if by_nodes else sizes
        paused, on = best_times(graphs, repeats, collector=False), best_times(graphs, repeats, collector=True)
        work = [lines_per_pass(g) for g in graphs] if by_nodes else []
        times = {name: [p[name] for p in paused] for name, _ in PASSES}
        times_on = {name: [o[name] for o in on] for name, _ in PASSES}
        lines = {name: [w[name] for w in work] for name, _ in PASSES}
        for name, ts in times.items():
            work_exp = exponent(actual, lines[name]) if by_nodes else None
            rows.append((label, name, actual, ts, exponent(actual, ts), exponent(actual, times_on[name]), work_exp))
            print(f"{label:32s} {name:22s} " + " ".join(f"{x * 1e3:9.2f}" for x in ts)
                  + f"  exponent {rows[-1][4]:.2f} (collector on {rows[-1][5]:.2f})"
                  + (f", lines {work_exp:.2f}" if by_nodes else ""), flush=True)
    return rows


def deep_tf_graph(blocks: int, channels: int = 8, hw: int = 4):
    """A frozen GraphDef of ``blocks`` small blocks (module docstring) on [1, hw, hw, channels]."""
    import tensorflow as tf
    rng = np.random.default_rng(0)
    flat = hw * hw * channels
    ones = np.ones(channels, F32)
    g = tf.Graph()
    with g.as_default():
        y = tf.compat.v1.placeholder(tf.float32, [1, hw, hw, channels], name="x")
        for k in range(blocks):
            with tf.name_scope(f"b{k}"):
                if k % 4 == 3:
                    w = rng.normal(0, 1 / np.sqrt(flat), (flat, flat)).astype(F32)
                    f = tf.matmul(tf.reshape(y, [1, flat]), w)
                    y = tf.reshape(tf.nn.relu6(tf.nn.bias_add(f, np.full(flat, 0.5, F32))), [1, hw, hw, channels])
                else:
                    w = rng.normal(0, 1 / np.sqrt(9 * channels), (3, 3, channels, channels)).astype(F32)
                    c = tf.nn.conv2d(y, w, 1, "SAME")
                    bn = tf.compat.v1.nn.fused_batch_norm(c, ones, ones * 0.5, ones * 0.1, ones, is_training=False)[0]
                    y = tf.nn.relu6(bn)
        tf.identity(y, name="out")
    return g.as_graph_def()


def conversion(graphdef_nodes: int) -> dict:
    """Seconds of each conversion step of a deep graph of about ``graphdef_nodes`` nodes, and
    the node counts (GraphDef, IR as imported, IR after the default passes)."""
    import tempfile

    from ratelnn.frontend.tensorflow import converter
    from ratelnn.frontend.tensorflow.importer import import_graphdef
    blocks = max(1, round(graphdef_nodes / 8.25))   # 8.25 GraphDef nodes a block on average
    gd = deep_tf_graph(blocks)
    config = {"input_nodes": ["x"], "output_nodes": ["out"], "input_shapes": [[1, 4, 4, 8]]}
    imported = len(import_graphdef(gd, ["x"], ["out"], [(1, 4, 4, 8)]).nodes)
    rng = np.random.default_rng(1)
    data = rng.uniform(0, 1, (4, 4, 4, 8)).astype(F32)
    out = {"graphdef nodes": len(gd.node), "IR nodes imported": imported}
    with tempfile.TemporaryDirectory() as d:
        c = None

        def make():
            nonlocal c
            c = converter(gd, dict(config, output_dir=d))
        for name, fn in (("converter", make), ("calibrate", lambda: c.calibrate(data, batch_size=1, progress=False)),
                         ("to_quant", lambda: c.to_quant()), ("to_npu", lambda: c.to_npu())):
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            out[name] = (time.perf_counter() - start, time.process_time() - cpu)
            print(f"{name:12s} {out[name][0]:8.2f} s wall {out[name][1]:8.2f} s CPU", flush=True)
        out["IR nodes after passes"] = len(c.graph.nodes)
    out["total"] = tuple(sum(out[k][i] for k in CONVERSION_STEPS) for i in (0, 1))
    return out


def fresh_process_conversion(graphdef_nodes: int) -> dict:
    """:func:`conversion` in a child process of its own (started by spawning, not forking)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(conversion, graphdef_nodes).result()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--doc", action="store_true", help="write the tables into docs/benchmarks.md")
    p.add_argument("--max-nodes", type=int, default=NODE_COUNTS[-1], help="largest chain of the node-count series")
    p.add_argument("--repeats", type=int, default=5, help="rounds, each timing every size on a fresh copy (best kept)")
    p.add_argument("--conversion-nodes", default="5000,20000",
                   help="GraphDef nodes of the converted deep graphs, comma-separated ('' skips the conversion)")
    a = p.parse_args()
    rows = pass_rows(a.max_nodes, a.repeats)
    convs = [fresh_process_conversion(int(n)) for n in a.conversion_nodes.split(",") if n]
    for conv in convs:
        print(conv)
    if a.doc:
        command = "python bench/pass_scaling.py --doc" + (
            f" --max-nodes {a.max_nodes}" if a.max_nodes != NODE_COUNTS[-1] else "") + (
            f" --repeats {a.repeats}" if a.repeats != 5 else "") + (
            f" --conversion-nodes {a.conversion_nodes}" if a.conversion_nodes != "5000,20000" else "")
        lines = ["## Pass scaling and conversion of deep graphs", "", f"### {cpu_name()}", "",
                 f"`{command}`: best of {a.repeats} rounds (each times every size once) of the CPU "
                 "milliseconds of the process per pass, Python's "
                 "garbage collector paused while the pass runs (timeit's convention); exponent = slope "
                 "of log time against log size (1 = linear); `collector on`: the same exponent with the "
                 "collector running, as in a conversion; lines exponent (node counts only) = the same "
                 "slope for the number of Python lines the pass executes (work, free of clock noise and "
                 "of cache effects).", "",
                 "| grows | pass | times (ms) at the sizes | exponent | collector on | lines exponent |",
                 "|---|---|---|---:|---:|---:|"]
        for label, name, sizes, ts, e, e_on, work in rows:
            at = ", ".join(f"{x * 1e3:.2f} @ {s:,}" for s, x in zip(sizes, ts))
            lines.append(f"| {label} | {name} | {at} | {e:.2f} | {e_on:.2f} | "
                         f"{'' if work is None else f'{work:.2f}'} |")
        if convs:
            lines += ["", "Conversion of deep graphs (calibration on 4 random batches of 1), seconds of wall "
                      "time (CPU seconds of the process); the last row: exponent of wall time against "
                      "GraphDef nodes between the first and last graph:", "",
                      "| GraphDef nodes | IR nodes as imported | after the default passes | "
                      + " | ".join(CONVERSION_STEPS) + " | total |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for conv in convs:
                lines.append(f"| {conv['graphdef nodes']:,} | {conv['IR nodes imported']:,} | "
                             f"{conv['IR nodes after passes']:,} | "
                             + " | ".join(f"{conv[k][0]:.2f} ({conv[k][1]:.2f})" for k in CONVERSION_STEPS + ("total",))
                             + " |")
            if len(convs) > 1:
                sizes = [c["graphdef nodes"] for c in convs]
                lines.append("| exponent | | | " + " | ".join(
                    f"{exponent(sizes, [c[k][0] for c in convs]):.2f}" for k in CONVERSION_STEPS + ("total",)) + " |")
        write_section("pass-scaling", "\n".join(lines))


if __name__ == "__main__":
    main()
