"""Joint compilation of several models: execution scheme, placement search, simulator,
baselines (docs/architecture.md §8, docs/joint.md).

The joint converter turns each model's compiled engines into a :class:`ModelSpec` (one
``LayerCost`` per instruction) and calls :func:`plan`; this package never sees a framework.
"""
from .baselines import BASELINES, baseline
from .planning import StrategyResult, compare, plan
from .scheme import (DeviceInfo, EngineAssignment, ModelInfo, Scheme, SchemeError, Stage, combine,
                     save_timeline)
from .search import EXHAUSTIVE_LIMIT, ModelSpec, count_groupings
from .simulator import SimulationResult, simulate

__all__ = ["BASELINES", "DeviceInfo", "EXHAUSTIVE_LIMIT", "EngineAssignment", "ModelInfo", "ModelSpec", "Scheme",
           "SchemeError", "SimulationResult", "Stage", "StrategyResult", "baseline", "combine", "compare",
           "count_groupings", "plan", "save_timeline", "simulate"]
