"""Run a compiled IR graph in Python: ``Engine`` nodes on the emulated NPU, every other node
with the numpy IR evaluator (``ratelnn.ir.evaluate.evaluate_node``)."""
from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional

import numpy as np

from ..ir import Graph
from ..ir.evaluate import EvaluationError, evaluate_node
from ..npu.batching import decode_engine_set, run_engine_set


def run_compiled(graph: Graph, feeds: Mapping[str, np.ndarray], backend: str = "reference",
                 fetches: Optional[Iterable[str]] = None) -> Dict[str, np.ndarray]:
    """Evaluate ``graph`` on ``feeds`` (graph input name -> array); engines run with
    ``backend`` (``"reference"`` or ``"native"``); an engine set splits the batch over its
    compiled sizes (docs/multi-batch.md).  Returns ``{tensor: array}`` for
    ``fetches`` (default: the graph outputs)."""
    fetches = list(graph.outputs if fetches is None else fetches)
    missing = [t for t in graph.inputs if t not in feeds]
    if missing:
        raise EvaluationError(f"no value fed for graph inputs {missing}")
    values: Dict[str, np.ndarray] = {k: np.asarray(v) for k, v in graph.params.items()}
    values.update((t, np.asarray(feeds[t])) for t in graph.inputs)
    for node in graph.nodes:
        args = [values[t] for t in node.inputs]
        if node.op == "Engine":
            engines = decode_engine_set(node.attrs["engine"], node.attrs.get("batch_engines", ()),
                                        node.attrs.get("engine_name", node.name))
            results = run_engine_set(engines, args, backend=backend)
        else:
            results = evaluate_node(node, args)
        values.update(zip(node.outputs, results))
    unknown = [t for t in fetches if t not in values]
    if unknown:
        raise EvaluationError(f"cannot fetch {unknown}: not produced by graph {graph.name!r}")
    return {t: values[t] for t in fetches}
