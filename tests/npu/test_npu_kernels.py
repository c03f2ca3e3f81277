"""Property tests aimed at the fast paths of the native NPU kernels (ops/core/npu_conv.cc,
npu_kernels.h): channel counts around the 16-channel blocks and 8-lane vectors, 1x1 and
FULLY_CONNECTED GEMMs with row tails and several pixel tiles, depthwise with multipliers,
int16 activations with chunked (wide) accumulation, the scalar int16 x int16 path, and the
chunked elementwise ops.  Native must equal the numpy reference bit for bit, with 1 and 2
threads, on every kernel path the CPU supports (portable, AVX2, AVX-VNNI, AVX-512, AVX-512 VNNI)."""
import numpy as np
from hypothesis import given, strategies as st

from ratelnn.npu.engine import EngineBuilder, qabs, qrange, quantize_multiplier

from helpers.engines import SETTINGS, assert_native_equals_reference, rand_codes, requant_consts, scale

ACT = st.sampled_from(["int8", "uint8", "int16"])
# around the vector widths: 1, 7, 8, 9, 15, 16, 17, 31, 32, 33
CHANNELS = st.one_of(st.integers(1, 40), st.sampled_from([7, 8, 9, 15, 16, 17, 31, 32, 33]))


def check(builder, inputs):
    return assert_native_equals_reference(builder.build(), inputs, thread_counts=(1, 2))


def conv_case(data, xdt, wdt, n, h, w, cin, cout, k, stride, dil, groups, relu=False, leaky=False):
    cg = cin // groups
    ext = dil * (k - 1) + 1
    pads = tuple(data.draw(st.integers(0, ext - 1)) for _ in range(4))
    h, w = max(h, ext), max(w, ext)
    oh = (h + pads[0] + pads[1] - ext) // stride + 1
    ow = (w + pads[2] + pads[3] - ext) // stride + 1
    sx, sy = scale(data), scale(data, -6, 0)
    sw = np.array([scale(data, -9, -5) for _ in range(cout)])
    x = rand_codes(data, (n, h, w, cin), xdt)
    wq = rand_codes(data, (k, k, cg, cout), wdt)
    bias = rand_codes(data, (cout,), "int16").astype(np.int32)
    ydt = data.draw(ACT)
    b = EngineBuilder("conv", n)
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, oh, ow, cout), ydt, sy)
    consts = requant_consts(b, wq, xdt, sx * sw / sy, bias, 0.1 * sx * sw / sy if leaky else None)
    b.add("CONV2D", [tx], [ty], consts, strides=(stride, stride), dilations=(dil, dil), pads=pads, groups=groups,
          act_min=0 if relu else None)
    b.set_io([tx], [ty])
    check(b, [x])


@SETTINGS
@given(data=st.data())
def test_gemm_conv_channel_tails(data):
    """Regular and grouped convs, channels around the block sizes, 1x1 included."""
    xdt = data.draw(ACT)
    wdt = "int16" if xdt != "int16" and data.draw(st.booleans()) else "int8"
    groups = data.draw(st.sampled_from([1, 1, 2]))
    cin = groups * data.draw(CHANNELS)
    cout = groups * data.draw(CHANNELS)
    k = data.draw(st.sampled_from([1, 1, 2, 3]))
    conv_case(data, xdt, wdt, data.draw(st.integers(1, 2)), data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9)),
              cin, cout, k, data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)), groups,
              relu=data.draw(st.booleans()), leaky=data.draw(st.booleans()))


@SETTINGS
@given(data=st.data())
def test_depthwise_multipliers(data):
    xdt = data.draw(ACT)
    wdt = "int16" if xdt != "int16" and data.draw(st.booleans()) else "int8"
    cin, mult = data.draw(CHANNELS), data.draw(st.integers(1, 3))
    conv_case(data, xdt, wdt, data.draw(st.integers(1, 2)), data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9)),
              cin, cin * mult, data.draw(st.sampled_from([1, 2, 3, 5])), data.draw(st.integers(1, 2)),
              data.draw(st.integers(1, 2)), cin, leaky=data.draw(st.booleans()))


@SETTINGS
@given(data=st.data())
def test_depthwise_borders_and_blocks(data):
    """Depthwise geometry aimed at both depthwise kernels (the direct one of the AVX2/AVX-512
    paths: packed_taps, no padded copy, taps outside the image skipped,
    8/4-pixel interior steps, masked channel tails; the padded-copy one): channels around
    16/32/64, 1-row and 1-column inputs, strides 1-3, dilations 1-3, asymmetric pads, batch
    1-3, multipliers 1 and 2, 8/16-bit activations and int8/int16 weights, every epilogue."""
    xdt = data.draw(ACT)
    wdt = "int16" if xdt != "int16" and data.draw(st.booleans()) else "int8"
    cin = data.draw(st.one_of(CHANNELS, st.sampled_from([47, 48, 63, 64, 65, 96, 129])))
    mult = data.draw(st.sampled_from([1, 1, 1, 2]))
    kh, kw = data.draw(st.sampled_from([1, 2, 3, 5])), data.draw(st.sampled_from([1, 3, 5]))
    dh, dw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    sh, sw = data.draw(st.sampled_from([1, 1, 2, 3])), data.draw(st.sampled_from([1, 1, 2, 3]))
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    h, w = data.draw(st.sampled_from([1, 1, 2, 3, 6])), data.draw(st.one_of(st.integers(1, 14), st.integers(12, 40)))
    # pads in [0, extent) with the padded input at least one kernel extent
    pt = data.draw(st.integers(0, eh - 1))
    pb = data.draw(st.integers(max(0, eh - h - pt), eh - 1))
    pl = data.draw(st.integers(0, ew - 1))
    pr = data.draw(st.integers(max(0, ew - w - pl), ew - 1))
    n, cout = data.draw(st.integers(1, 3)), cin * mult
    oh, ow = (h + pt + pb - eh) // sh + 1, (w + pl + pr - ew) // sw + 1
    sx, sy = scale(data), scale(data, -6, 0)
    sws = np.array([scale(data, -9, -5) for _ in range(cout)])
    x = rand_codes(data, (n, h, w, cin), xdt)
    wq = rand_codes(data, (kh, kw, 1, cout), wdt)
    bias = rand_codes(data, (cout,), "int16").astype(np.int32)
    leaky = data.draw(st.booleans())
    b = EngineBuilder("dw", n)
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, oh, ow, cout), data.draw(ACT), sy)
    consts = requant_consts(b, wq, xdt, sx * sws / sy, bias, 0.1 * sx * sws / sy if leaky else None)
    b.add("CONV2D", [tx], [ty], consts, strides=(sh, sw), dilations=(dh, dw), pads=(pt, pb, pl, pr), groups=cin,
          act_min=0 if data.draw(st.booleans()) else None)
    b.set_io([tx], [ty])
    check(b, [x])


