"""RatelQuant / RatelDequant / RatelMinMax in real TensorFlow, and the op-library cache.

The library is built (or taken from the cache) once per test session by the ``ops``
fixture. Quant/Dequant must equal ratelnn/ir/arith.py bit for bit.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import ratelnn
from ratelnn import _build
from ratelnn.calibration.stats import load_statistics
from ratelnn.ir import arith
from ratelnn.npu import supported_isas

from helpers.stats import calibration_graph, expected_ranges, graph_tensors, random_batches, \
    subprocess_env

import tensorflow as tf

DTYPES = ("int8", "uint8", "int16", "int32")
ROUND_MODES = tuple(arith.ROUNDERS)
SPECIAL_VALUES = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4028235e38,
                           -3.4028235e38, 1e-45, -1e-45, 1.1754944e-38, 2147483648.0,
                           -2147483904.0, 2147483520.0], dtype=np.float32)


@pytest.fixture(scope="session")
def ops():
    return ratelnn.tf_init()


def near_ties(scales, rng) -> np.ndarray:
    """Inputs whose quotient by one of ``scales`` lies within 3 ulps of a half-integer (both
    sides, up to the int16 range): where a quotient not computed by division could round to
    another code."""
    halves = rng.integers(-33000, 33000, 400) + 0.5
    centre = np.concatenate([(halves * s).astype(np.float32) for s in scales])
    out, up, down = [centre], centre, centre
    for _ in range(3):
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
        out += [up, down]
    return np.concatenate(out)


def f32(v: float) -> float:
    return float(np.float32(v))


scales = st.one_of(st.sampled_from([2.0 ** k for k in range(-12, 13)]),
                   st.floats(f32(1e-30), f32(1e30), width=32))


@st.composite
def float_inputs(draw, scale: float, size: int):
    """Random float32 values (NaN, Inf, subnormals included), exact ties (k + 0.5) * scale,
    values around the code range and special values, in random order."""
    anything = draw(hnp.arrays(np.float32, size, elements=st.floats(width=32)))
    ks = draw(hnp.arrays(np.int64, size, elements=st.integers(-70000, 70000)))
    in_range = draw(hnp.arrays(np.float32, size,
                               elements=st.floats(-40000, 40000, width=32)))
    x = np.concatenate([anything, ((ks + 0.5) * scale).astype(np.float32),
                        in_range * np.float32(scale), SPECIAL_VALUES])
    return x[draw(st.permutations(range(x.size)))]


def assert_same_bits(actual, expected):
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual.view(f"u{actual.itemsize}"),
                                  expected.view(f"u{expected.itemsize}"))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), scale=scales)
def test_quant_per_tensor_matches_reference(ops, data, scale):
    x = data.draw(float_inputs(scale, data.draw(st.integers(1, 40))))
    for dtype in DTYPES:
        for mode in ROUND_MODES:
            got = ops.ratel_quant(x, scale=scale, dtype=dtype, round_mode=mode)
            assert_same_bits(got.numpy(), arith.quantize(x, scale, dtype, round_mode=mode))


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_quant_dequant_per_channel_match_reference(ops, data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=6))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    channel_scales = [data.draw(scales) for _ in range(shape[axis])]
    size = int(np.prod(shape))
    x = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(width=32)))
    x = np.where(np.arange(size).reshape(shape) % 2 == 0, x,
                 np.float32(2.5) * np.asarray(channel_scales, np.float32).reshape(
                     [shape[axis] if d == axis % len(shape) else 1 for d in range(len(shape))]))
    x = x.astype(np.float32)
    for dtype in DTYPES:
        mode = data.draw(st.sampled_from(ROUND_MODES))
        q = ops.ratel_quant(x, scales=channel_scales, axis=axis, dtype=dtype,
                            round_mode=mode).numpy()
        expected_q = arith.quantize(x, channel_scales, dtype, axis=axis, round_mode=mode)
        assert_same_bits(q, expected_q)
        back = ops.ratel_dequant(q, scales=channel_scales, axis=axis).numpy()
        with np.errstate(over="ignore"):  # huge scales overflow to inf, in both
            expected_back = arith.dequantize(expected_q, channel_scales, axis=axis)
        assert_same_bits(back, expected_back)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), scale=scales, dtype=st.sampled_from(DTYPES))
def test_dequant_per_tensor_matches_reference(ops, data, scale, dtype):
    info = np.iinfo(dtype)
    q = data.draw(hnp.arrays(dtype, data.draw(st.integers(1, 50)),
                             elements=st.integers(int(info.min), int(info.max))))
    q = np.concatenate([q, np.array([info.min, info.max, 0], dtype)])
    with np.errstate(over="ignore"):  # huge scales overflow to inf, in both
        expected = arith.dequantize(q, scale)
    assert_same_bits(ops.ratel_dequant(q, scale=scale).numpy(), expected)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_per_channel_along_each_axis(ops, axis):
    rng = np.random.default_rng(axis + 10)
    x = (rng.standard_normal((3, 4, 5)) * 50).astype(np.float32)
    channel_scales = [0.25 * (i + 1) for i in range(x.shape[axis])]
    q = ops.ratel_quant(x, scales=channel_scales, axis=axis, dtype="int8").numpy()
    expected = arith.quantize(x, channel_scales, "int8", axis=axis)
    assert_same_bits(q, expected)
    # a per-channel result must differ from quantizing with the first scale everywhere
    assert not np.array_equal(q, arith.quantize(x, channel_scales[0], "int8"))
    back = ops.ratel_dequant(q, scales=channel_scales, axis=axis).numpy()
    assert_same_bits(back, arith.dequantize(expected, channel_scales, axis=axis))


def test_large_tensor_sharded_over_threads_matches_reference(ops):
    x = (np.random.default_rng(0).standard_normal((8, 56, 56, 64)) * 4).astype(np.float32)
    channel_scales = np.linspace(0.01, 0.05, 64, dtype=np.float32).tolist()
    for kwargs in ({"scale": 0.03}, {"scales": channel_scales, "axis": -1},
                   {"scales": channel_scales[:56], "axis": 1}):
        q = ops.ratel_quant(x, dtype="int8", **kwargs).numpy()
        s = kwargs.get("scales", kwargs.get("scale"))
        expected = arith.quantize(x, s, "int8", axis=kwargs.get("axis"))
        assert_same_bits(q, expected)
        assert_same_bits(ops.ratel_dequant(q, **kwargs).numpy(),
                         arith.dequantize(expected, s, axis=kwargs.get("axis")))


QUANT_PATH_SCRIPT = """
import sys, numpy as np, tensorflow as tf, ratelnn
x, scales = np.load(sys.argv[1]), [float(s) for s in sys.argv[3].split(",")]
ops, out = ratelnn.tf_init(), {}
for dtype in ("int8", "uint8", "int16", "int32"):
    for mode in ("half_away_from_zero", "half_to_even", "floor", "ceil", "trunc"):
        for k, scale in enumerate(scales):
            q = ops.ratel_quant(x, dtype=dtype, scale=scale, round_mode=mode).numpy()
            out[f"q-{dtype}-{mode}-{k}"] = q
            out[f"d-{dtype}-{mode}-{k}"] = ops.ratel_dequant(q, scale=scale).numpy()
