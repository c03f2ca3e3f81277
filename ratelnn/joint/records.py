"""The records an execution scheme is made of (docs/architecture.md §8): stages, engine assignments, model
and device figures, and :class:`SchemeError`.  :mod:`ratelnn.joint.scheme` assembles them
into a :class:`~ratelnn.joint.scheme.Scheme`; the simulator reads them.

Units: seconds, bytes; core ids are physical ids on their device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from ..errors import RatelError

SCHEME_FORMAT = "ratelnn.scheme"
SCHEME_VERSION = 1
MODES = ("single_core", "cooperative", "shared")
SPLIT_MODES = ("none", "batch", "pipeline", "tensor")


class SchemeError(RatelError, ValueError):
    """An execution scheme is invalid, inconsistent or cannot be loaded."""


@dataclass(frozen=True)
class Stage:
    """One step of an engine's execution on a set of cores that work in lock step.

    ``core_ids``: the cores it occupies (several for ``batch``/``tensor`` splits, one per
    ``pipeline`` stage).  ``chunks``: ``(core seconds, host-link bytes)`` in execution order; a
    chunk's bytes (streamed weights) must arrive before it can finish; consecutive chunks
    without host traffic are merged.  ``handoff_s``: passing the output to the next stage's core.
    """

    core_ids: Tuple[int, ...]
    chunks: Tuple[Tuple[float, float], ...]
    handoff_s: float = 0.0

    @property
    def core_s(self) -> float:
        """Seconds of core work per frame (chunks and handoff)."""
        return sum(s for s, _ in self.chunks) + self.handoff_s


@dataclass(frozen=True)
class EngineAssignment:
    """Where and how one engine runs.  Per-frame figures cover ``batch`` inferences.

    ``mode``: ``single_core`` | ``cooperative`` (one model on several cores) | ``shared``
    (several models on the same cores).  ``split_mode``: how the engine uses its cores
    (``none`` on one core).  ``sram_bytes``: per core.  ``latency_s``: one invocation batch on an
    otherwise idle device.  ``core_seconds``: work per frame on each of ``core_ids``.
    ``host_link_bytes``: per frame (inputs, outputs, streamed weights, spills).
    """

    model_index: int
    model_name: str
    engine_name: str
    device_id: int
    core_ids: Tuple[int, ...]
    mode: str
    split_mode: str
    resident: bool
    sram_bytes: float
    latency_s: float
    batch: int
    core_seconds: Tuple[float, ...]
    host_link_bytes: float
    input_bytes: float
    output_bytes: float
    stages: Tuple[Stage, ...]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SchemeError(f"engine {self.engine_name!r}: mode must be one of {MODES}, got {self.mode!r}")
        if self.split_mode not in SPLIT_MODES:
            raise SchemeError(f"engine {self.engine_name!r}: split_mode must be one of {SPLIT_MODES}, "
                              f"got {self.split_mode!r}")
        if len(self.core_seconds) != len(self.core_ids) or not self.core_ids:
            raise SchemeError(f"engine {self.engine_name!r}: core_seconds must give one value per core id")
        for stage in self.stages:
            if not set(stage.core_ids) <= set(self.core_ids):
                raise SchemeError(f"engine {self.engine_name!r}: a stage uses cores {stage.core_ids} "
                                  f"outside the engine's cores {self.core_ids}")


@dataclass(frozen=True)
class ModelInfo:
    """A model of the frame: ``depends_on`` lists the models (indices) whose outputs of the same
    frame it needs; ``macs_per_frame`` counts tensor-unit MACs of all its invocations."""

    name: str
    invocations_per_frame: int
    depends_on: Tuple[int, ...]
    macs_per_frame: float


@dataclass(frozen=True)
class DeviceInfo:
    """The part of a device a scheme uses and the figures the simulator needs."""

    core_ids: Tuple[int, ...]
    host_link_bytes_per_s: float
    core_sram_bytes: float
    core_peak_macs_per_s: float
    host_dma_latency_s: float
