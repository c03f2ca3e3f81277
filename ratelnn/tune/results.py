"""What a search found: the evaluated candidates (:class:`Point`), the :class:`TuneResult`
with its Pareto front, table and plot, and the default metric."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence

from ..metrics.cosine import lowest_cosine as cosine_metric  # noqa: F401  (the default metric)


@dataclasses.dataclass
class Point:
    """One evaluated candidate: ``settings`` (config keys), ``metric`` (None: not run, see
    ``note``), ``latency_s`` (predicted, one inference: engines + host time of its fp32
    layers), ``fits_sram`` (every engine's weights and working set fit a core's SRAM)."""

    label: str
    settings: Dict[str, Any]
    metric: Optional[float]
    latency_s: float
    fits_sram: bool
    seconds: float
    note: str = ""
    engines_sha256: str = ""   # of the compiled model's engine bytes, in graph order


@dataclasses.dataclass
class TuneResult:
    """What :func:`ratelnn.tune.tune` found.

    ``config``: the chosen candidate's config keys (with its ``output_dir``), a plain dict;
    ``metric``, ``latency_s``: its figures; ``baseline_latency_s``: the all-int8 latency;
    ``met``: whether it meets ``target`` within ``max_latency_ratio``; ``pareto``: the
    non-dominated points, latency ascending and metric strictly ascending; ``history``: every
    point in order; ``fp32_metric``: the metric of the float model; ``stopped``: why the
    search ended.  Held-out judgement (:mod:`ratelnn.tune.holdout`): ``metric`` is the figure on
    the ``tuning_samples`` the search ran on; ``held_out_metric`` (``held_out_fp32_metric``: the
    float model's) the chosen model's on the ``held_out_samples`` it never saw (None: too few
    samples to hold any out); ``held_out_warning``: the warning given when the two differ by
    more than ``HELD_OUT_BOUND``, else None."""

    config: Dict[str, Any]
    metric: float
    latency_s: float
    baseline_latency_s: float
    target: float
    max_latency_ratio: float
    met: bool
    pareto: List[Point]
    history: List[Point]
    fp32_metric: float
    stopped: str
    chosen: Point
    held_out_metric: Optional[float] = None
    held_out_fp32_metric: Optional[float] = None
    tuning_samples: int = 0
    held_out_samples: int = 0
    held_out_warning: Optional[str] = None

    @property
    def latency_ratio(self) -> float:
        return self.latency_s / self.baseline_latency_s if self.baseline_latency_s else math.nan

    def table(self) -> str:
        """History as aligned text: label, metric, latency (us), ratio, kept on the front."""
        front = {id(p) for p in self.pareto}
        lines = [f"{'candidate':<48} {'metric':>9} {'latency us':>11} {'ratio':>6}  front  note"]
        for p in self.history:
            metric = "-" if p.metric is None else f"{p.metric:.5f}"
            lines.append(f"{p.label[:48]:<48} {metric:>9} {p.latency_s * 1e6:>11.2f} "
                         f"{p.latency_s / self.baseline_latency_s:>6.3f}  {'*' if id(p) in front else ' ':^5}  {p.note}")
        lines.append(f"chosen: {self.chosen.label} (metric {self.metric:.5f}, latency ratio "
                     f"{self.latency_ratio:.3f}, target {'met' if self.met else 'NOT met'}; {self.stopped})")
        if self.held_out_metric is not None:
            lines.append(f"held out: metric {self.held_out_metric:.5f} on {self.held_out_samples} samples the search "
                         f"never saw (tuning figure {self.metric:.5f} on {self.tuning_samples})"
                         f"{'; WARNING: they differ by more than the bound' if self.held_out_warning else ''}")
        return "\n".join(lines)

    def plot(self, path: str) -> str:
        """Draw metric vs predicted latency (every point, the front, target, latency limit,
        the choice) into the image ``path`` (PNG by extension); returns ``path``."""
        import matplotlib
        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        try:
            run = [p for p in self.history if p.metric is not None]
            ax.scatter([p.latency_s * 1e6 for p in run], [p.metric for p in run], s=14, c="0.6",
                       label="candidates")
            ax.step([p.latency_s * 1e6 for p in self.pareto], [p.metric for p in self.pareto], "o-",
                    where="post", c="C0", label="Pareto front")
            ax.axhline(self.target, ls="--", c="C2", label=f"target {self.target:g}")
            ax.axvline(self.baseline_latency_s * self.max_latency_ratio * 1e6, ls=":", c="C3",
                       label=f"{self.max_latency_ratio:g} x all-int8 latency")
            ax.scatter([self.latency_s * 1e6], [self.metric], s=90, facecolors="none", edgecolors="C1",
                       linewidths=2, label="chosen")
            ax.set_xlabel("predicted NPU latency per inference (us)")
            ax.set_ylabel("metric")
            ax.legend(fontsize=8, loc="lower right")
            fig.tight_layout()
            fig.savefig(path)
        finally:
            plt.close(fig)
        return path


def pareto_front(points: Sequence[Point]) -> List[Point]:
    """Points with a metric not dominated by another (lower or equal latency and higher or
    equal metric, one of them strictly): latency ascending, metric strictly ascending."""
    front: List[Point] = []
    for p in sorted((p for p in points if p.metric is not None), key=lambda p: (p.latency_s, -p.metric)):
        if not front or p.metric > front[-1].metric:
            front.append(p)
    return front