np.savez(sys.argv[2], **out)
"""


@pytest.mark.no_tf_math
@pytest.mark.parametrize("path", ["portable", "avx2", "avx512"])
def test_quant_and_dequant_bits_on_each_path(ops, tmp_path, path):
    """RatelQuant/RatelDequant loops are compiled per path (ops/core/quant_kernels.inc: the
    portable loops, the AVX2 ones, which the AVX-VNNI path runs too, and the AVX-512 ones,
    which the AVX-512 VNNI path runs too).  The other tests of this module run the machine's
    path in process; this one forces each path (RATELNN_ISA, a new process): the reference's
    bits for every dtype and round mode on ties, quotients within ulps of a tie, subnormals,
    NaN/Inf."""
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU has no {path} path")
    rng = np.random.default_rng(11)
    scales = [0.1, 1 / 3, 2.0 ** -20, 7.5]
    ties = (rng.integers(-70000, 70000, 4000) + 0.5).astype(np.float32)
    x = np.concatenate([rng.standard_normal(4000).astype(np.float32) * 300, ties, ties * np.float32(0.1),
                        near_ties(scales, rng), SPECIAL_VALUES, np.float32(1e-40) * np.arange(-8, 9, dtype=np.float32)])
    np.save(tmp_path / "x.npy", x)
    env = subprocess_env(RATELNN_ISA=path)
    proc = subprocess.run([sys.executable, "-c", QUANT_PATH_SCRIPT, str(tmp_path / "x.npy"), str(tmp_path / "out.npz"),
                           ",".join(repr(s) for s in scales)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "out.npz")
    for dtype in DTYPES:
        for mode in ROUND_MODES:
            for k, scale in enumerate(scales):
                expected = arith.quantize(x, scale, dtype, round_mode=mode)
                assert_same_bits(got[f"q-{dtype}-{mode}-{k}"], expected)
                assert_same_bits(got[f"d-{dtype}-{mode}-{k}"], arith.dequantize(expected, scale))


def test_quant_bits_on_the_machine_path_in_long_blocks(ops):
    """The vector block loop of the machine's path (32 codes per step on AVX2, 16 on AVX-512) on
    ties, quotients within ulps of a tie, subnormals, NaN/Inf, values beyond every code range,
    with a ragged tail: the reference's bits for every dtype and round mode."""
    rng = np.random.default_rng(12)
    ties = (rng.integers(-70000, 70000, 3000) + 0.5).astype(np.float32)
    scales = (0.1, 1 / 3, 2.0 ** -20, 7.5)
    x = np.concatenate([rng.standard_normal(3000).astype(np.float32) * 300, ties,
                        ties * np.float32(0.1), near_ties(scales, rng), np.tile(SPECIAL_VALUES, 20),
                        np.float32(1e-40) * np.arange(-8, 9, dtype=np.float32)])
    x = x[rng.permutation(x.size)][:-5]
    for scale in scales:
        for dtype in DTYPES:
            for mode in ROUND_MODES:
                got = ops.ratel_quant(x, scale=scale, dtype=dtype, round_mode=mode).numpy()
                assert_same_bits(got, arith.quantize(x, scale, dtype, round_mode=mode))


