"""Partition a quantized IR graph into maximal NPU-supported regions (docs/architecture.md §6).

A region is a set of supported nodes that becomes one engine.  Regions are grown by
merging along edges between supported nodes, and also between supported siblings, as long
as the merge keeps the graph of regions acyclic: two regions may be merged only when no
path leads from one to the other through a node outside both (that path would have to
leave the engine and come back into it).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Set

from ..ir import Graph, Node


@dataclasses.dataclass
class Region:
    """One future engine: its nodes (in topological order) and border tensors."""

    index: int
    nodes: List[Node]
    inputs: List[str]   # tensors read by the region and produced outside it (not params)
    outputs: List[str]  # tensors produced inside and read outside it or graph outputs


def find_regions(graph: Graph, is_supported: Callable[[Graph, Node], bool], merge: bool = True) -> List[Region]:
    """Maximal acyclic regions of nodes for which ``is_supported(graph, node)`` holds
    (``merge=False``: one region per supported node).

    ``graph.nodes`` must be topologically sorted.  Returns regions in topological order
    of their first node.
    """
    nodes = graph.nodes
    producer = {t: i for i, n in enumerate(nodes) for t in n.outputs}
    succ: List[Set[int]] = [set() for _ in nodes]
    for i, n in enumerate(nodes):
        for t in n.inputs:
            p = producer.get(t)
            if p is not None:
                succ[p].add(i)
    supported = [is_supported(graph, n) for n in nodes]
    cluster = {i: i for i in range(len(nodes)) if supported[i]}
    # per region root: its members, its frontier (successors outside it) and its last node
    members: Dict[int, Set[int]] = {i: {i} for i in cluster}
    frontier: Dict[int, Set[int]] = {i: set(succ[i]) - {i} for i in cluster}
    last: Dict[int, int] = {i: i for i in cluster}

    def find(i: int) -> int:
        while cluster[i] != i:
            cluster[i] = cluster[cluster[i]]
            i = cluster[i]
        return i

    def path_outside(ra: int, rb: int) -> bool:
        """True when a path from a node of region ``ra`` reaches region ``rb`` through a node
        outside both.  Node indices are topological, so the search stops past ``rb``'s last node."""
        a, b, limit = members[ra], members[rb], last[rb]
        stack = [s for s in frontier[ra] if s not in b and s < limit]
        seen: Set[int] = set()
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            for s in succ[k]:
                if s in b:
                    return True
                if s not in a and s < limit:
                    stack.append(s)
        return False

    def try_merge(i: int, j: int) -> bool:
        ri, rj = find(i), find(j)
        if ri == rj:
            return False
        if path_outside(ri, rj) or path_outside(rj, ri):
            return False
        root, gone = min(ri, rj), max(ri, rj)
        cluster[gone] = root
        big, small = sorted((members.pop(ri), members.pop(rj)), key=len, reverse=True)
        big |= small
        members[root] = big
        frontier[root] = {s for s in frontier.pop(ri) | frontier.pop(rj) if s not in big}
        last[root] = max(last.pop(ri), last.pop(rj))
        return True

    changed = merge
    while changed:
        changed = False
        for i in range(len(nodes)):  # producer -> consumer edges
            if supported[i]:
                for s in sorted(succ[i]):
                    if supported[s] and try_merge(i, s):
                        changed = True
        for i in range(len(nodes)):  # siblings fed by one tensor
            kids = [s for s in sorted(succ[i]) if supported[s]]
            for a, b in zip(kids, kids[1:]):
                if try_merge(a, b):
                    changed = True

    groups: Dict[int, List[int]] = {}
    for i in sorted(cluster):
        groups.setdefault(find(i), []).append(i)
    consumers = graph.consumer_map()
    regions = []
    for k, idxs in enumerate(sorted(groups.values(), key=lambda g: g[0])):
        region_nodes = [nodes[i] for i in idxs]
        inside = {id(n) for n in region_nodes}
        produced = {t for n in region_nodes for t in n.outputs}
        ins: List[str] = []
        for n in region_nodes:
            for t in n.inputs:
                if t not in produced and t not in graph.params and t not in ins:
                    ins.append(t)
        outs = [t for n in region_nodes for t in n.outputs
                if t in graph.outputs or any(id(c) not in inside for c in consumers.get(t, []))]
        regions.append(Region(k, region_nodes, ins, outs))
    return regions
