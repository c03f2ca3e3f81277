"""Engine sets: one region compiled for several batch sizes (docs/multi-batch.md,
docs/architecture.md §6).

An engine set is a list of engines of one region, one per compiled batch size, sorted by
batch size; they differ only in ``batch_size``, their tensors' batch dimension, their memory
plan and their cycle estimates.  A run of ``n`` samples is split by :func:`plan_batches`
(the same rule as ``ops/core/npu_batch.cc``): ``q = n // B`` chunks of the largest size ``B``
and, for the remainder ``r = n % B > 0``, one chunk of the smallest size ``s >= r``, padded
with ``s - r`` zero samples whose outputs are dropped.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

from ..proto import engine_pb2 as pb
from .costmodel import layer_cycles
from .costs import instruction_layer_cost
from .device import target_device
from .engine import Engine, EngineBuilder
from .format import EngineError


def plan_batches(sizes: Sequence[int], n: int) -> List[Tuple[int, int, int]]:
    """Chunks ``(size, start, rows)`` of a run of ``n`` samples over compiled ``sizes``:
    samples ``start:start+rows`` run on the engine of batch ``size`` (``rows < size`` only in
    the last chunk: padded).  ``n = 0`` gives no chunk."""
    sizes = sorted(int(s) for s in sizes)
    if not sizes or sizes[0] < 1:
        raise EngineError(f"an engine set needs batch sizes >= 1, got {list(sizes)}")
    largest = sizes[-1]
    full, rest = divmod(int(n), largest)
    chunks = [(largest, k * largest, largest) for k in range(full)]
    if rest:
        chunks.append((next(s for s in sizes if s >= rest), full * largest, rest))
    return chunks


def estimate_cycles(proto: "pb.Engine") -> None:
    """Fill every instruction's ``cycles``: the cost model's cycles for ``proto.batch_size``
    samples on one core of the engine's device (docs/cost-model.md)."""
    core = target_device(int(proto.device_id)).core
    for ins in proto.instructions:
        ins.cycles = int(round(layer_cycles(instruction_layer_cost(proto, ins), core, int(proto.batch_size))[0]))


def rebatch(engine: Engine, batch: int) -> Engine:
    """``engine`` compiled for ``batch`` samples: the batch dimension of every tensor, the
    memory plan and the cycle estimates redone; instructions and constants unchanged."""
    builder = EngineBuilder(engine.name, int(batch))
    builder.proto.CopyFrom(engine.proto)
    builder.proto.batch_size = int(batch)
    for t in builder.proto.tensors:
        t.shape[0] = int(batch)
    estimate_cycles(builder.proto)
    return builder.build()


def check_engine_set(engines: Sequence[Engine], label: str) -> None:
    """The engines of one set agree: inputs and outputs (count, dtype, shape[1:]), device and
    cores; batch sizes distinct and ascending.  Raises :class:`EngineError` naming ``label``."""
    first = engines[0]

    def signature(e: Engine):
        return ([(t.dtype, t.shape[1:]) for t in e.inputs], [(t.dtype, t.shape[1:]) for t in e.outputs],
                int(e.proto.device_id), list(e.proto.core_ids))

    for prev, e in zip(engines, engines[1:]):
        if e.batch_size <= prev.batch_size:
            raise EngineError(f"engine {label!r}: batch sizes of its engine set must be distinct and ascending, "
                              f"got {[x.batch_size for x in engines]}")
    for e in engines[1:]:
        if signature(e) != signature(first):
            raise EngineError(f"engine {label!r}: the engine compiled for batch {e.batch_size} does not match the "
                              f"one for batch {first.batch_size} (inputs, outputs, device or cores differ)")


def run_engine_set(engines: Sequence[Engine], arrays: Sequence[np.ndarray], backend: str = "reference",
                   num_threads: int = 2) -> List[np.ndarray]:
    """Run a batch on an engine set by :func:`plan_batches`; one engine runs any batch as it is."""
    if len(engines) == 1:
        return engines[0].run(arrays, backend=backend, num_threads=num_threads)
    inputs, n = engines[0].check_inputs(arrays)
    by_size = {e.batch_size: e for e in engines}
    parts: List[List[np.ndarray]] = []
    for size, start, rows in plan_batches(list(by_size), n):
        chunk = [x[start:start + rows] for x in inputs]
        if rows < size:   # the padded remainder: zero samples, outputs dropped
            chunk = [np.concatenate([x, np.zeros((size - rows,) + x.shape[1:], x.dtype)]) for x in chunk]
        outs = by_size[size].run(chunk, backend=backend, num_threads=num_threads)
        parts.append([y[:rows] for y in outs])
    return [np.concatenate([p[k] for p in parts]) for k in range(len(engines[0].outputs))]


def decode_engine_set(engine: bytes, batch_engines: Sequence[bytes] = (), label: str = "") -> List[Engine]:
    """The engine set of an engine node (attrs ``engine`` and ``batch_engines``), decoded
    once (``Engine.decoded``) and checked (:func:`check_engine_set`)."""
    engines = [Engine.decoded(bytes(b), label=label or None) for b in [engine, *batch_engines]]
    check_engine_set(engines, label or engines[0].name)
    return engines
