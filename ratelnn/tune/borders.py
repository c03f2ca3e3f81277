"""Borders: fp32 at the quantized tensors a numerically sensitive float op reads, jointly with
int16 on the quantized region upstream of it."""
from __future__ import annotations

from typing import Dict, List, Tuple

from ..ir import registry
from ..quantization.policy import activation_inputs, is_scale_preserving, make_plan
from .entries import merged, user_fixed
from .results import Point

# float ops whose result is sensitive to small absolute errors of their input over a wide
# dynamic range (the borders step): the registry's sensitive ops in all their spellings and the
# framework types of Opaque nodes, lower case
SENSITIVE_OPS = registry.SENSITIVE_OP_TYPES


def sensitive(node) -> bool:
    """Whether ``node`` is a float op of :data:`SENSITIVE_OPS` (Opaque: by its framework type)."""
    kind = node.attrs.get("type") if node.op == "Opaque" else node.op
    return str(kind).lower() in SENSITIVE_OPS


def border_entries(moves) -> List[Dict[str, str]]:
    """The layer entries of ``moves`` (:func:`border_moves`): int16, then fp32, of each move."""
    return [{"layer_name": name, "data_type": dtype} for _, fp32, int16 in moves
            for names, dtype in ((int16, "int16"), (fp32, "fp32")) for name in names]


def border_moves(search, best: Point) -> List[Tuple[str, List[str], List[str]]]:
    """(sensitive op, fp32 node names, int16 layer names) per float op of
    :data:`SENSITIVE_OPS` reading a quantized tensor, in graph order.  fp32: the quantized
    nodes producing that tensor (through scale-preserving ones up to its anchor's
    producer), so it stays float; int16: every 8-bit anchor upstream of the op, back to
    the previous sensitive op or a graph input (a quantized node by its name, a graph
    input or a float op's output border by the input's or the float op's name)."""
    conv, _ = search.candidate(best.settings)
    graph = conv.graph
    plan = make_plan(graph, conv.config)
    quantized, anchors = set(plan.quantized_nodes), set(plan.anchors)
    producers = {t: n for n in graph.nodes for t in n.outputs}
    fixed = user_fixed(graph, search.user_layers)
    moves, seen_moves = [], set()
    for op in graph.nodes:
        if op.name in quantized or not sensitive(op):
            continue
        fp32: List[str] = []
        for t in activation_inputs(graph, op):
            node = producers.get(t)
            while node is not None and node.name in quantized and node.name not in fp32:
                fp32.append(node.name)
                node = producers.get(node.inputs[0]) if is_scale_preserving(node) else None
        fp32 = [n for n in fp32 if n not in fixed]
        if not fp32:
            continue
        int16: List[str] = []
        stack, visited = list(activation_inputs(graph, op)), set()
        while stack:
            t = stack.pop()
            if t in visited:
                continue
            visited.add(t)
            node = producers.get(t)
            if node is None or node.name not in quantized:   # a border: input or float op output
                name = t if node is None else node.name
                if t in anchors and name not in int16:
                    int16.append(name)
                if node is None or sensitive(node):
                    continue
            elif not is_scale_preserving(node) and node.name not in fp32 and node.name not in int16:
                int16.append(node.name)
            stack.extend(activation_inputs(graph, node))
        int16 = [n for n in int16 if n not in fixed]
        key = (tuple(fp32), tuple(sorted(int16)))
        if key not in seen_moves:
            seen_moves.add(key)
            moves.append((op.name, fp32, int16))
    return moves


def stage_borders(search, best: Point) -> Point:
    """The border moves of :func:`border_moves` on ``best``: all at once, then each on
    its own, kept cumulatively when it raises the metric (a move's fp32 and int16 halves
    go together: either alone may gain nothing)."""
    moves = border_moves(search, best)
    method = best.settings["quantize_algorithm"]

    def trial(label: str, base: Point, chosen) -> Point:
        settings = search.with_layers(base, merged(search.own_layers(base), border_entries(chosen)))
        return search.evaluate(f"{method} + {label}", settings)

    found = best
    if len(moves) > 1:
        p = trial(f"fp32 at {len(moves)} sensitive borders, int16 upstream", best, moves)
        if search.meets(p):
            return p
        found = p if search.better(p, found) else found
    step = best
    for move in moves:
        p = trial(f"fp32 at border {move[0]}, int16 upstream", step, [move])
        if search.better(p, step):
            step = p
            if search.meets(step):
                break
    return step if search.meets(step) or search.better(step, found) else found
