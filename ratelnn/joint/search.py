"""Placement search for a joint compilation (docs/architecture.md §8).

A placement partitions the models into *groups*; each group gets ``k`` cores of one device and
its models run on those cores (each model with its own split mode over them; weights resident
or streamed, under each core's SRAM).  Layouts a user tries by hand are all groupings: every
model on its own core (singleton groups of one core), small models packed on one core, one
large model on cooperating cores (a singleton group of ``k`` cores), all models in series on
all cores (one group), pairs of cores cooperating, and their mixtures over several devices.

Inside a group, the cost model (:mod:`ratelnn.npu.costmodel`) prices every model for each
split mode and residency; the fastest choice per model is kept, then models are switched to
lower-SRAM choices (streaming, splits that divide weights) by least time lost per byte freed
until the models' SRAM needs fit a core.  Models are laid on the group's cores where they add
least to the busiest core.

The objective is the frame period of :class:`~ratelnn.joint.scheme.Scheme` (busiest core or
host link per frame), ties broken by the sum of squared core loads.  ``plan`` searches all
groupings exhaustively when their number is below :data:`EXHAUSTIVE_LIMIT`, else it runs a
best-improvement local search (move / swap a model, move a core, merge or split groups) from
several starting layouts under a time budget.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import product
from typing import Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..npu import costmodel as cm
from ..npu.device import CoreSpec, DeviceSpec, resolve_device_info, target_device
from .scheme import DeviceInfo, EngineAssignment, ModelInfo, Scheme, SchemeError, Stage

EXHAUSTIVE_LIMIT = 20_000     # groupings; above it ``method="auto"`` uses the local search
DEFAULT_TIME_BUDGET_S = 8.0


@dataclass(frozen=True)
class ModelSpec:
    """One model of the frame, framework-free.

    ``layers``: its fused layers in execution order.  ``engine_names``: its engines (default: one
    engine named after the model); with several, ``engine_layer_counts`` says how many of
    ``layers`` each engine holds, in order.  ``invocations_per_frame``: inferences per frame,
    run as one batch.  ``depends_on``: indices of earlier models whose outputs of the same frame
    it needs; ``None`` means the previous model in the list (a chain), ``()`` none.
    """

    name: str
    layers: Sequence[cm.LayerCost]
    invocations_per_frame: int = 1
    engine_names: Optional[Sequence[str]] = None
    engine_layer_counts: Optional[Sequence[int]] = None
    depends_on: Optional[Sequence[int]] = None

    def __post_init__(self) -> None:
        n = self.invocations_per_frame
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SchemeError(f"model {self.name!r}: invocations_per_frame must be an integer >= 1, got {n!r}")
        if not self.layers:
            raise SchemeError(f"model {self.name!r}: the layer list is empty")
        names = list(self.engine_names) if self.engine_names is not None else [self.name]
        counts = self.engine_layer_counts
        if counts is None:
            if len(names) != 1:
                raise SchemeError(f"model {self.name!r}: {len(names)} engines need engine_layer_counts")
            counts = [len(self.layers)]
        if len(counts) != len(names) or any(c < 1 for c in counts) or sum(counts) != len(self.layers):
            raise SchemeError(f"model {self.name!r}: engine_layer_counts {list(counts)} must give each of the "
                              f"{len(names)} engines >= 1 layer and sum to {len(self.layers)} layers")
        object.__setattr__(self, "engine_names", tuple(names))
        object.__setattr__(self, "engine_layer_counts", tuple(counts))

    def engine_tables(self) -> List[cm.LayerTable]:
        bounds = np.cumsum([0, *self.engine_layer_counts])
        return [cm.LayerTable(list(self.layers[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]


# --------------------------------------------------------------------------- options and groups


@dataclass
class _Option:
    """One model priced on ``k`` cores: split ``mode``, residency, per-engine costs.

    ``per_core_s``: seconds per frame on each core position ``0..used-1``."""

    mode: str
    resident: bool
    costs: List[cm.ModelCost]
    per_core_s: np.ndarray
    need: float
    link_bytes: float

    @property
    def used(self) -> int:
        return len(self.per_core_s)

    @property
    def busiest_s(self) -> float:
        return float(self.per_core_s.max())


@dataclass
class _GroupPlan:
    """A group's models, their chosen options and core positions (``offset``), the per-core
    seconds per frame and the host-link bytes per frame."""

    models: Tuple[int, ...]
    k: int
    options: Dict[int, _Option]
    offsets: Dict[int, int]
    loads: np.ndarray
    link_bytes: float


Block = Tuple[int, int, FrozenSet[int]]     # (device id, cores, models)


def _stage_seconds(cost: cm.ModelCost, table: cm.LayerTable, core: CoreSpec) -> List[float]:
    """Seconds per batch on each core position a cost uses (pipeline: stage + handoff)."""
    clock = cost.clock_hz
    rows = cost.layers
    if cost.split_mode != "pipeline":
        return [sum(r.cycles for r in rows) / clock] * cost.cores
    stages = [0.0] * cost.cores
    last = [0] * cost.cores
    for i, r in enumerate(rows):
        stages[r.core] += r.cycles
        last[r.core] = i
    for s in range(cost.cores - 1):
        stages[s] += table.out_bytes[last[s]] * cost.batch / core.core_link_bytes_per_cycle
    return [c / clock for c in stages]


class Planner:
    """Prices models and groups on the given devices (cached) and builds schemes."""

    def __init__(self, models: Sequence[ModelSpec], device_info: Optional[Mapping] = None,
                 params: cm.CostParams = cm.DEFAULT_PARAMS) -> None:
        if not models:
            raise SchemeError("plan needs at least one model")
        if not all(isinstance(m, ModelSpec) for m in models):
            raise SchemeError("models must be ModelSpec objects")
        self.models = list(models)
        self.params = params
        self.cores: Dict[int, List[int]] = resolve_device_info(device_info)
        self.devices: Dict[int, DeviceSpec] = {d: target_device(d) for d in self.cores}
        self.tables = [m.engine_tables() for m in self.models]
        self.depends = []
        for i, m in enumerate(self.models):
            deps = tuple(m.depends_on) if m.depends_on is not None else ((i - 1,) if i else ())
            if any(isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < i for j in deps):
                raise SchemeError(f"model {m.name!r}: depends_on {list(deps)} must name earlier models (0..{i - 1})")
            self.depends.append(deps)
        self._options: Dict[Tuple, List[_Option]] = {}
        self._groups: Dict[Tuple, _GroupPlan] = {}

    # ---------------------------------------------------------------- pricing

    def option(self, i: int, device_id: int, k: int, mode: str, resident: bool,
               budget: Optional[float] = None) -> Optional[_Option]:
        """Model ``i`` on ``k`` cores of a device, or None if the choice is impossible."""
        device = self.devices[device_id]
        batch = self.models[i].invocations_per_frame
        per_core = np.zeros(0)
        costs, need, link = [], 0.0, 0.0
        for table in self.tables[i]:
            try:
                cost = cm.model_cost(table, device, k, batch, mode, resident=resident,
                                     params=self.params, sram_budget=budget)
            except cm.CostModelError:
                return None
            seconds = np.array(_stage_seconds(cost, table, device.core))
            if len(seconds) > len(per_core):
                per_core = np.pad(per_core, (0, len(seconds) - len(per_core)))
            per_core[:len(seconds)] += seconds
            costs.append(cost)
            need += cost.sram_bytes_needed
            link += cost.host_link_bytes_per_batch
        return _Option(mode if k > 1 else "batch", resident, costs, per_core, need, link)

    def options(self, i: int, device_id: int, k: int) -> List[_Option]:
        """All feasible (split mode, residency) choices of model ``i`` on ``k`` cores, fastest first."""
        key = (i, device_id, k)
        if key not in self._options:
            modes = cm.SPLIT_MODES if k > 1 else ("batch",)
            found = [o for mode in modes for res in (True, False)
                     if (o := self.option(i, device_id, k, mode, res)) is not None]
            found.sort(key=lambda o: (o.busiest_s, o.link_bytes, o.need))
            self._options[key] = found
        return self._options[key]

    def group(self, device_id: int, k: int, models: FrozenSet[int]) -> _GroupPlan:
        """The plan of a group of ``models`` sharing ``k`` cores of a device (cached)."""
        key = (device_id, k, models)
        plan = self._groups.get(key)
        if plan is None:
            plan = self._groups[key] = self._plan_group(device_id, k, tuple(sorted(models)))
        return plan

    def _plan_group(self, device_id: int, k: int, members: Tuple[int, ...]) -> _GroupPlan:
        sram = float(self.devices[device_id].core.sram_bytes)
        choices = {i: self.options(i, device_id, k)[0] for i in members}
        # switch to lower-SRAM choices, least time lost per byte freed, until all fit one core
        while len(members) > 1 and sum(o.need for o in choices.values()) > sram:
            best, best_ratio = None, math.inf
            for i in members:
                cur = choices[i]
                for o in self.options(i, device_id, k):
                    if o.need < cur.need:
                        ratio = max(o.busiest_s - cur.busiest_s, 0.0) / (cur.need - o.need)
                        if ratio < best_ratio:
                            best, best_ratio = (i, o), ratio
            if best is None:
                break
            choices[best[0]] = best[1]
        total = sum(o.need for o in choices.values())
        if len(members) > 1 and total > sram:   # even the leanest choices overflow: share SRAM, spill
            scale = sram / total
            for i, o in list(choices.items()):
                scaled = self.option(i, device_id, k, o.mode, o.resident, budget=max(o.need * scale, 1.0))
                choices[i] = scaled or self.option(i, device_id, k, o.mode, False, budget=max(o.need * scale, 1.0))
        loads = [0.0] * k
        offsets = {}
        for i in sorted(members, key=lambda j: -choices[j].busiest_s):
            seconds = choices[i].per_core_s.tolist()
            best_peak = math.inf
            for r in range(k):       # rotation of the model's core positions that keeps the peak lowest
                trial = list(loads)
                for p, sec in enumerate(seconds):
                    trial[(r + p) % k] += sec
                if max(trial) < best_peak:
                    best_peak, offsets[i], best = max(trial), r, trial
            loads = best
        return _GroupPlan(members, k, choices, offsets, np.array(loads), sum(o.link_bytes for o in choices.values()))

    # ---------------------------------------------------------------- objective

    def score(self, blocks: Sequence[Block]) -> Tuple[float, float]:
        """(frame period in s, sum of squared core loads) of a grouping."""
        link = {d: 0.0 for d in self.devices}
        period, squares = 0.0, 0.0
        for d, k, models in blocks:
            g = self.group(d, k, models)
            period = max(period, float(g.loads.max()))
            squares += float(np.dot(g.loads, g.loads))
            link[d] += g.link_bytes
        for d, b in link.items():
            period = max(period, b / self.devices[d].host_link_bytes_per_s)
        return period, squares

    # ---------------------------------------------------------------- schemes

    def scheme(self, blocks: Sequence[Block], strategy: str, search_time_s: float = 0.0,
               core_order: Optional[Mapping[int, Sequence[int]]] = None) -> Scheme:
        """The scheme of a grouping; groups take the device's cores in order."""
        free = {d: list(core_order[d] if core_order else c) for d, c in self.cores.items()}
        used_cores: Dict[int, List[int]] = {d: [] for d in self.cores}
        engines: List[EngineAssignment] = []
        for d, k, models in blocks:
            if k > len(free[d]):
                raise SchemeError(f"the grouping asks for more cores than device {d} offers ({self.cores[d]})")
            ids, free[d] = free[d][:k], free[d][k:]
            used_cores[d] += ids
            g = self.group(d, k, models)
            for i in g.models:
                engines += self._engines(i, d, ids, g, shared=len(g.models) > 1)
        engines.sort(key=lambda e: (e.model_index, self.models[e.model_index].engine_names.index(e.engine_name)))
        devices = {d: self._device_info(d, sorted(ids)) for d, ids in used_cores.items() if ids}
        infos = [ModelInfo(m.name, m.invocations_per_frame, self.depends[i],
                           sum(t.total_macs for t in self.tables[i]) * m.invocations_per_frame)
                 for i, m in enumerate(self.models)]
        return Scheme(infos, engines, devices, strategy, search_time_s)

    def _device_info(self, d: int, ids: List[int]) -> DeviceInfo:
        dev = self.devices[d]
        return DeviceInfo(tuple(ids), dev.host_link_bytes_per_s, float(dev.core.sram_bytes),
                          dev.core.peak_macs_per_s, self.params.host_dma_latency_s)

    def _engines(self, i: int, d: int, ids: List[int], g: _GroupPlan, shared: bool) -> List[EngineAssignment]:
        option, k = g.options[i], g.k
        spec, device = self.models[i], self.devices[d]
        out = []
        for name, table, cost in zip(spec.engine_names, self.tables[i], option.costs):
            seconds = _stage_seconds(cost, table, device.core)
            positions = [(g.offsets[i] + p) % k for p in range(len(seconds))]
            core_ids = tuple(ids[p] for p in positions)
            split = cost.split_mode if cost.cores > 1 else "none"
            mode = "shared" if shared else ("cooperative" if cost.cores > 1 else "single_core")
            out.append(EngineAssignment(
                model_index=i, model_name=spec.name, engine_name=name, device_id=d, core_ids=core_ids,
                mode=mode, split_mode=split, resident=cost.weights_resident, sram_bytes=cost.sram_bytes_needed,
                latency_s=cost.latency_s, batch=cost.batch, core_seconds=tuple(seconds),
                host_link_bytes=cost.host_link_bytes_per_batch,
                input_bytes=table.input_bytes * cost.batch, output_bytes=table.output_bytes * cost.batch,
                stages=_stages(cost, table, device, core_ids)))
        return out


