"""Analytic cost model of the emulated NPU (docs/architecture.md §7, §8).

Works on an abstract list of :class:`LayerCost` (one entry per fused layer / engine
instruction), independent of the engine format.  Every number is per inference unless it
says "per batch".  Units: cycles of the core clock, bytes, seconds.

Per layer on one core, for ``b`` inferences::

    cycles = overhead + max(compute, sram, stream) + sync

* ``compute``: tensor unit (conv, depthwise, fc, matmul) = MACs / (peak MACs/cycle x
  utilisation), utilisation = how well (pixels, kh*kw*Cin, Cout) fill the array tiles; an
  int16 x int16 product runs at 1/``int16_slowdown`` of the int8 rate, int16 x int8 (one
  16-bit operand) at 1/sqrt(``int16_slowdown``) (docs/cost-model.md).  Vector unit (eltwise, pool, lut, softmax) =
  element ops / ops per cycle.  Memory unit (concat, move): no compute.
* ``sram``: activations in+out (x b) plus weights (once per batch) over the SRAM bandwidth.
* ``stream``: weights that are not resident come over the host link once per batch round
  (activations that do not fit in SRAM even for one inference spill over it too).
* ``sync``: ``tensor`` split only: barrier plus all-gather of the layer's output.

A batch that does not fit in SRAM runs in rounds of as many inferences as fit; the overhead
is paid once per layer per round.

Multi-core split modes: ``batch`` (each core runs part of the batch with its own copy of the
weights), ``pipeline`` (contiguous layer stages, one per core, activations passed over the
core interconnect), ``tensor`` (every layer's output channels divided among the cores, an
all-gather and barrier after each layer).  Parameters and their derivation:
``docs/cost-model.md``.
"""
from __future__ import annotations

import bisect
import itertools
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import RatelError
from .device import DeviceSpec, get_device, resolve_device_info, target_device

TENSOR_KINDS = ("conv", "depthwise", "fc", "matmul")
VECTOR_KINDS = ("eltwise", "pool", "lut", "softmax")
MEMORY_KINDS = ("concat", "move")
UNITS = ("tensor", "vector", "memory")
SPLIT_MODES = ("batch", "pipeline", "tensor")
_UNIT_OF_KIND = {**{k: 0 for k in TENSOR_KINDS}, **{k: 1 for k in VECTOR_KINDS}, **{k: 2 for k in MEMORY_KINDS}}
BOUNDS = ("compute", "bandwidth", "bandwidth", "overhead")  # argmax over (compute, sram, stream, overhead+sync)


class CostModelError(RatelError, ValueError):
    """A layer list or cost-model argument is invalid."""


@dataclass(frozen=True)
class CostParams:
    """Timing overheads of the model (see docs/cost-model.md for each derivation)."""

    layer_overhead_cycles: float = 1000.0   # per layer per core and batch round (fitted: ResNet-50 batch-1 latency)
    tensor_sync_cycles: float = 200.0       # per layer barrier in ``tensor`` split (assumed)
    host_dma_latency_s: float = 1.0e-6      # fixed latency of one host<->device transfer (assumed, PCIe round trip)


DEFAULT_PARAMS = CostParams()


