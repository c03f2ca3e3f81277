"""Portable native code: libraries built for the baseline, kernel paths chosen at run time
(ops/core/isa.h), every path bit-exact, RATELNN_ISA forcing a path, and the op-library glue
compiling for a Sapphire Rapids target (AVX512-FP16), whatever machine runs the tests."""
import concurrent.futures
import os
import platform
import re
import subprocess
import sys

import numpy as np
import pytest

from ratelnn import _build, oplib
from ratelnn.npu import ISA_PATHS, EngineError, force_isa, native_isa, supported_isas
from ratelnn.npu import native

from ratelnn.npu import EngineBuilder

from helpers.engines import assert_native_equals_reference, mixed_engine, requant_consts
from helpers.paths import TESTS

X86 = platform.machine() in ("x86_64", "AMD64")
# native engines and compiles of the op library: no TensorFlow kernel runs (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math



@pytest.fixture(scope="module")
def engine_and_input():
    return mixed_engine()


@pytest.mark.parametrize("path", ISA_PATHS)
def test_every_kernel_path_matches_the_reference(path, engine_and_input):
    """Each path this CPU has runs bit-exactly; a path it lacks is reported as not run."""
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU lacks the {path} kernel path (it has {', '.join(supported_isas())})")
    eng, x = engine_and_input
    (ref,) = eng.run([x], backend="reference")
    with force_isa(path):
        assert native_isa() == path
        for threads in (1, 2):
            (got,) = eng.run([x], backend="native", num_threads=threads)
            np.testing.assert_array_equal(got, ref)
    assert np.unique(ref).size > 10  # the engine computes something non-trivial


def _bit_exact_on_path(path, cases):
    """Run (engine, input) cases on the reference and forced onto `path` (1 and 2 threads),
    asserting equal bits; skip, saying so, when the CPU lacks the path.  Returns how many
    cases' outputs take more than 8 distinct values."""
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU lacks the {path} kernel path (it has {', '.join(supported_isas())})")
    distinct = 0
    for eng, x in cases:
        (ref,) = eng.run([x], backend="reference")
        with force_isa(path):
            for threads in (1, 2):
                (got,) = eng.run([x], backend="native", num_threads=threads)
                np.testing.assert_array_equal(got, ref, err_msg=f"{eng.name}, {path}, {threads} threads")
        distinct += np.unique(ref).size > 8
    return distinct


