"""Apply the data-driven accuracy passes (AdaRound, bias correction) only where they help
(docs/quantization.md §8, "Checked on held-out samples").

The kept calibration sample is split by the held-out rule
(:func:`ratelnn.calibration.split.split_sample`: every 4th sample held out, when the sample has 8
or more), the passes are fitted on the rest, and each combination the config asks for
(AdaRound + correction, AdaRound alone, correction alone, none) is scored by the agreement of
the quantized model's outputs with the float model's on the held-out samples: each output's
cosine similarity, lowered to its norm ratio where that is lower (scale-aware,
:func:`~ratelnn.metrics.cosine.output_agreements`), the lowest over the outputs and the
logits of the outputs a ``Softmax`` produces (:func:`softmax_logits`).
The best wins; ties go to the most passes applied.  So the passes never lower that metric on
the held-out part.  With fewer than 8 samples nothing is held out and the passes are
applied unchecked.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from ..calibration.split import split_sample
from ..ir import Graph
from ..ir.evaluate import evaluate
from ..ir.registry import QDQ_OPS
from ..metrics.cosine import output_agreements
from .adaround import adaround
from .bias_correction import correct_biases, correct_biases_analytic
from .emit import emit_qdq
from .layerwalk import check_time, chunked


def softmax_logits(graph: Graph) -> List[str]:
    """The tensors the ``Softmax`` nodes producing ``graph``'s outputs read (their logits), in
    output order; through the ``Quant``/``Dequant`` pair a QDQ graph puts after an output.  A
    confident softmax hides most of what int8 loses in its logits (probabilities near 0 or 1
    barely move), so the held-out check judges the logits too."""
    logits = []
    for tensor in graph.outputs:
        node = graph.producer(tensor)
        while node is not None and node.op in QDQ_OPS:
            node = graph.producer(node.inputs[0])
        if node is not None and node.op == "Softmax":
            logits.append(node.inputs[0])
    return logits


def qdq_agreements(graph: Graph, qgraph: Graph, config: Mapping[str, Any], sample, reference=None) -> tuple:
    """(``{tensor: agreement}`` of the QDQ model with the float model on ``sample``
    (:func:`~ratelnn.metrics.cosine.output_agreements`), for each output in ``graph.outputs``
    order, then for the logits of the outputs a ``Softmax`` produces (:func:`softmax_logits`,
    named as in ``graph``); the float values in that order, one array each, real rows only:
    pass them back as ``reference`` to skip running the float model again)."""
    feeds, real = chunked(sample, (config.get("input_shapes") or [[None]])[0][0])
    qdq = emit_qdq(qgraph, config)
    check_time("the held-out check")
    names = list(graph.outputs) + softmax_logits(graph)

    def run(g: Graph, fetches: List[str]) -> list:
        chunks = []
        for f, r in zip(feeds, real):
            values = evaluate(g, f, fetches)
            chunks.append([np.asarray(values[t], np.float64)[:r] for t in fetches])
        return [np.concatenate(parts) for parts in zip(*chunks)]

    reference = run(graph, names) if reference is None else reference
    agreements = output_agreements(run(qdq, list(qdq.outputs) + softmax_logits(qdq)), reference)
    return dict(zip(names, agreements, strict=True)), reference


def qdq_agreement(graph: Graph, qgraph: Graph, config: Mapping[str, Any], sample, reference=None) -> tuple:
    """(the lowest of :func:`qdq_agreements`, the float outputs)."""
    agreements, reference = qdq_agreements(graph, qgraph, config, sample, reference)
    return min(agreements.values(), default=1.0), reference


def apply_passes(graph: Graph, qgraph: Graph, config: Mapping[str, Any],
                 sample: Optional[Mapping[str, np.ndarray]]) -> Graph:
    """``qgraph`` (quantized from ``graph``) with the passes ``config`` asks for that do not
    lower the lowest held-out output agreement (module docstring); the choice is recorded in
    ``meta["accuracy_passes"]``."""
    ada = int(config.get("adaround_iterations", 0)) > 0
    correction = config.get("bias_correction", "none")
    if not ada and correction == "none":
        return qgraph
    fit, held = split_sample(sample) if sample is not None else (None, None)

    def corrected(q: Graph) -> Graph:
        q = q.copy()
        if correction == "empirical":
            return correct_biases(graph, q, config, fit)
        return correct_biases_analytic(graph, q, config)

    candidates: Dict[str, Graph] = {}
    if ada:
        rounded = adaround(graph, qgraph.copy(), config, fit)
        if correction != "none":
            candidates["adaround+bias_correction"] = corrected(rounded)
        candidates["adaround"] = rounded
    if correction != "none":
        candidates["bias_correction"] = corrected(qgraph)
    candidates["none"] = qgraph
    if held is None:
        chosen, scores = next(iter(candidates)), {}
    else:
        scores, reference = {}, None
        for name, q in candidates.items():
            scores[name], reference = qdq_agreement(graph, q, config, held, reference)
        chosen = max(candidates, key=lambda name: scores[name])   # first (most passes) on ties
        wanted = next(iter(candidates))
        if chosen != wanted:
            warnings.warn(f"accuracy passes: {wanted} lowered the lowest output agreement on the {len(next(iter(held.values())))} "
                          f"held-out calibration samples ({scores[wanted]:.6f} vs {scores[chosen]:.6f} with "
                          f"{chosen}); using {chosen}", UserWarning, stacklevel=3)
    result = candidates[chosen]
    result.meta["accuracy_passes"] = {"applied": chosen, "held_out_agreement": scores}
    return result
