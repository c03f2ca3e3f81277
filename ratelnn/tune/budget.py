"""The int16 budget: int16 on the layers losing most SQNR per predicted second of int16, as
many as the estimate fits in the latency limit."""
from __future__ import annotations

import dataclasses
from typing import Dict

import numpy as np

from ..compiler import compile_graph
from ..npu.costmodel import layer_cycles
from ..npu.costs import instruction_layer_cost
from ..proto import engine_pb2
from .layers import prefixes, ranked_layers
from .passes import without_data_passes
from .pricing import compiled_engines
from .results import Point


def int16_prices(search, best: Point) -> Dict[str, float]:
    """Anchor tensor -> predicted extra seconds of one inference with that 8-bit tensor in
    int16 alone: per engine instruction writing or reading it, the cost model's cycles
    (``layer_cycles``, one core) with its bytes doubled and its product int16 x int8,
    minus its cycles now; scaled by the all-int8 latency over the summed cycles of the
    all-int8 model (the cores' split); an estimate for ranking, the candidates are priced in
    full."""
    conv, _ = search.candidate(without_data_passes(best.settings, search.known_passes))
    compiled = compile_graph(conv.quantized_ir(), conv.config, conv.device_info)
    extra: Dict[str, float] = {}
    total = 0.0
    for _, engine in compiled_engines(compiled):
        tensors = engine.proto.tensors
        for ins in engine.instructions:
            cost = instruction_layer_cost(engine, ins)
            now = layer_cycles(cost)[0]
            total += now
            for slot, ids in (("in", ins.inputs), ("out", ins.outputs)):
                for i in ids:
                    t = tensors[i]
                    if t.dtype == engine_pb2.INT16:
                        continue
                    size = float(np.prod(t.shape[1:], dtype=np.int64))
                    wide = (dataclasses.replace(cost, bits=16, in_bytes=cost.in_bytes + size) if slot == "in"
                            else dataclasses.replace(cost, out_bytes=cost.out_bytes + size))
                    extra[t.name] = extra.get(t.name, 0.0) + layer_cycles(wide)[0] - now
    scale = search.baseline.latency_s / total if total > 0 else 0.0
    return {t: c * scale for t, c in extra.items()}


def stage_budget(search, best: Point) -> Point:
    """int16 on the layers that lose the most SQNR per predicted second
    (:func:`int16_prices`), as many as the estimate fits in the latency limit, judged
    at that count first (then more or fewer as :func:`prefixes` bisects)."""
    prices = int16_prices(search, best)
    ranked = [r for r in ranked_layers(search, best, prices) if r[1]]
    room = search.ratio * search.baseline.latency_s - best.latency_s
    anchors = anchor_tensors(search.conv.graph)
    k, spent = 0, 0.0
    for _, entries, _ in ranked:
        cost = sum(prices.get(anchors.get(e["layer_name"], e["layer_name"]), 0.0) for e in entries)
        if spent + cost > room:
            break
        spent, k = spent + cost, k + 1
    if k == 0:
        return best
    sizes = [k] + ([min(2 * k, len(ranked))] if k < len(ranked) else [])
    return prefixes(search, best, ranked, 1, "int16", sizes=sizes, label="per predicted us")


def anchor_tensors(graph) -> Dict[str, str]:
    """layer_configs name -> the tensor it sets: a node's first output (a graph input: itself)."""
    return {n.name: n.outputs[0] for n in graph.nodes if n.outputs}