@SETTINGS
@given(data=st.data())
def test_depthwise_column_runs(data):
    """The direct depthwise kernel's column runs (kw = 3, dilation 1 across, strides 1 and 2:
    8/4/2/1-pixel runs over output widths 1..16, borders inside a run), kernel heights 1-4,
    asymmetric pads, channels around 16/64, batch 1-3, 8/16-bit activations, and the ReLU
    epilogue (lo >= 0) with shifts 33..40 and products p < 0 that are multiples of 2^32."""
    xdt = data.draw(ACT)
    wdt = "int16" if xdt != "int16" and data.draw(st.booleans()) else "int8"
    cin = data.draw(st.one_of(CHANNELS, st.sampled_from([47, 48, 64, 65])))
    kh, dh = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 2))
    sh, sw = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    eh = dh * (kh - 1) + 1
    pt, pb = data.draw(st.integers(0, eh - 1)), data.draw(st.integers(0, eh - 1))
    pl, pr = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
    h = data.draw(st.integers(max(1, eh - pt - pb), 8))
    w = data.draw(st.integers(max(1, 3 - pl - pr), 20))
    n = data.draw(st.integers(1, 3))
    oh, ow = (h + pt + pb - eh) // sh + 1, (w + pl + pr - 3) // sw + 1
    x = rand_codes(data, (n, h, w, cin), xdt)
    wq = rand_codes(data, (kh, 3, 1, cin), wdt)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    bias = rng.integers(-5000, 5000, cin)
    shifts = rng.integers(33, 41, cin)
    mults = np.where(rng.random(cin) < 0.3, 2 ** 30, rng.integers(2 ** 28, 2 ** 31 - 1, cin))  # 2^30: t * M % 2^32 == 0 for t % 4 == 0
    relu = data.draw(st.booleans())
    b = EngineBuilder("dw_runs", n)
    tx, ty = b.tensor("x", x.shape, xdt, 0.1), b.tensor("y", (n, oh, ow, cin), data.draw(ACT), 1.0)
    consts = [b.const("w", wq), b.const("bias", bias.astype(np.int32)), b.const("m", mults.astype(np.int32)),
              b.const("s", shifts.astype(np.int32))]
    b.add("CONV2D", [tx], [ty], consts, strides=(sh, sw), dilations=(dh, 1), pads=(pt, pb, pl, pr), groups=cin,
          act_min=0 if relu else None)
    b.set_io([tx], [ty])
    check(b, [x])


@SETTINGS
@given(data=st.data())
def test_depthwise_few_channels_flat_rows(data):
    """Depthwise with 2, 4 or 8 channels at horizontal stride 1 where the vpdpbusd runs do not
    apply (output rows as flat runs of 16-lane blocks over several pixels, widened padded input
    rows, weights and constants tiled with period C: 16-bit x, kw != 3, dilation across, every
    such conv on the AVX2 and AVX-512 paths) beside channel counts that keep the per-pixel
    kernels (3, 5, 12, 16, 24):
    kernels 1-4 high and wide, dilations 1-2, vertical strides 1-2, odd widths, asymmetric
    pads, the 16-lane epilogue (shifts >= 33) and the table one (smaller shifts)."""
    xdt = data.draw(ACT)
    wdt = "int16" if xdt != "int16" and data.draw(st.booleans()) else "int8"
    cin = data.draw(st.sampled_from([2, 4, 8, 8, 3, 5, 12, 16, 24]))
    (kh, kw), (dh, dw) = data.draw(st.tuples(st.integers(1, 4), st.integers(1, 4))), data.draw(
        st.tuples(st.integers(1, 2), st.integers(1, 2)))
    sh, sw = data.draw(st.integers(1, 2)), data.draw(st.sampled_from([1, 1, 2]))
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    pads = tuple(data.draw(st.integers(0, e - 1)) for e in (eh, eh, ew, ew))
    h = data.draw(st.integers(max(1, eh - pads[0] - pads[1]), 7))
    w = data.draw(st.integers(max(1, ew - pads[2] - pads[3]), 21))
    n = data.draw(st.integers(1, 2))
    oh, ow = (h + pads[0] + pads[1] - eh) // sh + 1, (w + pads[2] + pads[3] - ew) // sw + 1
    x = rand_codes(data, (n, h, w, cin), xdt)
    wq = rand_codes(data, (kh, kw, 1, cin), wdt)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    bias = rng.integers(-5000, 5000, cin)
    shifts = rng.integers(33, 41, cin) if data.draw(st.booleans()) else rng.integers(12, 33, cin)
    mults = rng.integers(2 ** 28, 2 ** 31 - 1, cin)
    b = EngineBuilder("dw_flat", n)
    tx, ty = b.tensor("x", x.shape, xdt, 0.1), b.tensor("y", (n, oh, ow, cin), data.draw(ACT), 1.0)
    consts = [b.const("w", wq), b.const("bias", bias.astype(np.int32)), b.const("m", mults.astype(np.int32)),
              b.const("s", shifts.astype(np.int32))]
    b.add("CONV2D", [tx], [ty], consts, strides=(sh, sw), dilations=(dh, dw), pads=pads, groups=cin,
          act_min=0 if data.draw(st.booleans()) else None)
    b.set_io([tx], [ty])
    check(b, [x])


