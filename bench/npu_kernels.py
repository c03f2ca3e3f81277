"""Per-kernel speed of the native NPU executor vs TensorFlow FP32 on the same shapes.

For ResNet50-like and MobileNetV2-like layer shapes, one single-instruction engine per
shape runs on the native executor (int8 in, int8/uint8 out) and the same op runs in TF
float32 (tf.function, the same thread count).  Reported: GOPS (2 * MACs / second, or
elements / second for the memory-bound ops) of each, and native / TF speed ratio.

    python bench/npu_kernels.py [--threads 2] [--batch 1] [--repeat 20] [--only conv]
    python bench/npu_kernels.py --network resnet50   # every conv/fc layer, summed
    python bench/npu_kernels.py --paths avx2,avx_vnni,avx512_vnni --threads 1  # kernel paths side by side

``--network`` times every CONV2D / FULLY_CONNECTED layer of ResNet50 v1.5 or MobileNetV2
(identical shapes once, weighted by their count) and prints the sums: a proxy for the
whole model that leaves out the elementwise/pool ops and TF's graph-level fusions.

``--paths`` runs the same engines on each named kernel path in one process (``force_isa``;
a path the CPU lacks is reported as not run) and prints GMAC/s per path instead of the TF
comparison: the instruction sets side by side on identical inputs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ratelnn.npu.engine import EngineBuilder, quantize_multiplier  # noqa: E402

# (label, kind, H, W, Cin, Cout, k, stride); kind: conv | dw | fc (int8 in, uint8 ReLU out),
# proj (a 1x1 conv like MobileNetV2's projections: uint8 in, int8 out, no ReLU)
SHAPES = [
    ("r50 conv1 7x7/2 224x3->64", "conv", 224, 224, 3, 64, 7, 2),
    ("r50 3x3 56x64->64", "conv", 56, 56, 64, 64, 3, 1),
    ("r50 1x1 56x64->256", "conv", 56, 56, 64, 256, 1, 1),
    ("r50 1x1 56x256->64", "conv", 56, 56, 256, 64, 1, 1),
    ("r50 3x3 28x128->128", "conv", 28, 28, 128, 128, 3, 1),
    ("r50 3x3 14x256->256", "conv", 14, 14, 256, 256, 3, 1),
    ("r50 1x1 14x1024->256", "conv", 14, 14, 1024, 256, 1, 1),
    ("r50 3x3 7x512->512", "conv", 7, 7, 512, 512, 3, 1),
    ("r50 fc 2048->1000", "fc", 1, 1, 2048, 1000, 1, 1),
    ("mv2 1x1 56x24->144", "conv", 56, 56, 24, 144, 1, 1),
    ("mv2 1x1 14x576->96", "conv", 14, 14, 576, 96, 1, 1),
    ("mv2 expand 112x16->96", "conv", 112, 112, 16, 96, 1, 1),
    ("mv2 expand 28x32->192", "conv", 28, 28, 32, 192, 1, 1),
    ("mv2 expand 7x160->960", "conv", 7, 7, 160, 960, 1, 1),
    ("mv2 project 56x96->24", "proj", 56, 56, 96, 24, 1, 1),
    ("mv2 project 28x192->32", "proj", 28, 28, 192, 32, 1, 1),
    ("mv2 project 7x960->320", "proj", 7, 7, 960, 320, 1, 1),
    ("mv2 conv last 7x320->1280", "conv", 7, 7, 320, 1280, 1, 1),
    ("mv2 conv1 3x3/2 224x3->32", "conv", 224, 224, 3, 32, 3, 2),
    ("mv2 dw3x3/2 112x96", "dw", 112, 112, 96, 96, 3, 2),
    ("mv2 dw3x3/2 56x144", "dw", 56, 56, 144, 144, 3, 2),
    ("mv2 dw3x3 56x144", "dw", 56, 56, 144, 144, 3, 1),
    ("mv2 dw3x3 28x192", "dw", 28, 28, 192, 192, 3, 1),
    ("mv2 dw3x3 14x576", "dw", 14, 14, 576, 576, 3, 1),
    ("mv2 dw3x3 7x960", "dw", 7, 7, 960, 960, 3, 1),
]
SHAPE_BY_LABEL = {label: rest for label, *rest in SHAPES}  # label -> (kind, H, W, Cin, Cout, K, stride)
# (label, kind, H, W, C): memory-bound ops, reported in G elements / s
ELEMENTWISE = [
    ("add 56x56x256", "add", 56, 56, 256),
    ("maxpool 3x3/2 112x112x64", "maxpool", 112, 112, 64),
    ("mean 7x7x2048", "mean", 7, 7, 2048),
]


def resnet50_layers():
    """(label, kind, H, W, Cin, Cout, k, stride) of every conv/fc layer of ResNet50 v1.5."""
    layers = [("conv1", "conv", 224, 224, 3, 64, 7, 2)]
    h, cin = 56, 64
    for blocks, mid, out, stride in ((3, 64, 256, 1), (4, 128, 512, 2), (6, 256, 1024, 2), (3, 512, 2048, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            layers.append((f"1x1 {h}x{cin}->{mid}", "conv", h, h, cin, mid, 1, 1))
            layers.append((f"3x3/{s} {h}x{mid}", "conv", h, h, mid, mid, 3, s))
            if b == 0:
                layers.append((f"proj/{s} {h}x{cin}->{out}", "conv", h, h, cin, out, 1, s))
            h = (h - 1) // s + 1
            layers.append((f"1x1 {h}x{mid}->{out}", "conv", h, h, mid, out, 1, 1))
            cin = out
    layers.append(("fc", "fc", 1, 1, 2048, 1000, 1, 1))
    return layers


def mobilenetv2_layers():
    """(label, kind, H, W, Cin, Cout, k, stride) of every conv/fc layer of MobileNetV2 1.0."""
    layers = [("conv1", "conv", 224, 224, 3, 32, 3, 2)]
    h, cin = 112, 32
    for t, c, n, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                            (6, 160, 3, 2), (6, 320, 1, 1)):
        for b in range(n):
            s = stride if b == 0 else 1
            mid = cin * t
            if t != 1:
                layers.append((f"expand {h}x{cin}->{mid}", "conv", h, h, cin, mid, 1, 1))
            layers.append((f"dw/{s} {h}x{mid}", "dw", h, h, mid, mid, 3, s))
            h = (h - 1) // s + 1
            layers.append((f"project {h}x{mid}->{c}", "conv", h, h, mid, c, 1, 1))
            cin = c
    layers += [("conv last", "conv", h, h, 320, 1280, 1, 1), ("fc", "fc", 1, 1, 1280, 1000, 1, 1)]
    return layers


def network_sum(tf, layers, n, threads, repeat, rng):
    counts = {}
    for layer in layers:
        counts[layer[1:]] = counts.get(layer[1:], 0) + 1
    total_nat = total_tf = 0.0
    for (kind, h, w, cin, cout, k, s), count in counts.items():
        eng, wq = conv_engine(kind, n, h, w, cin, cout, k, s, rng)
        x = random_input(rng, eng, n)
        total_nat += count * timeit(lambda: eng.run([x], backend="native", num_threads=threads), repeat)
        if tf is not None:
            total_tf += count * timeit(tf_conv_fn(tf, kind, n, h, w, cin, cout, k, s, wq), repeat)
    return total_nat, total_tf


def random_codes(rng, spec, n):
    """Codes over the whole range of an (8-bit) engine input ``spec``'s dtype, batch n."""
    lo, hi = (0, 256) if spec.dtype == np.uint8 else (-128, 128)
    return rng.integers(lo, hi, (n,) + spec.shape[1:]).astype(spec.dtype)


