"""The execution scheme of a joint compilation (docs/architecture.md §8).

A :class:`Scheme` says, for every engine of every model, which device and cores run it, how
(one core, several cores cooperating, several models sharing cores), whether its weights stay
resident in SRAM, and what it costs per frame.  A *frame* is one pass of the whole model set:
model ``i`` runs ``invocations_per_frame`` inferences (as one batch) once its dependencies of
the same frame are done.

``predicted_fps`` is the analytic steady-state estimate: frames are pipelined, so the frame
period is the load of the busiest resource — a core (seconds of work per frame) or a device's
host link (bytes per frame / bandwidth).  The discrete-event simulator
(:mod:`ratelnn.joint.simulator`) measures the same scheme independently.

Units: seconds, bytes; core ids are physical ids on their device.
"""
from __future__ import annotations

import io
import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..fileio import write_atomic

from .records import (MODES, SCHEME_FORMAT, SCHEME_VERSION, SPLIT_MODES, DeviceInfo,  # noqa: F401
                      EngineAssignment, ModelInfo, SchemeError, Stage)
from .simulator import simulate


@dataclass
class Scheme:
    """An execution scheme: models, their engines' placement, the devices used.

    ``strategy`` names what produced it (``search``, ``exhaustive``, a baseline, ``combined``);
    ``search_time_s`` how long that took.
    """

    models: List[ModelInfo]
    engines: List[EngineAssignment]
    devices: Dict[int, DeviceInfo]
    strategy: str = "search"
    search_time_s: float = 0.0

    def __post_init__(self) -> None:
        self._validate()

    # -------------------------------------------------------------- analytic estimate

    @property
    def core_load_s(self) -> Dict[Tuple[int, int], float]:
        """Seconds of work per frame on each ``(device, core)`` of the scheme."""
        load = {(d, c): 0.0 for d, info in self.devices.items() for c in info.core_ids}
        for e in self.engines:
            for core, seconds in zip(e.core_ids, e.core_seconds):
                load[(e.device_id, core)] += seconds
        return load

    @property
    def link_load_s(self) -> Dict[int, float]:
        """Seconds per frame each device's host link is busy."""
        load = {d: 0.0 for d in self.devices}
        for e in self.engines:
            load[e.device_id] += e.host_link_bytes / self.devices[e.device_id].host_link_bytes_per_s
        return load

    @property
    def frame_period_s(self) -> float:
        """Predicted steady-state time between frames: the busiest core or host link."""
        return max([*self.core_load_s.values(), *self.link_load_s.values()])

    @property
    def predicted_fps(self) -> float:
        """Predicted frames per second of the whole model set (frames pipelined)."""
        return 1.0 / self.frame_period_s

    @property
    def roofline_fps(self) -> float:
        """Compute roofline: all cores of the scheme at peak MAC rate / MACs per frame."""
        peak = sum(len(d.core_ids) * d.core_peak_macs_per_s for d in self.devices.values())
        macs = sum(m.macs_per_frame for m in self.models)
        return peak / macs if macs > 0 else float("inf")

    @property
    def predicted_latency_s(self) -> float:
        """Latency of one frame on an idle device: the longest dependency chain of models,
        each the sum of its engines' latencies."""
        model_latency = [0.0] * len(self.models)
        for e in self.engines:
            model_latency[e.model_index] += e.latency_s
        finish: List[float] = []
        for i, m in enumerate(self.models):
            finish.append(max((finish[j] for j in m.depends_on), default=0.0) + model_latency[i])
        return max(finish)

    def engines_of(self, model_index: int) -> List[EngineAssignment]:
        return [e for e in self.engines if e.model_index == model_index]

    # -------------------------------------------------------------- simulation, pictures

    def simulate(self, frames: int = 200, frames_in_flight: Optional[int] = None):
        """Discrete-event run of this scheme (see :func:`ratelnn.joint.simulator.simulate`)."""
        return simulate(self, frames=frames, frames_in_flight=frames_in_flight)

    def save_timeline(self, path: str) -> str:
        """Write a PNG of what each core and host link does over one frame period."""
        return save_timeline(self, path)

    def summary(self) -> str:
        """One line per engine and the predicted figures, as text."""
        lines = [f"scheme ({self.strategy}): predicted {self.predicted_fps:,.1f} frames/s, frame latency "
                 f"{self.predicted_latency_s * 1e3:.3f} ms, roofline {self.roofline_fps:,.1f} frames/s"]
        for e in self.engines:
            lines.append(f"  {e.engine_name:<24} dev {e.device_id} cores {list(e.core_ids)} {e.mode}/{e.split_mode} "
                         f"{'resident' if e.resident else 'streamed'} x{e.batch} "
                         f"{max(e.core_seconds) * 1e3:.4f} ms/frame on its busiest core")
        return "\n".join(lines)

    # -------------------------------------------------------------- JSON

    def to_dict(self) -> Dict[str, Any]:
        return {
            "format": SCHEME_FORMAT, "version": SCHEME_VERSION, "strategy": self.strategy,
            "search_time_s": self.search_time_s,
            "predicted_fps": self.predicted_fps, "predicted_latency_s": self.predicted_latency_s,
            "roofline_fps": self.roofline_fps,
            "devices": {str(d): asdict(info) for d, info in self.devices.items()},
            "models": [asdict(m) for m in self.models],
            "engines": [asdict(e) for e in self.engines],
        }

    def to_json(self, path: Optional[str] = None, indent: int = 1) -> str:
        """The scheme as JSON text; also written (atomically) to ``path`` if given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            write_atomic(path, text.encode())
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Scheme":
        if not isinstance(data, Mapping) or data.get("format") != SCHEME_FORMAT:
            raise SchemeError(f"not a ratelnn execution scheme (expected format {SCHEME_FORMAT!r})")
        if data.get("version") != SCHEME_VERSION:
            raise SchemeError(f"scheme version {data.get('version')!r} is not supported (expected {SCHEME_VERSION})")
        try:
            devices = {int(d): DeviceInfo(**{**v, "core_ids": tuple(v["core_ids"])})
                       for d, v in data["devices"].items()}
            models = [ModelInfo(**{**m, "depends_on": tuple(m["depends_on"])}) for m in data["models"]]
            engines = [EngineAssignment(**{
                **e, "core_ids": tuple(e["core_ids"]), "core_seconds": tuple(e["core_seconds"]),
                "stages": tuple(Stage(tuple(s["core_ids"]), tuple(tuple(c) for c in s["chunks"]), s["handoff_s"])
                                for s in e["stages"])}) for e in data["engines"]]
        except (KeyError, TypeError) as exc:
            raise SchemeError(f"malformed execution scheme: {exc!r}") from None
        return cls(models, engines, devices, data.get("strategy", "loaded"), data.get("search_time_s", 0.0))

    @classmethod
    def from_json(cls, text_or_path: str) -> "Scheme":
        """Load a scheme from JSON text or from a file path."""
        text = text_or_path
        if not text_or_path.lstrip().startswith("{"):
            if not os.path.exists(text_or_path):
                raise SchemeError(f"scheme file {text_or_path!r} does not exist")
            with open(text_or_path) as f:
                text = f.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemeError(f"scheme JSON is not valid: {exc}") from None
        return cls.from_dict(data)

    # -------------------------------------------------------------- checks

    def _validate(self) -> None:
        if not self.models or not self.engines:
            raise SchemeError("a scheme needs at least one model and one engine")
        for i, m in enumerate(self.models):
            if any(not 0 <= j < i for j in m.depends_on):
                raise SchemeError(f"model {m.name!r}: depends_on {list(m.depends_on)} must name earlier models")
        seen = set()
        for e in self.engines:
            if not 0 <= e.model_index < len(self.models):
                raise SchemeError(f"engine {e.engine_name!r}: model_index {e.model_index} out of range")
            if e.device_id not in self.devices:
                raise SchemeError(f"engine {e.engine_name!r}: device {e.device_id} is not in the scheme")
            unknown = set(e.core_ids) - set(self.devices[e.device_id].core_ids)
            if unknown:
                raise SchemeError(f"engine {e.engine_name!r}: cores {sorted(unknown)} are not in the scheme's "
                                  f"cores {list(self.devices[e.device_id].core_ids)} of device {e.device_id}")
            seen.add(e.model_index)
        missing = set(range(len(self.models))) - seen
        if missing:
            raise SchemeError(f"models {[self.models[i].name for i in sorted(missing)]} have no engine")


def combine(schemes: Sequence[Scheme]) -> Scheme:
    """Several schemes (e.g. manual compositions on disjoint cores) as one scheme of one frame.

    Models keep their dependencies inside their own scheme; schemes on the same device must
    use disjoint cores and agree on the device figures.
    """
    if not schemes:
        raise SchemeError("combine needs at least one scheme")
    models: List[ModelInfo] = []
    engines: List[EngineAssignment] = []
    devices: Dict[int, DeviceInfo] = {}
    for s in schemes:
        offset = len(models)
        for d, info in s.devices.items():
            if d in devices:
                overlap = set(devices[d].core_ids) & set(info.core_ids)
                if overlap:
                    raise SchemeError(f"schemes to combine both use cores {sorted(overlap)} of device {d}")
                if (devices[d].host_link_bytes_per_s, devices[d].core_sram_bytes) != \
                        (info.host_link_bytes_per_s, info.core_sram_bytes):
                    raise SchemeError(f"schemes to combine disagree on the figures of device {d}")
                info = DeviceInfo(tuple(sorted(devices[d].core_ids + info.core_ids)), info.host_link_bytes_per_s,
                                  info.core_sram_bytes, info.core_peak_macs_per_s, info.host_dma_latency_s)
            devices[d] = info
        models += [ModelInfo(m.name, m.invocations_per_frame, tuple(j + offset for j in m.depends_on),
                             m.macs_per_frame) for m in s.models]
        engines += [EngineAssignment(**{**e.__dict__, "model_index": e.model_index + offset}) for e in s.engines]
    return Scheme(models, engines, dict(sorted(devices.items())), "combined", sum(s.search_time_s for s in schemes))


def save_timeline(scheme: Scheme, path: str) -> str:
    """A PNG (matplotlib) of one frame period: per core, its engines' work laid end to end;
    per device, the host link's busy time.  Returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not str(path).lower().endswith(".png"):
        raise SchemeError(f"save_timeline writes a PNG; the path must end in .png, got {path!r}")
    colours = plt.get_cmap("tab20")
    rows = [(f"dev {d} core {c}", d, c) for d, info in scheme.devices.items() for c in info.core_ids]
    rows += [(f"dev {d} host link", d, None) for d in scheme.devices]
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 1.8))
    ms = 1e3
    for y, (_, d, core) in enumerate(rows):
        t = 0.0
        for e in scheme.engines:
            if e.device_id != d:
                continue
            if core is None:
                width = e.host_link_bytes / scheme.devices[d].host_link_bytes_per_s
            elif core in e.core_ids:
                width = e.core_seconds[e.core_ids.index(core)]
            else:
                continue
            if width > 0:
                ax.barh(y, width * ms, left=t * ms, color=colours(e.model_index % 20), edgecolor="black", lw=0.3)
                if width > 0.06 * scheme.frame_period_s:
                    ax.text((t + width / 2) * ms, y, e.engine_name[:14], ha="center", va="center", fontsize=7)
                t += width
    ax.axvline(scheme.frame_period_s * ms, color="red", ls="--", lw=1, label="frame period")
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time within one frame period (ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours(i % 20)) for i in range(len(scheme.models))]
    ax.legend(handles + [ax.lines[0]], [m.name for m in scheme.models] + ["frame period"],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"{scheme.strategy}: predicted {scheme.predicted_fps:,.0f} frames/s")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    write_atomic(path, buffer.getvalue())
    return path