def test_depthwise_mobilenet_rows():
    """A MobileNetV2-like depthwise layer (stride 2, pads (0, 1, 0, 1), 96 channels, ReLU6
    bounds) and a 5x5 one with 40 channels, int8 and uint8 inputs: many interior pixels, two
    threads splitting rows, outputs not saturated."""
    rng = np.random.default_rng(7)
    for xdt, (h, c, k, s, pads) in [("int8", (23, 96, 3, 2, (0, 1, 0, 1))), ("uint8", (17, 40, 5, 1, (2, 2, 2, 2)))]:
        lo, hi = (-128, 127) if xdt == "int8" else (0, 255)
        x = rng.integers(lo, hi + 1, (2, h, h, c)).astype(xdt)
        wq = rng.integers(-128, 128, (k, k, 1, c)).astype(np.int8)
        o = (h + pads[0] + pads[1] - k) // s + 1
        b = EngineBuilder("mv2_dw", 2)
        tx, ty = b.tensor("x", x.shape, xdt, 0.02), b.tensor("y", (2, o, o, c), "uint8", 6 / 255)
        b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, np.full(c, 0.02 * 0.004 / (6 / 255)),
                                                   rng.integers(-3000, 3000, c)),
              strides=(s, s), dilations=(1, 1), pads=pads, groups=c, act_min=0, act_max=255)
        b.set_io([tx], [ty])
        (y,) = check(b, [x])
        assert len(np.unique(y)) > 50


def test_depthwise_small_images_and_tails():
    """MobileNetV2-like 3x3 depthwise convs on small images (7x7, 14x14, odd widths) whose
    channels leave whole 16-channel blocks after the groups of 64 (two: the 2-block table of the
    vpdpbusd runs, 32, 96, 160, 176; one: 16, 48, 80, 144) or a partial block (40, 200), strides 1 and
    2 with symmetric and (0, 1, 0, 1) pads, int8 / uint8 in and out, clamp bounds inside the
    output range (the clamp on bytes), batch 2: native equals the reference on every path."""
    rng = np.random.default_rng(11)
    cases = [(7, 7, 960, 1, (1, 1, 1, 1)), (7, 7, 160, 1, (1, 1, 1, 1)), (7, 7, 96, 1, (1, 1, 1, 1)), (14, 14, 144, 1, (1, 1, 1, 1)),
             (14, 14, 48, 2, (0, 1, 0, 1)), (9, 13, 176, 2, (1, 1, 1, 1)), (7, 11, 16, 1, (1, 1, 1, 1)),
             (6, 9, 32, 2, (0, 1, 0, 1)), (5, 10, 80, 1, (0, 1, 1, 0)), (7, 7, 40, 2, (1, 1, 1, 1)),
             (8, 5, 200, 1, (1, 1, 1, 1)), (3, 18, 144, 2, (1, 1, 1, 1)), (5, 9, 32, 1, (1, 1, 1, 1))]
    for i, (h, w, c, s, pads) in enumerate(cases):
        xdt, ydt = ("int8", "uint8") if i % 2 == 0 else ("uint8", "int8")
        lo, hi = qrange(xdt)
        x = rng.integers(lo, hi + 1, (2, h, w, c)).astype(xdt)
        wq = rng.integers(-128, 128, (3, 3, 1, c)).astype(np.int8)
        oh, ow = (h + pads[0] + pads[1] - 3) // s + 1, (w + pads[2] + pads[3] - 3) // s + 1
        act = (3, 140) if ydt == "uint8" else (-80, 70)
        b = EngineBuilder("dw_small", 2)
        tx, ty = b.tensor("x", x.shape, xdt, 0.02), b.tensor("y", (2, oh, ow, c), ydt, 0.01)
        b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, np.full(c, 0.02 * 0.002 / 0.01), rng.integers(-3000, 3000, c)),
              strides=(s, s), dilations=(1, 1), pads=pads, groups=c, act_min=act[0], act_max=act[1])
        b.set_io([tx], [ty])
        (y,) = check(b, [x])
        assert (y == act[0]).any() and (y == act[1]).any() and len(np.unique(y)) > 50, (h, w, c, s)


@SETTINGS
@given(data=st.data())
def test_depthwise_few_channel_column_steps(data):
    """3-wide depthwise on 4, 8 or 16 channels with 8-bit activations (the vpdpbusd column
    steps at stride 1: 64 / C pixels per step, the taps from the next step's windows, the last
    step stored masked; stride 2 keeps the per-block runs): widths 1-40 (odd ones, steps cut
    anywhere), kernel heights 1-4, pads 0-2 on every side, strides 1 and 2, batch 1-3, int8 /
    uint8 in and out, the 16-lane epilogue with and without the ReLU floor, and the table one."""
    xdt, ydt = data.draw(st.sampled_from(["int8", "uint8"])), data.draw(st.sampled_from(["int8", "uint8"]))
    cin = data.draw(st.sampled_from([4, 8, 8, 16]))
    kh, sh, sw = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 2)), data.draw(st.sampled_from([1, 1, 2]))
    pt, pb = data.draw(st.integers(0, kh - 1)), data.draw(st.integers(0, kh - 1))
    pl, pr = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
    h = data.draw(st.integers(max(1, kh - pt - pb), 6))
    w = data.draw(st.one_of(st.sampled_from([1, 3, 7, 9, 15, 17]), st.integers(max(1, 3 - pl - pr), 40)))
    w = max(w, 3 - pl - pr)
    n = data.draw(st.integers(1, 3))
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - 3) // sw + 1
    x = rand_codes(data, (n, h, w, cin), xdt)
    wq = rand_codes(data, (kh, 3, 1, cin), "int8")
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    bias = rng.integers(-5000, 5000, cin)
    shifts = rng.integers(33, 41, cin) if data.draw(st.booleans()) else rng.integers(20, 33, cin)
    mults = rng.integers(2 ** 28, 2 ** 31 - 1, cin)
    act = data.draw(st.sampled_from([None, (0, None), (-60, 90)] if ydt == "int8" else [None, (0, None), (5, 200)]))
    b = EngineBuilder("dw_cols", n)
    tx, ty = b.tensor("x", x.shape, xdt, 0.1), b.tensor("y", (n, oh, ow, cin), ydt, 1.0)
    consts = [b.const("w", wq), b.const("bias", bias.astype(np.int32)), b.const("m", mults.astype(np.int32)),
              b.const("s", shifts.astype(np.int32))]
    b.add("CONV2D", [tx], [ty], consts, strides=(sh, sw), dilations=(1, 1), pads=(pt, pb, pl, pr), groups=cin,
          act_min=act[0] if act else None, act_max=act[1] if act else None)
    b.set_io([tx], [ty])
    check(b, [x])


