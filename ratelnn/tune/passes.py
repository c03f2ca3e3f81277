"""The accuracy passes a search tries: config key -> values, kept when they raise the metric."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..config import DEFAULTS, ConfigError

# config key -> values tried, in order; skipped while the config does not know the key
# (docs/quantization.md)
PASSES: Tuple[Tuple[str, Tuple[Any, ...]], ...] = (
    ("equalization", (True,)),
    ("bias_correction", ("empirical", "analytic")),
    ("adaround_iterations", (200,)),
)
PASS_OFF = {"equalization": False, "bias_correction": "none", "adaround_iterations": 0}
# tried after the int16 budget: an optimisation per layer, minutes per try on a large model
LATE_PASSES = ("adaround_iterations",)


def known_passes(passes: Optional[Sequence[str]]) -> List[Tuple[str, Tuple[Any, ...]]]:
    """The :data:`PASSES` to try: those named in ``passes`` (None: all) that the config
    knows; ConfigError for a name that is no pass."""
    unknown = set(passes or ()) - {k for k, _ in PASSES}
    if unknown:
        raise ConfigError(f"tune: unknown passes {sorted(unknown)}; known: {[k for k, _ in PASSES]}")
    return [(k, v) for k, v in PASSES if k in DEFAULTS and (passes is None or k in passes)]


def without_data_passes(settings: Mapping[str, Any], known) -> Dict[str, Any]:
    """``settings`` with the passes that fit on data (bias correction, AdaRound) off."""
    off = {k: PASS_OFF[k] for k, _ in known if k in ("bias_correction", "adaround_iterations")}
    return dict(settings, **off)


def stage_passes(search, best, keys: Sequence[str]):
    """Each known pass of ``keys`` on ``best`` in turn, at the value that raises the metric
    most (none when no value does)."""
    for key, values in [(k, v) for k, v in search.known_passes if k in keys]:
        found = best
        for value in values:
            s = dict(best.settings, **{key: value})
            p = search.evaluate(f"{best.label} + {key}={value}", s)
            if search.better(p, found):
                found = p
        best = found
    return best