def _depthwise_cases():
    """(engine, input) pairs aimed at the depthwise kernels: input widths 1..16 (the 8/4/2/1
    column runs) and 37-200 at stride 2 (interior 8-pixel runs), strides 1 and 2, asymmetric
    pads, kernel heights 3 and 4, channels off the 16-channel blocks and whole groups of 64
    (with a 16-channel tail: 144; 32 at stride 1: pixel pairs, odd widths), int8/uint8/int16
    activations with int8/int16 weights, batch 2, ReLU."""
    rng = np.random.default_rng(12)
    cases = []

    def case(i, w, xdt, c, s):
        wdt = "int16" if i % 5 == 4 and xdt != "int16" else "int8"
        kh = 3 + i % 2
        pads = (i % 2, (i // 2) % 2, (i // 4) % 2, 1 - i % 2)
        h, w = max(kh - pads[0] - pads[1], 2 + i % 3), max(w, 3 - pads[2] - pads[3])
        oh, ow = (h + pads[0] + pads[1] - kh) // s + 1, (w + pads[2] + pads[3] - 3) // s + 1
        lo, hi = np.iinfo(xdt).min, np.iinfo(xdt).max
        x = rng.integers(lo, hi + 1, (2, h, w, c)).astype(xdt)
        wq = rng.integers(np.iinfo(wdt).min, np.iinfo(wdt).max + 1, (kh, 3, 1, c)).astype(wdt)
        b = EngineBuilder(f"dw{w}", 2)
        tx, ty = b.tensor("x", x.shape, xdt, 0.05), b.tensor("y", (2, oh, ow, c), ("uint8", "int8")[i % 2], 0.1)
        b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, np.full(c, 0.05 * 0.002 / 0.1) * (1 if wdt == "int8" else 2 ** -8),
                                                   rng.integers(-3000, 3000, c)),
              strides=(s, s), dilations=(1, 1), pads=pads, groups=c, act_min=0 if i % 4 == 0 else None)
        b.set_io([tx], [ty])
        cases.append((b.build(), x))

    for i, w in enumerate([*range(1, 17), 37, 40, 45, 200]):  # 200: one output row, blocks split over 2 threads
        case(i, w, ("int8", "uint8", "int16")[i % 3], (20, 48, 65, 64, 144, 32, 32)[i % 7], 2 if w > 16 else 1 + (i // 3) % 2)
    case(6, 16, "int8", 32, 1)  # 32 channels, odd output widths (15, 15): the pairs' last pixel
    case(13, 15, "uint8", 32, 1)
    return cases


@pytest.mark.parametrize("path", ISA_PATHS)
def test_depthwise_on_every_kernel_path(path):
    """Depthwise convs forced onto each path this CPU has (AVX-512 VNNI: the vpdpbusd column
    runs, strides 1 and 2; AVX2/AVX-VNNI/AVX-512: the int32-lane runs; portable: the padded copy), 1 and 2 threads,
    bit-exact with the reference; a path the CPU lacks is reported as not run."""
    assert _bit_exact_on_path(path, _depthwise_cases()) >= 12  # the outputs are not saturated constants


def _stem_cases():
    """(engine, input) pairs aimed at the stem convs (few input channels, groups 1; on the VNNI
    paths read as kernel-row quads from a padded u8 copy, no im2col): Cin 1-4, kernels 3x3,
    7x7 (K = 147), 5x3 and 2x2, strides 1-2, a dilation, odd widths, asymmetric pads,
    channels off the 16-channel blocks, int8/uint8/int16 activations, batch 1-3, the fused
    16-lane epilogue and the int64-lane one (leaky ReLU), ReLU."""
    rng = np.random.default_rng(5)
    cases = []
    # (Cin, kh, kw, stride, dilation, pads, H, W, Cout, x dtype, batch, leaky)
    for i, (cin, kh, kw, s, d, pads, h, w, cout, xdt, n, leaky) in enumerate([
            (3, 3, 3, 2, 1, (0, 1, 0, 1), 15, 17, 32, "int8", 1, False),  # MobileNetV2's Conv1
            (3, 7, 7, 2, 1, (3, 3, 3, 3), 16, 15, 64, "int8", 2, False),  # ResNet50's conv1
            (1, 3, 3, 1, 1, (1, 1, 1, 1), 9, 13, 8, "uint8", 3, False),   # fer's first conv
            (2, 3, 3, 1, 2, (2, 1, 0, 2), 8, 11, 20, "int8", 2, True),
            (4, 5, 3, 2, 1, (1, 2, 2, 0), 12, 9, 37, "uint8", 1, False),
            (3, 2, 2, 1, 1, (0, 1, 1, 0), 5, 7, 17, "uint8", 2, True),
            (3, 3, 3, 2, 1, (1, 1, 1, 1), 9, 11, 24, "int16", 2, False),
            (4, 3, 3, 1, 1, (1, 1, 1, 1), 6, 19, 48, "int8", 3, False)]):
        oh, ow = (h + pads[0] + pads[1] - d * (kh - 1) - 1) // s + 1, (w + pads[2] + pads[3] - kw) // s + 1
        lo, hi = np.iinfo(xdt).min, np.iinfo(xdt).max
        x = rng.integers(lo, hi + 1, (n, h, w, cin)).astype(xdt)
        wq = rng.integers(-128, 128, (kh, kw, cin, cout)).astype(np.int8)
        real = np.full(cout, 0.05 * 0.002 / 0.1) * 2.0 ** -(kh * kw * cin // 40)
        b = EngineBuilder(f"stem{i}", n)
        tx, ty = b.tensor("x", x.shape, xdt, 0.05), b.tensor("y", (n, oh, ow, cout), ("int8", "uint8")[i % 2], 0.1)
        b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, real, rng.integers(-3000, 3000, cout),
                                                   0.1 * real if leaky else None),
              strides=(s, s), dilations=(d, 1), pads=pads, groups=1, act_min=0 if i % 3 == 0 else None)
        b.set_io([tx], [ty])
        cases.append((b.build(), x))
    return cases


def _stem_epilogue_cases():
    """(engine, input) pairs for the stem convs' fused epilogue forms on avx512_vnni (8-pixel
    tiles, the last one overlapping the one before: output widths 9-19, none a multiple of 8):
    int16 outputs (the 16-lane stores), uint8 with ReLU6-like bounds, int8 over its whole
    range, a lone 16-channel block after a pair, Cin 1-8, strides 1-2, batch 1-3."""
    rng = np.random.default_rng(8)
    cases = []
    # (Cin, k, stride, pads, H, W, Cout, x dtype, y dtype, act_min, act_max, batch)
    for i, (cin, k, s, pads, h, w, cout, xdt, ydt, amin, amax, n) in enumerate([
            (3, 3, 2, (0, 1, 0, 1), 11, 37, 32, "int8", "int16", 0, None, 1),
            (3, 7, 2, (3, 3, 3, 3), 9, 30, 24, "uint8", "int16", None, None, 2),
            (4, 3, 1, (1, 1, 1, 1), 5, 11, 48, "int8", "uint8", 0, 60, 3),
            (1, 3, 1, (1, 1, 1, 1), 6, 21, 16, "uint8", "int8", None, None, 2),
            (2, 5, 2, (2, 2, 2, 2), 7, 26, 40, "int8", "uint8", 0, None, 1),
            (8, 3, 1, (1, 1, 1, 1), 9, 23, 8, "uint8", "uint8", 0, None, 2),   # fer's second conv
            (5, 3, 2, (0, 1, 0, 1), 8, 19, 24, "int8", "int8", None, None, 1)]):
        oh, ow = (h + pads[0] + pads[1] - k) // s + 1, (w + pads[2] + pads[3] - k) // s + 1
        lo, hi = np.iinfo(xdt).min, np.iinfo(xdt).max
        x = rng.integers(lo, hi + 1, (n, h, w, cin)).astype(xdt)
        wq = rng.integers(-128, 128, (k, k, cin, cout)).astype(np.int8)
        real = rng.uniform(0.5, 2.0, cout) * (0.05 * 0.004 / 0.1) * 2.0 ** -(k * k * cin // 40)
        b = EngineBuilder(f"stem_epi{i}", n)
        tx, ty = b.tensor("x", x.shape, xdt, 0.05), b.tensor("y", (n, oh, ow, cout), ydt, 0.1)
        b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, real, rng.integers(-3000, 3000, cout)),
              strides=(s, s), dilations=(1, 1), pads=pads, groups=1, act_min=amin, act_max=amax)
        b.set_io([tx], [ty])
        cases.append((b.build(), x))
    return cases


