"""Why a compiled model has more than one engine: the CPU nodes that lie between engines, each
with the reason the NPU does not run it (docs/architecture.md §6, "Why engines split").

:func:`engine_splits` is recorded by ``compile_graph`` in the compiled graph's
``meta["engine_splits"]``; :func:`split_causes` counts them by op and reason.
"""
from __future__ import annotations

import collections
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..ir import Graph
from .partition import Region

SPLITS_META = "engine_splits"
CYCLE_REASON = "kept apart from the engine it feeds: merging them would make a path leave the NPU and come back"


def engine_splits(graph: Graph, regions: Sequence[Region], refusals: Mapping[str, Optional[str]],
                  names: Sequence[str]) -> List[Dict[str, object]]:
    """One entry per CPU node of ``graph`` that reads (through CPU nodes) an engine's output
    and feeds (through CPU nodes) an engine's input: ``{"node", "op", "reason", "after":
    [engine names upstream], "before": [engine names downstream]}`` (``op``: :func:`op_type`), in graph order; plus one
    entry (``node``/``op`` None, reason :data:`CYCLE_REASON`) per edge from one engine
    straight into another.  ``refusals``: node name -> why the NPU does not run it."""
    region_of = {id(n): k for k, r in enumerate(regions) for n in r.nodes}
    nodes = graph.nodes
    index = {id(n): i for i, n in enumerate(nodes)}
    consumers = graph.consumer_map()
    producer = {t: n for n in nodes for t in n.outputs}

    def spread(start: Dict[int, Set[int]], step) -> Dict[int, Set[int]]:
        """CPU nodes reached from ``start`` (node index -> engines) along ``step``, with the
        engines each is reached from."""
        reached: Dict[int, Set[int]] = collections.defaultdict(set)
        stack = list(start.items())
        while stack:
            i, engines = stack.pop()
            if engines <= reached[i]:
                continue
            reached[i] |= engines
            stack.extend((index[id(m)], engines) for m in step(nodes[i]) if id(m) not in region_of)
        return reached

    def readers(node):
        return [c for t in node.outputs for c in consumers.get(t, [])]

    def writers(node):
        return [producer[t] for t in node.inputs if t in producer]

    first_down: Dict[int, Set[int]] = collections.defaultdict(set)
    first_up: Dict[int, Set[int]] = collections.defaultdict(set)
    cycle_edges: Set[Tuple[int, int]] = set()
    for k, region in enumerate(regions):
        for t in region.outputs:
            for c in consumers.get(t, []):
                if id(c) in region_of:
                    cycle_edges.add((k, region_of[id(c)]))
                else:
                    first_down[index[id(c)]].add(k)
        for t in region.inputs:
            p = producer.get(t)
            if p is not None and id(p) not in region_of:
                first_up[index[id(p)]].add(k)
    down, up = spread(first_down, readers), spread(first_up, writers)
    splits: List[Dict[str, object]] = [
        {"node": nodes[i].name, "op": op_type(nodes[i]), "reason": refusals.get(nodes[i].name) or "not in an engine",
         "after": [names[k] for k in sorted(down[i])], "before": [names[k] for k in sorted(up[i])]}
        for i in sorted(set(down) & set(up)) if down[i] and up[i]]
    splits += [{"node": None, "op": None, "reason": CYCLE_REASON, "after": [names[a]], "before": [names[b]]}
               for a, b in sorted(cycle_edges)]
    return splits


def op_type(node) -> str:
    """The op a user knows: the framework's type for an op outside the IR (``Opaque``)."""
    return str(node.attrs.get("type")) if node.op == "Opaque" else node.op


def split_causes(splits: Sequence[Mapping[str, object]]) -> List[Tuple[Optional[str], str, int]]:
    """``[(op, reason, count)]`` of ``splits`` (a compiled graph's ``meta["engine_splits"]``),
    most frequent first."""
    counts = collections.Counter((s["op"], s["reason"]) for s in splits)
    return [(op, reason, n) for (op, reason), n in counts.most_common()]