def test_depthwise_few_channel_rows():
    """fer-like 3x3 depthwise rows on 8 and 16 channels (60 wide: a partial last step) and 4, 8
    and 16 channels at the odd widths 1, 3, 7 and 13, stride 1 'same' pads and stride 2, batch
    3, int8 / uint8 in and out with clamp bounds inside the output range: native equals the
    reference on every path, the outputs spread and reach the lower bound (the upper one in all
    but the narrowest images)."""
    rng = np.random.default_rng(5)
    cases = [(8, 60, 8, 1), (6, 60, 16, 1), (5, 1, 8, 1), (4, 3, 8, 1), (3, 7, 8, 1), (5, 7, 8, 2), (4, 13, 4, 1),
             (3, 7, 16, 1), (4, 3, 4, 1), (6, 13, 16, 2)]
    top_reached = []
    for i, (h, w, c, s) in enumerate(cases):
        xdt, ydt = ("int8", "uint8") if i % 2 == 0 else ("uint8", "int8")
        lo, hi = qrange(xdt)
        x = rng.integers(lo, hi + 1, (3, h, w, c)).astype(xdt)
        wq = rng.integers(-128, 128, (3, 3, 1, c)).astype(np.int8)
        oh, ow = (h + 2 - 3) // s + 1, (w + 2 - 3) // s + 1
        act = (3, 140) if ydt == "uint8" else (-80, 70)
        b = EngineBuilder("dw_few", 3)
        tx, ty = b.tensor("x", x.shape, xdt, 0.02), b.tensor("y", (3, oh, ow, c), ydt, 0.01)
        b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, np.full(c, 0.02 * 0.002 / 0.01), rng.integers(-3000, 3000, c)),
              strides=(s, s), dilations=(1, 1), pads=(1, 1, 1, 1), groups=c, act_min=act[0], act_max=act[1])
        b.set_io([tx], [ty])
        (y,) = check(b, [x])
        assert (y == act[0]).any() and len(np.unique(y)) > min(50, y.size // 4), (h, w, c, s)
        top_reached.append((y == act[1]).any())
    assert sum(top_reached) >= len(cases) - 2


@SETTINGS
@given(data=st.data())
def test_wide_and_scalar_convs(data):
    """int16 activations with K > 511 (int32 chunks summed in int64) and int16 x int16
    weights (the scalar path)."""
    wdt = data.draw(st.sampled_from(["int8", "int16"]))
    cin = data.draw(st.integers(57, 80)) if wdt == "int8" else data.draw(st.integers(1, 20))
    conv_case(data, "int16", wdt, 1, data.draw(st.integers(3, 5)), data.draw(st.integers(3, 5)), cin,
              data.draw(CHANNELS), 3, 1, 1, 1)


def test_conv_spans_several_pixel_tiles():
    """More pixels than one 48-pixel tile, rows not a multiple of the 6-row micro-tile."""
    data_rng = np.random.default_rng(5)
    n, h, w, cin, cout = 2, 13, 11, 19, 35
    x = data_rng.integers(-128, 128, (n, h, w, cin)).astype(np.int8)
    wq = data_rng.integers(-128, 128, (3, 3, cin, cout)).astype(np.int8)
    bias = data_rng.integers(-3000, 3000, cout)
    b = EngineBuilder("tiles", n)
    tx, ty = b.tensor("x", x.shape, "int8", 0.02), b.tensor("y", (n, h, w, cout), "int8", 0.1)
    b.add("CONV2D", [tx], [ty], requant_consts(b, wq, "int8", np.full(cout, 0.02 * 0.01 / 0.1), bias),
          strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1)
    b.set_io([tx], [ty])
    (y,) = check(b, [x])
    assert len(np.unique(y)) > 20  # not saturated: the comparison means something


@SETTINGS
@given(data=st.data())
def test_fully_connected_rows_and_blocks(data):
    xdt = data.draw(ACT)
    n, k, m = data.draw(st.integers(1, 60)), data.draw(st.integers(1, 300)), data.draw(CHANNELS)
    sx, sy = scale(data), scale(data, -6, 0)
    sw = np.array([scale(data, -9, -5) for _ in range(m)])
    x, wq = rand_codes(data, (n, k), xdt), rand_codes(data, (k, m), "int8")
    bias = rand_codes(data, (m,), "int16").astype(np.int32)
    b = EngineBuilder("fc", n)
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, m), data.draw(ACT), sy)
    b.add("FULLY_CONNECTED", [tx], [ty], requant_consts(b, wq, xdt, sx * sw / sy, bias))
    b.set_io([tx], [ty])
    check(b, [x])