def random_input(rng, eng, n):
    """random_codes of the engine's first input."""
    return random_codes(rng, eng.inputs[0], n)


def timeit(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.min(times))  # min: the machine may be shared


def out_size(h, k, s):
    pad = k // 2
    return (h + 2 * pad - k) // s + 1, pad


def conv_engine(kind, n, h, w, cin, cout, k, s, rng):
    """One CONV2D / FULLY_CONNECTED engine with int8 input, uint8 (ReLU) output (``proj``:
    uint8 input, int8 output without ReLU)."""
    b = EngineBuilder(kind, n)
    if kind == "proj":
        tx, ty = b.tensor("x", (n, h, w, cin), "uint8", 0.02), b.tensor("y", (n, h, w, cout), "int8", 0.05)
        wq = rng.integers(-127, 128, (1, 1, cin, cout)).astype(np.int8)
        m, sh = quantize_multiplier(0.02 * 0.01 / 0.05, cin * 255 * 128 + 1000)
        b.add("CONV2D", [tx], [ty], [b.const("w", wq), b.const("bias", rng.integers(-1000, 1000, cout).astype(np.int32)),
                                     b.const("m", np.full(cout, m, np.int32)), b.const("s", np.full(cout, sh, np.int32))],
              strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1)
        b.set_io([tx], [ty])
        return b.build(), wq
    if kind == "fc":
        tx, ty = b.tensor("x", (n, cin), "int8", 0.02), b.tensor("y", (n, cout), "uint8", 0.05)
        wq = rng.integers(-127, 128, (cin, cout)).astype(np.int8)
    else:
        oh, pad = out_size(h, k, s)
        ow, _ = out_size(w, k, s)
        tx = b.tensor("x", (n, h, w, cin), "int8", 0.02)
        ty = b.tensor("y", (n, oh, ow, cout), "uint8", 0.05)
        wq = rng.integers(-127, 128, (k, k, 1 if kind == "dw" else cin, cout)).astype(np.int8)
    kk = int(np.prod(wq.shape[:-1]))
    m, sh = quantize_multiplier(0.02 * 0.01 / 0.05, kk * 128 * 128 + 1000)
    consts = [b.const("w", wq), b.const("bias", rng.integers(-1000, 1000, cout).astype(np.int32)),
              b.const("m", np.full(cout, m, np.int32)), b.const("s", np.full(cout, sh, np.int32))]
    if kind == "fc":
        b.add("FULLY_CONNECTED", [tx], [ty], consts)
    else:
        b.add("CONV2D", [tx], [ty], consts, strides=(s, s), dilations=(1, 1), pads=(pad, pad, pad, pad),
              groups=cin if kind == "dw" else 1, act_min=0)
    b.set_io([tx], [ty])
    return b.build(), wq


