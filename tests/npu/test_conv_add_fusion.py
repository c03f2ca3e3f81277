"""The native executor's conv + residual ADD (+ ReLU REQUANT) fusion (plan_fusions,
ops/core/npu_exec.h; docs/architecture.md §7): a GEMM CONV2D whose output only the ADD after
it reads runs that ADD in its epilogue.  Native must equal the numpy reference bit for bit on
every kernel path, with 1 and 2 threads, whether the pair fuses or not; the per-instruction
profile shows which ran fused (the ADD's line reads 0 us)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from ratelnn.npu.engine import EngineBuilder, qabs, quantize_multiplier

from helpers.engines import SETTINGS, assert_native_equals_reference, rand_codes, requant_consts, scale

ACT = st.sampled_from(["int8", "uint8", "int16"])


def add_attrs(sa, sb, sy, shift):
    """ADD multipliers of operand scales sa, sb into sy at `shift` (clipped below 2^31)."""
    return dict(multipliers=[min(int(round(sa / sy * 2 ** shift)), 2 ** 31 - 1),
                             min(int(round(sb / sy * 2 ** shift)), 2 ** 31 - 1)], shifts=[shift])


def conv_into(b, data, tx, x_shape, xdt, cout, k, name):
    """A stride-1 'same' CONV2D of tensor tx (NHWC `x_shape`, dtype xdt) into a new tensor
    of `cout` channels (dtype and scales drawn), appended to builder b; returns
    (tensor, scale, dtype)."""
    n, h, w, cin = x_shape
    wdt = "int16" if xdt != "int16" and data.draw(st.booleans()) else "int8"
    sx, sy = 2.0 ** -4, scale(data, -6, 0)
    sw = np.array([scale(data, -9, -3) for _ in range(cout)])
    wq = rand_codes(data, (k, k, cin, cout), wdt)
    bias = rand_codes(data, (cout,), "int16").astype(np.int32)
    ydt = data.draw(ACT)
    ty = b.tensor(name, (n, h, w, cout), ydt, sy)
    relu = data.draw(st.booleans())
    p = (k - 1) // 2
    b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, sx * sw / sy, bias), name=name, strides=(1, 1),
          dilations=(1, 1), pads=(p, k - 1 - p, p, k - 1 - p), groups=1, act_min=0 if relu else None)
    return ty, sy, ydt


def chain(data, second_reader):
    """x -> conv -> ADD(conv, residual) [-> REQUANT]; the residual an engine input or an
    earlier conv of x; operand order, dtypes, scales, shifts and clamps drawn.  second_reader:
    None, "output" (the conv's result is also an engine output) or "pool" (a MAX_POOL reads it
    too).  Returns (builder, inputs)."""
    n = data.draw(st.integers(1, 3))
    h, w = data.draw(st.integers(1, 7)), data.draw(st.integers(1, 9))
    cin, cout = data.draw(st.integers(1, 64)), data.draw(st.sampled_from([1, 7, 16, 17, 31, 32, 33, 64]))
    xdt = data.draw(ACT)
    b = EngineBuilder("conv_add", n)
    x = rand_codes(data, (n, h, w, cin), xdt)
    tx = b.tensor("x", x.shape, xdt, 2.0 ** -4)
    inputs, tins = [x], [tx]
    if data.draw(st.booleans()):  # the residual: an earlier conv of x (ResNet's shortcut)
        tr, sr, _ = conv_into(b, data, tx, x.shape, xdt, cout, 1, "shortcut")
    else:
        rdt, sr = data.draw(ACT), scale(data, -6, 0)
        r = rand_codes(data, (n, h, w, cout), rdt)
        tr = b.tensor("r", r.shape, rdt, sr)
        inputs.append(r)
        tins.append(tr)
    tc, sc, cdt = conv_into(b, data, tx, x.shape, xdt, cout, data.draw(st.sampled_from([1, 3])), "conv")
    sy, ydt = scale(data, -6, 0), data.draw(ACT)
    ty = b.tensor("sum", (n, h, w, cout), ydt, sy)
    conv_first = data.draw(st.booleans())
    shift = data.draw(st.sampled_from([16, 30, 54]))  # 54: the int64 path (the double one is not exact)
    attrs = add_attrs(sc, sr, sy, shift) if conv_first else add_attrs(sr, sc, sy, shift)
    b.add("ADD", [tc, tr] if conv_first else [tr, tc], [ty], name="add",
          act_min=0 if data.draw(st.booleans()) else None, **attrs)
    outs = [ty]
    if data.draw(st.booleans()):  # the ReLU REQUANT after a residual ADD
        tq = b.tensor("relu", (n, h, w, cout), data.draw(ACT), sy / 2)
        m, s = quantize_multiplier(2.0, qabs(ydt))
        b.add("REQUANT", [ty], [tq], name="relu", multipliers=[m], shifts=[s], act_min=0)
        outs = [tq]
    if second_reader == "output":
        outs.append(tc)
    elif second_reader == "pool":
        tp = b.tensor("pool", (n, h, w, cout), cdt, sc)
        b.add("MAX_POOL", [tc], [tp], name="pool", ksize=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0))
        outs.append(tp)
    b.set_io(tins, outs)
    return b, inputs


@SETTINGS
@given(data=st.data(), second_reader=st.sampled_from([None, None, "output", "pool"]))
def test_conv_add_chains_match_the_reference(data, second_reader):
    """Fused (the conv's result read by the ADD alone) and unfused (a second reader) chains."""
    b, inputs = chain(data, second_reader)
    assert_native_equals_reference(b.build(), inputs, thread_counts=(1, 2))


def resnet_block(conv_is_output):
    """ResNet's block tail at batch 2: a 1x1 conv (uint8 in, int8 out, 64 channels), the
    residual ADD with an int8 engine input, the ReLU REQUANT to uint8; the conv's result also
    an engine output when `conv_is_output` (then nothing may fuse)."""
    rng = np.random.default_rng(3)
    b = EngineBuilder("block", 2)
    x = rng.integers(0, 256, (2, 14, 14, 48)).astype(np.uint8)
    r = rng.integers(-128, 128, (2, 14, 14, 64)).astype(np.int8)
    tx, tr = b.tensor("x", x.shape, "uint8", 0.05), b.tensor("r", r.shape, "int8", 0.1)
    tc, ty = b.tensor("conv", r.shape, "int8", 0.1), b.tensor("sum", r.shape, "int8", 0.15)
    tq = b.tensor("relu", r.shape, "uint8", 0.08)
    w = rng.integers(-127, 128, (1, 1, 48, 64)).astype(np.int8)
    b.add("CONV2D", [tx], [tc], requant_consts(b, w, "uint8", np.full(64, 0.05 * 0.01 / 0.1), rng.integers(-999, 999, 64)),
          name="conv", strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1)
    b.add("ADD", [tr, tc], [ty], name="add", **add_attrs(0.1, 0.1, 0.15, 30))
    m, s = quantize_multiplier(0.15 / 0.08, 128)
    b.add("REQUANT", [ty], [tq], name="relu", multipliers=[m], shifts=[s], act_min=0)
    b.set_io([tx, tr], [tq, tc] if conv_is_output else [tq])
    return b.build(), [x, r]


@pytest.mark.parametrize("conv_is_output", [False, True])
def test_profile_shows_the_fused_pair(conv_is_output, monkeypatch, capfd):
    """Fused: the conv's line carries the time, the ADD's and the REQUANT's read 0 us (one
    line per instruction still); not fused when the conv's result has a second reader."""
    eng, inputs = resnet_block(conv_is_output)
    ref = assert_native_equals_reference(eng, inputs)
    monkeypatch.setenv("RATELNN_NPU_PROFILE", "1")
    capfd.readouterr()
    got = eng.run(inputs, backend="native", num_threads=2)
    lines = [ln.split("\t") for ln in capfd.readouterr().err.splitlines() if ln.startswith("npu-profile\t")]
    assert [ln[4] for ln in lines] == ["CONV2D", "ADD", "REQUANT"]
    us = {ln[5]: float(ln[6]) for ln in lines}
    assert us["conv"] > 0
    assert (us["add"] == 0 and us["relu"] == 0) != conv_is_output
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)