@SETTINGS
@given(data=st.data(), op=st.sampled_from(["ADD", "SUB", "MUL"]))
def test_chunked_elementwise(data, op):
    """Same-shape and per-channel constant operands longer than one 2048-element chunk."""
    adt, bdt, ydt = data.draw(ACT), data.draw(ACT), data.draw(ACT)
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 40)), data.draw(st.integers(1, 70)),
             data.draw(CHANNELS))
    per_channel = data.draw(st.booleans())
    sa, sb, sy = scale(data), scale(data), scale(data, -7, 0)
    a = rand_codes(data, shape, adt)
    bb = rand_codes(data, shape[-1:] if per_channel else shape, "int8" if per_channel else bdt)
    b = EngineBuilder("elementwise", shape[0])
    ta, ty = b.tensor("a", shape, adt, sa), b.tensor("y", shape, ydt, sy)
    if op == "MUL":
        m, s = quantize_multiplier(sa * sb / sy, qabs(adt) * qabs(bb.dtype))
        attrs = dict(multipliers=[m], shifts=[s])
    else:
        s = 30
        attrs = dict(multipliers=[int(min(sa / sy * 2 ** s, 2 ** 31 - 1)), int(min(sb / sy * 2 ** s, 2 ** 31 - 1))],
                     shifts=[s])
    if per_channel:
        b.add(op, [ta], [ty], [b.const("b", bb)], **attrs)
        b.set_io([ta], [ty])
        check(b, [a])
    else:
        tb = b.tensor("b", shape, bdt, sb)
        b.add(op, [ta, tb], [ty], **attrs)
        b.set_io([ta, tb], [ty])
        check(b, [a, bb])


@SETTINGS
@given(data=st.data(), is_max=st.booleans())
def test_pools_and_mean_wide_channels(data, is_max):
    xdt = data.draw(ACT)
    ydt = xdt if is_max else data.draw(ACT)
    n, h, w, c = data.draw(st.integers(1, 2)), data.draw(st.integers(3, 12)), data.draw(st.integers(3, 12)), data.draw(CHANNELS)
    sx, sy = scale(data), scale(data)
    x = rand_codes(data, (n, h, w, c), xdt)
    b = EngineBuilder("pool", n)
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, (h - 1) // 2 + 1, (w - 1) // 2 + 1, c), ydt, sy)
    attrs = dict(ksize=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    if not is_max:
        m, s = quantize_multiplier(sx / sy, 9 * qabs(xdt))
        attrs.update(multipliers=[m], shifts=[s], count_include_pad=data.draw(st.booleans()))
    b.add("MAX_POOL" if is_max else "AVG_POOL", [tx], [ty], **attrs)
    tm = b.tensor("m", (n, c), data.draw(ACT), sy)
    m, s = quantize_multiplier(sx / sy, h * w * qabs(xdt))
    s = min(s, 62 - (h * w).bit_length())
    b.add("MEAN", [tx], [tm], axes=(1, 2), multipliers=[int(np.floor(sx / sy * 2 ** s + 0.5))], shifts=[s])
    b.set_io([tx], [ty, tm])
    check(b, [x])


@SETTINGS
@given(data=st.data())
def test_max_pool_windows_strides_and_clamps(data):
    """MAX_POOL's separable kernel: kernels 1..4 wide and high, strides 1..3, any padding up to
    a whole window (windows of padding alone clamp to lo), channels around the vector widths
    (8, 12, 24, odd) and a clamp inside the dtype's range."""
    xdt = data.draw(ACT)
    n, c = data.draw(st.integers(1, 2)), data.draw(st.one_of(CHANNELS, st.sampled_from([8, 12, 24])))
    (kh, kw), (sh, sw) = data.draw(st.tuples(st.integers(1, 4), st.integers(1, 4))), data.draw(
        st.tuples(st.integers(1, 3), st.integers(1, 3)))
    pads = tuple(data.draw(st.integers(0, k - 1)) for k in (kh, kh, kw, kw))
    h, w = data.draw(st.integers(kh, 13)), data.draw(st.integers(kw, 13))
    oh, ow = (h + pads[0] + pads[1] - kh) // sh + 1, (w + pads[2] + pads[3] - kw) // sw + 1
    lo, hi = qrange(xdt)
    act_min, act_max = data.draw(st.integers(lo, 0)), data.draw(st.integers(1, hi))
    sx = scale(data)
    x = rand_codes(data, (n, h, w, c), xdt)
    b = EngineBuilder("max_pool", n)
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, oh, ow, c), xdt, sx)
    b.add("MAX_POOL", [tx], [ty], ksize=(kh, kw), strides=(sh, sw), pads=pads, act_min=act_min, act_max=act_max)
    b.set_io([tx], [ty])
    check(b, [x])


@SETTINGS
@given(data=st.data())
def test_mean_in_column_blocks(data):
    """MEAN over contiguous axes on wide rows: several 128-column blocks with a tail, enough
    elements to split over the threads, keepdims or not, an outer dimension of 1-3 (the
    batch), mean over H and W or over W only, extreme codes."""
    xdt, ydt = data.draw(ACT), data.draw(ACT)
    n, h, w = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 9)), data.draw(st.integers(2, 9))
    c = data.draw(st.sampled_from([128, 129, 255, 300, 1280]))
    axes = data.draw(st.sampled_from([(1, 2), (2,)]))
    keep = data.draw(st.booleans())
    shape = (n, h, w, c)
    out = tuple(1 if d in axes else s for d, s in enumerate(shape) if keep or d not in axes)
    sx, sy = scale(data), scale(data)
    lo, hi = qrange(xdt)
    x = data.draw(st.sampled_from([rand_codes(data, shape, xdt), np.full(shape, hi), np.full(shape, lo)])).astype(xdt)
    cells = int(np.prod([shape[a] for a in axes]))
    m, s = quantize_multiplier(sx / sy, cells * qabs(xdt))
    s = min(s, 62 - cells.bit_length())
    b = EngineBuilder("mean", n)
    tx, ty = b.tensor("x", shape, xdt, sx), b.tensor("y", out, ydt, sy)
    b.add("MEAN", [tx], [ty], axes=axes, keepdims=keep, multipliers=[int(np.floor(sx / sy * 2 ** s + 0.5))], shifts=[s])
    b.set_io([tx], [ty])
    check(b, [x])


