"""The narrow exact ADD/SUB (+ REQUANT) path for 8-bit codes (ops/core/npu_add_narrow.h;
docs/npu-arithmetic.md, "ADD, SUB, MUL"): small integer parameters derived at engine load and
checked on every one of the 256 x 256 code pairs, used only when they match.  The check must
catch a plan wrong on a single pair; native must equal the numpy reference on every kernel path
whether an instruction takes the narrow path or falls back."""
import numpy as np
import pytest
from hypothesis import event, given, strategies as st

from ratelnn.npu import native
from ratelnn.npu.engine import EngineBuilder, qabs, quantize_multiplier
from ratelnn.npu.format import qrange
from ratelnn.npu.reference import round_shift

from helpers.engines import SETTINGS, assert_native_equals_reference, requant_consts

pytestmark = pytest.mark.no_tf_math  # native engines only

EIGHT = st.sampled_from(["int8", "uint8"])


def pairs(adt, bdt, tail=0, seed=0):
    """Every (a, b) code pair of the two dtypes, then `tail` random pairs, as two (1, n) rows."""
    a, b = np.meshgrid(np.arange(*_span(adt)), np.arange(*_span(bdt)), indexing="ij")
    rng = np.random.default_rng(seed)
    a = np.concatenate([a.ravel(), rng.integers(*_span(adt), tail)]).astype(adt)
    b = np.concatenate([b.ravel(), rng.integers(*_span(bdt), tail)]).astype(bdt)
    return a.reshape(1, -1), b.reshape(1, -1)


def _span(dtype):
    lo, hi = qrange(dtype)
    return lo, hi + 1


