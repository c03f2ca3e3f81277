"""Engine helpers: random codes and scales for property tests, requantization constants,
small engines touching most opcodes, and running the native executor on every kernel path
against the numpy reference."""
import os

import numpy as np
from hypothesis import HealthCheck, settings, strategies as st

from ratelnn.npu import EngineBuilder, force_isa, supported_isas
from ratelnn.npu.engine import make_lut, make_softmax_table, qabs, qrange, quantize_multiplier, seal
from ratelnn.proto import engine_pb2 as pb


# RATELNN_NPU_EXAMPLES raises the number of examples for a deeper run.
SETTINGS = settings(max_examples=int(os.environ.get("RATELNN_NPU_EXAMPLES", 30)), deadline=None, suppress_health_check=list(HealthCheck))


ACT = st.sampled_from(["int8", "uint8", "int16"])


def scale(data, lo=-8, hi=-1):
    return float(2.0 ** data.draw(st.floats(lo, hi)))


def rand_codes(data, shape, dtype):
    lo, hi = qrange(dtype)
    seed = data.draw(st.integers(0, 2 ** 31))
    return np.random.default_rng(seed).integers(lo, hi + 1, size=shape).astype(dtype)


def native_on_every_path(eng, inputs, **run_args):
    """``[(kernel path, native outputs)]`` for every path this CPU supports (ratelnn.npu.ISA_PATHS;
    tests/test_isa_paths.py reports the ones it lacks as not run)."""
    runs = []
    for path in supported_isas():
        with force_isa(path):
            runs.append((path, eng.run(inputs, backend="native", **run_args)))
    return runs


def assert_native_equals_reference(eng, inputs, thread_counts=(2,)):
    """Run ``eng`` on the reference and, on every supported kernel path and thread count, the
    native executor; assert bit equality; return the reference outputs."""
    ref = eng.run(inputs, backend="reference")
    for threads in thread_counts:
        for path, nat in native_on_every_path(eng, inputs, num_threads=threads):
            for r, n in zip(ref, nat):
                assert r.dtype == n.dtype and r.shape == n.shape, path
                np.testing.assert_array_equal(r, n, err_msg=f"kernel path {path}, {threads} threads")
    return ref


def requant_consts(b, wq, x_dtype, real_mults, bias, neg_mults=None):
    k = int(np.prod(wq.shape[:-1]))
    bound = k * qabs(x_dtype) * qabs(wq.dtype) + int(np.max(np.abs(bias)))
    ms = [quantize_multiplier(r, bound) for r in real_mults]
    consts = [b.const("w", wq), b.const("bias", bias.astype(np.int32)),
              b.const("m", np.array([m for m, _ in ms], np.int32)), b.const("s", np.array([s for _, s in ms], np.int32))]
    if neg_mults is not None:
        ns = [quantize_multiplier(r, bound) for r in neg_mults]
        consts += [b.const("mn", np.array([m for m, _ in ns], np.int32)), b.const("sn", np.array([s for _, s in ns], np.int32))]
    return consts