@dataclass(frozen=True)
class LayerCost:
    """One layer as the cost model sees it.

    ``macs``: multiply-accumulates per inference (for vector kinds: element operations).
    ``weight_bytes``: constants (weights, biases, tables).  ``in_bytes``/``out_bytes``:
    activations read/written per inference.  ``live_bytes``: other activations that must stay
    in SRAM while this layer runs (e.g. a residual shortcut).  ``kernel_area`` = kh*kw;
    ``out_pixels`` = Ho*Wo per inference (1 for fc).  ``bits``: 8 or 16 (operand width: the
    activations'); ``weight_bits``: the weights' (8 or 16; None: ``bits``).  Tensor kinds run
    at 1/``int16_slowdown`` of the int8 rate for a 16 x 16 product, 1/sqrt of it for 16 x 8.
    """

    kind: str
    macs: float
    weight_bytes: float = 0.0
    in_bytes: float = 0.0
    out_bytes: float = 0.0
    bits: int = 8
    in_channels: int = 0
    out_channels: int = 0
    kernel_area: int = 1
    out_pixels: int = 1
    live_bytes: float = 0.0
    name: str = ""
    weight_bits: Optional[int] = None
    _row: tuple = field(init=False, repr=False, compare=False)   # this layer's LayerTable columns

    def __post_init__(self) -> None:
        label = self.name or self.kind
        if self.kind not in _UNIT_OF_KIND:
            raise CostModelError(f"layer {label!r}: unknown kind {self.kind!r}; known: {sorted(_UNIT_OF_KIND)}")
        if self.bits not in (8, 16):
            raise CostModelError(f"layer {label!r}: bits must be 8 or 16, got {self.bits!r}")
        if self.weight_bits not in (None, 8, 16):
            raise CostModelError(f"layer {label!r}: weight_bits must be None, 8 or 16, got {self.weight_bits!r}")
        wide = (self.bits == 16) + ((self.bits if self.weight_bits is None else self.weight_bits) == 16)
        for attr in ("macs", "weight_bytes", "in_bytes", "out_bytes", "in_channels", "out_channels",
                     "kernel_area", "out_pixels", "live_bytes"):
            value = getattr(self, attr)
            if not isinstance(value, (int, float, np.integer, np.floating)) or not value >= 0 or math.isinf(value):
                raise CostModelError(f"layer {label!r}: {attr} must be a finite number >= 0, got {value!r}")
        reduce = self.kernel_area * (1 if self.kind == "depthwise" else self.in_channels)
        object.__setattr__(self, "_row", (_UNIT_OF_KIND[self.kind], self.macs, self.weight_bytes, self.in_bytes,
                                          self.out_bytes, self.live_bytes, wide / 2.0, reduce,
                                          self.out_channels, self.out_pixels))


class LayerTable:
    """A layer list as numpy arrays (build once, evaluate many times)."""

    def __init__(self, layers: Sequence[LayerCost], input_bytes: Optional[float] = None,
                 output_bytes: Optional[float] = None) -> None:
        if len(layers) == 0:
            raise CostModelError("the layer list is empty")
        if not all(isinstance(layer, LayerCost) for layer in layers):
            raise CostModelError("layers must be LayerCost objects")
        self.layers = tuple(layers)
        self.columns = np.array([layer._row for layer in layers], dtype=np.float64).T.copy()
        self.input_bytes = float(layers[0].in_bytes if input_bytes is None else input_bytes)
        self.output_bytes = float(layers[-1].out_bytes if output_bytes is None else output_bytes)
        self._cache: Dict[Any, Any] = {}   # per (core, split, params) precomputed arrays
        # wide: the 16-bit share of a product's operands (0, 0.5: int16 x int8, 1: int16 x int16)
        (unit, self.macs, self.weight_bytes, self.in_bytes, self.out_bytes, live, self.wide,
         self.reduce, self.out_channels, self.pixels) = self.columns
        self.is_tensor = unit == 0
        self.is_vector = unit == 1
        self.act_bytes = self.in_bytes + self.out_bytes
        self.working_set = self.act_bytes + live
        self.total_weight_bytes = float(self.weight_bytes.sum())
        self.total_macs = float(self.macs[self.is_tensor].sum())

    def __len__(self) -> int:
        return len(self.layers)


LayersLike = Union[Sequence[LayerCost], LayerTable]


_TABLES: "OrderedDict[Tuple[int, ...], LayerTable]" = OrderedDict()
_TABLES_KEPT = 64


def as_table(layers: LayersLike) -> LayerTable:
    """The :class:`LayerTable` of a layer list, reused while the same LayerCost objects are
    passed again (a small LRU keyed by object identity; the cached table holds the objects,
    so their ids cannot be recycled while the entry lives)."""
    if isinstance(layers, LayerTable):
        return layers
    key = tuple(map(id, layers))
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES[key] = LayerTable(layers)
        if len(_TABLES) > _TABLES_KEPT:
            _TABLES.popitem(last=False)
    else:
        _TABLES.move_to_end(key)
    return table


def _fill(size: np.ndarray, tile: int) -> np.ndarray:
    """Fraction of ``ceil(size/tile)`` tiles that ``size`` fills (1 where size is 0/unknown)."""
    safe = np.maximum(size, 1.0)
    return np.where(size > 0, safe / (np.ceil(safe / tile) * tile), 1.0)


@dataclass
class _CoreRun:
    """Cycles of layers ``start:start+len(cycles)`` of a table run by one core (all batch
    rounds summed; arrays are per layer)."""

    start: int
    core: int
    compute: np.ndarray
    sram: np.ndarray
    stream: np.ndarray       # weights streamed and activations spilled over the host link
    sync: np.ndarray
    overhead: np.ndarray
    cycles: np.ndarray
    sram_bytes_needed: float
    resident: bool
    spilled_bytes: float     # activations that do not fit, moved over the host link per batch
    streamed_bytes: float    # weights moved over the host link per batch


