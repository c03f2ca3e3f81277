"""ratel_quant / ratel_dequant / ratel_minmax / ratel_engine_op in real MXNet 1.9.

The op library is built (or taken from the cache) and loaded once per session by the ``mx``
fixture. Quant/Dequant must equal ratelnn/ir/arith.py bit for bit, the engine op
the reference executor bit for bit.
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ratelnn
from ratelnn.calibration.stats import load_statistics
from ratelnn.npu.engine import EngineBuilder, quantize_multiplier
from ratelnn.oplib import flush_statistics
from ratelnn.ir import arith

from helpers.stats import subprocess_env

DTYPES = ("int8", "uint8", "int16")
ROUND_MODES = tuple(arith.ROUNDERS)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38, 1e-45, 2.5, -2.5, 3.5],
                   np.float32)


def carried(expected: np.ndarray) -> np.ndarray:
    """MXNet carries int16 as int32 (docs/mxnet.md)."""
    return expected.astype(np.int32) if expected.dtype == np.int16 else expected


def test_quant_per_tensor_bit_exact(mx):
    rng = np.random.default_rng(0)
    for scale in (2.0 ** -7, float(np.float32(0.0123)), float(np.float32(3.7e-5)), 1000.0):
        ties = ((rng.integers(-40000, 40000, 200) + 0.5) * scale).astype(np.float32)
        x = np.concatenate([SPECIAL, ties, (rng.standard_normal(500) * 300 * scale).astype(np.float32)])
        for dtype in DTYPES:
            for mode in ROUND_MODES:
                got = mx.nd.ratel_quant(mx.nd.array(x), scale=repr(scale), dtype=dtype, round_mode=mode)
                expected = carried(arith.quantize(x, scale, dtype, round_mode=mode))
                assert got.dtype == expected.dtype
                np.testing.assert_array_equal(got.asnumpy(), expected)
                back = mx.nd.ratel_dequant(got, scale=repr(scale)).asnumpy()
                exp_back = arith.dequantize(arith.quantize(x, scale, dtype, round_mode=mode), scale)
                np.testing.assert_array_equal(back.view(np.uint32), exp_back.view(np.uint32))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_per_channel_bit_exact(mx, axis):
    rng = np.random.default_rng(axis + 5)
    x = (rng.standard_normal((3, 4, 5)) * 40).astype(np.float32)
    scales = [float(np.float32(0.1 * (i + 1) + 0.013)) for i in range(x.shape[axis])]
    for dtype in DTYPES:
        q = mx.nd.ratel_quant(mx.nd.array(x), scales=json.dumps(scales), axis=str(axis), dtype=dtype)
        expected = arith.quantize(x, scales, dtype, axis=axis)
        np.testing.assert_array_equal(q.asnumpy(), carried(expected))
        assert not np.array_equal(expected, arith.quantize(x, scales[0], dtype))
        back = mx.nd.ratel_dequant(q, scales=json.dumps(scales), axis=str(axis)).asnumpy()
        np.testing.assert_array_equal(back, arith.dequantize(expected, scales, axis=axis))


def test_large_tensor_split_over_threads_bit_exact(mx):
    x = (np.random.default_rng(1).standard_normal((4, 64, 56, 56)) * 4).astype(np.float32)
    scales = np.linspace(0.01, 0.05, 64, dtype=np.float32).tolist()
    q = mx.nd.ratel_quant(mx.nd.array(x), scales=json.dumps(scales), axis="1", dtype="int8").asnumpy()
    np.testing.assert_array_equal(q, arith.quantize(x, scales, "int8", axis=1))


@pytest.mark.parametrize("attrs, message", [
    ({"scale": "-1.0", "dtype": "int8"}, "not a finite positive"),
    ({"scale": "abc", "dtype": "int8"}, "'scale' = 'abc' is not a number"),
    ({"scale": "0.1", "scales": "[0.1]", "axis": "0", "dtype": "int8"}, "exactly one of"),
    ({"scale": "0.1", "dtype": "int4"}, "dtype 'int4'"),
    ({"scale": "0.1", "dtype": "int8", "round_mode": "up"}, "unknown round_mode 'up'"),
    ({"scales": "[0.1, 0.2]", "axis": "0", "dtype": "int8"}, "ratel_quant"),  # 2 scales, 3 channels
])
def test_bad_quant_attributes_raise(mx, attrs, message):
    with pytest.raises(mx.base.MXNetError, match=message):
        mx.nd.ratel_quant(mx.nd.ones((3, 2)), **attrs).asnumpy()


def test_dequant_rejects_float_input(mx):
    with pytest.raises(mx.base.MXNetError, match="ratel_dequant: input has dtype float32"):
        mx.nd.ratel_dequant(mx.nd.ones((2,)), scale="0.5").asnumpy()


def record(mx, x: np.ndarray, name: str, output_dir) -> np.ndarray:
    return mx.nd.ratel_minmax(mx.nd.array(x), tensor_name=name, output_dir=str(output_dir)).asnumpy()


def test_minmax_forwards_and_records(mx, tmp_path):
    batches = [np.random.default_rng(k).standard_normal((4, 3, 5)).astype(np.float32) * (k + 1)
               for k in range(3)]
    for b in batches:
        np.testing.assert_array_equal(record(mx, b, "conv1", tmp_path), b)
    flush_statistics()
    stats = load_statistics(tmp_path)["conv1"]
    assert stats.batches == 3 and stats.count == 3 * 60
    assert stats.min == float(min(b.min() for b in batches))
    assert stats.max == float(max(b.max() for b in batches))
    ema = batches[0].max()
    for b in batches[1:]:
        ema = 0.9 * ema + 0.1 * float(b.max())
    assert stats.ema_max == pytest.approx(ema, rel=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_minmax_nan_names_the_tensor(mx, tmp_path, bad):
    x = np.ones((2, 3), np.float32)
    x[1, 2] = bad
    with pytest.raises(mx.base.MXNetError, match="ratel_minmax: 'stage2/add': calibration batch contains NaN or Inf"):
        record(mx, x, "stage2/add", tmp_path)


def test_minmax_rejects_unknown_record_kind(mx, tmp_path):
    with pytest.raises(mx.base.MXNetError, match="unknown record 'histogram'"):
        mx.nd.ratel_minmax(mx.nd.ones((2,)), tensor_name="t", output_dir=str(tmp_path),
                           record="['histogram']").asnumpy()


def test_minmax_from_two_threads(mx, tmp_path):
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((8, 16)).astype(np.float32) * 3 for _ in range(40)]
    errors = []

    def work(part):
        try:
            for b in part:
                record(mx, b, "shared", tmp_path)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(batches[k::2],)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    flush_statistics()
    stats = load_statistics(tmp_path)["shared"]
    assert stats.batches == 40
    assert (stats.min, stats.max) == (float(min(b.min() for b in batches)),
                                       float(max(b.max() for b in batches)))


MINMAX_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, ratelnn
    from ratelnn.mxnet_compat import import_mxnet
    ratelnn.mx_init()
    mx = import_mxnet()
    seed, out = int(sys.argv[1]), sys.argv[2]
    rng = np.random.default_rng(seed)
    for _ in range(20):
        x = mx.nd.array(rng.standard_normal((8, 16)).astype(np.float32) * (seed + 1))
        mx.nd.ratel_minmax(x, tensor_name="t", output_dir=out).asnumpy()
""")