def small_engine_builder(batch=2):
    """A conv -> maxpool -> add(const) -> concat -> lut/softmax engine touching most opcodes."""
    rng = np.random.default_rng(0)
    b = EngineBuilder("fmt_engine", batch)
    x = b.tensor("x", (batch, 5, 5, 3), "int8", 0.05)
    c = b.tensor("conv", (batch, 5, 5, 4), "int8", 0.1)
    p = b.tensor("pool", (batch, 3, 3, 4), "int8", 0.1)
    a = b.tensor("add", (batch, 3, 3, 4), "int8", 0.2)
    cat = b.tensor("cat", (batch, 3, 3, 8), "int8", 0.2)
    f = b.tensor("flat", (batch, 72), "int8", 0.2)
    s = b.tensor("sm", (batch, 72), "uint8", 1 / 255)
    t = b.tensor("lut", (batch, 72), "int16", 1 / 32767)
    m, sh = quantize_multiplier(0.05 * 0.01 / 0.1, 27 * 128 * 128 + 100)
    consts = [b.const("w", rng.integers(-128, 128, (3, 3, 3, 4)).astype(np.int8)),
              b.const("b", rng.integers(-100, 100, 4).astype(np.int32)),
              b.const("m", np.full(4, m, np.int32)), b.const("s", np.full(4, sh, np.int32))]
    b.add("CONV2D", [x], [c], consts, name="conv", strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1)
    b.add("MAX_POOL", [c], [p], name="pool", ksize=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    ma, sa = quantize_multiplier(0.5, 128)
    b.add("ADD", [p], [a], [b.const("k", np.arange(4, dtype=np.int8))], name="add",
          multipliers=[1 << 20, 1 << 21], shifts=[22])
    b.add("CONCAT", [a, p], [cat], name="cat", axis=3, multipliers=[1, ma], shifts=[0, sa])
    b.add("RESHAPE", [cat], [f], name="flat")
    table, sm_m, sm_s = make_softmax_table("int8", 0.2, 1 / 255, 72)
    b.add("SOFTMAX", [f], [s], [b.const("exp", table)], name="softmax", multipliers=[sm_m], shifts=[sm_s])
    b.add("LUT", [f], [t], [b.const("tanh", make_lut(np.tanh, "int8", 0.2, "int16", 1 / 32767))], name="tanh")
    b.set_io([x], [s, t])
    b.set_placement(device_id=0, core_ids=[0, 1], split_mode="SPLIT_BATCH")
    return b


def mixed_engine():
    """An engine of a 3x3 conv, a depthwise conv, a residual ADD and a FULLY_CONNECTED layer
    with channel counts off the 16-channel blocks, and an int8 input batch of 3."""
    rng = np.random.default_rng(7)
    b = EngineBuilder("paths", 3)
    x = rng.integers(-128, 128, size=(3, 9, 9, 21)).astype(np.int8)
    tx = b.tensor("x", x.shape, "int8", 0.05)
    t1 = b.tensor("conv", (3, 9, 9, 37), "uint8", 0.04)
    w1 = rng.integers(-127, 128, size=(3, 3, 21, 37)).astype(np.int8)
    b.add("CONV2D", [tx], [t1], requant_consts(b, w1, "int8", np.full(37, 0.05 * 0.01 / 0.04),
                                               rng.integers(-500, 500, 37)),
          strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1, act_min=0)
    t2 = b.tensor("dw", (3, 9, 9, 37), "uint8", 0.04)
    w2 = rng.integers(-127, 128, size=(3, 3, 1, 37)).astype(np.int8)
    b.add("CONV2D", [t1], [t2], requant_consts(b, w2, "uint8", np.full(37, 0.01), rng.integers(-99, 99, 37)),
          strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=37, act_min=0)
    t3 = b.tensor("sum", (3, 9, 9, 37), "int8", 0.06)
    shift = 30
    m = int(np.floor(0.04 / 0.06 * 2 ** shift + 0.5))
    b.add("ADD", [t1, t2], [t3], multipliers=[m, m], shifts=[shift])
    t4 = b.tensor("flat", (3, 9 * 9 * 37), "int8", 0.06)
    b.add("RESHAPE", [t3], [t4])
    t5 = b.tensor("fc", (3, 19), "int16", 0.001)
    w5 = rng.integers(-127, 128, size=(9 * 9 * 37, 19)).astype(np.int8)
    b.add("FULLY_CONNECTED", [t4], [t5], requant_consts(b, w5, "int8", np.full(19, 0.06 * 0.002 / 0.001),
                                                        rng.integers(-999, 999, 19)))
    b.set_io([tx], [t5])
    return b.build(), x


def engines_without_names(graph_def) -> list:
    """The engines of a compiled GraphDef with instruction and constant names cleared (they
    name IR nodes, which fusion names differently in the float and the quantized model)."""
    engines = []
    for node in graph_def.node:
        if node.op == "RatelEngineOp":
            proto = pb.Engine.FromString(node.attr["engine"].s)
            for item in [*proto.instructions, *proto.constants]:
                item.name = ""
            engines.append(seal(proto))
    return engines


# ---------------------------------------------------------------- hostile engines
def engine_mutations(good: bytes, count: int, seed: int) -> list:
    """``count`` corruptions of ``good``: truncations, bit flips, huge or zero dims,
    appended junk and injected 10-byte varints, in turn."""
    rng = np.random.default_rng(seed)
    proto = pb.Engine.FromString(good)
    out = []
    for k in range(count):
        kind = k % 5
        data = bytearray(good)
        if kind == 0:
            data = data[: rng.integers(0, len(data))]
        elif kind == 1:
            for _ in range(rng.integers(1, 4)):
                data[rng.integers(0, len(data))] ^= 1 << int(rng.integers(0, 8))
        elif kind == 2:
            data += rng.integers(0, 256, rng.integers(1, 40)).astype(np.uint8).tobytes()
        elif kind == 3:
            p = pb.Engine()
            p.CopyFrom(proto)
            t = p.tensors[rng.integers(0, len(p.tensors))]
            t.shape[rng.integers(0, len(t.shape))] = int(rng.choice([1 << 31, 1 << 40, 1 << 62, 0, -1, 1 << 20]))
            data = bytearray(seal(p))
        else:
            pos = rng.integers(0, len(data))
            data[pos:pos] = bytes([0xff] * 9 + [0x01])  # a 10-byte varint in the middle
        out.append(bytes(data))
    return out


def flip_constant_bit(good: bytes, const: int = 0, bit: int = 3) -> bytes:
    """``good`` with one bit flipped inside the data of constant ``const`` (a weight): bytes
    that still parse and validate, with other weights."""
    data = pb.Engine.FromString(good).constants[const].data
    at = good.find(data) + len(data) // 2
    out = bytearray(good)
    out[at] ^= 1 << bit
    return bytes(out)


def without_checksum(good: bytes) -> bytes:
    """``good`` as engine format 1.0 wrote it: no checksum field, minor version 0."""
    proto = pb.Engine.FromString(good)
    proto.ClearField("checksum")
    proto.format_version.minor = 0
    return proto.SerializeToString()