@pytest.mark.parametrize("cases", [_stem_cases, _stem_epilogue_cases], ids=["shapes", "epilogue-forms"])
@pytest.mark.parametrize("path", ISA_PATHS)
def test_stem_convs_on_every_kernel_path(path, cases):
    """Stem convs (their shapes, and every fused epilogue form) forced onto each path this CPU
    has, 1 and 2 threads, bit-exact with the reference; a path the CPU lacks is reported as
    not run."""
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU lacks the {path} kernel path (it has {', '.join(supported_isas())})")
    for eng, x in cases():
        (ref,) = eng.run([x], backend="reference")
        with force_isa(path):
            for threads in (1, 2):
                (got,) = eng.run([x], backend="native", num_threads=threads)
                np.testing.assert_array_equal(got, ref, err_msg=f"{eng.name}, {path}, {threads} threads")
        assert np.unique(ref).size > 8, eng.name  # not saturated constants
        assert (ref == ref.min()).mean() < 0.9 and (ref == ref.max()).mean() < 0.9, eng.name  # not clamped flat


def test_best_path_is_the_default():
    """The best supported path runs unless RATELNN_ISA forces one (as when the suite is run
    once per path to emulate an older CPU)."""
    assert native_isa() == (os.environ.get("RATELNN_ISA") or supported_isas()[-1])
    assert supported_isas()[0] == "portable"
    if X86:
        assert "avx2" in supported_isas() or "avx2" not in _cpu_flags()


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return set(re.search(r"^flags\s*:(.*)$", f.read(), re.M).group(1).split())
    except (OSError, AttributeError):
        return set()