# ------------------------------------------------------------------ the int8 dot-product path
# On AVX-512 VNNI (zmm) and AVX-VNNI (ymm), 8-bit activations x int8 weights run vpdpbusd on
# u8 x s8 k-quads, int8 activations entering as x + 128 with -128 * sum(w) folded into the bias
# (npu_kernels.h).

@SETTINGS
@given(data=st.data())
def test_dot_product_gemm_quads_and_blocks(data):
    """8-bit activations with many input channels (several 128-quad weight sub-blocks), K not a
    multiple of 4, odd and even counts of 16-channel blocks, 1x1 (direct u8 rows and copied
    rows), strided, dilated and grouped convs, extreme codes."""
    xdt = data.draw(st.sampled_from(["int8", "uint8"]))
    groups = data.draw(st.sampled_from([1, 1, 1, 2]))
    cin = groups * data.draw(st.one_of(st.integers(1, 70), st.sampled_from([64, 127, 128, 129, 257])))
    cout = groups * data.draw(st.one_of(CHANNELS, st.sampled_from([47, 48, 49, 64, 80])))
    k = data.draw(st.sampled_from([1, 1, 3]))
    conv_case(data, xdt, "int8", data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8)),
              data.draw(st.integers(1, 8)), cin, cout, k, data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)),
              groups, relu=data.draw(st.booleans()), leaky=data.draw(st.booleans()))


def _extreme_fc(xdt, k, m, seed):
    """FULLY_CONNECTED with K at the largest value whose accumulator bound still fits int32
    (not wide), codes at the ends of their ranges: the u8 x s8 sums and, for int8 activations,
    the x + 128 sums wrap int32 on the way and must come back exact."""
    rng = np.random.default_rng(seed)
    lo, hi = (-128, 127) if xdt == "int8" else (0, 255)
    x = rng.choice(np.array([lo, hi, lo + 1, hi - 1]), size=(3, k)).astype(xdt)
    x[0] = hi  # one row at the positive end everywhere
    wq = rng.choice(np.array([-128, 127, -127]), size=(k, m)).astype(np.int8)
    wq[:, 0] = -128
    bias = np.zeros(m, np.int64)
    bound = k * qabs(xdt) * 128
    assert bound <= 2 ** 31 - 1  # not wide: the int32 paths run
    b = EngineBuilder("fc_extreme", 3)
    tx, ty = b.tensor("x", x.shape, xdt, 0.01), b.tensor("y", (3, m), "int16", 1.0)
    b.add("FULLY_CONNECTED", [tx], [ty], requant_consts(b, wq, xdt, np.full(m, 2.0 ** -16), bias))
    b.set_io([tx], [ty])
    (y,) = check(b, [x])
    y = y.astype(np.int64)
    assert np.abs(y).max() > 10000 and len(np.unique(y)) > 20  # sums beyond 2^29, not all saturated


# pixel counts around the 48-pixel tiles (a remainder below 6 joins the last tile) and the
# 6-row micro-tiles
PIXELS = st.one_of(st.integers(1, 14), st.sampled_from([47, 48, 49, 53, 54, 55, 59, 96, 97, 101, 102, 145, 196]))