@pytest.mark.parametrize("kwargs, message", [
    ({"scales": [1.0, 2.0, 3.0], "axis": 1}, "got 3 scales but dimension 1"),
    ({"scales": [1.0, 2.0], "axis": 2}, "axis 2 is out of range"),
    ({"scale": 0.0}, "not a finite positive number"),
    ({"scales": [1.0, float("nan")], "axis": 0}, "scale[1]"),
    ({"scale": -1.0}, "not a finite positive number"),
])
def test_bad_scales_raise_invalid_argument(ops, kwargs, message):
    x = np.ones((2, 4), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message.replace("[", r"\[")):
        ops.ratel_quant(x, dtype="int8", **kwargs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message.replace("[", r"\[")):
        ops.ratel_dequant(np.ones((2, 4), np.int8), **kwargs)


def test_unknown_round_mode_is_rejected(ops):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError, TypeError),
                       match="round_mode"):
        ops.ratel_quant(np.ones(3, np.float32), dtype="int8", round_mode="stochastic")


def test_shape_functions_keep_static_shape(ops):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None, 7, 3))
        q = ops.ratel_quant(x, scale=0.5, dtype="uint8")
        d = ops.ratel_dequant(q, scales=[1.0, 2.0, 3.0], axis=-1)
        m = ops.ratel_min_max(d, tensor_name="t", output_dir="/nonexistent-unused")
    assert q.shape.as_list() == d.shape.as_list() == m.shape.as_list() == [None, 7, 3]
    assert q.dtype == tf.uint8 and d.dtype == tf.float32