class _PerInference:
    """Batch-independent per-layer costs of a table on one core spec with ``n_split``-way
    channel split (cached on the table: the search evaluates one model many times)."""

    def __init__(self, t: LayerTable, core, n_split: int, params: CostParams) -> None:
        n_core = np.ceil(t.out_channels / n_split)
        share = np.where(t.out_channels > 0, n_core / np.maximum(t.out_channels, 1.0), 1.0 / n_split)
        rate = core.macs_per_cycle / core.int16_slowdown ** t.wide   # 16x8: 2 of 4 8x8 products
        util = _fill(t.reduce, core.tile_reduce) * _fill(n_core, core.tile_out_channels)
        self.tensor = np.where(t.is_tensor, t.macs * share / (rate * util), 0.0)
        self.vector = np.where(t.is_vector, t.macs / n_split / core.vector_ops_per_cycle, 0.0)
        self.pixels = np.where(t.is_tensor, t.pixels, 0.0)   # 0: no pixel-tile effect
        self.tile_pixels = core.tile_pixels
        self.sram_act = t.act_bytes / core.sram_bytes_per_cycle
        self.sram_weights = t.weight_bytes / n_split / core.sram_bytes_per_cycle
        self.weight_bytes = t.weight_bytes / n_split
        self.working_set = t.working_set
        self.sync_fixed = params.tensor_sync_cycles if n_split > 1 else 0.0
        self.sync_per_inference = t.out_bytes * (n_split - 1) / n_split / core.core_link_bytes_per_cycle
        self.partitions: Dict[Any, List[int]] = {}

    def cycles(self, b, link: "_Link", streamed, room):
        """Per-layer (compute, sram, stream, sync) cycles of one round of ``b`` inferences.

        ``b``, ``streamed`` (0/1) and ``room`` (SRAM bytes left for activations) are scalars
        or per-layer arrays."""
        compute = self.tensor * b / _fill(b * self.pixels, self.tile_pixels) + self.vector * b
        sram = self.sram_act * b + self.sram_weights
        spill = np.maximum(self.working_set * b - room, 0.0) * 2.0
        stream = spill / link.spill + self.weight_bytes * streamed / link.weights
        sync = self.sync_fixed + self.sync_per_inference * b
        return compute, sram, stream, sync


@dataclass(frozen=True)
class _Link:
    """Host-link bytes per core cycle available to one core for streamed weights and for
    spilled activations."""

    weights: float
    spill: float


def _per_inference(t: LayerTable, core, n_split: int, params: CostParams) -> _PerInference:
    key = (core, n_split, params)
    cached = t._cache.get(key)
    if cached is None:
        cached = t._cache[key] = _PerInference(t, core, n_split, params)
    return cached


