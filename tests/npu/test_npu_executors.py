"""Property tests of the two NPU executors: for every instruction, random shapes, strides,
pads, dilations, groups, scales and dtypes give native == reference bit for bit, and the
reference agrees with a float computation within the quantization error."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from helpers.engines import (ACT, SETTINGS, assert_native_equals_reference, rand_codes,
                             requant_consts, scale, small_engine_builder)
from ratelnn.npu.engine import (EngineBuilder, EngineError, make_lut, make_softmax_table, qabs, qrange,
                                quantize_multiplier, quantize_real)


def run_both(builder, inputs):
    """Build, run on both backends, assert bit equality, return the reference outputs."""
    return assert_native_equals_reference(builder.build(), inputs)


def assert_close_codes(got, real, out_scale, out_dtype, tol=1, lo=None, hi=None):
    """``got`` equals the float result quantized to the output, within ``tol`` codes."""
    want = quantize_real(real, out_scale, out_dtype).astype(np.int64)
    if lo is not None:
        want = np.clip(want, lo, hi)
    assert np.max(np.abs(got.astype(np.int64) - want), initial=0) <= tol


def float_conv(x, w, strides, dilations, pads, groups):
    """Straightforward float NHWC grouped convolution (independent of the reference)."""
    n, h, wi, cin = x.shape
    kh, kw, cg, cout = w.shape
    (sh, sw), (dh, dw), (pt, pb, pl, pr) = strides, dilations, pads
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wi + pl + pr - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, oh, ow, cout))
    cog = cout // groups
    for o in range(cout):
        g = o // cog
        for i in range(kh):
            for j in range(kw):
                for a in range(oh):
                    iy = a * sh - pt + i * dh
                    if not 0 <= iy < h:
                        continue
                    for b in range(ow):
                        ix = b * sw - pl + j * dw
                        if 0 <= ix < wi:
                            y[:, a, b, o] += x[:, iy, ix, g * cg:(g + 1) * cg] @ w[i, j, :, o]
    return y



@SETTINGS
@given(data=st.data())
def test_conv2d(data):
    xdt, ydt = data.draw(ACT), data.draw(ACT)
    wdt = "int16" if xdt == "int16" and data.draw(st.booleans()) else "int8"
    depthwise = data.draw(st.booleans())
    if depthwise:
        cin = data.draw(st.integers(1, 4))
        groups, mult = cin, data.draw(st.integers(1, 2))
        cg, cout = 1, cin * mult
    else:
        groups = data.draw(st.integers(1, 3))
        cg, cout = data.draw(st.integers(1, 4)), groups * data.draw(st.integers(1, 3))
        cin = cg * groups
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    strides = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    dil = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    ext = (dil[0] * (kh - 1) + 1, dil[1] * (kw - 1) + 1)
    pads = tuple(data.draw(st.integers(0, ext[d // 2] - 1)) for d in range(4))
    h = data.draw(st.integers(max(1, ext[0] - pads[0] - pads[1]), 7))
    w = data.draw(st.integers(max(1, ext[1] - pads[2] - pads[3]), 7))
    n = data.draw(st.integers(1, 2))
    sx, sy = scale(data), scale(data, -6, 0)
    sw = np.array([scale(data, -9, -5) for _ in range(cout)])
    x = rand_codes(data, (n, h, w, cin), xdt)
    wq = rand_codes(data, (kh, kw, cg, cout), wdt)
    bias = rand_codes(data, (cout,), "int16").astype(np.int32)
    leaky = data.draw(st.booleans())
    alpha = 0.1
    relu = not leaky and data.draw(st.booleans())
    y_real = float_conv(x * sx, wq * sw, strides, dil, pads, groups) + bias * sx * sw
    b = EngineBuilder("conv", n)
    oh = (h + pads[0] + pads[1] - ext[0]) // strides[0] + 1
    ow = (w + pads[2] + pads[3] - ext[1]) // strides[1] + 1
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, oh, ow, cout), ydt, sy)
    consts = requant_consts(b, wq, xdt, sx * sw / sy, bias, alpha * sx * sw / sy if leaky else None)
    b.add("CONV2D", [tx], [ty], consts, strides=strides, dilations=dil, pads=pads, groups=groups,
          act_min=0 if relu else None)
    b.set_io([tx], [ty])
    (y,) = run_both(b, [x])
    if leaky:
        y_real = np.where(y_real >= 0, y_real, alpha * y_real)
    if relu:
        y_real = np.maximum(y_real, 0)
    assert_close_codes(y, y_real, sy, ydt)


@SETTINGS
@given(data=st.data())
def test_fully_connected(data):
    xdt, ydt = data.draw(ACT), data.draw(ACT)
    n, k, m = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 40)), data.draw(st.integers(1, 8))
    sx, sy = scale(data), scale(data, -6, 0)
    sw = np.array([scale(data, -9, -5) for _ in range(m)])
    x, wq = rand_codes(data, (n, k), xdt), rand_codes(data, (k, m), "int8")
    bias = rand_codes(data, (m,), "int16").astype(np.int32)
    b = EngineBuilder("fc", n)
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, m), ydt, sy)
    b.add("FULLY_CONNECTED", [tx], [ty], requant_consts(b, wq, xdt, sx * sw / sy, bias))
    b.set_io([tx], [ty])
    (y,) = run_both(b, [x])
    assert_close_codes(y, (x * sx) @ (wq * sw) + bias * sx * sw, sy, ydt)


def broadcast_shape(data, shape):
    return tuple(1 if (d > 0 and data.draw(st.booleans())) else s for d, s in enumerate(shape))


@SETTINGS
@given(data=st.data(), op=st.sampled_from(["ADD", "SUB", "MUL"]))
def test_binary(data, op):
    adt, bdt, ydt = data.draw(ACT), data.draw(ACT), data.draw(ACT)
    n = data.draw(st.integers(1, 2))
    shape = (n,) + tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    const_b = data.draw(st.booleans())
    bshape = broadcast_shape(data, shape)
    if const_b:
        bshape = (1,) + bshape[1:] if data.draw(st.booleans()) else bshape[1:]
    sa, sb, sy = scale(data), scale(data), scale(data, -7, 0)
    a, bb = rand_codes(data, shape, adt), rand_codes(data, bshape, "int8" if const_b and bdt == "uint8" else bdt)
    b = EngineBuilder("bin", n)
    ta = b.tensor("a", shape, adt, sa)
    ty = b.tensor("y", shape, ydt, sy)
    if op == "MUL":
        m, s = quantize_multiplier(sa * sb / sy, qabs(adt) * qabs(bb.dtype))
        attrs = dict(multipliers=[m], shifts=[s])
    else:
        s = 40
        ma, mb = [int(np.floor(r * 2 ** s + 0.5)) for r in (sa / sy, sb / sy)]
        while max(ma, mb) > 2 ** 31 - 1 or ma * qabs(adt) + mb * qabs(bb.dtype) > 2 ** 62:
            s -= 1
            ma, mb = [int(np.floor(r * 2 ** s + 0.5)) for r in (sa / sy, sb / sy)]
        attrs = dict(multipliers=[ma, mb], shifts=[s])
    if const_b:
        b.add(op, [ta], [ty], [b.const("b", bb)], **attrs)
        inputs = [a]
    else:
        tb = b.tensor("b", bshape, bdt, sb)
        b.add(op, [ta, tb], [ty], **attrs)
        inputs = [a, bb]
    # a REQUANT (ReLU) of the result: the native executor runs both in one pass unless the
    # op's result is also an engine output
    then_requant, y_is_output = data.draw(st.booleans()), data.draw(st.booleans())
    outputs = [ty]
    if then_requant:
        rdt, sr = data.draw(ACT), scale(data)
        tr = b.tensor("r", shape, rdt, sr)
        m, s = quantize_multiplier(sy / sr, qabs(ydt))
        b.add("REQUANT", [ty], [tr], multipliers=[m], shifts=[s], act_min=0)
        outputs = [ty, tr] if y_is_output else [tr]
    b.set_io([ta] if const_b else [ta, tb], outputs)
    got = run_both(b, inputs)
    ra, rb = a * sa, bb * sb
    real = np.broadcast_to(ra * rb if op == "MUL" else (ra + rb if op == "ADD" else ra - rb), shape)
    if not then_requant or y_is_output:
        assert_close_codes(got[0], real, sy, ydt)
    if then_requant:
        y_real = quantize_real(real, sy, ydt).astype(np.float64) * sy   # the op's saturated result
        assert_close_codes(got[-1], y_real, sr, rdt, tol=2 + sy / sr, lo=0, hi=qrange(rdt)[1])


def pool_case(data):
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    strides = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    pads = tuple(data.draw(st.integers(0, (kh, kw)[d // 2] - 1)) for d in range(4))
    h = data.draw(st.integers(max(1, kh - pads[0] - pads[1]), 7))
    w = data.draw(st.integers(max(1, kw - pads[2] - pads[3]), 7))
    oh = (h + pads[0] + pads[1] - kh) // strides[0] + 1
    ow = (w + pads[2] + pads[3] - kw) // strides[1] + 1
    return (kh, kw), strides, pads, (h, w), (oh, ow)


def float_pool(x, ksize, strides, pads, oh, ow, is_max, include_pad):
    n, h, w, c = x.shape
    y = np.zeros((n, oh, ow, c))
    for a in range(oh):
        for b in range(ow):
            y0, x0 = a * strides[0] - pads[0], b * strides[1] - pads[2]
            win = x[:, max(y0, 0):min(y0 + ksize[0], h), max(x0, 0):min(x0 + ksize[1], w), :]
            cnt = ksize[0] * ksize[1] if include_pad else win.shape[1] * win.shape[2]
            y[:, a, b, :] = win.max(axis=(1, 2)) if is_max else win.sum(axis=(1, 2)) / cnt
    return y


@SETTINGS
@given(data=st.data(), is_max=st.booleans())
def test_pools(data, is_max):
    xdt = data.draw(ACT)
    ydt = xdt if is_max else data.draw(ACT)
    ksize, strides, pads, (h, w), (oh, ow) = pool_case(data)
    n, c = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 5))
    include = data.draw(st.booleans())
    sx = scale(data)
    sy = sx if is_max else scale(data)
    x = rand_codes(data, (n, h, w, c), xdt)
    b = EngineBuilder("pool", n)
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, oh, ow, c), ydt, sy)
    attrs = dict(ksize=ksize, strides=strides, pads=pads)
    if not is_max:
        m, s = quantize_multiplier(sx / sy, ksize[0] * ksize[1] * qabs(xdt))
        attrs.update(multipliers=[m], shifts=[s], count_include_pad=include)
    b.add("MAX_POOL" if is_max else "AVG_POOL", [tx], [ty], **attrs)
    b.set_io([tx], [ty])
    (y,) = run_both(b, [x])
    real = float_pool(x * sx, ksize, strides, pads, oh, ow, is_max, include)
    assert_close_codes(y, real, sy, ydt, tol=0 if is_max else 1)


@SETTINGS
@given(data=st.data())
def test_mean(data):
    xdt, ydt = data.draw(ACT), data.draw(ACT)
    shape = (data.draw(st.integers(1, 2)),) + tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    axes = sorted(data.draw(st.sets(st.integers(1, len(shape) - 1), min_size=1)))
    keep = data.draw(st.booleans())
    out = tuple(1 if d in axes else s for d, s in enumerate(shape) if keep or d not in axes)
    sx, sy = scale(data), scale(data)
    x = rand_codes(data, shape, xdt)
    cells = int(np.prod([shape[a] for a in axes]))
    m, s = quantize_multiplier(sx / sy, cells * qabs(xdt))
    s = min(s, 62 - cells.bit_length())
    m = int(np.floor(sx / sy * 2 ** s + 0.5))
    b = EngineBuilder("mean", shape[0])
    tx, ty = b.tensor("x", shape, xdt, sx), b.tensor("y", out, ydt, sy)
    b.add("MEAN", [tx], [ty], axes=axes, keepdims=keep, multipliers=[m], shifts=[s])
    b.set_io([tx], [ty])
    (y,) = run_both(b, [x])
    assert_close_codes(y, (x * sx).mean(axis=tuple(axes), keepdims=keep), sy, ydt)


@pytest.mark.parametrize("xdt, shape", [("int8", (2, 7, 7, 1280)), ("uint8", (1, 12, 12, 200)),
                                        ("int16", (1, 5, 5, 300))])
def test_mean_global_pool(xdt, shape):
    """Global average pools wider than one column block (MobileNetV2's 7x7x1280 head, a tail
    block of 200 - 128 and 300 - 256 columns), codes at the dtype's extremes: native equals
    the reference on every path."""
    rng = np.random.default_rng(5)
    lo, hi = qrange(xdt)
    x = rng.integers(lo, hi + 1, shape).astype(xdt)
    x[0, 0, 0, :5], x[0, -1, -1, -5:] = lo, hi
    cells = shape[1] * shape[2]
    m, s = quantize_multiplier(0.5, cells * qabs(xdt))
    s = min(s, 62 - cells.bit_length())
    m = int(np.floor(0.5 * 2 ** s + 0.5))
    b = EngineBuilder("gap", shape[0])
    tx, ty = b.tensor("x", shape, xdt, 0.01), b.tensor("y", (shape[0], shape[3]), "int8", 0.02)
    b.add("MEAN", [tx], [ty], axes=[1, 2], keepdims=False, multipliers=[m], shifts=[s])
    b.set_io([tx], [ty])
    (y,) = run_both(b, [x])
    assert_close_codes(y, (x * 0.01).mean(axis=(1, 2)), 0.02, "int8")


@SETTINGS
@given(data=st.data())
def test_concat_and_requant(data):
    ydt = data.draw(ACT)
    k = data.draw(st.integers(1, 3))
    base = (data.draw(st.integers(1, 2)),) + tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    axis = data.draw(st.integers(1, len(base) - 1))
    sy = scale(data)
    b = EngineBuilder("concat", base[0])
    ids, xs, ms, ss, reals = [], [], [], [], []
    for i in range(k):
        shape = base[:axis] + (data.draw(st.integers(1, 3)),) + base[axis + 1:]
        dt, sx = data.draw(ACT), scale(data)
        xs.append(rand_codes(data, shape, dt))
        ids.append(b.tensor(f"x{i}", shape, dt, sx))
        m, s = quantize_multiplier(sx / sy, qabs(dt))
        ms.append(m), ss.append(s), reals.append(xs[-1] * sx)
    out_shape = base[:axis] + (sum(x.shape[axis] for x in xs),) + base[axis + 1:]
    ty = b.tensor("y", out_shape, ydt, sy)
    b.add("CONCAT", ids, [ty], axis=axis, multipliers=ms, shifts=ss)
    rdt, sr = data.draw(ACT), scale(data)
    tr = b.tensor("r", out_shape, rdt, sr)
    m, s = quantize_multiplier(sy / sr, qabs(ydt))
    b.add("REQUANT", [ty], [tr], multipliers=[m], shifts=[s], act_min=0)
    b.set_io(ids, [ty, tr])
    y, r = run_both(b, xs)
    assert_close_codes(y, np.concatenate(reals, axis=axis), sy, ydt)
    assert_close_codes(r, y * sy, sr, rdt, lo=0, hi=qrange(rdt)[1])


@SETTINGS
@given(data=st.data())
def test_layout_ops(data):
    """PAD, RESHAPE, TRANSPOSE move codes without changing them."""
    xdt = data.draw(ACT)
    shape = (data.draw(st.integers(1, 2)),) + tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    x = rand_codes(data, shape, xdt)
    pads = [(0, 0)] + [(data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in shape[1:]]
    value = int(rand_codes(data, (), xdt))
    perm = [0] + list(data.draw(st.permutations(range(1, len(shape)))))
    b = EngineBuilder("layout", shape[0])
    tx = b.tensor("x", shape, xdt, 0.1)
    padded = tuple(s + p + q for s, (p, q) in zip(shape, pads))
    tp = b.tensor("p", padded, xdt, 0.1)
    tt = b.tensor("t", tuple(padded[p] for p in perm), xdt, 0.1)
    tr = b.tensor("r", (shape[0], int(np.prod(padded[1:]))), xdt, 0.1)
    b.add("PAD", [tx], [tp], pads=np.ravel(pads), pad_value=value)
    b.add("TRANSPOSE", [tp], [tt], perm=perm)
    b.add("RESHAPE", [tt], [tr])
    b.set_io([tx], [tp, tt, tr])
    p, t, r = run_both(b, [x])
    want = np.pad(x, pads, constant_values=value)
    np.testing.assert_array_equal(p, want)
    np.testing.assert_array_equal(t, np.transpose(want, perm))
    np.testing.assert_array_equal(r, np.transpose(want, perm).reshape(shape[0], -1))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
@pytest.mark.parametrize("perm", [(0, 2, 3, 1), (0, 3, 1, 2), (0, 2, 1, 3), (0, 1, 3, 2)])
def test_transpose_of_tensors_wider_than_a_copy_tile(perm, dtype):
    """TRANSPOSE of NCHW-sized tensors whose dims exceed the 64-element copy tile, one of
    them 1: native == reference == numpy."""
    shape = (2, 70, 1, 67)
    lo, hi = qrange(dtype)
    x = np.random.default_rng(0).integers(lo, hi + 1, shape).astype(dtype)
    b = EngineBuilder("transpose", shape[0])
    tx = b.tensor("x", shape, dtype, 0.1)
    ty = b.tensor("y", tuple(shape[p] for p in perm), dtype, 0.1)
    b.add("TRANSPOSE", [tx], [ty], perm=list(perm))
    b.set_io([tx], [ty])
    (y,) = run_both(b, [x])
    np.testing.assert_array_equal(y, np.transpose(x, perm))


@SETTINGS
@given(data=st.data(), fn=st.sampled_from(["sigmoid", "tanh", "exp"]))
def test_lut(data, fn):
    xdt, ydt = data.draw(ACT), data.draw(ACT)
    funcs = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "exp": np.exp}
    sx, sy = scale(data, -8, -3), scale(data, -10, -2)
    table = make_lut(funcs[fn], xdt, sx, ydt, sy)
    assert table.shape == ((65536,) if xdt == "int16" else (256,)) and table.dtype == np.dtype(ydt)
    shape = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 50)))
    x = rand_codes(data, shape, xdt)
    b = EngineBuilder("lut", shape[0])
    tx, ty = b.tensor("x", shape, xdt, sx), b.tensor("y", shape, ydt, sy)
    b.add("LUT", [tx], [ty], [b.const("table", table)])
    b.set_io([tx], [ty])
    (y,) = run_both(b, [x])
    with np.errstate(over="ignore"):
        assert_close_codes(y, funcs[fn](x * sx), sy, ydt, tol=0)


@SETTINGS
@given(data=st.data())
def test_softmax(data):
    xdt, ydt = data.draw(ACT), data.draw(ACT)
    shape = (data.draw(st.integers(1, 3)),) + tuple(data.draw(st.lists(st.integers(1, 20), min_size=1, max_size=2)))
    sx = scale(data, -7, -2)
    sy = 1.0 / qrange(ydt)[1]
    table, m, s = make_softmax_table(xdt, sx, sy, shape[-1])
    x = rand_codes(data, shape, xdt)
    b = EngineBuilder("softmax", shape[0])
    tx, ty = b.tensor("x", shape, xdt, sx), b.tensor("y", shape, ydt, sy)
    b.add("SOFTMAX", [tx], [ty], [b.const("exp", table)], multipliers=[m], shifts=[s])
    b.set_io([tx], [ty])
    (y,) = run_both(b, [x])
    xi = x.astype(np.int64)
    real = np.exp((xi - xi.max(axis=-1, keepdims=True)) * sx)
    real = real / real.sum(axis=-1, keepdims=True)
    # the exp table has 2^-24 absolute precision: tiny terms can move the result by a code
    assert_close_codes(y, real, sy, ydt, tol=1 if ydt != "int16" else 2)


def softmax_engine_and_input(data, batch, classes, out_scale):
    """A SOFTMAX engine over ``classes`` at ``out_scale`` and a batch of confident rows (one
    logit far above the rest, as a trained classifier's head gives) mixed with random ones."""
    xdt, ydt = data.draw(ACT), data.draw(ACT)
    sx = scale(data, -6, -2)
    table, m, s = make_softmax_table(xdt, sx, out_scale, classes)
    x = rand_codes(data, (batch, classes), xdt)
    lo, hi = qrange(xdt)
    rows = np.arange(batch)
    confident = rows[rows % 2 == 0]
    x[confident] = np.clip(x[confident].astype(np.int64), lo, hi // 4).astype(xdt)
    x[confident, data.draw(st.integers(0, classes - 1))] = hi
    b = EngineBuilder("softmax_head", batch)
    tx, ty = b.tensor("x", (batch, classes), xdt, sx), b.tensor("y", (batch, classes), ydt, out_scale)
    b.add("SOFTMAX", [tx], [ty], [b.const("exp", table)], multipliers=[m], shifts=[s])
    b.set_io([tx], [ty])
    return b, x, sx, ydt


@SETTINGS
@given(data=st.data(), batch=st.sampled_from([1, 8]), classes=st.integers(10, 10_000),
       out_bits=st.integers(4, 12))
def test_softmax_wide_rows_and_coarse_output_scales(data, batch, classes, out_bits):
    """Classifier heads of 10 to 10,000 classes with output scales 2^-4 .. 2^-12 build (the
    table's shift respects the engine validator's bound), run bit-identically on both
    executors and stay within a code or two of the float softmax."""
    b, x, sx, ydt = softmax_engine_and_input(data, batch, classes, 2.0 ** -out_bits)
    (y,) = run_both(b, [x])
    xi = x.astype(np.int64)
    real = np.exp((xi - xi.max(axis=-1, keepdims=True)) * sx)
    real = real / real.sum(axis=-1, keepdims=True)
    assert_close_codes(y, real, 2.0 ** -out_bits, ydt, tol=1 if ydt != "int16" else 2)


def conv_chain(batch):
    """x -> CONV2D(3x3, relu) -> AVG_POOL -> MEAN, built for ``batch``."""
    rng = np.random.default_rng(1)
    b = EngineBuilder("chain", batch)
    tx = b.tensor("x", (batch, 6, 6, 3), "int8", 0.02)
    tc = b.tensor("c", (batch, 6, 6, 4), "uint8", 0.05)
    tp = b.tensor("p", (batch, 3, 3, 4), "uint8", 0.05)
    tm = b.tensor("m", (batch, 4), "int16", 0.001)
    wq = rng.integers(-127, 128, (3, 3, 3, 4)).astype(np.int8)
    bias = rng.integers(-500, 500, 4)
    b.add("CONV2D", [tx], [tc], requant_consts(b, wq, "int8", np.full(4, 0.02 * 0.01 / 0.05), bias),
          strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1, act_min=0)
    m, s = quantize_multiplier(1.0, 4 * 255)
    b.add("AVG_POOL", [tc], [tp], ksize=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), multipliers=[m], shifts=[s])
    m, s = quantize_multiplier(0.05 / 0.001, 9 * 255)
    b.add("MEAN", [tp], [tm], axes=(1, 2), multipliers=[m], shifts=[s])
    b.set_io([tx], [tm, tc])
    return b.build()


def test_batch_size_is_free_at_run_time():
    eng = conv_chain(2)
    x = np.random.default_rng(2).integers(-128, 128, (5, 6, 6, 3)).astype(np.int8)
    full = eng.run([x], backend="native")
    for n in (1, 5):
        ref = eng.run([x[:n]], backend="reference")
        nat = eng.run([x[:n]], backend="native", num_threads=1)
        for r, a, f in zip(ref, nat, full):
            assert r.shape[0] == n
            np.testing.assert_array_equal(r, a)
            np.testing.assert_array_equal(a, f[:n])  # samples are independent


@pytest.mark.parametrize("schedule", ["layers", "samples", "auto"])
def test_batch_split_schedules_give_the_same_bits(monkeypatch, schedule):
    """RATELNN_BATCH_SPLIT forces how the native executor shares a batch among threads
    (ops/core/npu_exec.h: whole samples per thread, or each instruction's work): any batch,
    with the samples that do not fill a round of threads run together, gives the reference's
    bits."""
    monkeypatch.setenv("RATELNN_BATCH_SPLIT", schedule)
    eng = conv_chain(2)
    x = np.random.default_rng(3).integers(-128, 128, (7, 6, 6, 3)).astype(np.int8)
    for n, threads in ((1, 2), (2, 2), (5, 2), (7, 3), (3, 4)):
        ref = eng.run([x[:n]], backend="reference")
        nat = eng.run([x[:n]], backend="native", num_threads=threads)
        for r, a in zip(ref, nat):
            np.testing.assert_array_equal(r, a)


def test_an_unknown_batch_split_is_an_error(monkeypatch):
    monkeypatch.setenv("RATELNN_BATCH_SPLIT", "diagonal")
    x = np.zeros((4, 6, 6, 3), np.int8)
    with pytest.raises(EngineError, match="RATELNN_BATCH_SPLIT=diagonal names no batch schedule"):
        conv_chain(2).run([x], backend="native", num_threads=2)


def test_run_rejects_wrong_inputs():
    eng = conv_chain(2)
    x = np.zeros((2, 6, 6, 3), np.int8)
    with pytest.raises(EngineError, match="chain.*must be int8"):
        eng.run([x.astype(np.uint8)], backend="native")
    with pytest.raises(EngineError, match="chain.*shape"):
        eng.run([x[:, :5]], backend="native")
    with pytest.raises(EngineError, match="expects 1 inputs"):
        eng.run([x, x], backend="reference")
    # one native check (ops/core/npu_io.h) for both executors and the TF/MXNet ops
    for backend in ("reference", "native"):
        with pytest.raises(EngineError, match=r"engine 'chain\w*': input 0 \('\w+'\) must be int8, got int16"):
            eng.run([x.astype(np.int16)], backend=backend)
        with pytest.raises(EngineError, match=r"input 0 \('\w+'\) has batch 0, expected N >= 1"):
            eng.run([x[:0]], backend=backend)
        with pytest.raises(EngineError, match=r"has shape \[2,6,6\], expected \[N,6,6,3\]"):
            eng.run([x[..., 0]], backend=backend)
    with pytest.raises(ValueError, match="backend"):
        eng.run([x], backend="gpu")


def test_quantize_multiplier_respects_the_accumulator_bound():
    m, s = quantize_multiplier(0.0123, 1)
    assert m < 2 ** 31 and abs(m / 2 ** s - 0.0123) < 1e-11
    m2, s2 = quantize_multiplier(0.0123, 2 ** 40)
    assert m2 * 2 ** 40 <= 2 ** 62 and abs(m2 / 2 ** s2 - 0.0123) < 1e-5
    with pytest.raises(EngineError):
        quantize_multiplier(float("nan"))


def test_engines_decoded_once_per_bytes():
    """Engine.decoded (what run_compiled uses) validates and packs an engine once per bytes
    and label; the cached engine runs like a fresh one."""
    from ratelnn.npu.engine import Engine
    data = small_engine_builder().build().to_bytes()
    first = Engine.decoded(data, "e")
    assert Engine.decoded(bytes(data), "e") is first  # equal bytes, another object
    assert Engine.decoded(data, "other") is not first
    x = np.random.default_rng(0).integers(-128, 128, (2, 5, 5, 3)).astype(np.int8)
    for got, want in zip(first.run([x], backend="native"), Engine.from_bytes(data).run([x], backend="native")):
        np.testing.assert_array_equal(got, want)
