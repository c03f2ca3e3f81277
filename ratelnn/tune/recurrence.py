"""Recurrences: int16 on the quantized elementwise chains of an unrolled recurrence (an
LSTM's cell state), whose rounding errors add up along them."""
from __future__ import annotations

from typing import Dict, List, Sequence

from ..ir import registry
from ..quantization.policy import activation_inputs, is_scale_preserving, make_plan
from .entries import merged, user_fixed

# quantized elementwise ops in a row (nothing weighted between them) that make a recurrence:
# an unrolled LSTM's cell state c_t = f * c_{t-1} + i * g is a chain of 2 per step, and its
# rounding errors add up along it (TFLite keeps the cell state 16-bit for that reason)
CHAIN_OPS = registry.QUANTIZED_BINARY_OPS
MIN_CHAIN = 8


def stage_chains(search, best):
    """int16 on every layer of :func:`recurrence_layers` but the user's, kept when it
    raises the metric."""
    conv, _ = search.candidate(best.settings)
    names = unfixed_recurrence_layers(conv, search.user_layers)
    if not names:
        return best
    entries = merged(search.own_layers(best), [{"layer_name": n, "data_type": "int16"} for n in names])
    p = search.evaluate(f"{best.settings['quantize_algorithm']} + int16 on {len(names)} recurrence layers",
                        search.with_layers(best, entries))
    return p if search.better(p, best) else best


def unfixed_recurrence_layers(conv, user_layers) -> List[str]:
    """:func:`recurrence_layers` of ``conv``'s graph under its config, but those the user's
    ``layer_configs`` entries set (:func:`~ratelnn.tune.entries.user_fixed`)."""
    fixed = user_fixed(conv.graph, user_layers)
    return [n for n in recurrence_layers(conv.graph, make_plan(conv.graph, conv.config).quantized_nodes)
            if n not in fixed]


def recurrence_layers(graph, quantized: Sequence[str]) -> List[str]:
    """The ``quantized`` :data:`CHAIN_OPS` nodes of ``graph`` connected (producer to reader,
    skipping scale-preserving nodes) into a group whose longest path holds at least
    :data:`MIN_CHAIN` of them, in graph order: an unrolled recurrence, such as an LSTM's cell
    state (every step's f * c, i * g and their sum)."""
    quantized = set(quantized)
    producers = {t: n for n in graph.nodes for t in n.outputs}
    chain = [n for n in graph.nodes if n.name in quantized and n.op in CHAIN_OPS]
    preds: Dict[str, List[str]] = {}
    for node in chain:
        preds[node.name] = []
        for t in activation_inputs(graph, node):
            p = producers.get(t)
            while p is not None and p.name in quantized and is_scale_preserving(p):
                p = producers.get(p.inputs[0])
            if p is not None and p.name in preds:
                preds[node.name].append(p.name)
    group = {n.name: n.name for n in chain}   # union-find over the producer-reader links

    def root(name: str) -> str:
        while group[name] != name:
            group[name] = name = group[group[name]]
        return name
    longest = {n.name: 1 for n in chain}      # longest path ending at the node
    for node in chain:                        # graph order is topological
        longest[node.name] += max((longest[p] for p in preds[node.name]), default=0)
        for p in preds[node.name]:
            group[root(p)] = root(node.name)
    groups: Dict[str, int] = {}
    for name, length in longest.items():
        groups[root(name)] = max(groups.get(root(name), 0), length)
    return [n.name for n in chain if groups[root(n.name)] >= MIN_CHAIN]
