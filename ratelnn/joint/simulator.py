"""Discrete-event simulation of a device executing an execution scheme (docs/architecture.md §8).

It replays the scheme's per-layer work, not its frame estimate, and measures throughput and
latency from event times:

* **Frames** are admitted closed-loop: ``frames_in_flight`` frames are in the system at once; a
  new one enters when one finishes.  A frame's latency runs from its admission to the end of its
  last model's output transfer.
* **Models** of a frame start when the models they depend on (``depends_on``, by default the
  previous model) have finished that frame; a model's engines run one after the other, each as a
  batch of ``invocations_per_frame`` inferences.
* **Engines** move their input to the device over the host link, run their stages, and move their
  output back.  A stage holds all its cores for its whole run (``batch``/``tensor`` splits hold
  several cores in lock step; ``pipeline`` stages run one core each, the next stage starting when
  the previous one has handed over).
* **Cores** are non-preemptive.  Waiting stages are started in priority order: stages that hold
  several cores (lock-step splits) first, then the oldest frame, then model order.  A stage that
  cannot start reserves its cores: lower-priority stages may only use other cores (without this,
  short single-core stages keep a lock-step stage from ever finding all its cores free).
* **Host link** (one per device): a FIFO server at the link bandwidth carrying inputs, outputs and
  streamed weights; each input/output transfer also pays the fixed DMA latency.  A stage's
  streamed weights are requested one chunk ahead (double buffering): a chunk ends when both its
  core work is done and its weights have arrived.

Units: seconds, bytes.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .records import SchemeError, Stage


@dataclass
class SimulationResult:
    """Measured figures.  ``fps`` over the frames after the warm-up (the first fifth);
    latencies over the same frames; utilisation = busy fraction of the measured run."""

    fps: float
    latency_p50_s: float
    latency_p99_s: float
    latency_mean_s: float
    core_utilisation: Dict[Tuple[int, int], float]
    link_utilisation: Dict[int, float]
    frames: int
    frames_in_flight: int
    duration_s: float

    def to_dict(self) -> Dict[str, object]:
        return {"fps": self.fps, "latency_p50_s": self.latency_p50_s, "latency_p99_s": self.latency_p99_s,
                "latency_mean_s": self.latency_mean_s, "frames": self.frames,
                "frames_in_flight": self.frames_in_flight, "duration_s": self.duration_s,
                "core_utilisation": {f"{d}:{c}": u for (d, c), u in self.core_utilisation.items()},
                "link_utilisation": {str(d): u for d, u in self.link_utilisation.items()}}


class _Link:
    """A device's host link: FIFO at ``rate`` bytes/s; ``busy`` accumulates transfer seconds."""

    def __init__(self, rate: float) -> None:
        self.rate, self.free_at, self.busy = rate, 0.0, []

    def transfer(self, now: float, nbytes: float) -> float:
        """Queue ``nbytes`` at ``now``; the time they have all arrived."""
        if nbytes <= 0:
            return now
        start = max(now, self.free_at)
        self.free_at = start + nbytes / self.rate
        self.busy.append((start, self.free_at))
        return self.free_at