def _stages(cost: cm.ModelCost, table: cm.LayerTable, device: DeviceSpec,
            core_ids: Tuple[int, ...]) -> Tuple[Stage, ...]:
    """Per-layer execution of a cost for the simulator: core-only seconds per layer (host-link
    stalls removed) and the bytes each layer needs over the host link."""
    clock = cost.clock_hz
    rows = cost.layers
    io = (table.input_bytes + table.output_bytes) * cost.batch
    streamed = 0.0 if cost.weights_resident else table.total_weight_bytes
    extra = max(cost.host_link_bytes_per_batch - io - streamed, 0.0)   # spills, weights of extra rounds
    n_stages = cost.cores if cost.split_mode == "pipeline" else 1
    per_stage: List[List[List[float]]] = [[] for _ in range(n_stages)]
    for idx, r in enumerate(rows):
        core_only = r.cycles - max(0.0, r.stream_cycles - max(r.compute_cycles, r.sram_cycles))
        link_bytes = 0.0 if r.weights == "resident" else float(table.weight_bytes[idx])
        chunks = per_stage[r.core if n_stages > 1 else 0]
        if chunks and link_bytes == 0.0:
            chunks[-1][0] += core_only / clock
        else:
            chunks.append([core_only / clock, link_bytes])
    if extra > 0:
        per_stage[0].insert(0, [0.0, extra])
    last = {r.core: idx for idx, r in enumerate(rows)}
    stages = []
    for s, chunks in enumerate(per_stage):
        cores = (core_ids[s],) if n_stages > 1 else core_ids
        handoff = 0.0
        if n_stages > 1 and s < n_stages - 1:
            handoff = table.out_bytes[last[s]] * cost.batch / device.core.core_link_bytes_per_cycle / clock
        stages.append(Stage(cores, tuple((float(a), float(b)) for a, b in chunks), handoff))
    return tuple(stages)


