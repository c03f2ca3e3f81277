"""Layers: int16, then fp32, on the k least precise layers, k bisected to the fewest that
meet the target or the most that stay within the latency limit."""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np

from ..analysis import layer_rows
from ..calibration.stats import load_statistics
from ..ir import arith
from ..ir.evaluate import EvaluationError
from ..quantization.policy import is_scale_preserving, make_plan
from ..quantization.quantizer import quantize
from ..quantization.thresholds import sqnr_db
from .entries import user_fixed
from .passes import without_data_passes
from .results import Point

T = TypeVar("T")   # what one trial of bisect_prefixes returns


def ranked_layers(search, best: Point, prices: Optional[Mapping[str, float]] = None
                  ) -> List[Tuple[str, List[Dict[str, str]], List[Dict[str, str]]]]:
    """(layer, int16 entries, fp32 entries) of every 8-bit layer (and quantized graph
    input), least precise first: by the SQNR the layer loses on the first batch
    (``analysis.layer_rows``, per-channel; measured without the data-driven passes, which
    would run again for the ranking alone), or, when the numpy evaluator cannot run the
    graph, by the 8-bit SQNR its histogram predicts (``thresholds.sqnr_db``).  With
    ``prices`` (anchor tensor -> predicted seconds of it in int16, :func:`int16_prices`):
    by SQNR loss per predicted second instead (measured losses only)."""
    conv, out = search.candidate(without_data_passes(best.settings, search.known_passes))
    graph = conv.graph
    plan = make_plan(graph, conv.config)
    quantized = set(plan.quantized_nodes)
    producers = {t: n for n in graph.nodes for t in n.outputs}

    def options(t: str):
        """(layer, int16 entries, fp32 entries) for the 8-bit anchor ``t``, or None."""
        node = producers.get(t)
        if t in graph.inputs:
            readers = [n.name for n in graph.consumers(t) if n.name in quantized]
            return (t, [{"layer_name": t, "data_type": "int16"}],
                    [{"layer_name": r, "data_type": "fp32"} for r in readers])
        if node is not None and node.name in quantized and not is_scale_preserving(node):
            return (node.name, [{"layer_name": node.name, "data_type": "int16"}],
                    [{"layer_name": node.name, "data_type": "fp32"}])
        if node is not None and node.name not in quantized:   # border: a float op's output
            readers = [n.name for n in graph.consumers(t) if n.name in quantized]
            return (t, [], [{"layer_name": r, "data_type": "fp32"} for r in readers])
        return None

    scored = []
    try:
        floor = min([v for v in (prices or {}).values() if v > 0] or [1.0])
        for row in layer_rows(conv, search.batches[0][0]):
            if row.dtype in ("int8", "uint8"):
                per = 1.0 if prices is None else max(prices.get(row.tensor, 0.0), floor)
                scored.append((-row.sqnr_drop_db / per, row.tensor))
    except EvaluationError:
        stats = load_statistics(out)
        qgraph = quantize(graph, stats, conv.config)
        for t in plan.anchors:
            qp = qgraph.qparams[t]
            if qp.dtype in ("int8", "uint8") and getattr(stats[t], "histogram", None) is not None:
                scored.append((sqnr_db(stats[t], float(np.max(qp.scale)) * arith.qmax_of(qp.dtype), qp.dtype), t))
    ranked, seen = [], set()
    fixed = user_fixed(graph, search.user_layers)   # the user's choices stay
    for _, t in sorted(scored, key=lambda s: s[0]):
        option = options(t)
        if option is not None and option[0] not in seen and not fixed.intersection(
                e["layer_name"] for e in option[1] + option[2]):
            seen.add(option[0])
            ranked.append(option)
    return ranked


def stage_layers(search, best: Point) -> Point:
    """int16, then fp32, on the least precise layers of ``best`` (:func:`prefixes`), each
    from ``best``; the best point."""
    ranked = ranked_layers(search, best)
    start = best
    for kind, dtype in ((1, "int16"), (2, "fp32")):   # each from the same start
        if search.meets(best):
            break
        p = prefixes(search, start, [r for r in ranked if r[kind]], kind, dtype)
        best = p if search.meets(p) or search.better(p, best) else best
    return best


def prefixes(search, best: Point, options, kind: int, dtype: str, sizes: Optional[Sequence[int]] = None,
             label: str = "") -> Point:
    """``dtype`` on the first k of ``options`` (least precise first) on top of ``best``,
    k = ``sizes`` (default :func:`doubling_sizes`), walked by :func:`bisect_prefixes`.
    Returns the fewest layers that meet the target, else the best point found."""
    current = {e["layer_name"]: e for e in search.own_layers(best)}
    method = best.settings["quantize_algorithm"]
    found = [best]

    def trial(k: int) -> Point:
        entries = dict(current)
        for option in options[:k]:
            entries.pop(option[0], None)
            entries.update((e["layer_name"], e) for e in option[kind])
        settings = search.with_layers(best, entries.values())
        p = search.evaluate(f"{method} + {dtype} on the {k} least precise layer(s){' ' + label if label else ''}",
                            settings)
        found[0] = p if search.better(p, found[0]) else found[0]
        return p

    met = bisect_prefixes(doubling_sizes(len(options)) if sizes is None else sizes, trial,
                          lambda p: p.metric is not None, search.meets)
    return found[0] if met is None else met


def doubling_sizes(n: int) -> List[int]:
    """1, 2, 4, ... and ``n`` (the prefix sizes of ``n`` options), ascending."""
    return sorted({min(2 ** i, n) for i in range(n.bit_length() + 1)} - {0})


def bisect_prefixes(sizes: Sequence[int], trial: Callable[[int], T], fits: Callable[[T], bool],
                    meets: Callable[[T], bool]) -> Optional[T]:
    """The walk over prefix sizes of tune's layer steps and the automatic step's: ``trial(k)``
    for k in ``sizes`` (ascending) until a result does not ``fits`` (over the latency limit, or
    not built) or ``meets`` the target; then bisect between the last k that fit without
    meeting and that k: up to the most layers that fit, or down to the fewest that meet.
    Each bisection takes about log2 of the gap in trials (``trial`` sees every result).
    Returns the result at the fewest k that meets, else None."""
    below = 0
    for k in sizes:
        p = trial(k)
        if not fits(p):
            while k - below > 1:
                mid = (below + k) // 2
                if fits(trial(mid)):
                    below = mid
                else:
                    k = mid
            return None
        if meets(p):
            while k - below > 1:
                mid = (below + k) // 2
                q = trial(mid)
                if meets(q):
                    k, p = mid, q
                else:
                    below = mid
            return p
        below = k
    return None