def _run_stages(t: LayerTable, starts: List[int], core, batch: int, n_split: int, resident: Optional[bool],
                sram_budget: float, link: _Link, params: CostParams) -> List[_CoreRun]:
    """Run ``batch`` inferences through consecutive stages (stage ``i`` = layers
    ``starts[i]:starts[i+1]`` on core ``i``), each in rounds of as many inferences as fit in
    its core's SRAM.  All stages are evaluated together, vectorised over layers."""
    pre = _per_inference(t, core, n_split, params)
    bounds = starts + [len(t)]
    lengths = np.diff(bounds)
    stage_weights = np.add.reduceat(pre.weight_bytes, starts)
    stage_ws = np.maximum.reduceat(pre.working_set, starts)
    stage_buffer = 2.0 * np.maximum.reduceat(pre.weight_bytes, starts)  # double-buffered streamed layer
    plans = []   # per stage: (resident, room, rounds, small, larger)
    for weights, ws, buffer in zip(stage_weights.tolist(), stage_ws.tolist(), stage_buffer.tolist()):
        keep = weights + ws <= sram_budget if resident is None else resident
        if keep and weights > sram_budget:
            raise CostModelError(f"weights of {weights / 2**20:.2f} MiB per core cannot be resident in an SRAM "
                                 f"budget of {sram_budget / 2**20:.2f} MiB; use resident=False or None")
        room = sram_budget - (weights if keep else buffer)
        fit = int(min(batch, max(room // ws, 1))) if ws > 0 else batch
        rounds = -(-batch // fit)
        small, larger = divmod(batch, rounds)     # ``larger`` rounds of small+1, the rest of small
        plans.append((keep, room, rounds, small, larger))
    col = lambda i: np.repeat(np.array([p[i] for p in plans], dtype=np.float64), lengths)  # noqa: E731
    streamed, room, rounds, small, larger = 1.0 - col(0), col(1), col(2), col(3), col(4)
    compute = sram = stream = sync = cycles = 0.0
    for b, count in ((small + 1, larger), (small, rounds - larger)):
        c, m, st, sy = pre.cycles(b, link, streamed, room)
        compute, sram, stream, sync = compute + count * c, sram + count * m, stream + count * st, sync + count * sy
        cycles = cycles + count * (np.maximum(np.maximum(c, m), st) + sy)
    overhead = params.layer_overhead_cycles * rounds
    cycles = cycles + overhead
    runs = []
    for i, (keep, _, n_rounds, small_b, larger_n) in enumerate(plans):
        sl = slice(bounds[i], bounds[i + 1])
        weights = float(stage_weights[i])
        streamed_bytes = 0.0 if keep else weights * n_rounds
        spilled = (float(stream[sl].sum()) - streamed_bytes / link.weights) * link.spill
        need = (weights if keep else float(stage_buffer[i])) + (small_b + (1 if larger_n else 0)) * float(stage_ws[i])
        runs.append(_CoreRun(bounds[i], i, compute[sl], sram[sl], stream[sl], sync[sl], overhead[sl], cycles[sl],
                             need, keep, max(spilled, 0.0), streamed_bytes))
    return runs


@dataclass(frozen=True)
class LayerBreakdown:
    """Cost of one layer in a :class:`ModelCost` (cycles on the core that runs it)."""

    name: str
    kind: str
    unit: str
    core: int
    cycles: float
    compute_cycles: float
    sram_cycles: float
    stream_cycles: float
    sync_cycles: float
    bound: str              # "compute" | "bandwidth" | "overhead"
    weights: str            # "resident" | "streamed"


@dataclass
class ModelCost:
    """Predicted cost of one model (or engine) on one device.

    ``latency_s``: one batch, host transfers included.  ``throughput``: inferences/s in steady
    state (host transfers overlapped with compute).  ``cores``: cores actually used.
    ``sram_bytes_needed``: per core (the largest), against ``sram_budget``.
    ``host_link_bytes_per_batch``: inputs, outputs, streamed weights, spilled activations.
    """

    latency_s: float
    throughput: float
    batch: int
    cores: int
    split_mode: str
    weights_resident: bool
    sram_bytes_needed: float
    host_link_bytes_per_batch: float
    activations_spilled: bool
    sram_budget: float
    clock_hz: float
    _table: LayerTable = field(repr=False)
    _runs: List[_CoreRun] = field(repr=False)

    @property
    def layers(self) -> List[LayerBreakdown]:
        rows = []
        for run in self._runs:
            parts = np.stack([run.compute, run.sram, run.stream, run.overhead + run.sync])
            for i in range(len(run.cycles)):
                layer = self._table.layers[run.start + i]
                rows.append(LayerBreakdown(
                    layer.name, layer.kind, UNITS[_UNIT_OF_KIND[layer.kind]], run.core, float(run.cycles[i]),
                    float(run.compute[i]), float(run.sram[i]), float(run.stream[i]), float(run.sync[i]),
                    BOUNDS[int(np.argmax(parts[:, i]))], "resident" if run.resident else "streamed"))
        return rows

    @property
    def fits_sram(self) -> bool:
        """True when weights (if resident) and one round of activations fit the SRAM budget."""
        return self.sram_bytes_needed <= self.sram_budget

    def unit_cycles(self) -> Dict[str, float]:
        """Cycles per hardware unit, summed over layers (on the cores that run them)."""
        totals = {u: 0.0 for u in UNITS}
        for row in self.layers:
            totals[row.unit] += row.cycles
        return totals


def layer_cycles(layer: LayerCost, core=None, batch: int = 1,
                 params: CostParams = DEFAULT_PARAMS) -> Tuple[float, str]:
    """Cycles of one layer for ``batch`` inferences on one core (default: an HG800 core), its
    weights resident, and what bounds it: ``"compute"``, ``"bandwidth"`` or ``"overhead"``."""
    core = core or get_device(0).core
    pre = _per_inference(as_table([layer]), core, 1, params)
    compute, sram, _, _ = pre.cycles(batch, _Link(math.inf, math.inf), 0.0, math.inf)
    parts = (float(compute[0]), float(sram[0]), 0.0, params.layer_overhead_cycles)
    return params.layer_overhead_cycles + max(parts[:2]), BOUNDS[int(np.argmax(parts))]


def _link(device: DeviceSpec, link_share: float, users: int, broadcast: bool) -> _Link:
    """Each of ``users`` cores gets an equal part of the host link; ``broadcast``: all cores
    receive the same streamed weights, sent once at the full rate."""
    per_cycle = device.host_link_bytes_per_s * link_share / device.core.clock_hz
    return _Link(per_cycle if broadcast else per_cycle / users, per_cycle / users)


def _partition(weights: Sequence[float], parts: int) -> List[int]:
    """Start indices of at most ``parts`` contiguous groups minimising the largest group sum."""
    prefix = [0.0, *itertools.accumulate(weights)]

    def cuts_for(limit: float) -> Optional[List[int]]:
        starts, start = [], 0
        for _ in range(parts):
            starts.append(start)
            start = max(bisect.bisect_right(prefix, prefix[start] + limit) - 1, start + 1)
            if start >= len(weights):
                return starts
        return None

    lo, hi = max(weights), prefix[-1]
    best = cuts_for(hi) or [0]
    for _ in range(30):
        mid = (lo + hi) / 2
        cuts = cuts_for(mid)
        if cuts is None:
            lo = mid
        else:
            hi, best = mid, cuts
        if hi - lo <= 1e-3 * hi:
            break
    return best


def model_cost(layers: LayersLike, device: Optional[DeviceSpec] = None, cores: int = 1, batch: int = 1,
               split_mode: str = "batch", resident: Optional[bool] = None,
               params: CostParams = DEFAULT_PARAMS, sram_budget: Optional[float] = None,
               link_share: float = 1.0) -> ModelCost:
    """Predicted latency/throughput of ``layers`` on ``cores`` cores of ``device``.

    ``resident``: True keeps weights in SRAM, False streams them every batch round, None
    chooses (resident when they fit).  ``sram_budget``: bytes of each core's SRAM this model
    may use (default: all of it; less when models share a core).  ``link_share``: fraction of
    the host link this model gets (default 1: it is alone on the device).
    """
    t = as_table(layers)
    device = device or get_device(0)
    core = device.core
    if split_mode not in SPLIT_MODES:
        raise CostModelError(f"split_mode must be one of {SPLIT_MODES}, got {split_mode!r}")
    if isinstance(cores, bool) or not isinstance(cores, int) or not 1 <= cores <= device.num_cores:
        raise CostModelError(f"cores must be an integer in 1..{device.num_cores}, got {cores!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise CostModelError(f"batch must be an integer >= 1, got {batch!r}")
    if not 0 < link_share <= 1:
        raise CostModelError(f"link_share must be in (0, 1], got {link_share!r}")
    budget = float(core.sram_bytes if sram_budget is None else sram_budget)
    if not 0 < budget <= core.sram_bytes:
        raise CostModelError(f"sram_budget must be in (0, {core.sram_bytes}] bytes, got {sram_budget!r}")
    mode = split_mode if cores > 1 else "batch"
    if mode == "pipeline":   # contiguous stages, balanced on their resident cycles
        used = min(cores, len(t))
        link = _link(device, link_share, used, broadcast=False)
        pre = _per_inference(t, core, 1, params)
        key = (batch, used)
        if key not in pre.partitions:
            c, m, _, _ = pre.cycles(batch, link, 0.0, math.inf)
            pre.partitions[key] = _partition((params.layer_overhead_cycles + np.maximum(c, m)).tolist(), used)
        starts = pre.partitions[key]
        used = len(starts)
        runs = _run_stages(t, starts, core, batch, 1, resident, budget, link, params)
        handoff = [t.out_bytes[s - 1] * batch / core.core_link_bytes_per_cycle for s in starts[1:]] + [0.0]
        stage_cycles = [float(r.cycles.sum()) + h for r, h in zip(runs, handoff)]
        core_cycles, busiest = sum(stage_cycles), max(stage_cycles)
        weight_copies = spill_copies = 1      # runs are the stages: their bytes add up
    else:   # batch: each core its share of the batch; tensor: every core a share of each layer
        used = min(cores, batch) if mode == "batch" else cores
        link = _link(device, link_share, used, broadcast=mode == "batch")
        per_core, n_split = (-(-batch // used), 1) if mode == "batch" else (batch, cores)
        runs = _run_stages(t, [0], core, per_core, n_split, resident, budget, link, params)
        busiest = core_cycles = float(runs[0].cycles.sum())
        # batch: streamed weights are broadcast once to all cores; tensor: each core its 1/k
        weight_copies, spill_copies = (1 if mode == "batch" else used), used

    streamed = weight_copies * sum(r.streamed_bytes for r in runs)
    spilled = spill_copies * sum(r.spilled_bytes for r in runs)
    link_bw = device.host_link_bytes_per_s * link_share
    io_bytes = (t.input_bytes + t.output_bytes) * batch
    latency = 2 * params.host_dma_latency_s + io_bytes / link_bw + core_cycles / core.clock_hz
    link_busy_s = (io_bytes + streamed + spilled) / link_bw
    throughput = batch / max(busiest / core.clock_hz, link_busy_s)
    return ModelCost(
        latency_s=latency, throughput=throughput, batch=batch, cores=used, split_mode=mode,
        weights_resident=all(r.resident for r in runs),
        sram_bytes_needed=max(r.sram_bytes_needed for r in runs),
        host_link_bytes_per_batch=io_bytes + streamed + spilled, activations_spilled=spilled > 0,
        sram_budget=budget, clock_hz=core.clock_hz, _table=t, _runs=runs)


def best_split(layers: LayersLike, device: Optional[DeviceSpec] = None, cores: int = 1, batch: int = 1,
               objective: str = "latency", **kwargs: Any) -> ModelCost:
    """The split mode a compiler would choose: lowest latency or highest throughput."""
    if objective not in ("latency", "throughput"):
        raise CostModelError(f"objective must be 'latency' or 'throughput', got {objective!r}")
    t = as_table(layers)
    costs = [model_cost(t, device, cores, batch, mode, **kwargs) for mode in SPLIT_MODES]
    if objective == "latency":
        return min(costs, key=lambda c: c.latency_s)
    return max(costs, key=lambda c: c.throughput)


def best_batch(layers: LayersLike, device: Optional[DeviceSpec] = None, cores: Optional[int] = None,
               batches: Sequence[int] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256),
               **kwargs: Any) -> ModelCost:
    """Offline: the highest-throughput (batch, split) over ``batches`` on ``cores`` cores."""
    device = device or get_device(0)
    t = as_table(layers)
    n = device.num_cores if cores is None else cores
    return max((best_split(t, device, n, b, "throughput", **kwargs) for b in batches), key=lambda c: c.throughput)


def colocate(models: Sequence[LayersLike], batches: Sequence[int], device: Optional[DeviceSpec] = None,
             params: CostParams = DEFAULT_PARAMS, link_share: float = 1.0) -> Tuple[List[ModelCost], float]:
    """Several models time-sharing one core.  Returns each model's cost and the round time (s).

    Weights stay resident while they all fit in the core's SRAM; otherwise the models whose
    streaming costs least time per byte freed are switched to streaming until they fit.
    A model's throughput in the returned costs is its batch per round time.
    """
    device = device or get_device(0)
    if len(models) != len(batches) or not models:
        raise CostModelError(f"colocate needs one batch per model, got {len(models)} models, {len(batches)} batches")
    tables = [as_table(m) for m in models]
    sram = float(device.core.sram_bytes)
    kw = dict(device=device, params=params, link_share=link_share)
    streamed = [model_cost(t, cores=1, batch=b, resident=False, **kw) for t, b in zip(tables, batches)]
    resident = [model_cost(t, cores=1, batch=b, resident=t.total_weight_bytes <= sram, **kw)
                for t, b in zip(tables, batches)]
    choice = list(resident)
    order = sorted(range(len(tables)), key=lambda i: (streamed[i].latency_s - resident[i].latency_s)
                   / max(resident[i].sram_bytes_needed - streamed[i].sram_bytes_needed, 1.0))
    for i in order:
        if sum(c.sram_bytes_needed for c in choice) <= sram:
            break
        choice[i] = streamed[i]
    # each model gets the SRAM it needs (shares scaled down if even streaming does not fit)
    needs = [max(c.sram_bytes_needed, 1.0) for c in choice]
    scale = min(1.0, sram / sum(needs))
    costs = [model_cost(t, cores=1, batch=b, resident=c.weights_resident, sram_budget=min(need * scale, sram), **kw)
             for t, b, c, need in zip(tables, batches, choice, needs)]
    round_s = sum(c.batch / c.throughput for c in costs)
    for c in costs:
        c.throughput = c.batch / round_s
    return costs, round_s


# ---------------------------------------------------------------- profiles


@dataclass
class EngineProfile:
    """One engine's best latency split and best throughput split."""

    name: str
    latency: ModelCost
    throughput: ModelCost


@dataclass
class Profile:
    """Predicted device time of a model (docs/architecture.md §7): one batch latency, throughput with all
    cores (split chosen per engine), and per-engine / per-layer breakdowns."""

    batch_size: int
    latency_s: float
    throughput: float
    engines: List[EngineProfile]

    @property
    def layers(self) -> List[LayerBreakdown]:
        """Per-layer breakdown of the latency-optimal plan, engines in order."""
        return [row for e in self.engines for row in e.latency.layers]

    def engine_line(self, e: "EngineProfile") -> str:
        """One engine's figures: latency and throughput with their splits, weights, SRAM."""
        lat, thr = e.latency, e.throughput
        return (f"engine {e.name}: latency {lat.latency_s * 1e3:.4f} ms ({lat.split_mode} x{lat.cores}), "
                f"throughput {thr.throughput:,.0f}/s ({thr.split_mode} x{thr.cores}, batch {thr.batch}), "
                f"weights {'resident' if lat.weights_resident else 'streamed'}, "
                f"SRAM {lat.sram_bytes_needed / 2**20:.1f} MiB/core")

    def table(self) -> str:
        """Text rendering: a summary line, then per engine its line and one line per layer."""
        lines = [f"batch {self.batch_size}: latency {self.latency_s * 1e3:.4f} ms, "
                 f"throughput {self.throughput:,.0f} inferences/s"]
        for e in self.engines:
            lines.append(self.engine_line(e))
            lines.append(f"  {'layer':<28} {'kind':<9} {'core':>4} {'cycles':>10} {'compute':>10} "
                         f"{'sram':>9} {'stream':>9} {'bound':<9} weights")
            for r in e.latency.layers:
                lines.append(f"  {r.name[:28]:<28} {r.kind:<9} {r.core:>4} {r.cycles:>10.0f} {r.compute_cycles:>10.0f} "
                             f"{r.sram_cycles:>9.0f} {r.stream_cycles:>9.0f} {r.bound:<9} {r.weights}")
        return "\n".join(lines)


def profile_layers(layers: Union[LayersLike, Mapping[str, LayersLike]], batch_size: int = 1,
                   device_info: Optional[Mapping[Any, Any]] = None,
                   params: CostParams = DEFAULT_PARAMS) -> Profile:
    """Profile a model given as one layer list or ``{engine_name: layers}`` (engines run in series).

    Latency: best split over the cores of the first device in ``device_info`` (default: all
    cores of device 0).  Throughput: per device, the best of running an independent batch on
    every core (``batch`` split of ``batch_size`` x cores) and cooperating splits; devices add.
    """
    engines_in = dict(layers) if isinstance(layers, Mapping) else {"engine0": layers}
    placement = resolve_device_info(device_info)
    devices = [target_device(d).with_cores(len(c)) for d, c in placement.items()]
    engines, latency = [], 0.0
    per_device_time = [0.0] * len(devices)   # seconds per batch_size inferences, engines in series
    for name, engine_layers in engines_in.items():
        t = as_table(engine_layers)
        fastest = best_split(t, devices[0], devices[0].num_cores, batch_size, "latency", params=params)
        widest = None
        for i, dev in enumerate(devices):
            n = dev.num_cores
            candidates = [model_cost(t, dev, n, batch_size * n, "batch", params=params)] + \
                [model_cost(t, dev, n, batch_size, m, params=params) for m in ("pipeline", "tensor")]
            top = max(candidates, key=lambda c: c.throughput)
            per_device_time[i] += batch_size / top.throughput
            widest = widest or top
        latency += fastest.latency_s
        engines.append(EngineProfile(name, fastest, widest))
    throughput = sum(batch_size / s for s in per_device_time)
    return Profile(batch_size, latency, throughput, engines)


# ---------------------------------------------------------------- Keras helper


def layers_from_keras(model: Any, bits: int = 8) -> List[LayerCost]:
    """The fused layer list of a Keras functional model, as the compiler would see it.

    BatchNormalization and ReLU fold into the preceding layer, ZeroPadding into the next
    conv; Flatten/Reshape/Dropout/Input are free.  MACs, weight and activation bytes are
    computed from the layer configs and output shapes (``bits``-wide operands; biases int32).
    ``live_bytes`` is from a liveness pass over the Keras graph.
    """
    elem = bits // 8
    free = {"InputLayer", "Flatten", "Reshape", "Dropout", "ZeroPadding2D", "BatchNormalization", "ReLU"}  # not IR ops

    def size(tensor) -> int:
        return int(np.prod([d for d in tensor.shape[1:]]))

    def inputs_of(layer) -> list:
        x = layer.input
        return list(x) if isinstance(x, (list, tuple)) else [x]

    # id(keras tensor) -> (index of the kept layer that produces it or None for a model input, elements)
    source: Dict[int, Tuple[Optional[int], int]] = {}
    kept: List[Tuple[Any, List[int], int, int]] = []   # (layer, kept-input indices, in elems, out elems)
    for layer in model.layers:
        cls = type(layer).__name__
        if cls == "InputLayer":
            source[id(layer.output)] = (None, size(layer.output))
            continue
        ins = [source[id(x)] for x in inputs_of(layer)]
        act_name = getattr(getattr(layer, "activation", None), "__name__", "linear")
        if cls in free or (cls == "Activation" and act_name in ("relu", "relu6", "linear")):
            source[id(layer.output)] = ins[0]
            continue
        producers = [j for j, _ in ins if j is not None]
        kept.append((layer, producers, sum(n for _, n in ins), size(layer.output)))
        if cls == "Dense" and act_name == "softmax":
            kept.append(("softmax", [len(kept) - 1], size(layer.output), size(layer.output)))
        source[id(layer.output)] = (len(kept) - 1, size(layer.output))

    last_use: Dict[int, int] = {}
    for i, (_, producers, _, _) in enumerate(kept):
        for j in producers:
            last_use[j] = i
    out: List[LayerCost] = []
    for i, (layer, producers, in_elems, out_elems) in enumerate(kept):
        live = sum(kept[j][3] for j, last in last_use.items() if j < i < last and j not in producers) * elem
        if layer == "softmax":
            out.append(LayerCost("softmax", 3.0 * in_elems, 0, in_elems * elem, out_elems * elem, bits,
                                 live_bytes=live, name=kept[producers[0]][0].name + "_softmax"))
        else:
            out.append(_keras_layer_cost(layer, in_elems, out_elems, elem, bits, live))
    return out


def _keras_layer_cost(layer: Any, in_elems: int, out_elems: int, elem: int, bits: int, live: float) -> LayerCost:
    cls = type(layer).__name__
    shape = layer.output.shape
    common = dict(in_bytes=in_elems * elem, out_bytes=out_elems * elem, bits=bits, live_bytes=live, name=layer.name)
    if cls in ("Conv2D", "DepthwiseConv2D"):
        cfg = layer.get_config()
        kh, kw = cfg["kernel_size"]
        cin = int(layer.input.shape[-1])
        pixels = int(shape[1] * shape[2])
        cout = int(shape[-1])
        if cls == "DepthwiseConv2D":
            macs = pixels * kh * kw * cout
            weights = kh * kw * cout * elem + 4 * cout
            return LayerCost("depthwise", macs, weights, in_channels=cin, out_channels=cout,
                             kernel_area=kh * kw, out_pixels=pixels, **common)
        groups = cfg.get("groups", 1)
        macs = pixels * kh * kw * (cin // groups) * cout
        weights = kh * kw * (cin // groups) * cout * elem + 4 * cout
        return LayerCost("conv", macs, weights, in_channels=cin // groups, out_channels=cout,
                         kernel_area=kh * kw, out_pixels=pixels, **common)
    if cls == "Dense":
        cin, cout = int(layer.input.shape[-1]), int(shape[-1])
        return LayerCost("fc", cin * cout, cin * cout * elem + 4 * cout, in_channels=cin, out_channels=cout, **common)
    if cls in ("MaxPooling2D", "AveragePooling2D"):
        ph, pw = layer.get_config()["pool_size"]
        return LayerCost("pool", out_elems * ph * pw, **common)
    if cls in ("GlobalAveragePooling2D", "GlobalMaxPooling2D"):
        return LayerCost("pool", in_elems, **common)
    if cls in ("Add", "Multiply", "Subtract", "Average", "Maximum", "Minimum"):   # not IR ops: Keras classes
        return LayerCost("eltwise", out_elems * (len(layer.input) - 1), **common)
    if cls == "Concatenate":
        return LayerCost("concat", 0, **common)
    if cls in ("Activation", "Softmax"):
        kind = "softmax" if cls == "Softmax" or getattr(layer.activation, "__name__", "") == "softmax" else "lut"
        return LayerCost(kind, (3 if kind == "softmax" else 1) * in_elems, 256 * elem, **common)
    raise CostModelError(f"layers_from_keras: layer {layer.name!r} of type {cls} is not supported by the cost model")
