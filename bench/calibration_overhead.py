"""Calibration and quantized-model overhead on MobileNetV2, relative to the float model.

Freezes Keras MobileNetV2 (weights=None, 224x224x3, batch 8; BatchNorm statistics taken from
one batch of random images, so that the folded biases are non-zero as in a trained model:
set_batch_norm_statistics), makes the calibration model
(``to_cal``) and the quantized model (``to_quant``, statistics from a few random batches:
enough for a *speed* measurement), then times one ``Session.run`` of each of the three
GraphDefs in interleaved rounds (the order rotates every round) with the same input and the
same thread count, and reports the median time per batch and the ratios
calibration/float and quantized/float (targets: <= 1.10 and <= 1.15), and to the float
model after ratelnn's passes. It also times RatelMinMax alone on the calibration model's
own tensors, one thread, on every kernel path this CPU has: CPU time per element per core
(target <= 0.15 ns), which moves less with the load than the ratios, with the tensors read
from memory (all 66 in turn) and from the L2 cache (a window of each, scanned repeatedly).

The result replaces the "Calibration overhead" section of docs/benchmarks.md.

    python bench/calibration_overhead.py [--repeats 15] [--threads 2] [--zero-bias-constants]

``--zero-bias-constants`` also times the quantized model with every zero bias a constant
(the exporter passes one through a ``PlaceholderWithDefault`` so that Grappler keeps
the BiasAdd and TensorFlow its Conv2D + BiasAdd + ReLU6 fusion): both forms in one run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _report import cpu_name, write_section

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "benchmarks.md"
BATCH = 8
IMAGE_SHAPE = (224, 224, 3)
CALIBRATION_BATCHES = 3
TARGETS = {"calibration": 1.10, "quantized": 1.15}  # max ratio to the float model's time
SCAN_TARGET_NS = 0.15  # max CPU ns per element of RatelMinMax's scan, one core
CACHE_WINDOW = 1 << 18  # elements (1 MiB) of each tensor rescanned from the L2 cache
CACHE_SCANS = 16  # scans of a window per Session.run, the first one loading it


ZERO_BIAS_CONSTANTS = "quantized, zero biases constant"


def zero_biases_constant(graph_def):
    """``graph_def`` with every ``PlaceholderWithDefault`` bypassed: its readers take its default
    (in the quantized model, the Dequant of zero bias codes, which Grappler folds to zeros)."""
    from tensorflow.core.framework import graph_pb2
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    default = {n.name: n.input[0] for n in out.node if n.op == "PlaceholderWithDefault"}
    for node in out.node:
        node.input[:] = [default.get(i, i) for i in node.input]
    kept = [n for n in out.node if n.name not in default]
    del out.node[:]
    out.node.extend(kept)
    return out


def mobilenet_v2_graphs(output_dir: str, zero_bias_constants: bool = False):
    """``(graphs, input_tensor, output_tensor)``: GraphDefs of an untrained MobileNetV2 for
    batches of 8 images of 224x224x3: the frozen float model, the float model after
    ratelnn's passes (BatchNorm folded: what the calibration model is built from), the
    calibration model and the quantized model (and with ``zero_bias_constants`` that model
    through :func:`zero_biases_constant`)."""
    import keras

    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing import run_graph

    ratelnn.tf_init()
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(weights=None, input_shape=IMAGE_SHAPE)
    set_batch_norm_statistics(model, random_images(BATCH, seed=3))
    graph_float, inputs, outputs = freeze_keras(model)
    input_tensor, output_tensor = inputs[0] + ":0", outputs[0] + ":0"
    config = {"input_nodes": inputs, "output_nodes": outputs,
              "input_shapes": [[BATCH, *IMAGE_SHAPE]], "output_dir": output_dir}
    conv = converter(graph_float, config)
    graph_cal = conv.to_cal()
    calibration_images = random_images(CALIBRATION_BATCHES * BATCH, seed=1)
    run_graph(graph_cal, input_tensor, output_tensor, calibration_images, BATCH)
    graphs = {"float": graph_float,
              "float, optimised": conv.handler.export_graph(conv.graph),
              "calibration": graph_cal, "quantized": conv.to_quant()}
    if zero_bias_constants:
        graphs[ZERO_BIAS_CONSTANTS] = zero_biases_constant(graphs["quantized"])
    return graphs, input_tensor, output_tensor


def set_batch_norm_statistics(model, images: np.ndarray) -> None:
    """Sets every BatchNormalization layer's moving mean and variance to those of ``images``
    (one training-mode pass with momentum 0), as training leaves them: the folded biases are
    then non-zero, as in any trained model, and TensorFlow fuses each convolution with its
    bias and ReLU6.  With an untrained model's statistics (mean 0, variance 1, beta 0) every
    folded bias is exactly 0, Grappler drops the BiasAdds, and ReLU6 runs as a separate op in
    the optimised and calibration graphs (~6 ms of ~35 per batch) but not in the frozen
    float graph, where the remapper fuses Conv2D + FusedBatchNorm + Relu6."""
    import keras
    layers = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in layers]
    for layer in layers:
        layer.momentum = 0.0
    model(images, training=True)
    for layer, momentum in zip(layers, momenta):
        layer.momentum = momentum


def random_images(count: int, seed: int) -> np.ndarray:
    """``count`` float32 images of 224x224x3 uniform in [-1, 1] (MobileNetV2's input range)."""
    return np.random.default_rng(seed).uniform(-1, 1, (count, *IMAGE_SHAPE)).astype(np.float32)


def time_side_by_side(graphs, input_tensor: str, output_tensor: str, threads: int,
                      repeats: int, warmup: int = 2):
    """Median seconds per ``Session.run`` of each graph on one batch, measured in
    ``repeats`` interleaved rounds whose order rotates; returns ``({name: wall seconds},
    {name: CPU seconds of the process})``: the CPU time (all threads) moves less with the
    load of a shared machine than the wall time."""
    import tensorflow as tf

    session_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                              inter_op_parallelism_threads=1)
    batch = random_images(BATCH, seed=2)
    sessions = {}
    for name, graph_def in graphs.items():
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        sessions[name] = tf.compat.v1.Session(graph=graph, config=session_config)
    try:
        for sess in sessions.values():
            for _ in range(warmup):
                sess.run(output_tensor, {input_tensor: batch})
        times = {name: [] for name in sessions}
        cpu_times = {name: [] for name in sessions}
        names = list(sessions)
        for round_index in range(repeats):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                start, cpu_start = time.perf_counter(), time.process_time()
                sessions[name].run(output_tensor, {input_tensor: batch})
                times[name].append(time.perf_counter() - start)
                cpu_times[name].append(time.process_time() - cpu_start)
    finally:
        for sess in sessions.values():
            sess.close()
    return ({name: statistics.median(values) for name, values in times.items()},
            {name: statistics.median(values) for name, values in cpu_times.items()})


