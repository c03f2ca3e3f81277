"""Engine sets: one region compiled for several batch sizes (docs/multi-batch.md,
docs/architecture.md §6).

A compiled engine holds every size it was compiled for: ``batch_size`` and its
``batch_plans`` (format 1.2), one copy of the instructions and constants for all of them, a
memory plan and cycle estimates per size (:func:`with_batch_plans`).  Models compiled before
that hold one engine per size (attr ``batch_engines``); both are an *engine set* here, a list
of engines whose sizes ascend.  A run of ``n`` samples is split by :func:`plan_batches` (the
same rule as ``ops/core/npu_batch.cc``): ``q = n // B`` chunks of the largest size ``B``, then
the remainder ``r = n % B > 0`` as the chunks of least predicted cycles
(:func:`chunk_cycles`), fewest padded samples and fewest chunks next: a sum of compiled sizes
(3 = 2 + 1), or ending in one chunk of the smallest size that holds what is left, padded with
zero samples whose outputs are dropped (3 -> 4).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..proto import engine_pb2 as pb
from .costmodel import layer_cycles
from .costs import instruction_layer_cost
from .device import target_device
from .engine import Engine, EngineBuilder
from .format import EngineError


def busiest_samples(size: int, split_mode: int, num_cores: int) -> float:
    """Samples' worth of work on the busiest core of a run of ``size`` samples: a SPLIT_BATCH
    engine's busiest core runs ``ceil(size / cores)``, other splits divide the work over the
    cores, SPLIT_NONE runs it all on one core (``ops/core/npu_batch.cc``)."""
    cores = max(int(num_cores), 1)
    if split_mode == pb.SPLIT_BATCH:
        return float((int(size) + cores - 1) // cores)
    if split_mode != pb.SPLIT_NONE:
        return float(size) / float(cores)
    return float(size)


def chunk_cycles(total_cycles: float, size: int, split_mode: int, num_cores: int) -> float:
    """Predicted cycles of one chunk of ``size`` samples whose instructions total
    ``total_cycles`` at that size on one core: per-sample cycles times :func:`busiest_samples`."""
    if size <= 0:
        return 0.0
    return float(total_cycles) / float(size) * busiest_samples(size, split_mode, num_cores)


def _total(cycles) -> float:
    total = 0.0   # summed in float, in order, as the native executor sums them
    for c in cycles:
        total += float(c)
    return total


def batch_slots(engines: Sequence[Engine]) -> List[Tuple[int, Engine, float]]:
    """``(size, engine, chunk cycles)`` of every compiled size of an engine set, in order:
    each engine's ``batch_size`` then its batch plans (chunk cycles on the engine's cores)."""
    slots = []
    for e in engines:
        p = e.proto
        cores = len(p.core_ids)
        slots.append((e.batch_size, e, chunk_cycles(_total(i.cycles for i in p.instructions), e.batch_size,
                                                    p.split_mode, cores)))
        slots.extend((int(plan.batch_size), e, chunk_cycles(_total(plan.cycles), int(plan.batch_size),
                                                            p.split_mode, cores)) for plan in p.batch_plans)
    return slots


def plan_batches(sizes: Sequence[int], n: int, cycles: Optional[Sequence[float]] = None) -> List[Tuple[int, int, int]]:
    """Chunks ``(size, start, rows)`` of a run of ``n`` samples over ascending compiled
    ``sizes`` whose chunks cost ``cycles`` (:func:`chunk_cycles`; default all 0: the fewest
    padded samples): samples ``start:start+rows`` run as one chunk of ``size`` (``rows < size``
    only in the last chunk: padded).  ``n = 0`` gives no chunk."""
    sizes = [int(s) for s in sizes]
    cycles = [0.0] * len(sizes) if cycles is None else [float(c) for c in cycles]
    if not sizes or sizes[0] < 1 or any(b <= a for a, b in zip(sizes, sizes[1:])) or len(cycles) != len(sizes):
        raise EngineError(f"an engine set needs ascending batch sizes >= 1 with one cost each, got {sizes}")
    largest = sizes[-1]
    full, rest = divmod(int(n), largest)
    chunks = [(largest, k * largest, largest) for k in range(full)]
    # best[m]: (cycles, padded samples, chunks, size index) of the cheapest chunks for m samples
    best: List[Tuple[float, int, int, int]] = [(0.0, 0, 0, 0)]
    for m in range(1, rest + 1):
        options = []
        for i in range(len(sizes) - 1, -1, -1):   # ties: the first found (larger sizes first)
            if sizes[i] > m and i > 0 and sizes[i - 1] >= m:
                continue   # padded only up to the smallest size that holds the m samples
            c, p, k, _ = best[max(m - sizes[i], 0)]
            options.append((c + cycles[i], p + max(sizes[i] - m, 0), k + 1, i))
        best.append(min(options, key=lambda o: o[:3]))
    start, m = full * largest, rest
    while m > 0:
        size = sizes[best[m][3]]
        rows = min(size, m)
        chunks.append((size, start, rows))
        start, m = start + rows, m - rows
    return chunks


def estimate_cycles(proto: "pb.Engine") -> None:
    """Fill every instruction's ``cycles``: the cost model's cycles for ``proto.batch_size``
    samples on one core of the engine's device (docs/cost-model.md)."""
    core = target_device(int(proto.device_id)).core
    for ins in proto.instructions:
        ins.cycles = int(round(layer_cycles(instruction_layer_cost(proto, ins), core, int(proto.batch_size))[0]))


