"""A PAD that only the CONV2D or MAX_POOL after it reads runs as that instruction's own padding
on the native executor (ops/core/npu_plan.cc, plan_pad_folds): same bits as the reference on
every kernel path, the folded PAD timed at 0 us, and PADs whose value or readers forbid the fold
still run."""
import re

import numpy as np
import pytest

from ratelnn.npu import ISA_PATHS, EngineBuilder, force_isa, supported_isas

from helpers.engines import requant_consts

# native engines only: no TensorFlow kernel runs (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math


def _pad_then(kind, xdt, pads, value, rng, n=1, h=23, w=20, c=24, k=3, s=2, second_reader=False):
    """(engine, input): x -> PAD (pads per side of H and W, `value`) -> `kind` (conv: a k x k
    stride-s CONV2D to 40 channels, dw: a k x k depthwise one, pool: a k x k MAX_POOL), each with
    no padding of its own; second_reader: the PAD's output is also an engine output."""
    x = rng.integers(np.iinfo(xdt).min, np.iinfo(xdt).max + 1, (n, h, w, c)).astype(xdt)
    (pt, pb), (pl, pr) = pads
    ph, pw = h + pt + pb, w + pl + pr
    oh, ow = (ph - k) // s + 1, (pw - k) // s + 1
    b = EngineBuilder(f"pad_{kind}", n)
    tx = b.tensor("x", x.shape, xdt, 0.05)
    tp = b.tensor("p", (n, ph, pw, c), xdt, 0.05)
    b.add("PAD", [tx], [tp], name="pad", pads=[0, 0, pt, pb, pl, pr, 0, 0], pad_value=value)
    if kind == "pool":
        ty = b.tensor("y", (n, oh, ow, c), xdt, 0.05)
        b.add("MAX_POOL", [tp], [ty], name="pool", ksize=(k, k), strides=(s, s), pads=(0, 0, 0, 0))
    else:
        cout, groups = (40, 1) if kind == "conv" else (c, c)
        wq = rng.integers(-128, 128, (k, k, c // groups, cout)).astype(np.int8)
        real = np.full(cout, 40.0 / (5461.0 * np.sqrt(k * k * c // groups)))
        ty = b.tensor("y", (n, oh, ow, cout), "uint8", 0.1)
        b.add("CONV2D", [tp], [ty], requant_consts(b, wq, xdt, real, rng.integers(-3000, 3000, cout)), name="conv",
              strides=(s, s), dilations=(1, 1), pads=(0, 0, 0, 0), groups=groups, act_min=0)
    b.set_io([tx], [ty, tp] if second_reader else [ty])
    return b.build(), x


def _cases():
    """(engine, input, whether the PAD folds): ResNet50's conv1_pad (3 on each side before a
    7x7/2 conv of 3 channels) and pool1_pad (1 before a 3x3/2 MAX_POOL of uint8), MobileNetV2's
    stride-2 pad (0 before, 1 after) before a depthwise and a GEMM conv, int8 pools padded with
    -128; and PADs that stay: a conv padded with a code other than 0, an int8 pool padded with 0
    (a window of negative codes would see it), a pool padding as wide as its window, a PAD that
    is also an engine output."""
    rng = np.random.default_rng(7)
    return [
        (*_pad_then("conv", "int8", ((3, 3), (3, 3)), 0, rng, h=40, w=37, c=3, k=7), True),
        (*_pad_then("pool", "uint8", ((1, 1), (1, 1)), 0, rng, n=2, h=56, w=56, c=64), True),
        (*_pad_then("dw", "uint8", ((0, 1), (0, 1)), 0, rng, h=28, w=28, c=96), True),
        (*_pad_then("conv", "uint8", ((0, 1), (0, 1)), 0, rng), True),
        (*_pad_then("pool", "int8", ((0, 2), (1, 0)), -128, rng, n=2), True),
        (*_pad_then("conv", "int8", ((1, 1), (1, 1)), 5, rng), False),
        (*_pad_then("pool", "int8", ((1, 1), (1, 1)), 0, rng, n=2, h=56, w=56, c=64), False),
        (*_pad_then("pool", "uint8", ((3, 0), (0, 0)), 0, rng, h=40, w=40, c=64), False),
        (*_pad_then("conv", "uint8", ((1, 1), (1, 1)), 0, rng, second_reader=True), False),
    ]


def _pad_microseconds(stderr):
    """The PAD's times from the profile lines (RATELNN_NPU_PROFILE=1) in `stderr`."""
    return [float(line.split("\t")[-1]) for line in stderr.splitlines()
            if re.match(r"npu-profile\t", line) and line.split("\t")[4] == "PAD"]


@pytest.mark.parametrize("path", ISA_PATHS)
def test_folded_pads_match_the_reference_on_every_kernel_path(path, monkeypatch, capfd):
    """Every case bit-exact with the reference, forced onto `path` (1 and 2 threads); with the
    profile on, a folded PAD reads 0 us (it never runs) and the others take time."""
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU lacks the {path} kernel path (it has {', '.join(supported_isas())})")
    for eng, x, folds in _cases():
        want = eng.run([x], backend="reference")
        with force_isa(path):
            for threads in (1, 2):
                got = eng.run([x], backend="native", num_threads=threads)
                for g, r in zip(got, want):
                    np.testing.assert_array_equal(g, r, err_msg=f"{eng.name}, {path}, {threads} threads")
            capfd.readouterr()
            monkeypatch.setenv("RATELNN_NPU_PROFILE", "1")
            eng.run([x], backend="native", num_threads=1)
            monkeypatch.delenv("RATELNN_NPU_PROFILE")
        (us,) = _pad_microseconds(capfd.readouterr().err)
        assert (us == 0.0) == folds, f"{eng.name} {x.dtype}: PAD {us} us, folded expected: {folds}"