def test_minmax_from_two_processes_into_one_dir(mx, tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", MINMAX_SCRIPT, str(seed), str(tmp_path)],
                              env=subprocess_env(), stderr=subprocess.PIPE, text=True)
             for seed in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-2000:]
    expected = [np.random.default_rng(s).standard_normal((20, 8, 16)).astype(np.float32) * (s + 1)
                for s in (1, 2)]
    stats = load_statistics(tmp_path)["t"]
    assert stats.batches == 40 and stats.count == 40 * 128
    assert stats.min == float(min(e.min() for e in expected))
    assert stats.max == float(max(e.max() for e in expected))


def two_io_engine(batch: int):
    """x(int8 NHWC) -> CONV2D relu -> c(uint8) -> MEAN -> m(int16); z(int16) -> REQUANT -> r(int8)."""
    rng = np.random.default_rng(7)
    b = EngineBuilder("mx_test_engine", batch)
    tx = b.tensor("x", (batch, 6, 6, 3), "int8", 0.02)
    tz = b.tensor("z", (batch, 5), "int16", 0.001)
    tc = b.tensor("c", (batch, 6, 6, 4), "uint8", 0.05)
    tm = b.tensor("m", (batch, 4), "int16", 0.001)
    tr = b.tensor("r", (batch, 5), "int8", 0.1)
    wq = rng.integers(-127, 128, (3, 3, 3, 4)).astype(np.int8)
    mult, shift = quantize_multiplier(0.02 * 0.01 / 0.05, 128 * 127 * 27 + 500)
    consts = [b.const("w", wq), b.const("bias", rng.integers(-500, 500, 4).astype(np.int32)),
              b.const("m", np.full(4, mult, np.int32)), b.const("s", np.full(4, shift, np.int32))]
    b.add("CONV2D", [tx], [tc], consts, strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1,
          act_min=0)
    m, s = quantize_multiplier(0.05 / 0.001, 36 * 255)
    b.add("MEAN", [tc], [tm], axes=(1, 2), multipliers=[m], shifts=[s])
    m, s = quantize_multiplier(0.001 / 0.1, 32767)
    b.add("REQUANT", [tz], [tr], multipliers=[m], shifts=[s])
    b.set_io([tx, tz], [tm, tc, tr])
    return b.build()