def calibrated_tensors(graph_cal, input_tensor: str):
    """The values every RatelMinMax of ``graph_cal`` sees for one batch: a list of arrays."""
    import tensorflow as tf

    names = [node.input[0] for node in graph_cal.node if node.op == "RatelMinMax"]
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_cal, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run([name + ":0" for name in names], {input_tensor: random_images(BATCH, 2)})


def scan_cost(tensors, repeats: int):
    """``{kernel path: {"memory" | "cache": (median, min) CPU ns per element}}`` of RatelMinMax
    alone, one intra-op thread, on every path this CPU supports, the inputs in variables so
    that nothing is copied. ``memory``: one op per tensor, all in one ``Session.run`` (most
    tensors are beyond L2, so this reads them from memory). ``cache``: ``CACHE_SCANS`` ops in
    a row on the first ``CACHE_WINDOW`` elements of each tensor, tensor after tensor, one
    chain of control dependencies in one ``Session.run`` (the window stays in L2; the
    per-op overheads are included)."""
    import tensorflow as tf

    import ratelnn
    from ratelnn.npu import force_isa, supported_isas

    ops = ratelnn.tf_init()
    windows = [t.ravel()[:CACHE_WINDOW] for t in tensors]
    sizes = {"memory": sum(t.size for t in tensors),
             "cache": CACHE_SCANS * sum(w.size for w in windows)}
    costs = {}
    with tempfile.TemporaryDirectory(prefix="ratelnn-scan-") as output_dir:
        graph = tf.Graph()
        with graph.as_default():
            feeds = [tf.compat.v1.placeholder(tf.float32, t.shape) for t in tensors + windows]
            variables = [tf.compat.v1.Variable(f, name=f"t{i}") for i, f in enumerate(feeds)]
            whole = variables[:len(tensors)]
            scans = tf.group(*[ops.ratel_min_max(v.read_value(), tensor_name=f"t{i}",
                                                 output_dir=output_dir)
                               for i, v in enumerate(whole)])
            chain = None
            for i, v in enumerate(variables[len(tensors):]):
                chain = scan_chain(ops, v, f"w{i}", output_dir, chain)
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                          inter_op_parallelism_threads=1)
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            sess.run([v.initializer for v in variables], dict(zip(feeds, tensors + windows)))
            for path in supported_isas():
                with force_isa(path):
                    sess.run([scans, chain])  # the first batch of a kernel also sets its range
                    seconds = {"memory": [], "cache": []}
                    for _ in range(repeats):
                        seconds["memory"].append(cpu_seconds(sess, scans))
                        seconds["cache"].append(cpu_seconds(sess, chain))
                costs[path] = {kind: (1e9 * statistics.median(values) / sizes[kind],
                                      1e9 * min(values) / sizes[kind])
                               for kind, values in seconds.items()}
    return costs


def scan_chain(ops, variable, name: str, output_dir: str, after=None):
    """``CACHE_SCANS`` RatelMinMax ops on ``variable``, each after the one before, the first
    after the op ``after``; returns the last one."""
    import tensorflow as tf

    last = after
    for _ in range(CACHE_SCANS):
        with tf.control_dependencies([last] if last is not None else []):
            last = ops.ratel_min_max(variable.read_value(), tensor_name=name,
                                     output_dir=output_dir).op
    return last


