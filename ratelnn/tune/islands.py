"""Islands: fp32 on whole engines that cost more on the NPU than their layers on the host.  A
small int8 region between ops the NPU does not run (a 3-D U-Net's ``Conv3D``) pays a host
round trip of every tensor it reads and writes; in fp32 its layers join the CPU ops around it
and the transfers go away, so the move both raises the accuracy and lowers the latency."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Tuple

from ..compiler import engine_regions
from ..quantization.policy import make_plan
from .entries import merged, user_fixed
from .passes import without_data_passes
from .pricing import host_seconds, price
from .results import Point


def island_moves(search, best: Point) -> List[Tuple[str, List[str], float]]:
    """(engine name, its node names, predicted seconds saved) per engine of ``best``'s compiled
    model (without the data-driven passes, which change codes, not dtypes) whose predicted
    latency (NPU cost model, host transfers included) exceeds the host estimate of its layers
    in fp32 (:func:`~ratelnn.tune.pricing.host_seconds`), most saved first.  Never every engine
    (the one saving least stays: a model without an engine is not quantized); an engine
    holding a layer the user's ``layer_configs`` set is left alone."""
    conv, _ = search.candidate(without_data_passes(best.settings, search.known_passes))
    qgraph = conv.quantized_ir()
    qgraph.toposort()
    try:
        engine_s = {e.name: e.latency.latency_s for e in price(qgraph, conv.config, conv.device_info)[1].engines}
    except ValueError:   # no engine
        return []
    _, regions = engine_regions(qgraph, make_plan(qgraph, conv.config))
    fixed = user_fixed(conv.graph, search.user_layers)
    layers = {n.name for n in conv.graph.nodes}
    moves = []
    for name, region in regions:
        nodes = [n.name for n in region.nodes if n.name in layers]
        saved = engine_s.get(name, 0.0) - host_seconds(conv.graph, nodes)
        if saved > 0 and not fixed.intersection(nodes):
            moves.append((name, nodes, saved))
    moves.sort(key=lambda m: -m[2])
    return moves[:len(regions) - 1]


def with_islands(layers: Iterable[Dict[str, Any]], moves) -> List[Dict[str, Any]]:
    """The layer entries ``layers`` with fp32 on every node of the islands ``moves``
    (:func:`island_moves`), replacing an entry of the same layer."""
    return merged(layers, [{"layer_name": name, "data_type": "fp32"} for _, nodes, _ in moves for name in nodes])


def stage_islands(search, best: Point) -> Point:
    """fp32 on the islands of ``best`` (:func:`island_moves`), all at once: the best point."""
    moves = island_moves(search, best)
    if not moves:
        return best
    settings = search.with_layers(best, with_islands(search.own_layers(best), moves))
    p = search.evaluate(f"{best.settings['quantize_algorithm']} + fp32 on {len(moves)} island engine(s)", settings)
    return p if search.meets(p) or search.better(p, best) else best