def test_minmax_from_three_threads_sharing_one_session(ops, tmp_path):
    batches = random_batches(seed=1, count=30)
    graph = calibration_graph(ops, str(tmp_path))
    with tf.compat.v1.Session(graph=graph) as session:
        def run(first):
            for i in range(first, len(batches), 3):
                out = session.run("out:0", feed_dict={"x:0": batches[i]})
                np.testing.assert_array_equal(out, graph_tensors(batches[i])["relu"])

        threads = [threading.Thread(target=run, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = load_statistics(tmp_path)  # flushes the in-memory store first
    assert sorted(stats) == ["affine", "relu", "x"]
    for name, (lo, hi) in expected_ranges(batches).items():
        assert (stats[name].min, stats[name].max) == (lo, hi), name
        assert stats[name].batches == 30
        assert stats[name].count == batches[0].size * 30


def test_minmax_ema_follows_batches_in_order(ops, tmp_path):
    batches = [random_batches(seed=2, count=1, offset=k)[0] for k in range(5)]
    ema_min = ema_max = None
    decay = float(np.float32(0.8))
    for b in batches:
        ops.ratel_min_max(b, tensor_name="t", output_dir=str(tmp_path), ema_decay=0.8)
        lo, hi = float(b.min()), float(b.max())
        ema_min = lo if ema_min is None else decay * ema_min + (1 - decay) * lo
        ema_max = hi if ema_max is None else decay * ema_max + (1 - decay) * hi
    stats = load_statistics(tmp_path)["t"]
    assert stats.ema_min == pytest.approx(ema_min, rel=1e-6)
    assert stats.ema_max == pytest.approx(ema_max, rel=1e-6)
    assert stats.min == min(float(b.min()) for b in batches)
    assert stats.batches == 5


def test_minmax_forwards_input_and_skips_empty_batches(ops, tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(
        ops.ratel_min_max(x, tensor_name="t", output_dir=str(tmp_path)).numpy(), x)
    empty = np.zeros((0, 3), np.float32)
    assert ops.ratel_min_max(empty, tensor_name="t", output_dir=str(tmp_path)).shape == (0, 3)
    stats = load_statistics(tmp_path)["t"]
    assert (stats.min, stats.max, stats.batches, stats.count) == (0.0, 5.0, 1, 6)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_minmax_rejects_nan_and_inf_naming_the_tensor(ops, tmp_path, bad):
    x = np.ones(100, np.float32)
    x[37] = bad
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="RatelMinMax 'conv1': calibration batch contains NaN or Inf"):
        ops.ratel_min_max(x, tensor_name="conv1", output_dir=str(tmp_path))


def test_minmax_rejects_unknown_record_kind(ops, tmp_path):
    with pytest.raises(tf.errors.InvalidArgumentError, match="unknown record 'histogram'"):
        ops.ratel_min_max(np.ones(3, np.float32), tensor_name="t", output_dir=str(tmp_path),
                          record=["minmax", "histogram"])


@pytest.mark.no_tf_math
def test_library_path_is_cached_in_process_and_across_processes(ops):
    path = ratelnn.ops_library_path("tensorflow")
    mtime = os.stat(path).st_mtime_ns
    start = time.perf_counter()
    assert ratelnn.ops_library_path("tensorflow") == path
    assert time.perf_counter() - start < 1.0
    code = ("import time, tensorflow, ratelnn; t = time.perf_counter(); "
            "p = ratelnn.ops_library_path('tensorflow'); print(p, time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), check=True,
                         capture_output=True, text=True, timeout=120).stdout.split()
    assert out[0] == path
    assert float(out[1]) < 1.0
    assert os.stat(path).st_mtime_ns == mtime


@pytest.mark.no_tf_math
def test_concurrent_first_builds_share_one_library(ops, tmp_path):
    # Seed the fresh cache with this session's compiled objects (compiling the whole library
    # twice concurrently takes minutes on 2 cores): the two processes then race to link and
    # publish the library.  The race on compiling one object is tested below.
    shutil.copytree(_build.cache_dir() / "obj", tmp_path / "obj",
                    ignore=shutil.ignore_patterns(".*"))
    code = ("import sys, tensorflow as tf, ratelnn; p = ratelnn.ops_library_path('tensorflow');"
            " tf.load_op_library(p); print(p)")
    env = subprocess_env(RATELNN_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err[-3000:]
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1 and Path(paths.pop()).parent == tmp_path
    assert len(list(tmp_path.glob("*.so"))) == 1
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.no_tf_math
def test_concurrent_compiles_of_one_source_publish_one_object(tmp_path):
    src = tmp_path / "tiny.cc"
    src.write_text('extern "C" int ratelnn_tiny(int x) { return 2 * x + 1; }\n')
    code = ("import sys; from ratelnn._build import build_library; "
            f"print(build_library('tiny', [{str(src)!r}]))")
    env = subprocess_env(RATELNN_CACHE_DIR=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1
    import ctypes
    assert ctypes.CDLL(paths.pop()).ratelnn_tiny(20) == 41
    cache = tmp_path / "cache"
    assert len(list((cache / "obj").glob("*.o"))) == 1
    assert not list(cache.rglob("*.tmp"))


@pytest.mark.no_tf_math
def test_unknown_framework():
    with pytest.raises(ValueError, match="unknown framework"):
        ratelnn.ops_library_path("pytorch")
