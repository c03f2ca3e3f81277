"""The quantization methods a search tries: the int8 methods (the first one is the all-int8
baseline) and ``auto_int16``."""
from __future__ import annotations

from ..errors import RatelError
from ..quantization.policy import make_plan

METHODS = ("naive", "kld", "percentile", "mse")
# auto_int16 (docs/quantization.md §4) at its defaults, then with a larger budget
AUTO_INT16 = (("auto_int16", {"auto_int16": True}),
              ("auto_int16 (40 dB, 30%)", {"auto_int16": True, "auto_int16_sqnr_db": 40.0,
                                           "auto_int16_max_fraction": 0.3}))


def stage_methods(search):
    """Every method of :data:`METHODS`, all int8 with ``auto_int16`` off; the first sets the
    search's baseline.  Returns the best."""
    best = None
    for method in METHODS:
        p = search.evaluate(method, {"quantize_algorithm": method, "auto_int16": False,
                                     "layer_configs": list(search.user_layers)})
        if search.baseline is None:
            if p.metric is None:
                raise RatelError(f"tune: the all-int8 baseline cannot be evaluated ({p.note})")
            search.baseline = p
            plan = make_plan(search.families.base().graph, dict(search.conv.config, **p.settings))
            search.baseline_quantized = set(plan.quantized_nodes)
        if best is None or search.better(p, best):
            best = p
    return best


def stage_auto_int16(search, best):
    """``auto_int16`` on ``best`` at each setting of :data:`AUTO_INT16`; the best point."""
    found = best
    for label, extra in AUTO_INT16:
        p = search.evaluate(f"{best.label} + {label}", dict(best.settings, **extra))
        if search.better(p, found):
            found = p
    return found
