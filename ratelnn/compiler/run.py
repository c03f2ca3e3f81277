"""Run a compiled IR graph in Python: ``Engine`` nodes on the emulated NPU, every other node
with the numpy IR evaluator (``ratelnn.ir.evaluate.evaluate_node``)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

import numpy as np

from ..ir import Graph
from ..ir.evaluate import EvaluationError, evaluate_node
from ..npu.batching import decode_engine_set, run_engine_set
from ..npu.reference import run_reference

# capture(engine, layer, spec, codes): ``layer`` the instruction's name (the IR node it came
# from), None for an engine input; ``spec`` the engine tensor (name, dtype, scale)
Capture = Callable[[Any, Optional[str], Any, np.ndarray], None]
NHWC_VIEW = "/nhwc"   # suffix of an engine tensor holding an NCHW IR tensor transposed to NHWC


def ir_tensor_of(spec_name: str) -> Tuple[str, bool]:
    """(IR tensor, whether the engine holds its NHWC view) of the engine tensor ``spec_name``."""
    if spec_name.endswith(NHWC_VIEW):
        return spec_name[:-len(NHWC_VIEW)], True
    return spec_name, False


def in_ir_layout(codes: np.ndarray, nhwc: bool) -> np.ndarray:
    """Codes of an engine tensor in its IR tensor's layout (an NHWC view transposed back)."""
    return codes.transpose(0, 3, 1, 2) if nhwc else codes


def run_compiled(graph: Graph, feeds: Mapping[str, np.ndarray], backend: str = "reference",
                 fetches: Optional[Iterable[str]] = None, capture: Optional[Capture] = None) -> Dict[str, np.ndarray]:
    """Evaluate ``graph`` on ``feeds`` (graph input name -> array); engines run with
    ``backend`` (``"reference"`` or ``"native"``); an engine set splits the batch over its
    compiled sizes (docs/multi-batch.md).  Returns ``{tensor: array}`` for
    ``fetches`` (default: the graph outputs).  ``capture``: see :func:`compiled_values`."""
    fetches = list(graph.outputs if fetches is None else fetches)
    values = compiled_values(graph, feeds, backend, capture)
    unknown = [t for t in fetches if t not in values]
    if unknown:
        raise EvaluationError(f"cannot fetch {unknown}: not produced by graph {graph.name!r}")
    return {t: values[t] for t in fetches}


def compiled_values(graph: Graph, feeds: Mapping[str, np.ndarray], backend: str = "reference",
                    capture: Optional[Capture] = None) -> Dict[str, np.ndarray]:
    """Every tensor of ``graph`` (params, inputs, node outputs) evaluated on ``feeds``.

    ``capture(engine, layer, spec, codes)``, if given, sees the codes of every engine input
    and of every instruction's output; the engines then run on the reference executor, the
    first engine of a set over the whole batch."""
    missing = [t for t in graph.inputs if t not in feeds]
    if missing:
        raise EvaluationError(f"no value fed for graph inputs {missing}")
    values: Dict[str, np.ndarray] = {k: np.asarray(v) for k, v in graph.params.items()}
    values.update((t, np.asarray(feeds[t])) for t in graph.inputs)
    for node in graph.nodes:
        args = [values[t] for t in node.inputs]
        if node.op != "Engine":
            results = evaluate_node(node, args)
        else:
            engines = decode_engine_set(node.attrs["engine"], node.attrs.get("batch_engines", ()),
                                        node.attrs.get("engine_name", node.name))
            if capture is None:
                results = run_engine_set(engines, args, backend=backend)
            else:
                engine = engines[0]
                inputs, _ = engine.check_inputs(args)
                for spec, codes in zip(engine.inputs, inputs):
                    capture(engine, None, spec, codes)
                results = run_reference(engine, inputs, lambda ins, codes, e=engine:
                                        capture(e, ins.name, e.tensors[ins.outputs[0]], codes))
        values.update(zip(node.outputs, results))
    return values