class _Run:
    """The event loop and its state."""

    def __init__(self, scheme: "Scheme", frames: int, in_flight: int) -> None:
        self.s = scheme
        self.frames, self.in_flight = frames, in_flight
        self.events: List[Tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.links = {d: _Link(info.host_link_bytes_per_s) for d, info in scheme.devices.items()}
        self.core_free = {(d, c): True for d, info in scheme.devices.items() for c in info.core_ids}
        self.core_busy: Dict[Tuple[int, int], List[Tuple[float, float]]] = {k: [] for k in self.core_free}
        self.waiting: Dict[int, List[Tuple[Tuple[int, int, int, int], Callable[[], None], Tuple]]] = \
            {d: [] for d in scheme.devices}
        self.engines = [scheme.engines_of(i) for i in range(len(scheme.models))]
        self.dependents = [[j for j, m in enumerate(scheme.models) if i in m.depends_on]
                           for i in range(len(scheme.models))]
        self.pending: Dict[Tuple[int, int], int] = {}     # (frame, model) -> dependencies left
        self.models_left: Dict[int, int] = {}
        self.admitted: Dict[int, float] = {}
        self.finished: Dict[int, float] = {}
        self.next_frame = 0

    def at(self, t: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (t, next(self.seq), action))

    def run(self) -> None:
        for _ in range(min(self.in_flight, self.frames)):
            self.admit()
        while self.events:
            self.now, _, action = heapq.heappop(self.events)
            action()

    # -------------------------------------------------------------- frames and models

    def admit(self) -> None:
        f = self.next_frame
        self.next_frame += 1
        self.admitted[f] = self.now
        self.models_left[f] = len(self.s.models)
        for i, m in enumerate(self.s.models):
            self.pending[(f, i)] = len(m.depends_on)
            if not m.depends_on:
                self.start_engine(f, i, 0)

    def model_done(self, f: int, i: int) -> None:
        self.models_left[f] -= 1
        if self.models_left[f] == 0:
            self.finished[f] = self.now
            if self.next_frame < self.frames:
                self.admit()
        for j in self.dependents[i]:
            self.pending[(f, j)] -= 1
            if self.pending[(f, j)] == 0:
                self.start_engine(f, j, 0)

    # -------------------------------------------------------------- engines and stages

    def start_engine(self, f: int, i: int, e: int) -> None:
        engine = self.engines[i][e]
        latency = self.s.devices[engine.device_id].host_dma_latency_s
        arrived = self.links[engine.device_id].transfer(self.now, engine.input_bytes) + latency
        self.at(arrived, lambda: self.stage_ready(f, i, e, 0))

    def stage_ready(self, f: int, i: int, e: int, st: int) -> None:
        engine = self.engines[i][e]
        self.waiting[engine.device_id].append(((f, i, e, st), lambda: self.start_stage(f, i, e, st),
                                               engine.stages[st].core_ids))
        self.dispatch(engine.device_id)

    def dispatch(self, d: int) -> None:
        queue = self.waiting[d]
        queue.sort(key=lambda item: (len(item[2]) == 1, item[0]))
        kept, reserved = [], set()
        for item in queue:
            cores = item[2]
            if not reserved.intersection(cores) and all(self.core_free[(d, c)] for c in cores):
                for c in cores:
                    self.core_free[(d, c)] = False
                item[1]()
            else:
                kept.append(item)
                reserved.update(cores)
        self.waiting[d] = kept

    def start_stage(self, f: int, i: int, e: int, st: int) -> None:
        engine = self.engines[i][e]
        stage: Stage = engine.stages[st]
        link = self.links[engine.device_id]
        started = self.now
        arrivals = [link.transfer(self.now, stage.chunks[0][1])]

        def chunk(j: int, begin: float) -> None:
            if j + 1 < len(stage.chunks):           # prefetch the next chunk's weights
                arrivals.append(link.transfer(begin, stage.chunks[j + 1][1]))
            end = max(begin + stage.chunks[j][0], arrivals[j])
            if j + 1 < len(stage.chunks):
                self.at(end, lambda: chunk(j + 1, end))
            else:
                self.at(end + stage.handoff_s, lambda: finish())

        def finish() -> None:
            for c in stage.core_ids:
                self.core_free[(engine.device_id, c)] = True
                self.core_busy[(engine.device_id, c)].append((started, self.now))
            if st + 1 < len(engine.stages):
                self.stage_ready(f, i, e, st + 1)
            else:
                latency = self.s.devices[engine.device_id].host_dma_latency_s
                done = link.transfer(self.now, engine.output_bytes) + latency
                self.at(done, lambda: self.engine_done(f, i, e))
            self.dispatch(engine.device_id)

        chunk(0, self.now)

    def engine_done(self, f: int, i: int, e: int) -> None:
        if e + 1 < len(self.engines[i]):
            self.start_engine(f, i, e + 1)
        else:
            self.model_done(f, i)


def _busy_within(intervals: List[Tuple[float, float]], t0: float, t1: float) -> float:
    return sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in intervals)


def simulate(scheme: "Scheme", frames: int = 200, frames_in_flight: Optional[int] = None) -> SimulationResult:
    """Run ``frames`` frames of ``scheme`` through the event simulation.

    ``frames_in_flight`` (default: twice the cores used plus 2, or four per model when that is
    more, so that a chain of many short models keeps every core fed) bounds how many frames
    are in the system; more lets deeper pipelines fill, at the cost of queueing latency.
    """
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 5:
        raise SchemeError(f"frames must be an integer >= 5, got {frames!r}")
    n_cores = sum(len(d.core_ids) for d in scheme.devices.values())
    default = max(2 * n_cores + 2, 4 * len(scheme.models))
    in_flight = default if frames_in_flight is None else frames_in_flight
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        raise SchemeError(f"frames_in_flight must be an integer >= 1, got {frames_in_flight!r}")
    run = _Run(scheme, frames, in_flight)
    run.run()
    if len(run.finished) != frames:
        raise SchemeError(f"simulation stalled: {len(run.finished)} of {frames} frames finished")
    warm = frames // 5
    done = np.array([run.finished[f] for f in range(frames)])
    order = np.sort(done)
    t0, t1 = order[warm], order[-1]
    fps = (frames - 1 - warm) / (t1 - t0)
    latency = np.array([run.finished[f] - run.admitted[f] for f in range(warm, frames)])
    span = t1 - t0
    return SimulationResult(
        fps=float(fps), latency_p50_s=float(np.percentile(latency, 50)),
        latency_p99_s=float(np.percentile(latency, 99)), latency_mean_s=float(latency.mean()),
        core_utilisation={k: _busy_within(v, t0, t1) / span for k, v in run.core_busy.items()},
        link_utilisation={d: _busy_within(link.busy, t0, t1) / span for d, link in run.links.items()},
        frames=frames, frames_in_flight=in_flight, duration_s=float(order[-1]))