def engine_attrs(engine) -> dict:
    return {"engine": base64.b64encode(engine.to_bytes()).decode(), "engine_name": engine.name,
            "device_id": "0", "core_ids": "[0, 1]", "num_outputs": "3"}


def test_engine_op_equals_reference_executor(mx):
    engine = two_io_engine(2)
    rng = np.random.default_rng(8)
    for batch in (2, 5):  # the compiled batch and another
        x = rng.integers(-128, 128, (batch, 6, 6, 3)).astype(np.int8)
        z = rng.integers(-32768, 32768, (batch, 5)).astype(np.int16)
        expected = engine.run([x, z], backend="reference")
        got = mx.nd.ratel_engine_op(mx.nd.array(x, dtype="int8"), mx.nd.array(z.astype(np.int32), dtype="int32"),
                                    **engine_attrs(engine))
        assert len(got) == 3
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g.asnumpy(), carried(e))
        assert got[0].dtype == np.int32 and got[1].dtype == np.uint8 and got[2].dtype == np.int8


def test_engine_op_checks_inputs_and_attrs(mx):
    engine = two_io_engine(2)
    x = mx.nd.zeros((2, 6, 6, 3), dtype="int8")
    z = mx.nd.zeros((2, 5), dtype="int32")
    with pytest.raises(mx.base.MXNetError, match="engine 'mx_test_engine': input 0 \\('x'\\) has shape"):
        mx.nd.ratel_engine_op(mx.nd.zeros((2, 5, 6, 3), dtype="int8"), z, **engine_attrs(engine)).asnumpy()
    with pytest.raises(mx.base.MXNetError, match="int16 input 'z' holds 40000"):
        mx.nd.ratel_engine_op(x, z + 40000, **engine_attrs(engine))[0].asnumpy()
    with pytest.raises(mx.base.MXNetError, match="num_outputs = 2 but the engine has 3 outputs"):
        mx.nd.ratel_engine_op(x, z, **{**engine_attrs(engine), "num_outputs": "2"})
    with pytest.raises(mx.base.MXNetError, match="not base64"):
        mx.nd.ratel_engine_op(x, z, **{**engine_attrs(engine), "engine": "@@@@"})


