"""Choosing an execution scheme (docs/architecture.md §8): :func:`plan` searches the placements of
:mod:`ratelnn.joint.search`, seeded with the simple placements of
:mod:`ratelnn.joint.baselines`; :func:`compare` simulates the chosen scheme beside those
baselines."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence

from ..npu import costmodel as cm
from .baselines import baseline_blocks
from .records import SchemeError
from .scheme import Scheme
from .search import (DEFAULT_TIME_BUDGET_S, EXHAUSTIVE_LIMIT, ModelSpec, Planner, count_groupings,
                     exhaustive_blocks, heuristic_blocks)
from .simulator import SimulationResult, simulate


def plan(models: Sequence[ModelSpec], device_info: Optional[Mapping] = None, method: str = "auto",
         time_budget_s: float = DEFAULT_TIME_BUDGET_S, params: cm.CostParams = cm.DEFAULT_PARAMS) -> Scheme:
    """Choose an execution scheme for ``models`` on ``device_info`` (docs/architecture.md §2 forms).

    ``method``: ``exhaustive`` (every grouping), ``heuristic`` (greedy + local search within
    ``time_budget_s``), ``auto`` (exhaustive when there are at most :data:`EXHAUSTIVE_LIMIT`
    groupings).  The scheme maximises the predicted frames per second.
    """
    if method not in ("auto", "exhaustive", "heuristic"):
        raise SchemeError(f"method must be 'auto', 'exhaustive' or 'heuristic', got {method!r}")
    if not time_budget_s > 0:
        raise SchemeError(f"time_budget_s must be > 0, got {time_budget_s!r}")
    start = time.perf_counter()
    planner = Planner(models, device_info, params)
    cores = {d: len(c) for d, c in planner.cores.items()}
    small = count_groupings(len(planner.models), cores) <= EXHAUSTIVE_LIMIT
    if method == "exhaustive" or (method == "auto" and small):
        if not small:
            raise SchemeError(f"{count_groupings(len(planner.models), cores):,} groupings are too many for an "
                              f"exhaustive search (limit {EXHAUSTIVE_LIMIT:,}); use method='heuristic'")
        blocks, strategy = exhaustive_blocks(planner), "exhaustive"
    else:
        blocks, strategy = heuristic_blocks(planner, baseline_blocks(planner).values(), time_budget_s), "search"
    return planner.scheme(blocks, strategy, time.perf_counter() - start)


@dataclass
class StrategyResult:
    """One strategy's scheme and its simulation."""

    name: str
    scheme: Scheme
    simulation: SimulationResult

    @property
    def fps(self) -> float:
        return self.simulation.fps


def compare(models: Sequence[ModelSpec], device_info: Optional[Mapping] = None, frames: int = 200,
            chosen: Optional[Scheme] = None, time_budget_s: float = DEFAULT_TIME_BUDGET_S,
            params: cm.CostParams = cm.DEFAULT_PARAMS) -> Dict[str, StrategyResult]:
    """Simulated results of the chosen scheme (``chosen``, or ``plan(models, device_info)``),
    the three baselines and, when the instance is small enough, the exhaustive optimum."""
    chosen = chosen or plan(models, device_info, time_budget_s=time_budget_s, params=params)
    start = time.perf_counter()
    planner = Planner(models, device_info, params)
    schemes = {"chosen": chosen}
    for name, blocks in baseline_blocks(planner).items():
        schemes[name] = planner.scheme(blocks, name, time.perf_counter() - start)
    cores = {d: len(c) for d, c in planner.cores.items()}
    if count_groupings(len(planner.models), cores) <= EXHAUSTIVE_LIMIT:
        start = time.perf_counter()
        blocks = exhaustive_blocks(planner)
        schemes["exhaustive"] = planner.scheme(blocks, "exhaustive", time.perf_counter() - start)
    return {name: StrategyResult(name, s, simulate(s, frames)) for name, s in schemes.items()}