def rebatch(engine: Engine, batch: int) -> Engine:
    """``engine`` compiled for ``batch`` samples alone: the batch dimension of every tensor,
    the memory plan and the cycle estimates redone, no batch plans; instructions and
    constants unchanged."""
    builder = EngineBuilder(engine.name, int(batch))
    builder.proto.CopyFrom(engine.proto)
    builder.proto.batch_size = int(batch)
    builder.proto.ClearField("batch_plans")
    for t in builder.proto.tensors:
        t.shape[0] = int(batch)
    estimate_cycles(builder.proto)
    return builder.build()


def with_batch_plans(engine: Engine, sizes: Sequence[int]) -> Engine:
    """``engine`` compiled for every batch size of ``sizes`` (positive, distinct), one copy of
    its instructions and constants: the smallest size as its ``batch_size``, the others as
    ``batch_plans`` (memory plan and cycles of :func:`rebatch` at that size)."""
    sizes = sorted({int(b) for b in sizes})
    base = rebatch(engine, sizes[0])
    proto = pb.Engine()
    proto.CopyFrom(base.proto)
    for b in sizes[1:]:
        at = rebatch(engine, b).proto
        proto.batch_plans.add(batch_size=b, sram_bytes=at.sram_bytes,
                              sram_offsets=[t.sram_offset for t in at.tensors],
                              sram_sizes=[t.sram_size for t in at.tensors],
                              cycles=[i.cycles for i in at.instructions])
    builder = EngineBuilder(engine.name, sizes[0])
    builder.proto.CopyFrom(proto)
    return builder.build(plan_memory=False)


def at_batch(engine: Engine, size: int) -> Engine:
    """The engine of one compiled ``size`` of ``engine`` (its ``batch_size`` or a batch plan's)
    alone: for profiling and inspection (a copy of the constants)."""
    if int(size) == engine.batch_size and not engine.proto.batch_plans:
        return engine
    builder = EngineBuilder(engine.name, int(size))
    builder.proto.CopyFrom(engine.proto)
    builder.proto.ClearField("batch_plans")
    if int(size) != engine.batch_size:
        plan = next((p for p in engine.proto.batch_plans if int(p.batch_size) == int(size)), None)
        if plan is None:
            raise EngineError(f"engine {engine.name!r} was not compiled for batch {size}: "
                              f"its sizes are {engine.batch_sizes}")
        builder.proto.batch_size = int(size)
        builder.proto.sram_bytes = plan.sram_bytes
        for t, off, n in zip(builder.proto.tensors, plan.sram_offsets, plan.sram_sizes):
            t.shape[0], t.sram_offset, t.sram_size = int(size), off, n
        for ins, c in zip(builder.proto.instructions, plan.cycles):
            ins.cycles = c
    return builder.build(plan_memory=False)


def expand_engine_set(engines: Sequence[Engine]) -> List[Engine]:
    """One engine per compiled size of an engine set (:func:`at_batch`), ascending."""
    return [at_batch(e, size) for size, e, _ in batch_slots(engines)]


def check_engine_set(engines: Sequence[Engine], label: str) -> None:
    """The engines of one set agree: inputs and outputs (count, dtype, shape[1:]), device and
    cores; batch sizes (with their plans) distinct and ascending.  Raises :class:`EngineError`
    naming ``label``."""
    first = engines[0]

    def signature(e: Engine):
        return ([(t.dtype, t.shape[1:]) for t in e.inputs], [(t.dtype, t.shape[1:]) for t in e.outputs],
                int(e.proto.device_id), list(e.proto.core_ids))

    sizes = [size for size, _, _ in batch_slots(engines)]
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise EngineError(f"engine {label!r}: batch sizes of its engine set must be distinct and ascending, "
                          f"got {sizes}")
    for e in engines[1:]:
        if signature(e) != signature(first):
            raise EngineError(f"engine {label!r}: the engine compiled for batch {e.batch_size} does not match the "
                              f"one for batch {first.batch_size} (inputs, outputs, device or cores differ)")


def run_engine_set(engines: Sequence[Engine], arrays: Sequence[np.ndarray], backend: str = "reference",
                   num_threads: int = 2) -> List[np.ndarray]:
    """Run a batch on an engine set by :func:`plan_batches`; a set of one size runs any batch
    as it is."""
    slots = batch_slots(engines)
    if len(slots) == 1:
        return engines[0].run(arrays, backend=backend, num_threads=num_threads)
    inputs, n = engines[0].check_inputs(arrays)
    by_size = {size: e for size, e, _ in slots}
    parts: List[List[np.ndarray]] = []
    for size, start, rows in plan_batches([s for s, _, _ in slots], n, [c for _, _, c in slots]):
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