def cpu_seconds(sess, fetch) -> float:
    """Process CPU seconds of one ``Session.run`` of ``fetch``."""
    start = time.process_time()
    sess.run(fetch)
    return time.process_time() - start


def report(medians, cpu_medians, threads: int, repeats: int, command: str, scans,
           tensors) -> str:
    """The markdown section (between the section markers) for docs/benchmarks.md."""
    import tensorflow as tf

    float_time, optimised_time = medians["float"], medians["float, optimised"]
    lines = [
        "## Calibration overhead (MobileNetV2, batch 8)",
        "",
        f"Command: `{command}`",
        "",
        f"Keras MobileNetV2 (weights=None, 224x224x3) frozen to a GraphDef; one `Session.run` "
        f"per batch of {BATCH}; {threads} intra-op threads; median of {repeats} interleaved "
        f"rounds (order rotating each round). TensorFlow {tf.__version__}, {cpu_name()}, "
        f"{os.cpu_count()} logical CPUs, load average {os.getloadavg()[0]:.2f} at the end.",
        "",
        "| model | ms / batch | images / s | time / float | target | met "
        "| time / float, optimised | CPU time / float |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for name, seconds in medians.items():
        ratio = seconds / float_time
        target = TARGETS.get(name)
        target_text = f"<= {target}" if target else "-"
        met = ("yes" if ratio <= target else "NO") if target else "-"
        lines.append(f"| {name} | {1000 * seconds:.1f} | {BATCH / seconds:.1f} | "
                     f"{ratio:.3f} | {target_text} | {met} | {seconds / optimised_time:.3f} | "
                     f"{cpu_medians[name] / cpu_medians['float']:.3f} |")
    elements = sum(t.size for t in tensors)
    lines += ["", "Targets apply to the wall time; `CPU time / float` is the ratio of the "
              "process's CPU time (every thread) per run, medians likewise. "
              "Ratios are to `float`, the frozen Keras model as the user has it; "
              "`float, optimised` is that model after ratelnn's graph passes (BatchNorm folded "
              "into convolutions, identities dropped), from which the calibration model is made "
              f"by adding one RatelMinMax op per quantized tensor ({len(tensors)} ops, "
              f"{elements / 1e6:.1f} M elements per batch), each after the fused "
              "convolution + bias + ReLU6 whose output it observes, so oneDNN's fusions stay "
              "as in the optimised model. The quantized model simulates int8 with "
              "RatelQuant/RatelDequant ops around float kernels (the weights' RatelDequant is "
              "constant-folded by Grappler)." + (
                  f" `{ZERO_BIAS_CONSTANTS}`: the quantized model with every zero bias a constant "
                  "instead of passed through a PlaceholderWithDefault: Grappler then drops those "
                  "BiasAdds and ReLU6 runs unfused after the expand convolutions." if ZERO_BIAS_CONSTANTS in medians else ""),
              "",
              f"RatelMinMax alone, one thread, CPU ns per element, median (min) of {repeats} "
              f"runs (target <= {SCAN_TARGET_NS} ns per element per core); `memory`: the "
              f"{len(tensors)} calibrated tensors in turn ({4 * elements / 2**20:.0f} MiB, read "
              f"from memory); `L2`: the first {CACHE_WINDOW} elements of each, scanned "
              f"{CACHE_SCANS} times in a row, tensor after tensor, in one run (the first scan loads "
              "them; per-op overheads included):",
              "",
              "| kernel path | memory | L2 |",
              "|---|---:|---:|"]
    for path, kinds in scans.items():
        lines.append(f"| {path} | " + " | ".join(f"{kinds[kind][0]:.3f} ({kinds[kind][1]:.3f})"
                                                for kind in ("memory", "cache")) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow intra-op threads")
    parser.add_argument("--zero-bias-constants", action="store_true",
                        help="also time the quantized model with its zero biases constant")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file to update ('-': print only)")
    args = parser.parse_args()
    if args.repeats < 1 or args.threads < 1:
        parser.error("--repeats and --threads must be positive")

    with tempfile.TemporaryDirectory(prefix="ratelnn-bench-") as output_dir:
        graphs, input_tensor, output_tensor = mobilenet_v2_graphs(output_dir, args.zero_bias_constants)
        medians, cpu_medians = time_side_by_side(graphs, input_tensor, output_tensor,
                                                 args.threads, args.repeats)
        tensors = calibrated_tensors(graphs["calibration"], input_tensor)
        scans = scan_cost(tensors, args.repeats)
    command = "python bench/calibration_overhead.py " + " ".join(sys.argv[1:])
    section = report(medians, cpu_medians, args.threads, args.repeats, command.strip(), scans,
                     tensors)
    write_section("calibration-overhead", section, args.doc)
    print(section)
    float_time = medians["float"]
    return 0 if all(medians[n] / float_time <= t for n, t in TARGETS.items()) else 1


if __name__ == "__main__":
    sys.exit(main())
