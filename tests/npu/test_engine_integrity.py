"""Engine integrity and size limits (docs/reliability.md "Engines"): a
CRC-32 over the whole engine checked before decoding, old engines without it refused with
a rebuild message, sizes at the run batch checked against limits naming the tensor before
anything is allocated, and the compile-time limits of the config."""
import time

import numpy as np
import pytest

from ratelnn.npu.engine import Engine, EngineBuilder, EngineError, seal
from ratelnn.proto import engine_pb2 as pb

from helpers.engines import flip_constant_bit, small_engine_builder, without_checksum


def test_checksum_is_the_last_field_and_zlib_crc32():
    import zlib
    data = small_engine_builder().build().to_bytes()
    assert data[-5] == 0x6D and int.from_bytes(data[-4:], "little") == zlib.crc32(data[:-5])
    assert pb.Engine.FromString(data).checksum == zlib.crc32(data[:-5])
    assert seal(pb.Engine.FromString(data)) == data  # resealing is deterministic


def test_one_flipped_bit_in_a_constant_is_refused():
    data = small_engine_builder().build().to_bytes()
    bad = flip_constant_bit(data)
    pb.Engine.FromString(bad)  # still parses: only the checksum tells
    with pytest.raises(EngineError, match=r"engine 'e1': checksum mismatch \(stored 0x[0-9a-f]{8}, computed "
                                          r"0x[0-9a-f]{8}\): the engine bytes are corrupted; compile the model again"):
        Engine.from_bytes(bad, label="e1")
    resealed = seal(pb.Engine.FromString(bad))  # a valid checksum over other weights: accepted
    assert Engine.from_bytes(resealed).constants[0].tobytes() != Engine.from_bytes(data).constants[0].tobytes()


def test_engines_without_a_checksum_are_refused_with_a_rebuild_message():
    old = without_checksum(small_engine_builder().build().to_bytes())
    with pytest.raises(EngineError, match=r"engine bytes: no checksum .* older than engine format 1.1; "
                                          r"compile the model again \(to_npu\)"):
        Engine.from_bytes(old)
    with pytest.raises(EngineError, match="no checksum"):
        Engine.from_bytes(b"")


def test_a_checksum_field_inside_the_engine_is_refused():
    data = small_engine_builder().build().to_bytes()
    body = data[:-5] + data[-5:] + b"\x08\x01"  # a field after the checksum
    with pytest.raises(EngineError, match="no checksum|checksum mismatch"):
        Engine.from_bytes(body)
    inner = seal(pb.Engine.FromString(data[:-5]))  # sealed twice: the first checksum is inside
    twice = data[:-5] + data[-5:]
    import struct
    import zlib
    twice = twice + struct.pack("<BI", 0x6D, zlib.crc32(twice))
    assert inner != twice
    with pytest.raises(EngineError, match="a checksum field before the last 5 bytes"):
        Engine.from_bytes(twice)


def wide_engine(batch=1):
    """A 1-instruction engine whose tensors have 2^29 elements per sample (a few hundred bytes)."""
    b = EngineBuilder("wide", batch)
    x = b.tensor("x", (batch, 1 << 29), "int8", 0.1)
    y = b.tensor("y", (batch, 1 << 29), "int8", 0.1)
    b.add("REQUANT", [x], [y], name="rq", multipliers=[1], shifts=[0])
    b.set_io([x], [y])
    return b.build()


def test_sizes_are_checked_before_allocating_at_the_run_batch():
    eng = wide_engine()
    assert len(eng.to_bytes()) < 200
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), (1000, 1 << 29), (0, 0))  # no memory
    for backend in ("reference", "native"):
        start = time.monotonic()
        with pytest.raises(EngineError, match=r"engine 'wide': tensor 'x' \[1000,536870912\] has more than "
                                              r"2147483647 elements at batch 1000 \(max_tensor_elements"):
            eng.run([x], backend=backend)
        assert time.monotonic() - start < 5


def test_run_time_limits_come_from_the_environment(monkeypatch):
    eng = small_engine_builder().build()
    x = np.zeros((3, 5, 5, 3), np.int8)
    monkeypatch.setenv("RATELNN_MAX_TOTAL_BYTES", "1000")
    with pytest.raises(EngineError, match=r"activation tensors take more than 1000 bytes at batch 3 .*"
                                          r"RATELNN_MAX_TOTAL_BYTES.* the largest is tensor 'lut' \[3,72\] "
                                          r"of 432 bytes"):
        eng.run([x], backend="native")
    monkeypatch.setenv("RATELNN_MAX_TOTAL_BYTES", "-5")
    with pytest.raises(EngineError, match=r"RATELNN_MAX_TOTAL_BYTES='-5' is not an integer in \[1, "):
        eng.run([x])
    monkeypatch.delenv("RATELNN_MAX_TOTAL_BYTES")
    monkeypatch.setenv("RATELNN_MAX_TENSOR_ELEMENTS", "200")
    with pytest.raises(EngineError, match=r"tensor 'x' \[3,5,5,3\] has more than 200 elements"):
        eng.run([x], backend="reference")
    monkeypatch.delenv("RATELNN_MAX_TENSOR_ELEMENTS")
    assert len(eng.run([x], backend="native")) == 2
