"""The avx_vnni kernel path (AVX-VNNI: VEX-encoded ymm vpdpbusd / vpdpwssd, no AVX-512;
ops/core/conv/gemm_dot.inc, dot_tile256) forced on its own: the dot-product GEMM and stem
kernels at their edges (K not a multiple of 4 and past one 128-quad weight sub-block, channel
tails, pixel-tile and 6-row micro-tile remainders, int8 and uint8 activations, 1 to 4
threads) against the numpy reference; the same bits as every other path the CPU has; no
AVX-512 instruction in its code; its peak probe.  Every test is reported as not run on a CPU
without AVX-VNNI."""
import platform
import re
import subprocess

import numpy as np
import pytest

from ratelnn.npu import EngineBuilder, force_isa, supported_isas
from ratelnn.npu import native

from helpers.engines import mixed_engine, requant_consts

PATH = "avx_vnni"
THREADS = (1, 2, 4)  # 4: more threads than cores on a 2-core machine
# native engines only: no TensorFlow kernel runs (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math


@pytest.fixture(autouse=True)
def _needs_avx_vnni():
    if PATH not in supported_isas():
        pytest.skip(f"not run: this CPU lacks the {PATH} kernel path (it has {', '.join(supported_isas())})")


def _codes(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _conv(name, rng, xdt, n, h, w, cin, cout, k, stride=1, pads=(0, 0, 0, 0), groups=1, ydt="uint8", relu=False,
          leaky=False, dilations=(1, 1)):
    """One CONV2D engine and a random input over the whole range of xdt."""
    oh = (h + pads[0] + pads[1] - dilations[0] * (k - 1) - 1) // stride + 1
    ow = (w + pads[2] + pads[3] - dilations[1] * (k - 1) - 1) // stride + 1
    x = _codes(rng, (n, h, w, cin), xdt)
    wq = _codes(rng, (k, k, cin // groups, cout), np.int8)
    real = 0.05 * 0.004 / 0.1 * 2.0 ** -((k * k * cin // groups).bit_length() // 2) * rng.uniform(0.5, 2, cout)
    b = EngineBuilder(name, n)
    tx, ty = b.tensor("x", x.shape, xdt, 0.05), b.tensor("y", (n, oh, ow, cout), ydt, 0.1)
    b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, real, rng.integers(-3000, 3000, cout),
                                               0.1 * real if leaky else None),
          strides=(stride, stride), dilations=dilations, pads=pads, groups=groups,
          act_min=0 if relu else None)
    b.set_io([tx], [ty])
    return b.build(), x


def _fc(name, rng, xdt, n, k, m, ydt="int16"):
    x = _codes(rng, (n, k), xdt)
    wq = _codes(rng, (k, m), np.int8)
    real = np.full(m, 0.05 * 0.004 / 0.1) * 2.0 ** -(k.bit_length() // 2)
    b = EngineBuilder(name, n)
    tx, ty = b.tensor("x", x.shape, xdt, 0.05), b.tensor("y", (n, m), ydt, 0.1)
    b.add("FULLY_CONNECTED", [tx], [ty], requant_consts(b, wq, xdt, real, rng.integers(-3000, 3000, m)))
    b.set_io([tx], [ty])
    return b.build(), x


def _check(eng, x):
    """avx_vnni at each thread count equals the reference bit for bit; returns the reference."""
    (ref,) = eng.run([x], backend="reference")
    with force_isa(PATH):
        for threads in THREADS:
            (got,) = eng.run([x], backend="native", num_threads=threads)
            np.testing.assert_array_equal(got, ref, err_msg=f"{eng.name}, {threads} threads")
    return ref


# (x dtype, K, outputs, rows): K around the quads (1, 2, 3, 5, 7) and past the 128-quad
# weight sub-block (513, 517); outputs around the 8-lane halves and 16-channel blocks; rows
# around the 6-row micro-tiles and the 48-pixel tiles (53: a remainder of 5 joins the last).
FC_CASES = [("int8", 1, 1, 1), ("uint8", 2, 7, 5), ("int8", 3, 8, 6), ("uint8", 5, 9, 7), ("int8", 7, 15, 11),
            ("uint8", 13, 16, 12), ("int8", 64, 17, 47), ("uint8", 127, 31, 48), ("int8", 513, 33, 49),
            ("uint8", 517, 47, 53), ("int8", 516, 64, 54), ("uint8", 40, 80, 101)]


@pytest.mark.parametrize("xdt,k,m,n", FC_CASES)
def test_fully_connected_edges(xdt, k, m, n):
    eng, x = _fc(f"fc_{xdt}_{k}_{m}_{n}", np.random.default_rng(k * 1000 + m), xdt, n, k, m)
    ref = _check(eng, x)
    assert np.unique(ref).size > min(8, ref.size // 2)  # not saturated


# (x dtype, H, W, Cin, Cout, kernel, stride, pads, groups, y dtype, relu, leaky)
CONV_CASES = [
    ("uint8", 7, 7, 64, 24, 1, 1, (0, 0, 0, 0), 1, "int8", False, False),  # 1x1 direct u8 rows, 49 pixels
    ("int8", 9, 6, 21, 37, 1, 1, (0, 0, 0, 0), 1, "uint8", True, False),  # 1x1, K = 21 (copied, padded rows)
    ("int8", 8, 9, 21, 37, 3, 1, (1, 1, 1, 1), 1, "uint8", True, False),  # im2col, K = 189
    ("uint8", 9, 11, 10, 17, 3, 2, (0, 1, 1, 0), 1, "int16", False, True),  # strided, leaky: 4-lane epilogue
    ("int8", 6, 7, 18, 34, 3, 1, (1, 1, 0, 2), 2, "int8", False, False),  # grouped (cg 9, cout_g 17)
    ("uint8", 14, 14, 96, 48, 3, 1, (1, 1, 1, 1), 1, "uint8", True, False),  # K = 864: 2 weight sub-blocks
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}x{c[3]}-{c[4]}-k{c[5]}g{c[8]}")
def test_conv_edges(case):
    xdt, h, w, cin, cout, k, s, pads, groups, ydt, relu, leaky = case
    eng, x = _conv(f"conv{h}x{w}x{cin}", np.random.default_rng(cin * 100 + cout), xdt, 2, h, w, cin, cout, k, s, pads,
                   groups, ydt, relu, leaky)
    ref = _check(eng, x)
    assert np.unique(ref).size > 8


# stem convs (Cin <= 4, groups 1, dilation 1 across: kernel-row quads from a padded u8 copy):
# (x dtype, Cin, k, stride, dilation down, pads, H, W, Cout)
STEM_CASES = [("int8", 3, 7, 2, 1, (3, 3, 3, 3), 16, 15, 64), ("uint8", 3, 3, 2, 1, (0, 1, 0, 1), 15, 17, 32),
              ("int8", 1, 3, 1, 1, (1, 1, 1, 1), 9, 13, 9), ("uint8", 4, 3, 1, 2, (2, 1, 0, 2), 8, 11, 20),
              ("int8", 2, 2, 1, 1, (0, 1, 1, 0), 5, 7, 17)]


@pytest.mark.parametrize("case", STEM_CASES, ids=lambda c: f"{c[0]}-cin{c[1]}-k{c[2]}s{c[3]}d{c[4]}")
def test_stem_edges(case):
    xdt, cin, k, s, d, pads, h, w, cout = case
    eng, x = _conv(f"stem{cin}x{k}", np.random.default_rng(cout), xdt, 2, h, w, cin, cout, k, s, pads, ydt="int8",
                   dilations=(d, 1))
    ref = _check(eng, x)
    assert np.unique(ref).size > 8


def test_same_bits_as_every_other_path():
    """The mixed engine (3x3 conv, depthwise, ADD, FC), a stem and a 1x1 conv on avx_vnni give
    the bits of every other path this CPU has (and of the reference)."""
    rng = np.random.default_rng(3)
    cases = [mixed_engine(), _conv("stem", rng, "int8", 1, 20, 20, 3, 32, 3, 2, (0, 1, 0, 1), relu=True),
             _conv("pw", rng, "uint8", 1, 10, 10, 40, 50, 1, ydt="int8")]
    others = [p for p in supported_isas() if p != PATH]
    assert others  # portable at least
    for eng, x in cases:
        with force_isa(PATH):
            (mine,) = eng.run([x], backend="native", num_threads=2)
        for p in others:
            with force_isa(p):
                (theirs,) = eng.run([x], backend="native", num_threads=2)
            np.testing.assert_array_equal(mine, theirs, err_msg=f"{eng.name}: {PATH} vs {p}")
        np.testing.assert_array_equal(mine, eng.run([x], backend="reference")[0])


def test_peak_probe_runs_the_ymm_dot_product():
    with force_isa(PATH):
        peak = native.peak_gmacs(seconds=0.02, repeats=1)
    assert peak["path"] == PATH and peak["instruction"].startswith("vpdpbusd ymm")
    assert peak["gmacs_per_core"] > 1.0


def _disassembly(library):
    return subprocess.run(["objdump", "-d", "-C", str(library)], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction check")
def test_no_avx512_instruction_in_the_path():
    """The isa_avx_vnni functions use VEX encodings only (an EVEX one would fault on a CPU
    with AVX-VNNI and no AVX-512, e.g. Sierra Forest): no instruction starts with the EVEX
    byte 0x62, no zmm / mask / upper-16 vector register, and the VNNI multiply-adds are the
    {vex} forms; the ymm vpdpbusd kernel is there."""
    function, bad, dot = None, [], 0
    for line in _disassembly(native.library_path()).splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            function = head.group(1) if re.search(r"\bisa_avx_vnni\b", head.group(1)) else None
            continue
        fields = line.split("\t")
        if function is None or len(fields) < 3:  # another function, or a continuation of raw bytes
            continue
        raw, ins = fields[1].split(), fields[2]
        evex = raw[:1] == ["62"] or (raw[:1] in (["66"], ["67"]) and raw[1:2] == ["62"])
        if evex or re.search(r"%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b", ins) or \
                (re.search(r"\bvpdp(bu|ws)s?d", ins) and not ins.startswith("{vex}")):
            bad.append(f"{function}: {ins}")
        dot += ins.startswith("{vex} vpdpbusd") and "%ymm" in ins
    assert bad == []
    assert dot > 0
