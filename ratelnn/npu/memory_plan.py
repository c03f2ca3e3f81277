"""SRAM memory plan of an engine: offsets for activation tensors with lifetime-based reuse.

Two tensors may share bytes when their lifetimes (the instruction indices between which
they must hold their value) do not overlap.  The plan is greedy best-offset placement,
largest tensors first, which is simple and usually within a few percent of the optimum.
Sizes are in bytes at the engine's compiled batch size; executors at another batch size
allocate their own buffers (the plan is for the cost model and the scheme).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

ALIGNMENT = 64  # bytes; every offset is a multiple of this


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def plan_memory(sizes: Sequence[int], lifetimes: Sequence[Tuple[int, int]]) -> Tuple[List[int], int]:
    """Assign byte offsets.  ``sizes[i]``: bytes of tensor i; ``lifetimes[i]``:
    ``(first, last)`` instruction indices (inclusive) during which it is live.
    Returns ``(offsets, total_bytes)``; live-overlapping tensors never share bytes."""
    if len(sizes) != len(lifetimes):
        raise ValueError("plan_memory: one lifetime per size is needed")
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    offsets = [0] * len(sizes)
    live_at: Dict[int, List[int]] = {}   # instruction index -> tensors placed live there
    reversed_spans: List[int] = []       # placed tensors with first > last, checked one by one
    total = 0
    for i in order:
        first, last = lifetimes[i]
        overlapping = {j for k in range(first, last + 1) for j in live_at.get(k, ())}
        overlapping.update(j for j in reversed_spans
                           if not (lifetimes[j][1] < first or last < lifetimes[j][0]))
        if first > last:   # a placed span overlaps it only if it covers [last, first]
            overlapping.update(j for j in live_at.get(last, ()) if lifetimes[j][1] >= first)
        busy = sorted((offsets[j], offsets[j] + _align(sizes[j])) for j in overlapping)
        offset = 0
        for start, end in busy:
            if offset + _align(sizes[i]) <= start:
                break
            offset = max(offset, end)
        offsets[i] = offset
        if first > last:
            reversed_spans.append(i)
        for k in range(first, last + 1):
            live_at.setdefault(k, []).append(i)
        total = max(total, offset + _align(sizes[i]))
    return offsets, total