def test_corrupted_or_old_engines_and_oversized_batches_raise(mx, monkeypatch):
    """Engine integrity: a flipped weight bit, an engine without its checksum, and sizes beyond
    the run-time limits (checked in shape inference, before MXNet allocates) are MXNetErrors."""
    from helpers.engines import flip_constant_bit, without_checksum
    engine = two_io_engine(2)
    x = mx.nd.zeros((2, 6, 6, 3), dtype="int8")
    z = mx.nd.zeros((2, 5), dtype="int32")
    for bad, message in ((flip_constant_bit(engine.to_bytes()), "checksum mismatch"),
                         (without_checksum(engine.to_bytes()), "no checksum .* compile the model again")):
        attrs = {**engine_attrs(engine), "engine": base64.b64encode(bad).decode()}
        with pytest.raises(mx.base.MXNetError, match=message):
            mx.nd.ratel_engine_op(x, z, **attrs)[0].asnumpy()
    monkeypatch.setenv("RATELNN_MAX_TOTAL_BYTES", "2000")
    with pytest.raises(mx.base.MXNetError, match=r"engine 'mx_test_engine': activation tensors take more than 2000 "
                                                 r"bytes at batch 9 .* the largest is tensor 'c' \[9,6,6,4\]"):
        mx.nd.ratel_engine_op(mx.nd.zeros((9, 6, 6, 3), dtype="int8"), mx.nd.zeros((9, 5), dtype="int32"),
                              **engine_attrs(engine))[0].asnumpy()


HOSTILE_SCRIPT = textwrap.dedent("""
    import base64, sys, numpy as np, ratelnn
    from ratelnn.mxnet_compat import import_mxnet
    ratelnn.mx_init()
    mx = import_mxnet()
    data = bytes.fromhex(sys.stdin.read().strip())
    rng = np.random.default_rng(0)
    rejected = ran = 0
    x = mx.nd.zeros((2, 6, 6, 3), dtype="int8")
    z = mx.nd.zeros((2, 5), dtype="int32")
    for i in range(100):
        b = bytearray(data)
        kind = i % 4
        if kind == 0:   # flip random bytes
            for p in rng.integers(0, len(b), 1 + i % 5):
                b[p] = int(rng.integers(0, 256))
        elif kind == 1:  # truncate
            b = b[:int(rng.integers(0, len(b)))]
        elif kind == 2:  # random garbage of random length
            b = bytearray(rng.integers(0, 256, int(rng.integers(0, 300))).astype(np.uint8).tobytes())
        else:            # splice a chunk of the engine elsewhere
            s, e, d = sorted(rng.integers(0, len(b), 3))
            b = b[:d] + b[s:e] + b[d:]
        attrs = dict(engine=base64.b64encode(bytes(b)).decode(), engine_name="hostile", num_outputs="3")
        try:
            outs = mx.nd.ratel_engine_op(x, z, **attrs)
            [o.asnumpy() for o in outs]
            ran += 1
        except mx.base.MXNetError as e:
            assert "hostile" in str(e) or "ratel_engine_op" in str(e), str(e)
            rejected += 1
    print(rejected, ran)
""")


def test_hostile_engine_bytes_give_errors_not_crashes(mx):
    data = two_io_engine(2).to_bytes()
    proc = subprocess.run([sys.executable, "-c", HOSTILE_SCRIPT], input=data.hex(), env=subprocess_env(),
                          capture_output=True, text=True, timeout=80)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rejected, ran = map(int, proc.stdout.split()[-2:])
    assert rejected + ran == 100 and rejected >= 50
    print(f"hostile engines: {rejected} rejected with an MXNetError, {ran} valid after mutation")


def test_library_path_is_cached_and_init_idempotent(mx):
    path = ratelnn.ops_library_path("mxnet")
    assert path == ratelnn.mx_init() == ratelnn.mx_init()
    assert path.endswith(".so") and "ratelnn_mx" in path
