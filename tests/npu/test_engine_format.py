"""The engine format: round trip through bytes, validation errors naming the engine and the
problem, and hostile bytes (a few hundred mutations) never crashing or hanging the native
validator + executor."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ratelnn.npu.engine import Engine, EngineError, seal
from ratelnn.proto import engine_pb2 as pb

from helpers.engines import small_engine_builder
from helpers.paths import REPO as ROOT, TESTS



def test_round_trip_and_view():
    b = small_engine_builder()
    eng = b.build()
    again = Engine.from_bytes(eng.to_bytes())
    assert again.to_bytes() == eng.to_bytes()
    assert again.name == "fmt_engine" and again.batch_size == 2 and again.format_version == (1, 2)
    assert [(t.name, t.shape, t.dtype, t.scale) for t in again.inputs] == [("x", (2, 5, 5, 3), np.dtype("int8"), 0.05)]
    assert [t.name for t in again.outputs] == ["sm", "lut"] and again.outputs[1].dtype == np.dtype("int16")
    assert list(again.proto.core_ids) == [0, 1] and again.proto.split_mode == pb.SPLIT_BATCH
    x = np.random.default_rng(3).integers(-128, 128, (3, 5, 5, 3)).astype(np.int8)
    for r, n in zip(again.run([x]), again.run([x], backend="native")):
        np.testing.assert_array_equal(r, n)


def test_memory_plan_reuses_dead_tensors():
    eng = small_engine_builder().build()
    tensors = eng.proto.tensors
    assert eng.proto.sram_bytes < sum(t.sram_size for t in tensors)  # some reuse happened
    # x is dead after the conv, sm/lut are born after it: x's bytes may be reused, but
    # tensors live at the same time never overlap, e.g. conv (written) and x (read).
    x, conv = tensors[0], tensors[1]
    assert x.sram_offset + x.sram_size <= conv.sram_offset or conv.sram_offset + conv.sram_size <= x.sram_offset
    assert all(t.sram_offset + t.sram_size <= eng.proto.sram_bytes for t in tensors)


def mutate_proto(fn):
    b = small_engine_builder()
    b.plan_memory()
    fn(b.proto)
    return seal(b.proto)


@pytest.mark.parametrize("mutation, message", [
    (lambda p: setattr(p.format_version, "major", 2), "unsupported format version 2"),
    (lambda p: p.tensors[1].shape.__setitem__(2, 1 << 40), "more than 2\\^31-1 elements|batch"),
    (lambda p: p.tensors[1].shape.__setitem__(2, 6), "CONV2D 'conv': output shape"),
    (lambda p: p.tensors[2].shape.__setitem__(3, 0), "dimension 0 is not positive"),
    (lambda p: setattr(p.constants[0], "data", p.constants[0].data[:-1]), "constant 0 'w': 107 data bytes"),
    (lambda p: p.instructions[0].inputs.__setitem__(0, 99), "input tensor id 99 out of range"),
    (lambda p: p.instructions[1].consts.append(57), "constant id 57 out of range|wrong number"),
    (lambda p: setattr(p.instructions[2], "opcode", 77), "unknown opcode 77"),
    (lambda p: p.instructions[1].attrs.pads.__setitem__(0, 3), "pads must be in"),
    (lambda p: setattr(p.instructions[0].attrs, "groups", 0), "groups 0"),
    (lambda p: p.instructions[2].attrs.multipliers.__setitem__(0, 1 << 40), "multiplier .* outside"),
    (lambda p: setattr(p, "batch_size", 0), "batch_size 0"),
    (lambda p: p.instructions[4].inputs.__setitem__(0, 7), "before it is produced"),
    (lambda p: setattr(p.tensors[5], "scale", float("nan")), "scale must be"),
])
def test_inconsistent_engines_are_rejected(mutation, message):
    with pytest.raises(EngineError, match=f"engine 'fmt_engine': .*({message})"):
        Engine.from_bytes(mutate_proto(mutation))


def test_bad_bytes_raise():
    good = small_engine_builder().build().to_bytes()
    for bad in (good[: len(good) // 2], good + b"\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"", b"garbage!"):
        with pytest.raises(EngineError, match="engine"):
            Engine.from_bytes(bad)
    with pytest.raises(EngineError, match="engine 'my_label'"):
        Engine.from_bytes(good[:-5], label="my_label")
    with pytest.raises(EngineError, match="expected bytes"):
        Engine.from_bytes("not bytes")


FUZZ_SCRIPT = textwrap.dedent("""
    import numpy as np
    from helpers.engines import engine_mutations, small_engine_builder
    from ratelnn.npu.engine import Engine, EngineError, seal
    b = small_engine_builder(); b.plan_memory(); good = b.to_bytes()
    counts = {{"error": 0, "ran": 0}}
    for data in engine_mutations(good, {n}, {seed}):
        try:
            eng = Engine.from_bytes(bytes(data))
        except EngineError:
            counts["error"] += 1
            continue
        for n in (1, 3):
            ins = [np.zeros((n,) + t.shape[1:], t.dtype) for t in eng.inputs]
            eng.run(ins, backend="native")
        counts["ran"] += 1
    print(counts)
""")


@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_bytes_never_crash(seed):
    script = FUZZ_SCRIPT.format(seed=seed, n=200)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = eval(proc.stdout.strip().splitlines()[-1])
    assert counts["error"] + counts["ran"] == 200 and counts["error"] > 100


def test_batch_plans_are_validated():
    """An engine with batch plans (format 1.2) keeps one copy of its constants; a plan whose
    size does not ascend, whose memory range leaves its sram_bytes or whose counts do not
    match the tensors and instructions is refused, the message naming the plan."""
    from ratelnn.npu.batching import with_batch_plans
    eng = small_engine_builder().build()
    multi = with_batch_plans(eng, [2, 4, 8])
    assert multi.batch_sizes == [2, 4, 8]
    assert len(multi.proto.constants) == len(eng.proto.constants)
    assert len(multi.to_bytes()) < len(eng.to_bytes()) + 64 * (len(eng.proto.tensors) + len(eng.instructions))

    def broken(change):
        proto = pb.Engine()
        proto.CopyFrom(multi.proto)
        change(proto)
        return seal(proto)

    cases = {"ascending batch sizes": lambda p: setattr(p.batch_plans[1], "batch_size", 4),
             "above batch_size": lambda p: setattr(p.batch_plans[0], "batch_size", 2),
             "batch plan 4: .* sram_offsets": lambda p: p.batch_plans[0].sram_offsets.append(0),
             "batch plan 8: .* cycle estimates": lambda p: p.batch_plans[1].cycles.append(1),
             "batch plan 4: .* memory plan range outside": lambda p: setattr(p.batch_plans[0], "sram_bytes", 1)}
    for message, change in cases.items():
        with pytest.raises(EngineError, match=message):
            Engine.from_bytes(broken(change))