def _python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


@pytest.mark.parametrize("path", ISA_PATHS)
def test_environment_variable_forces_a_path(path):
    code = "from ratelnn.npu import native_isa; print(native_isa())"
    proc = _python(code, RATELNN_ISA=path)
    if path in supported_isas():
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == path
    else:  # a path the machine lacks is an error naming it, never a silent fallback
        assert proc.returncode != 0
        assert f"RATELNN_ISA={path}" in proc.stderr and "cannot run" in proc.stderr


def test_unknown_path_in_the_environment_is_a_clear_error_when_an_engine_runs():
    proc = _python(
        "from helpers.engines import mixed_engine\n"
        "from ratelnn.npu import EngineError\n"
        "eng, x = mixed_engine()\n"
        "try:\n    eng.run([x], backend='native')\nexcept EngineError as e:\n    print('EngineError:', e)\n",
        RATELNN_ISA="sse9", PYTHONPATH=str(TESTS))
    assert proc.returncode == 0, proc.stderr
    assert "EngineError:" in proc.stdout and "RATELNN_ISA=sse9 names no kernel path" in proc.stdout
    with pytest.raises(EngineError, match="unknown kernel path"):
        native.set_isa("sse9")


def _functions_with_wide_instructions(library):
    """Names of the functions in ``library`` that contain a VEX/EVEX-encoded instruction."""
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(library)], capture_output=True,
                         text=True, check=True).stdout
    found, function = set(), None
    for line in out.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            function = head.group(1)
            continue
        ins = re.match(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$", line)
        if ins and function and (ins.group(1).startswith("v") or "%ymm" in ins.group(2) or "%zmm" in ins.group(2)):
            found.add(function)
    return found


@pytest.mark.skipif(not X86, reason="x86 instruction check")
def test_wide_instructions_only_inside_the_run_time_paths():
    """Outside the isa_avx2/isa_avx_vnni/isa_avx512 kernel namespaces the native library is baseline
    x86-64 code, so it loads and runs on any x86-64 machine (no SIGILL on an older host)."""
    wide = _functions_with_wide_instructions(native.library_path())
    assert any("isa_avx512_vnni" in f for f in wide) and any("isa_avx_vnni" in f for f in wide)  # compiled in
    outside = sorted(f for f in wide if not re.search(r"\bisa_(avx2|avx_vnni|avx512|avx512_vnni|amx)\b", f))
    assert outside == []


def test_cache_key_depends_on_toolchain_not_on_cpu_features():
    identity = _build.toolchain_identity(_build.compiler_command()[0])
    assert platform.machine() in identity
    assert not any(flag.startswith(("-march", "-mtune", "-mavx")) for flag in _build.COMPILE_FLAGS)


def _syntax_check(command, source):
    proc = subprocess.run([*command, "-march=sapphirerapids", "-fsyntax-only", source], capture_output=True,
                          text=True)
    return source, proc.returncode, proc.stderr


def _build_units(framework):
    """(compiler command, source) of every object of ``framework``'s op library."""
    if framework == "tensorflow":
        flags, _ = oplib.tensorflow_build_flags()
        glue = oplib.tensorflow_sources()
    else:
        flags, _ = oplib.mxnet_build_flags()
        glue = [s for s in oplib.mxnet_sources() if "/ops/" in s]  # MXNet's own lib_api.cc aside
    units = [(_build.compiler_command(flags), s) for s in glue]
    return units + [(_build.compiler_command(_build.core_flags(flags)), s) for s in oplib.core_sources()]


@pytest.mark.skipif(not X86, reason="x86 target")
def test_op_libraries_compile_for_a_sapphire_rapids_target():
    """The exact flags of the builds, with the compiler targeting Sapphire Rapids (AVX512-FP16,
    AMX): TensorFlow's Eigen breaks under AVX512-FP16 unless the glue turns it off.  The
    objects both libraries share (ops/core, same flags) are checked once."""
    units = {(tuple(command), source): None for fw in ("tensorflow", "mxnet") for command, source in _build_units(fw)}
    # one ABI: both libraries link the same ops/core objects (+ 1: ops/mxnet/ratel_mx_ops.cc)
    assert len(units) == len(oplib.tensorflow_sources()) + len(oplib.core_sources()) + 1
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda unit: _syntax_check(*unit), units))
    failures = [(s, err[-2000:]) for s, rc, err in results if rc != 0]
    assert failures == []


