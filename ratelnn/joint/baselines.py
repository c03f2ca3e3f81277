"""Simple placements a user would try by hand (docs/architecture.md §8); :mod:`ratelnn.joint.planning`
seeds the search with them and compares its scheme against them.

* ``serial_all_cores``: all models in one group on all cores of a device, one after the other,
  each with its best split over the cores (with several devices, models are dealt to the
  devices longest first onto the least-loaded device).
* ``round_robin``: model ``i`` alone on core ``i mod cores`` (cores of all devices in order);
  models that wrap around share a core.
* ``first_fit_sram``: models by decreasing SRAM need (weights + largest working set) onto the
  first core with room for them; a model that fits nowhere goes to the core with most room
  left (its weights then stream).

Within a core or group, models get the same per-model choices (split mode, residency) as in
the search, so the baselines differ from it only in the grouping.
"""
from __future__ import annotations

import time
from typing import Dict, List, Mapping, Optional, Sequence

from ..npu import costmodel as cm
from .scheme import Scheme
from .search import Block, ModelSpec, Planner

BASELINES = ("serial_all_cores", "round_robin", "first_fit_sram")


def _serial_all_cores(planner: Planner) -> List[Block]:
    load = {d: 0.0 for d in planner.cores}
    members: Dict[int, set] = {d: set() for d in planner.cores}
    first = next(iter(planner.cores))
    work = {i: planner.options(i, first, 1)[0].busiest_s for i in range(len(planner.models))}
    for i in sorted(work, key=lambda j: -work[j]):
        d = min(load, key=lambda x: (load[x] / len(planner.cores[x]), x))
        load[d] += work[i]
        members[d].add(i)
    return [(d, len(planner.cores[d]), frozenset(m)) for d, m in members.items() if m]


def _all_cores(planner: Planner) -> List[tuple]:
    return [(d, c) for d, ids in planner.cores.items() for c in ids]


def _per_core_blocks(planner: Planner, assignment: Dict[int, List[int]]) -> List[Block]:
    cores = _all_cores(planner)
    return [(cores[c][0], 1, frozenset(m)) for c, m in sorted(assignment.items()) if m]


def _round_robin(planner: Planner) -> List[Block]:
    n = len(_all_cores(planner))
    assignment: Dict[int, List[int]] = {}
    for i in range(len(planner.models)):
        assignment.setdefault(i % n, []).append(i)
    return _per_core_blocks(planner, assignment)


def _sram_need(planner: Planner, i: int) -> float:
    """Bytes model ``i`` needs on one core with its weights resident (all its engines)."""
    return sum(t.total_weight_bytes + float(t.working_set.max()) * planner.models[i].invocations_per_frame
               for t in planner.tables[i])


def _first_fit_sram(planner: Planner) -> List[Block]:
    cores = _all_cores(planner)
    room = [float(planner.devices[d].core.sram_bytes) for d, _ in cores]
    assignment: Dict[int, List[int]] = {}
    need = {i: _sram_need(planner, i) for i in range(len(planner.models))}
    for i in sorted(need, key=lambda j: -need[j]):
        fits = [c for c in range(len(cores)) if room[c] >= need[i]]
        c = fits[0] if fits else max(range(len(cores)), key=lambda x: room[x])
        room[c] -= need[i]
        assignment.setdefault(c, []).append(i)
    return _per_core_blocks(planner, assignment)


def baseline_blocks(planner: Planner) -> Dict[str, List[Block]]:
    """The groupings of the three baselines on the planner's devices."""
    return {"serial_all_cores": _serial_all_cores(planner), "round_robin": _round_robin(planner),
            "first_fit_sram": _first_fit_sram(planner)}


def baseline(name: str, models: Sequence[ModelSpec], device_info: Optional[Mapping] = None,
             params: cm.CostParams = cm.DEFAULT_PARAMS) -> Scheme:
    """The scheme of one baseline (``serial_all_cores``, ``round_robin``, ``first_fit_sram``)."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known: {BASELINES}")
    start = time.perf_counter()
    planner = Planner(models, device_info, params)
    blocks = baseline_blocks(planner)[name]
    return planner.scheme(blocks, name, time.perf_counter() - start)