@SETTINGS
@given(data=st.data())
def test_pointwise_gemm_tiles_and_epilogue_forms(data):
    """1x1 convs on the dot-product path at pixel counts around the tile edges, K around the
    quads (1..40, and past one 128-quad weight sub-block), channels off the blocks; each form of
    the fused epilogue: ReLU (lo >= 0), the whole int8/int16 range (the saturating narrowing
    clamps) and a narrower signed range (the clamp runs)."""
    xdt = data.draw(st.sampled_from(["int8", "uint8"]))
    pixels, cout = data.draw(PIXELS), data.draw(CHANNELS)
    cin = data.draw(st.one_of(st.integers(1, 40), st.sampled_from([64, 96, 513, 516])))
    n = 2 if pixels % 2 == 0 and data.draw(st.booleans()) else 1
    form = data.draw(st.sampled_from(["relu", "relu6", "full", "narrow"]))
    if form == "relu6":
        ydt = "uint8"
    else:
        ydt = data.draw(ACT if form == "relu" else st.sampled_from(["int8", "int16"]))
    lo, hi = qrange(ydt)
    if form == "relu6":
        act = (0, data.draw(st.integers(1, 254)))
    elif form == "narrow":
        act = (data.draw(st.integers(lo + 1, -1)), data.draw(st.integers(1, hi)))
    else:
        act = (0 if form == "relu" else None, None)
    x = rand_codes(data, (n, 1, pixels // n, cin), xdt)
    wq = rand_codes(data, (1, 1, cin, cout), "int8")
    bias = rand_codes(data, (cout,), "int16").astype(np.int32)
    sx, sy = scale(data), scale(data, -6, 0)
    sw = np.array([scale(data, -9, -5) for _ in range(cout)])
    b = EngineBuilder("pointwise", n)
    tx, ty = b.tensor("x", x.shape, xdt, sx), b.tensor("y", (n, 1, pixels // n, cout), ydt, sy)
    b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, sx * sw / sy, bias), strides=(1, 1), dilations=(1, 1),
          pads=(0, 0, 0, 0), groups=1, act_min=act[0], act_max=act[1])
    b.set_io([tx], [ty])
    check(b, [x])


def test_dot_product_extreme_sums_int8():
    _extreme_fc("int8", (2 ** 31 - 1) // (128 * 128), 17, 1)  # K = 131071, odd


def test_dot_product_extreme_sums_uint8():
    _extreme_fc("uint8", (2 ** 31 - 1) // (255 * 128), 33, 2)  # K = 65793


@SETTINGS
@given(data=st.data())
def test_epilogue_shift_boundaries(data):
    """The 16-lane epilogue runs when every shift is >= 33 (else the 4-lane form): shifts at
    31..36 per channel, all >= 33 or mixed, multipliers near 2^31, every output dtype."""
    xdt, ydt = data.draw(st.sampled_from(["int8", "uint8"])), data.draw(ACT)
    n, k, m = data.draw(st.integers(1, 13)), data.draw(st.integers(1, 90)), data.draw(CHANNELS)
    low = data.draw(st.sampled_from([31, 32, 33]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    x, wq = rand_codes(data, (n, k), xdt), rand_codes(data, (k, m), "int8")
    bias = rng.integers(-5000, 5000, m)
    shifts = rng.integers(low, 37, m)
    mults = rng.integers(2 ** 30, 2 ** 31 - 1, m)
    mults[rng.random(m) < 0.2] = 0  # M = 0 too
    b = EngineBuilder("epilogue", n)
    tx, ty = b.tensor("x", x.shape, xdt, 0.1), b.tensor("y", (n, m), ydt, 1.0)
    b.add("FULLY_CONNECTED", [tx], [ty], [b.const("w", wq), b.const("bias", bias.astype(np.int32)),
                                           b.const("m", mults.astype(np.int32)), b.const("s", shifts.astype(np.int32))],
          act_min=0 if data.draw(st.booleans()) else None)
    b.set_io([tx], [ty])
    check(b, [x])


@SETTINGS
@given(data=st.data())
def test_requant_every_shift(data):
    """REQUANT (the vectorised scale_add_requant: 16 lanes on AVX-512, 8 on AVX2) with shifts
    0..62, multipliers up to 2^31 - 1, row lengths around the vector widths."""
    xdt, ydt = data.draw(ACT), data.draw(ACT)
    shape = (data.draw(st.integers(1, 2)), data.draw(st.one_of(st.integers(1, 40), st.sampled_from([15, 16, 17, 31, 33]))))
    s = data.draw(st.integers(0, 62))
    m = data.draw(st.integers(0, 2 ** 31 - 1))
    x = rand_codes(data, shape, xdt)
    b = EngineBuilder("requant", shape[0])
    tx, ty = b.tensor("x", shape, xdt, 0.1), b.tensor("y", shape, ydt, 0.1)
    b.add("REQUANT", [tx], [ty], multipliers=[m], shifts=[s])
    b.set_io([tx], [ty])
    check(b, [x])


# ADD/SUB run in double when B + 2^(s-1) < 2^53 (ops/core/npu_add.h, B = qabs(a) Ma + qabs(b) Mb):
# with <= 16-bit operands B < 2^48, so s <= 53 takes the double path and s >= 54 the int64
# fallback; the same holds for the fused REQUANT's shift.  Around that edge, at small shifts
# (ties: p an odd multiple of 2^(s-1)) and at the usual ~30.
SHIFTS = st.sampled_from([0, 1, 2, 29, 30, 31, 47, 52, 53, 54, 55, 62])


def multiplier(data, s):
    """A multiplier for shift s: a scale ratio in [1/16, 2) times 2^s (as compiled engines have;
    at s = 1, 2 the sums hit ties), a tiny one, or the largest."""
    real = int(2.0 ** (s + data.draw(st.floats(-4, 1, exclude_max=True))))
    return data.draw(st.sampled_from([min(real, 2 ** 31 - 1), data.draw(st.integers(0, 3)), 2 ** 31 - 1]))


def extreme_codes(data, shape, dtype):
    """Random codes with the dtype's extremes (qmin, qmax, 0, +-1) sprinkled in."""
    x = rand_codes(data, shape, dtype)
    lo, hi = qrange(dtype)
    flat = x.reshape(-1)
    picks = np.random.default_rng(data.draw(st.integers(0, 2 ** 31))).integers(0, flat.size, size=(flat.size + 3) // 4)
    flat[picks] = np.resize(np.array([lo, hi, 0, max(lo, -1), 1], dtype), picks.size)
    return x


@SETTINGS
@given(data=st.data(), op=st.sampled_from(["ADD", "SUB"]), fused=st.booleans())
def test_add_double_path_and_fallback(data, op, fused):
    """ADD/SUB (and a REQUANT fused after them, the ReLU after a residual ADD) on both sides of
    the double path's exactness bound, with extreme operands, row tails and two chunks."""
    adt, bdt, tdt, ydt = (data.draw(ACT) for _ in range(4))
    n = data.draw(st.sampled_from([1, 7, 8, 9, 15, 16, 17, 33, 2100]))
    shape = (data.draw(st.integers(1, 2)), n)
    a, bb = extreme_codes(data, shape, adt), extreme_codes(data, shape, bdt)
    b = EngineBuilder("add", shape[0])
    ta, tb = b.tensor("a", shape, adt, 0.1), b.tensor("b", shape, bdt, 0.1)
    ty = b.tensor("y", shape, ydt, 0.1)
    s, s2 = data.draw(SHIFTS), data.draw(SHIFTS)
    add_attrs = dict(multipliers=[multiplier(data, s), multiplier(data, s)], shifts=[s])
    if fused:
        tt = b.tensor("t", shape, tdt, 0.1)
        lo, hi = qrange(tdt)
        b.add(op, [ta, tb], [tt], act_min=data.draw(st.sampled_from([None, 0, lo // 2])),
              act_max=data.draw(st.sampled_from([None, hi // 3])), **add_attrs)
        b.add("REQUANT", [tt], [ty], multipliers=[multiplier(data, s2)], shifts=[s2],
              act_min=data.draw(st.sampled_from([None, 0])))
    else:
        b.add(op, [ta, tb], [ty], **add_attrs)
    b.set_io([ta, tb], [ty])
    check(b, [a, bb])


def test_add_double_path_ties():
    """Every int8 pair at s = 1 (odd sums are ties: half away from zero), ADD and SUB, alone and
    with a fused REQUANT that halves again."""
    lo, hi = qrange("int8")
    a, c = np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1))
    a, c = a.reshape(1, -1).astype(np.int8), c.reshape(1, -1).astype(np.int8)
    for op in ("ADD", "SUB"):
        for fused in (False, True):
            b = EngineBuilder("ties", 1)
            ta, tb, ty = (b.tensor(name, a.shape, dt, 0.1) for name, dt in (("a", "int8"), ("b", "int8"), ("y", "int8")))
            if fused:
                tt = b.tensor("t", a.shape, "int16", 0.1)
                b.add(op, [ta, tb], [tt], multipliers=[1, 1], shifts=[1])
                b.add("REQUANT", [tt], [ty], multipliers=[1], shifts=[1])
            else:
                b.add(op, [ta, tb], [ty], multipliers=[1, 1], shifts=[1])
            b.set_io([ta, tb], [ty])
            ref = check(b, [a, c])[0]
            assert np.any((a.astype(int) + (1 if op == "ADD" else -1) * c) % 2 == 1) and np.unique(ref).size > 100


POINTWISE_8BIT_FORMS = {"relu_u8": ("uint8", 0, None), "relu6_u8": ("uint8", 0, 200), "full_s8": ("int8", None, None),
                        "narrow_s8": ("int8", -100, 90)}


def test_pointwise_8bit_packed_stores_and_ties():
    """The fused epilogue's packed 8-bit stores (four rows or row halves per vpackssdw /
    vpack[us]swb / vpermd, conv/gemm_dot.inc): small K (4..64), lone and paired 16-channel
    blocks with channel tails, pixel counts off the 6-row micro-tiles, int8 and uint8 input, the
    uint8 ReLU over the whole range (no clamp, the packs saturate), a narrower ReLU, the whole
    int8 range and a narrower one.  Multipliers 2^30 with weights in {-1, 0, 1} put about one
    product in 16 on an exact rounding tie (t = 8 mod 16 with s = 34), negative ones included."""
    ks, rng = [4, 8, 12, 16, 20, 32, 36, 64], np.random.default_rng(7)
    case = 0
    for xdt in ("int8", "uint8"):
        for form, (ydt, act_min, act_max) in POINTWISE_8BIT_FORMS.items():
            for cout in (8, 16, 24, 40, 96):
                k, pixels, ties = ks[case % len(ks)], (7, 53, 101)[case % 3], case % 2 == 0
                case += 1
                lo, hi = qrange(xdt)
                x = rng.integers(lo, hi + 1, (1, 1, pixels, k)).astype(xdt)
                b = EngineBuilder("pointwise8", 1)
                tx, ty = b.tensor("x", x.shape, xdt, 0.02), b.tensor("y", (1, 1, pixels, cout), ydt, 0.05)
                if ties:
                    wq = rng.integers(-1, 2, (1, 1, k, cout)).astype(np.int8)
                    bias = rng.integers(-300, 300, cout).astype(np.int32)
                    consts = [b.const("w", wq), b.const("bias", bias), b.const("m", np.full(cout, 2 ** 30, np.int32)),
                              b.const("s", np.full(cout, 34, np.int32))]
                else:
                    wq = rng.integers(-127, 128, (1, 1, k, cout)).astype(np.int8)
                    bias = rng.integers(-3000, 3000, cout).astype(np.int32)
                    consts = requant_consts(b, wq, xdt, rng.uniform(1e-3, 2e-2, cout) * (1 if xdt == "int8" else 0.5), bias)
                b.add("CONV2D", [tx], [ty], consts, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1,
                      act_min=act_min, act_max=act_max)
                b.set_io([tx], [ty])
                (y,) = check(b, [x])
                ylo, yhi = qrange(ydt)
                assert len(np.unique(y)) > 3, (xdt, form, cout)  # not all clamped
                if act_min is None and act_max is None and not ties:
                    assert (y == ylo).any() and (y == yhi).any(), (xdt, form, cout)  # the packs saturate both ends


def test_pointwise_small_k_long_tiles():
    """Small K takes pixel tiles of 2 or 4 x 48 rows when every thread keeps 4 of them
    (conv_gemm_quad): pixel counts that give such tiles at 1 and 2 threads, with a last tile of
    a few rows, one that takes a remainder below 6 (4 x 192 + 3) and row tails below 6; K from 4
    to 96 (the 8 KiB limit picks 192, 96 or 48 rows), int8 and uint8 input, 8-bit and int16
    outputs."""
    rng = np.random.default_rng(11)
    for pixels, k, cout, xdt, ydt in [(997, 16, 24, "int8", "uint8"), (1601, 16, 40, "uint8", "int8"),
                                      (771, 8, 16, "int8", "int8"), (3085, 32, 96, "int8", "uint8"),
                                      (1543, 64, 20, "uint8", "int16"), (1543, 96, 33, "int8", "uint8"),
                                      (1290, 4, 17, "uint8", "uint8")]:
        lo, hi = qrange(xdt)
        x = rng.integers(lo, hi + 1, (1, 1, pixels, k)).astype(xdt)
        wq = rng.integers(-127, 128, (1, 1, k, cout)).astype(np.int8)
        bias = rng.integers(-3000, 3000, cout).astype(np.int32)
        b = EngineBuilder("pointwise_long", 1)
        tx, ty = b.tensor("x", x.shape, xdt, 0.02), b.tensor("y", (1, 1, pixels, cout), ydt, 0.05)
        b.add("CONV2D", [tx], [ty], requant_consts(b, wq, xdt, rng.uniform(1e-3, 2e-2, cout), bias), strides=(1, 1),
              dilations=(1, 1), pads=(0, 0, 0, 0), groups=1, act_min=0 if ydt == "uint8" else None)
        b.set_io([tx], [ty])
        (y,) = check(b, [x])
        assert len(np.unique(y)) > 20, (pixels, k, cout)
