"""Pruning: once the target is met, the search's layer entries dropped again one at a time
while it still holds and the latency does not grow."""
from __future__ import annotations

from .results import Point


def stage_prune(search, best: Point) -> Point:
    """``best`` with each of the search's layer entries dropped in turn (last first), kept
    dropped while the target holds at no higher latency; the last point kept."""
    layers = search.own_layers(best)
    for entry in list(reversed(layers)):
        current = search.own_layers(best)
        if entry not in current:
            continue
        trial = [e for e in current if e != entry]
        s = search.with_layers(best, trial)
        p = search.evaluate(f"{best.settings['quantize_algorithm']} - {entry['layer_name']} {entry['data_type']}", s)
        if search.meets(p) and p.latency_s <= best.latency_s:
            best = p
    return best
