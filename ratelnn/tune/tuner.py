"""The :class:`Tuner`: checks the arguments, runs the steps of a search in order and picks
the result."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

from ..config import ConfigError
from ..errors import RatelError
from .borders import stage_borders
from .budget import stage_budget
from .families import PLAIN
from .holdout import gap_warning
from .islands import stage_islands
from .layers import stage_layers
from .methods import stage_auto_int16, stage_methods
from .passes import LATE_PASSES, PASSES, stage_passes
from .prune import stage_prune
from .recurrence import stage_chains
from .results import TuneResult, pareto_front
from .search import Search, Stop


class Tuner:
    """One search (see :mod:`ratelnn.tune`); :meth:`run` returns the :class:`TuneResult`."""

    def __init__(self, conv, data: Any, metric: Optional[Callable] = None, target: float = 0.99,
                 max_latency_ratio: float = 1.3, max_evals: int = 40, time_budget_s: Optional[float] = None,
                 calibration_data: Any = None, batch_size: Optional[int] = None, progress: bool = True,
                 passes: Optional[Sequence[str]] = None, borders: bool = True, int16_budget: bool = True,
                 hold_out: bool = True) -> None:
        for name, value, ok, expected in (
                ("target", target, lambda v: math.isfinite(v), "a finite number"),
                ("max_latency_ratio", max_latency_ratio, lambda v: v >= 1.0, "a number >= 1"),
                ("max_evals", max_evals, lambda v: v >= 1 and float(v).is_integer(), "an integer >= 1"),
                ("time_budget_s", 0.0 if time_budget_s is None else time_budget_s, lambda v: v >= 0, "None or seconds >= 0")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
                raise ConfigError(f"tune: {name} must be {expected}, got {value!r}")
        if metric is not None and not callable(metric):
            raise ConfigError(f"tune: metric must be None or a callable (outputs, data) -> float, got {metric!r}")
        self.borders = bool(borders)
        self.int16_budget = bool(int16_budget)
        self.search = Search(conv, data, metric, target, max_latency_ratio, max_evals, time_budget_s,
                             calibration_data, batch_size, progress, passes, hold_out)

    def run(self) -> TuneResult:
        search = self.search
        search.prepare()
        stopped = "search done"
        try:
            try:
                best = stage_methods(search)
                best = stage_passes(search, best, [k for k, _ in PASSES if k not in LATE_PASSES])
                if not search.meets(best) and self.int16_budget:
                    best = stage_budget(search, best)
                if not search.meets(best):
                    best = stage_auto_int16(search, best)
                if not search.meets(best):
                    best = stage_chains(search, best)
                if not search.meets(best) and self.borders:
                    best = stage_borders(search, best)
                if not search.meets(best):
                    best = stage_islands(search, best)
                if not search.meets(best):
                    best = stage_layers(search, best)
                if not search.meets(best):   # minutes per try: after the cheap dtype moves
                    best = stage_passes(search, best, LATE_PASSES)
                if search.meets(best) and best.settings["layer_configs"] != search.user_layers:
                    stage_prune(search, best)
            except Stop as e:
                stopped = str(e)
        finally:
            search.bar.close()
        if search.baseline is None:
            raise RatelError(f"tune: no candidate evaluated ({stopped})")
        return self._result(stopped)

    def _result(self, stopped: str) -> TuneResult:
        """The cheapest point meeting the target (fewest layer entries, then highest metric on
        a tie), else the most accurate feasible one."""
        search = self.search
        run = [p for p in search.history if p.metric is not None]
        meeting = [p for p in run if search.meets(p)]
        if meeting:
            chosen = min(meeting, key=lambda p: (round(p.latency_s, 10), len(p.settings["layer_configs"]), -p.metric))
        else:
            feasible = [p for p in run if search.feasible(p)] or run
            chosen = max(feasible, key=lambda p: (p.metric, -p.latency_s))
        _, out = search.families.family(chosen.settings)
        config = dict(chosen.settings, output_dir=out, **PLAIN)
        if not chosen.settings["layer_configs"]:
            config["layer_configs"] = []
        held, held_fp32 = search.judge_held_out(chosen)
        warning = gap_warning("tune", chosen.metric, held, len(search.tuning), len(search.held or ()))
        return TuneResult(config, chosen.metric, chosen.latency_s, search.baseline.latency_s, search.target,
                          search.ratio, bool(meeting), pareto_front(search.history), list(search.history),
                          search.fp32_metric, stopped, chosen, held, held_fp32, len(search.tuning),
                          len(search.held or ()), warning)

def tune(conv, data: Any, metric: Optional[Callable] = None, target: float = 0.99,
         max_latency_ratio: float = 1.3, max_evals: int = 40, time_budget_s: Optional[float] = None,
         calibration_data: Any = None, batch_size: Optional[int] = None, progress: bool = True,
         passes: Optional[Sequence[str]] = None, borders: bool = True, int16_budget: bool = True,
         hold_out: bool = True) -> TuneResult:
    """See :meth:`ratelnn.convert.ConvertImpl.tune`."""
    return Tuner(conv, data, metric, target, max_latency_ratio, max_evals, time_budget_s,
                 calibration_data, batch_size, progress, passes, borders, int16_budget, hold_out).run()