# --------------------------------------------------------------------------- exhaustive


def _set_partitions(items: Sequence[int], max_blocks: int) -> Iterator[List[List[int]]]:
    """All partitions of ``items`` into at most ``max_blocks`` blocks."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in _set_partitions(rest, max_blocks):
        for b in range(len(partition)):
            yield partition[:b] + [[first] + partition[b]] + partition[b + 1:]
        if len(partition) < max_blocks:
            yield [[first]] + partition


def _compositions(total: int, parts: int) -> Iterator[Tuple[int, ...]]:
    if parts == 1:
        yield (total,)
        return
    for head in range(1, total - parts + 2):
        for tail in _compositions(total - head, parts - 1):
            yield (head,) + tail


def _core_assignments(n_blocks: int, cores: Mapping[int, int]) -> Iterator[List[Tuple[int, int]]]:
    """(device, cores) per block; every device that gets blocks gives them all its cores."""
    devices = list(cores)
    for labels in product(devices, repeat=n_blocks):
        counts = {d: labels.count(d) for d in devices}
        if any(counts[d] > cores[d] for d in devices):
            continue
        per_device = [list(_compositions(cores[d], counts[d])) if counts[d] else [()] for d in devices]
        for combo in product(*per_device):
            taken = {d: list(c) for d, c in zip(devices, combo)}
            yield [(d, taken[d].pop(0)) for d in labels]


def _stirling2(n: int, k: int) -> int:
    row = [1] + [0] * k
    for i in range(1, n + 1):
        row = [0] + [j * row[j] + row[j - 1] for j in range(1, min(i, k) + 1)] + [0] * (k - min(i, k))
    return row[k]


def count_groupings(n_models: int, cores: Mapping[int, int]) -> int:
    """How many groupings the exhaustive search visits."""
    total_cores = sum(cores.values())
    count = 0
    for g in range(1, min(n_models, total_cores) + 1):
        ways = 0
        for per_device in product(*(range(0, c + 1) for c in cores.values())):
            if sum(per_device) != g:
                continue
            arrangements = math.factorial(g)
            for n_d, c in zip(per_device, cores.values()):
                arrangements //= math.factorial(n_d)
                arrangements *= math.comb(c - 1, n_d - 1) if n_d else 1
            ways += arrangements
        count += _stirling2(n_models, g) * ways
    return count


def exhaustive_blocks(planner: Planner) -> List[Block]:
    """The best grouping over all partitions of the models and all core counts."""
    cores = {d: len(c) for d, c in planner.cores.items()}
    best, best_score = None, (math.inf, math.inf)
    for partition in _set_partitions(list(range(len(planner.models))), sum(cores.values())):
        for assignment in _core_assignments(len(partition), cores):
            blocks = [(d, k, frozenset(p)) for p, (d, k) in zip(partition, assignment)]
            s = planner.score(blocks)
            if s < best_score:
                best, best_score = blocks, s
    return best


# --------------------------------------------------------------------------- heuristic


def _normalise(blocks: Sequence[Block]) -> Tuple[Block, ...]:
    return tuple(sorted(blocks, key=lambda b: (b[0], -b[1], sorted(b[2]))))


def greedy_blocks(planner: Planner) -> List[Block]:
    """Longest model first onto the single-core group where it raises the objective least;
    spare cores then go, one at a time, to the group that gains most from them."""
    blocks: List[Block] = [(d, 1, frozenset()) for d, ids in planner.cores.items() for _ in ids]
    alone = {i: planner.options(i, d, 1)[0].busiest_s for i in range(len(planner.models))
             for d in list(planner.cores)[:1]}
    for i in sorted(alone, key=lambda j: -alone[j]):
        trials = []
        for b, (d, k, models) in enumerate(blocks):
            trial = blocks[:b] + [(d, k, models | {i})] + blocks[b + 1:]
            trials.append((planner.score([x for x in trial if x[2]]), b))
        b = min(trials)[1]
        blocks[b] = (blocks[b][0], blocks[b][1], blocks[b][2] | {i})
    spare = [b for b in blocks if not b[2]]
    blocks = [b for b in blocks if b[2]]
    for d, _, _ in spare:
        trials = []
        for b, (bd, k, models) in enumerate(blocks):
            if bd == d:
                trial = blocks[:b] + [(bd, k + 1, models)] + blocks[b + 1:]
                trials.append((planner.score(trial), b))
        b = min(trials)[1]
        blocks[b] = (blocks[b][0], blocks[b][1] + 1, blocks[b][2])
    return blocks


def _neighbours(blocks: Tuple[Block, ...]) -> Iterator[List[Block]]:
    """Groupings one move away: move or swap a model, move a core, merge or split groups."""
    n = len(blocks)
    for a in range(n):
        da, ka, ma = blocks[a]
        for b in range(n):
            if a == b:
                continue
            db, kb, mb = blocks[b]
            rest = [blocks[x] for x in range(n) if x not in (a, b)]
            for i in ma:                                         # move model i from a to b
                if len(ma) > 1:
                    yield rest + [(da, ka, ma - {i}), (db, kb, mb | {i})]
                elif da == db:                                   # a empties: its cores go to b
                    yield rest + [(db, kb + ka, mb | {i})]
                else:                                            # ... or to a group on a's device
                    for c, (dc, kc, mc) in enumerate(rest):
                        if dc == da:
                            yield rest[:c] + rest[c + 1:] + [(dc, kc + ka, mc), (db, kb, mb | {i})]
            if a < b:
                for i in ma:                                     # swap i and j
                    for j in mb:
                        yield rest + [(da, ka, ma - {i} | {j}), (db, kb, mb - {j} | {i})]
            if da == db and ka > 1:                              # move one core from a to b
                yield rest + [(da, ka - 1, ma), (db, kb + 1, mb)]
            if da == db and a < b:                               # merge a and b
                yield rest + [(da, ka + kb, ma | mb)]
        if ka > 1 and len(ma) > 1:                               # split one model off with one core
            rest = [blocks[x] for x in range(n) if x != a]
            for i in ma:
                yield rest + [(da, ka - 1, ma - {i}), (da, 1, frozenset({i}))]


def local_search(planner: Planner, start: Sequence[Block], deadline: float) -> Tuple[Tuple[Block, ...], Tuple]:
    """Best-improvement descent from ``start`` until a local optimum or the deadline."""
    current = _normalise(start)
    current_score = planner.score(current)
    while time.perf_counter() < deadline:
        best, best_score = None, current_score
        for trial in _neighbours(current):
            s = planner.score(trial)
            if s < best_score:
                best, best_score = trial, s
            if time.perf_counter() >= deadline:
                break
        if best is None:
            break
        current, current_score = _normalise(best), best_score
    return current, current_score


def heuristic_blocks(planner: Planner, starts: Sequence[Sequence[Block]], time_budget_s: float) -> List[Block]:
    """Local search from the greedy layout and each of ``starts``; the best result."""
    deadline = time.perf_counter() + time_budget_s
    best, best_score = None, (math.inf, math.inf)
    for start in [greedy_blocks(planner), *starts]:
        blocks, s = local_search(planner, start, deadline)
        if s < best_score:
            best, best_score = blocks, s
        if time.perf_counter() >= deadline:
            break
    return list(best)