def spec_values(spec, a, b):
    """The reference function of a narrow spec (docs/npu-arithmetic.md), int64."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    y = np.clip(round_shift(a * spec["ma"] + b * spec["mb"], spec["s"]), spec["lo"], spec["hi"])
    if spec.get("requant"):
        y = np.clip(round_shift(y * spec["m2"], spec["s2"]), spec["lo2"], spec["hi2"])
    return y


def plan_values(plan, a, b):
    """A narrow plan's function by its definition, clamp(floor((a*ma + b*mb + c) / 2^t)) per
    stage in int64 (the kernels' int32 steps, wide or not, are checked natively)."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    q = np.clip((a * plan["ma"] + b * plan["mb"] + plan["c"]) >> plan["t"], plan["lo"], plan["hi"])
    if plan["two_stage"]:
        q = np.clip((q * plan["m2"] + plan["c2"]) >> plan["t2"], plan["lo2"], plan["hi2"])
    return q


def residual_spec(adt="int8", bdt="uint8", sa=0.1, sb=0.05, sy=0.15, s=31):
    m = [int(round(sa / sy * 2 ** s)), int(round(sb / sy * 2 ** s))]
    return dict(at=adt, bt=bdt, ma=m[0], mb=m[1], s=s, lo=qrange("int8")[0], hi=qrange("int8")[1])


def test_check_rejects_a_plan_wrong_on_one_pair():
    """A found plan passes the native exhaustive check and an independent numpy emulation; the
    same plan with its offset moved just past one pair's rounding boundary fails on exactly that
    pair, and a narrow multiplier beyond int16 (vpmaddwd) fails everywhere."""
    a, b = (v.ravel().astype(np.int64) for v in pairs("int8", "uint8"))
    for sb in (0.05, 0.07, 0.09, 0.11, 0.13):  # until one pair alone is nearest its boundary
        spec = residual_spec(sb=sb)
        plan = native.add_narrow_plan(spec)
        assert plan is not None and not plan["two_stage"], plan
        ref = spec_values(spec, a, b)
        np.testing.assert_array_equal(plan_values(plan, a, b), ref)
        assert native.add_narrow_mismatches(spec, plan) == (0, None)
        top = a * plan["ma"] + b * plan["mb"] + plan["c"]
        slack = np.where(ref < plan["hi"], ((ref + 1) << plan["t"]) - 1 - top, np.iinfo(np.int64).max)
        (nearest,) = np.nonzero(slack == slack.min())
        if nearest.size == 1:
            break
    assert nearest.size == 1
    wrong = dict(plan, c=plan["c"] + int(slack.min()) + 1)
    got = plan_values(wrong, a, b)
    assert np.count_nonzero(got != ref) == 1 and got[nearest[0]] != ref[nearest[0]]
    assert native.add_narrow_mismatches(spec, wrong) == (1, (int(a[nearest[0]]), int(b[nearest[0]])))
    assert native.add_narrow_mismatches(spec, dict(plan, ma=40000, wide=0))[0] == a.size  # not int16


def _engine(data):
    """An ADD/SUB (+ REQUANT) of two 8-bit operands into 8-bit codes over every code pair plus a
    row tail; scales, shifts, clamps and dtypes drawn.  Returns (engine, inputs, spec)."""
    adt, bdt, ydt = data.draw(EIGHT), data.draw(EIGHT), data.draw(EIGHT)
    op, fused = data.draw(st.sampled_from(["ADD", "SUB"])), data.draw(st.booleans())
    tdt = data.draw(st.sampled_from(["int8", "uint8", "int16"])) if fused else ydt
    sa, sb, sy = (float(2.0 ** data.draw(st.floats(-7, 0))) for _ in range(3))
    s = data.draw(st.sampled_from([8, 15, 24, 31, 38]))
    ma, mb = (min(int(round(r / sy * 2 ** s)), 2 ** 31 - 1) for r in (sa, sb))
    lo, hi = qrange(tdt)
    act_min, act_max = data.draw(st.sampled_from([None, 0, lo // 2])), data.draw(st.sampled_from([None, hi // 3]))
    x, z = pairs(adt, bdt, data.draw(st.integers(0, 40)), data.draw(st.integers(0, 99)))
    b = EngineBuilder("narrow", 1)
    ta, tb = b.tensor("a", x.shape, adt, sa), b.tensor("b", z.shape, bdt, sb)
    tt = b.tensor("t", x.shape, tdt, sy)
    b.add(op, [ta, tb], [tt], name="add", multipliers=[ma, mb], shifts=[s], act_min=act_min, act_max=act_max)
    spec = dict(at=adt, bt=bdt, ma=ma, mb=mb if op == "ADD" else -mb, s=s, lo=max(lo, act_min if act_min is not None else lo),
                hi=min(hi, act_max if act_max is not None else hi))
    out = tt
    if fused:  # the ReLU REQUANT after a residual ADD, with a new scale
        r2 = float(2.0 ** data.draw(st.floats(-2, 2)))  # the scale ratio sum / output
        out = b.tensor("y", x.shape, ydt, sy / r2)
        m2, s2 = quantize_multiplier(r2, qabs(tdt))
        relu = data.draw(st.booleans())
        b.add("REQUANT", [tt], [out], name="relu", multipliers=[m2], shifts=[s2], act_min=0 if relu else None)
        spec.update(requant=1, m2=m2, s2=s2, lo2=0 if relu else qrange(ydt)[0], hi2=qrange(ydt)[1])
    b.set_io([ta, tb], [out])
    return b.build(), [x, z], spec


@SETTINGS
@given(data=st.data())
def test_narrow_or_fallback_equals_the_reference_on_every_kernel_path(data):
    """Random scales, shifts, clamps, dtypes, ADD or SUB, with or without the REQUANT: the engine
    takes the narrow path exactly when a plan exists for its function, and every kernel path the
    CPU has (forced one by one), 1 and 2 threads, equals the reference on every code pair."""
    eng, inputs, spec = _engine(data)
    plan = native.add_narrow_plan(spec)
    event("no plan" if plan is None else f"wide {plan['wide']}, two stages {plan['two_stage']}")
    assert eng.narrow_adds() == (["add"] if plan is not None else [])
    ref = assert_native_equals_reference(eng, inputs, thread_counts=(1, 2))
    if plan is not None:
        np.testing.assert_array_equal(plan_values(plan, *inputs)[0], ref[0][0])


def test_no_narrow_plan_falls_back():
    """Slopes Ma / 2^s beyond 2^14 (one code step moves the sum by more than 2^14 output steps)
    fit neither form, so the search finds no plan and the engine keeps the double path, exact."""
    m, s = 2 ** 31 - 1, 16
    spec = dict(at="int8", bt="uint8", ma=m, mb=m, s=s, lo=-128, hi=127)
    assert native.add_narrow_plan(spec) is None
    x, z = pairs("int8", "uint8", 17)
    b = EngineBuilder("fallback", 1)
    ta, tb, ty = b.tensor("a", x.shape, "int8", 1.0), b.tensor("b", z.shape, "uint8", 1.0), b.tensor("y", x.shape, "int8", 1.0)
    b.add("ADD", [ta, tb], [ty], name="add", multipliers=[m, m], shifts=[s])
    b.set_io([ta, tb], [ty])
    eng = b.build()
    assert eng.narrow_adds() == []
    ref = assert_native_equals_reference(eng, [x, z], thread_counts=(1, 2))
    assert set(np.unique(ref[0])) == {-128, 0, 127}


# conv2_block2's residual ADD and ReLU REQUANT in the compiled Keras ResNet50: residual (uint8)
# and conv (int8) slopes, and the int8 sum into uint8 at ~255/127
R50_ADD = (int(0.48006037389859557 * 2 ** 31), int(0.20498704258352518 * 2 ** 31), 31)
R50_RELU = (int(2.007874023169279 * 2 ** 29), 29)


@pytest.mark.parametrize("conv_first", [True, False])
def test_resnet_block_tail_takes_the_narrow_path_in_the_conv_epilogue(conv_first):
    """ResNet50's block tail (a 1x1 conv uint8 -> int8, the residual ADD with the previous block's
    uint8 ReLU output, the ReLU REQUANT to uint8) fuses into the conv and runs its plan there:
    a wide stage (split multipliers), then a narrow one; exact on every kernel path, 1 and 2
    threads, 72 channels (tails of the 32- and 16-lane steps), either operand order."""
    mr, mc, s = R50_ADD
    m2, s2 = R50_RELU
    spec = dict(at="uint8", bt="int8", ma=mr, mb=mc, s=s, lo=-128, hi=127, requant=1, m2=m2, s2=s2, lo2=0, hi2=255)
    plan = native.add_narrow_plan(spec)
    assert plan["wide"] and plan["two_stage"] and not plan["wide2"], plan
    rng = np.random.default_rng(5)
    b = EngineBuilder("block", 2)
    x = rng.integers(0, 256, (2, 9, 7, 40)).astype(np.uint8)
    r = rng.integers(0, 256, (2, 9, 7, 72)).astype(np.uint8)
    tx, tr = b.tensor("x", x.shape, "uint8", 0.05), b.tensor("r", r.shape, "uint8", 0.1)
    tc, ty = b.tensor("conv", r.shape, "int8", 0.12), b.tensor("sum", r.shape, "int8", 0.15)
    tq = b.tensor("relu", r.shape, "uint8", 0.08)
    w = rng.integers(-127, 128, (1, 1, 40, 72)).astype(np.int8)
    b.add("CONV2D", [tx], [tc], requant_consts(b, w, "uint8", np.full(72, 0.05 * 0.01 / 0.12), rng.integers(-999, 999, 72)),
          name="conv", strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1)
    b.add("ADD", [tc, tr] if conv_first else [tr, tc], [ty], name="add", multipliers=[mc, mr] if conv_first else [mr, mc],
          shifts=[s])
    b.add("REQUANT", [ty], [tq], name="relu", multipliers=[m2], shifts=[s2], act_min=0)
    b.set_io([tx, tr], [tq])
    eng = b.build()
    assert eng.narrow_adds() == ["add"]
    ref = assert_native_equals_reference(eng, [x, r], thread_counts=(1, 2))
    assert np.unique(ref[0]).size > 100