PEAK_INSTRUCTIONS = {"portable": "pmaddwd", "avx2": "vpmaddwd + vpaddd ymm", "avx_vnni": "vpdpbusd ymm",
                     "avx512": "vpmaddwd + vpaddd zmm", "avx512_vnni": "vpdpbusd zmm", "amx": "tdpbusd tiles"}


@pytest.mark.parametrize("path", ISA_PATHS)
def test_peak_probe_names_each_paths_multiply_add(path):
    """bench/emulator_speed.py's machine peak: each path's probe times that path's own
    multiply-add (the instruction its GEMM kernels use), at a plausible rate."""
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU has no {path} path")
    with force_isa(path):
        peak = native.peak_gmacs(seconds=0.02, repeats=1)
    assert peak["path"] == path and peak["instruction"].startswith(PEAK_INSTRUCTIONS[path]), peak
    assert 1.0 < peak["gmacs_per_core"] < 10000.0, peak


def _gemm_cases():
    """(engine, input) pairs aimed at the GEMM of 1x1 and KxK convs (on amx the tdpbusd tiles
    where M >= 16, K >= 64, >= 32 channels; vpdpbusd below): odd channel counts, K off the
    64-value tile steps (27, 99, 200, 300, 576) and on them (64, 256), strides, asymmetric
    pads, a dilation, groups, a 1x1 image at batch 20 (a dense layer's shape), int8/uint8
    activations, row counts off the 16-row tiles (49 and 50: 48 on the tiles, the rest on the
    vpdpbusd tail), ReLU and the whole int8 range; a 7x7 3x3 conv of 256 channels (ResNet50's
    last stage at batch 1: one pixel tile whose channel splits read the rows their thread
    packed for its first split, and whose panels prefetch the next weight sub-block); stems
    with 8 output channels (two pixels per vector on avx512_vnni) on 1, 2, 3 and 8 input
    channels (1, 2, 3 and 6 quads a kernel row: odd and even), 16 pixels a row and more, the
    last tile of a row overlapping the one before (17, 19 pixels), strided and padded; 5 output
    channels with K = 1080 (AVX2's half-block GEMM over several weight sub-blocks)."""
    rng = np.random.default_rng(31)
    cases = []
    # (Cin, kh, kw, stride, dilation, pads, H, W, Cout, groups, x dtype, batch)
    for i, (cin, kh, kw, s, d, pads, h, w, cout, groups, xdt, n) in enumerate([
            (64, 1, 1, 1, 1, (0, 0, 0, 0), 7, 7, 96, 1, "uint8", 1),
            (256, 1, 1, 2, 1, (0, 0, 0, 0), 9, 9, 33, 1, "int8", 2),
            (33, 3, 3, 1, 1, (1, 1, 1, 1), 8, 11, 47, 1, "int8", 1),
            (11, 3, 3, 2, 2, (2, 1, 0, 2), 13, 10, 64, 1, "uint8", 2),
            (64, 3, 3, 1, 1, (1, 1, 1, 1), 6, 6, 70, 2, "int8", 2),
            (300, 1, 1, 1, 1, (0, 0, 0, 0), 1, 1, 37, 1, "uint8", 20),
            (200, 1, 1, 1, 1, (0, 0, 0, 0), 5, 5, 130, 1, "int8", 1),
            (3, 3, 3, 1, 1, (0, 0, 0, 0), 9, 9, 48, 1, "int8", 1),
            (256, 3, 3, 1, 1, (1, 1, 1, 1), 7, 7, 128, 1, "int8", 1),
            (8, 3, 3, 1, 1, (0, 0, 0, 0), 7, 21, 8, 1, "uint8", 2),
            (1, 3, 3, 2, 1, (1, 0, 1, 1), 9, 37, 8, 1, "int8", 1),
            (8, 3, 3, 1, 1, (1, 1, 1, 1), 4, 32, 8, 1, "int8", 1),
            (1, 3, 3, 1, 1, (0, 0, 0, 0), 5, 18, 8, 1, "uint8", 3),
            (3, 3, 3, 1, 1, (1, 1, 1, 1), 6, 17, 8, 1, "int8", 1),
            (2, 3, 3, 1, 1, (0, 0, 0, 0), 5, 40, 8, 1, "uint8", 1),
            (120, 3, 3, 1, 1, (1, 1, 1, 1), 5, 6, 5, 1, "int8", 2)]):
        oh, ow = (h + pads[0] + pads[1] - d * (kh - 1) - 1) // s + 1, (w + pads[2] + pads[3] - d * (kw - 1) - 1) // s + 1
        lo, hi = np.iinfo(xdt).min, np.iinfo(xdt).max
        x = rng.integers(lo, hi + 1, (n, h, w, cin)).astype(xdt)
        wq = rng.integers(-128, 128, (kh, kw, cin // groups, cout)).astype(np.int8)
        real = np.full(cout, 40.0 / (5461.0 * np.sqrt(kh * kw * cin // groups)))  # outputs spread over ~40 codes
        b = EngineBuilder(f"gemm{i}", n)
        tx, ty = b.tensor("x", x.shape, xdt, 0.05), b.tensor("y", (n, oh, ow, cout), ("int8", "uint8")[i % 2], 0.1)
        b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, real, rng.integers(-3000, 3000, cout)),
              strides=(s, s), dilations=(d, d), pads=pads, groups=groups, act_min=0 if i % 3 == 0 else None)
        b.set_io([tx], [ty])
        cases.append((b.build(), x))
    return cases


@pytest.mark.parametrize("path", ISA_PATHS)
def test_gemm_convs_on_every_kernel_path(path):
    """1x1, KxK, strided, dilated, grouped and dense-shaped convs forced onto each path this
    CPU has (amx: the tile GEMM), 1 and 2 threads, bit-exact with the reference; a path the
    CPU lacks is reported as not run."""
    assert _bit_exact_on_path(path, _gemm_cases()) >= 6  # the outputs are not saturated constants


@pytest.mark.parametrize("xdt", ["int8", "uint8"])
def test_epilogue_rounding_ties_on_every_path(xdt):
    """M = 2^30 with shifts 33..36 puts t * M on the rounding ties (t = 4 mod 8 for s = 33):
    negative ties round away from zero only with u = p - [p < 0], the step the high-dword
    epilogues (8 lanes on AVX2 and AVX-VNNI, 16 on AVX-512) must not drop; every path the CPU
    has, 1 and 2 threads.  Random multipliers almost never hit a tie."""
    rng = np.random.default_rng(11)
    n, k, m = 53, 5, 40
    info = np.iinfo(xdt)
    x = rng.integers(info.min, info.max + 1, (n, k)).astype(xdt)
    wq = rng.integers(-128, 128, (k, m)).astype(np.int8)
    shifts = 33 + np.arange(m) % 4
    bias = rng.integers(-64, 64, m) * 4
    b = EngineBuilder("ties", n)
    tx, ty = b.tensor("x", x.shape, xdt, 0.1), b.tensor("y", (n, m), "int16", 1.0)
    b.add("FULLY_CONNECTED", [tx], [ty], [b.const("w", wq), b.const("bias", bias.astype(np.int32)),
                                           b.const("m", np.full(m, 2 ** 30, np.int32)),
                                           b.const("s", shifts.astype(np.int32))])
    b.set_io([tx], [ty])
    eng = b.build()
    t = x.astype(np.int64) @ wq.astype(np.int64) + bias
    assert np.sum((t < 0) & (t % 2 ** (shifts - 30) == 2 ** (shifts - 31))) > 50  # negative ties
    assert_native_equals_reference(eng, [x], thread_counts=(1, 2))