def elementwise_engine(kind, n, h, w, c):
    b = EngineBuilder(kind, n)
    tx = b.tensor("x", (n, h, w, c), "int8", 0.02)
    inputs = [tx]
    if kind == "add":
        ta, ty = b.tensor("a", (n, h, w, c), "int8", 0.03), b.tensor("y", (n, h, w, c), "int8", 0.05)
        s = 30
        b.add("ADD", [tx, ta], [ty], multipliers=[int(0.4 * 2 ** s), int(0.6 * 2 ** s)], shifts=[s])
        inputs.append(ta)
    elif kind == "maxpool":
        ty = b.tensor("y", (n, h // 2, w // 2, c), "int8", 0.02)
        b.add("MAX_POOL", [tx], [ty], ksize=(3, 3), strides=(2, 2), pads=(0, 1, 0, 1))
    else:
        ty = b.tensor("y", (n, c), "int8", 0.02)
        m, s = quantize_multiplier(1.0, h * w * 128)
        s = min(s, 62 - (h * w).bit_length())
        b.add("MEAN", [tx], [ty], axes=(1, 2), multipliers=[int(2 ** s)], shifts=[s])
    b.set_io(inputs, [ty])
    return b.build(), len(inputs)


def tf_conv_fn(tf, kind, n, h, w, cin, cout, k, s, wq):
    if kind == "fc":
        x, wf = tf.constant(np.random.rand(n, cin).astype(np.float32)), tf.constant(wq.astype(np.float32))
        return tf.function(lambda: tf.nn.relu(tf.matmul(x, wf)))
    x = tf.constant(np.random.rand(n, h, w, cin).astype(np.float32))
    if kind == "dw":
        wf = tf.constant(wq.astype(np.float32).reshape(k, k, cin, 1))
        return tf.function(lambda: tf.nn.relu(tf.nn.depthwise_conv2d(x, wf, (1, s, s, 1), "SAME")))
    wf = tf.constant(wq.astype(np.float32))
    return tf.function(lambda: tf.nn.relu(tf.nn.conv2d(x, wf, s, "SAME")))


def tf_elementwise_fn(tf, kind, n, h, w, c):
    x = tf.constant(np.random.rand(n, h, w, c).astype(np.float32))
    if kind == "add":
        a = tf.constant(np.random.rand(n, h, w, c).astype(np.float32))
        return tf.function(lambda: x + a)
    if kind == "maxpool":
        return tf.function(lambda: tf.nn.max_pool2d(x, 3, 2, "SAME"))
    return tf.function(lambda: tf.reduce_mean(x, axis=(1, 2)))


def shape_engines(only: str, n: int, rng):
    """``(label, engine, int8 weights, input, MACs)`` of every :data:`SHAPES` entry whose label
    contains ``only``, at batch ``n``."""
    for label, kind, h, w, cin, cout, k, s in SHAPES:
        if only not in label:
            continue
        eng, wq = conv_engine(kind, n, h, w, cin, cout, k, s, rng)
        y_shape = eng.outputs[0].shape
        pix = int(np.prod(y_shape[1:-1])) if len(y_shape) > 2 else 1
        yield label, eng, wq, random_input(rng, eng, n), n * pix * cout * (k * k * (1 if kind == "dw" else cin))


def compare_paths(paths, n, threads, repeat, only, rng):
    """GMAC/s of every conv/fc shape (labels containing ``only``) on each kernel path."""
    from ratelnn.npu import ISA_PATHS, force_isa, supported_isas
    unknown = [p for p in paths if p not in ISA_PATHS]
    if unknown:
        raise SystemExit(f"unknown kernel path(s) {', '.join(unknown)} (known: {', '.join(ISA_PATHS)})")
    have = [p for p in paths if p in supported_isas()]
    for p in paths:
        if p not in have:
            print(f"not run: this CPU lacks the {p} kernel path")
    print(f"batch {n}, {threads} threads; GMAC/s per kernel path (min of {repeat} runs)")
    print(f"{'kernel':30s} {'MMACs':>8s} " + " ".join(f"{p:>12s}" for p in have))
    for label, eng, _, x, macs in shape_engines(only, n, rng):
        rates = []
        for p in have:
            with force_isa(p):
                rates.append(macs / timeit(lambda: eng.run([x], backend="native", num_threads=threads), repeat) / 1e9)
        print(f"{label:30s} {macs / 1e6:8.1f} " + " ".join(f"{r:12.1f}" for r in rates), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", default="", help="run only labels containing this text")
    ap.add_argument("--no-tf", action="store_true", help="skip the TensorFlow comparison")
    ap.add_argument("--network", choices=["resnet50", "mobilenetv2"], help="sum over every conv/fc layer of a model")
    ap.add_argument("--paths", default="", help="comma-separated kernel paths to compare (no TF), e.g. avx2,avx_vnni")
    args = ap.parse_args(argv)
    if args.paths:
        return compare_paths(args.paths.split(","), args.batch, args.threads, args.repeat, args.only,
                             np.random.default_rng(0))
    tf = None
    if not args.no_tf:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    n = args.batch
    if args.network:
        layers = resnet50_layers() if args.network == "resnet50" else mobilenetv2_layers()
        t_nat, t_tf = network_sum(tf, layers, n, args.threads, args.repeat, rng)
        line = f"{args.network} batch {n}, {args.threads} threads, {len(layers)} conv/fc layers: native {t_nat * 1e3:.1f} ms"
        if tf is not None:
            line += f", TF FP32 {t_tf * 1e3:.1f} ms, native/TF time {t_nat / t_tf:.2f}"
        print(line)
        return
    print(f"batch {n}, {args.threads} threads; GOPS = 2*MACs/s")
    print(f"{'kernel':30s} {'MMACs':>8s} {'native ms':>10s} {'GOPS':>7s} {'TF ms':>8s} {'TF GOPS':>8s} {'ratio':>6s}")
    for label, eng, wq, x, macs in shape_engines(args.only, n, rng):
        kind, h, w, cin, cout, k, s = SHAPE_BY_LABEL[label]
        t_nat = timeit(lambda: eng.run([x], backend="native", num_threads=args.threads), args.repeat)
        line = f"{label:30s} {macs / 1e6:8.1f} {t_nat * 1e3:10.3f} {2 * macs / t_nat / 1e9:7.1f}"
        if tf is not None:
            t_tf = timeit(tf_conv_fn(tf, kind, n, h, w, cin, cout, k, s, wq), args.repeat)
            line += f" {t_tf * 1e3:8.3f} {2 * macs / t_tf / 1e9:8.1f} {t_tf / t_nat:6.2f}"
        print(line, flush=True)
    print(f"{'memory-bound op':30s} {'Melems':>8s} {'native ms':>10s} {'Gel/s':>7s} {'TF ms':>8s} {'TF Gel/s':>8s} {'ratio':>6s}")
    for label, kind, h, w, c in ELEMENTWISE:
        if args.only not in label:
            continue
        eng, n_in = elementwise_engine(kind, n, h, w, c)
        xs = [rng.integers(-128, 128, (n, h, w, c)).astype(np.int8) for _ in range(n_in)]
        elems = n * h * w * c
        t_nat = timeit(lambda: eng.run(xs, backend="native", num_threads=args.threads), args.repeat)
        line = f"{label:30s} {elems / 1e6:8.2f} {t_nat * 1e3:10.3f} {elems / t_nat / 1e9:7.2f}"
        if tf is not None:
            t_tf = timeit(tf_elementwise_fn(tf, kind, n, h, w, c), args.repeat)
            line += f" {t_tf * 1e3:8.3f} {elems / t_tf / 1e9:8.2f} {t_tf / t_nat:6.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
