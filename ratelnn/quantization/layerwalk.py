"""Walk the quantized (QDQ) model and the float model side by side over a data sample, one
Conv2D/MatMul at a time: the accuracy passes that tune a layer on data (bias correction,
AdaRound; docs/quantization.md, "Accuracy passes") see each layer's quantized input *after*
the layers before it were tuned.

The sample is evaluated in chunks of the model's batch size (fixed-batch reshapes keep
working); the last chunk is padded by repeating rows and only its real rows count.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

import numpy as np

from ..errors import TimeLimitExceeded
from ..ir import Graph, Node, registry
from ..ir.evaluate import evaluate_node
from .emit import emit_qdq

Chunks = List[np.ndarray]

# time.monotonic() after which a walk stops (None: no limit); set by time_limit()
_DEADLINE: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar("layer_walk_deadline", default=None)


@contextlib.contextmanager
def time_limit(deadline: Optional[float]) -> Iterator[None]:
    """Within the block, walks over the model stop with :class:`TimeLimitExceeded` once
    ``time.monotonic()`` passes ``deadline`` (None: no limit).  A pass on a large model can
    take minutes per try; ``tune`` uses this to keep its ``time_budget_s``."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_time(where: str) -> None:
    """Raise :class:`TimeLimitExceeded` naming ``where`` when the deadline has passed."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise TimeLimitExceeded(f"time limit reached during {where}")


@dataclasses.dataclass
class Layer:
    """One quantized Conv2D/MatMul reached by the walk.

    ``qnode``: the node of the quantized IR (its ``inputs[1]``/``[2]`` name the integer
    weight and int32 bias params, edited in place by the visitor); ``fnode``: the float
    node; ``x_q``/``x_f``: its quantized-model / float-model input per chunk; ``real``: real
    rows per chunk.  :meth:`pre_activation` evaluates either node without its activation."""

    qnode: Node
    fnode: Node
    x_q: Chunks
    x_f: Chunks
    real: List[int]
    float_params: tuple   # the float node's (weights, bias or None)

    def pre_activation(self, node: Node, x: np.ndarray, w: np.ndarray, b: Optional[np.ndarray]) -> np.ndarray:
        probe = dataclasses.replace(node, attrs=dict(node.attrs, act="none"))
        return evaluate_node(probe, [x, w] + ([] if b is None else [b]))[0]

    def channel_axis(self) -> int:
        if self.fnode.op == "Conv2D" and self.fnode.attrs.get("layout") == "NCHW":
            return 1
        return -1


# visit(layer) -> the dequantized (weight, bias or None) the walk continues with
Visitor = Callable[[Layer], tuple]


def chunked(sample: Mapping[str, np.ndarray], batch: Optional[int]) -> tuple:
    """(list of feed dicts of ``batch`` rows, real rows of each)."""
    n = min(len(v) for v in sample.values())
    batch = batch or n
    feeds, real = [], []
    for start in range(0, n, batch):
        size = min(batch, n - start)
        idx = np.arange(start, start + batch) if size == batch else \
            np.concatenate([np.arange(start, n), np.full(batch - size, n - 1)])
        feeds.append({k: np.asarray(v)[idx] for k, v in sample.items()})
        real.append(size)
    return feeds, real


class _FloatWalker:
    """Evaluates the float graph lazily, node by node, on every chunk; keeps the values that
    are still read (or pinned)."""

    def __init__(self, graph: Graph, feeds: List[Dict[str, np.ndarray]], pinned) -> None:
        self.graph = graph
        self.values: Dict[str, Chunks] = {t: [f[t] for f in feeds] for t in graph.inputs}
        self.params = graph.params
        self.uses = Counter(t for n in graph.nodes for t in n.inputs)
        self.pinned = set(pinned)
        self.i = 0

    def get(self, tensor: str) -> Chunks:
        if tensor in self.params:
            return None
        while tensor not in self.values:
            node = self.graph.nodes[self.i]
            self.i += 1
            args = [self.values[t] if t in self.values else [self.params[t]] * self._n() for t in node.inputs]
            outs = [evaluate_node(node, [a[c] for a in args]) for c in range(self._n())]
            for k, t in enumerate(node.outputs):
                self.values[t] = [o[k] for o in outs]
            for t in node.inputs:
                self.uses[t] -= 1
                if self.uses[t] <= 0 and t not in self.pinned:
                    self.values.pop(t, None)
        return self.values[tensor]

    def release(self, tensor: str) -> None:
        self.pinned.discard(tensor)
        if self.uses[tensor] <= 0:
            self.values.pop(tensor, None)

    def _n(self) -> int:
        return len(next(iter(self.values.values())))


def walk_layers(graph: Graph, qgraph: Graph, config: Mapping[str, Any],
                sample: Mapping[str, np.ndarray], visit: Visitor) -> None:
    """Call ``visit`` for every quantized Conv2D/MatMul of ``qgraph`` (quantized from float
    ``graph``) with integer weights, in graph order, on ``sample`` (input name -> [N, ...])."""
    qdq = emit_qdq(qgraph, config)
    producers = {t: n for n in qdq.nodes for t in n.outputs}
    owners = {n.inputs[1]: n for n in qgraph.nodes if registry.is_weighted(n.op) and len(n.inputs) > 1
              and n.inputs[1] in qgraph.params and qgraph.params[n.inputs[1]].dtype.kind == "i"}
    float_nodes = {n.name: n for n in graph.nodes}

    def owner(node: Node) -> Optional[Node]:
        if not registry.is_weighted(node.op) or len(node.inputs) < 2:
            return None
        deq = producers.get(node.inputs[1])
        q = owners.get(deq.inputs[0]) if deq is not None and deq.op == "Dequant" else None
        return q if q is not None and q.name in float_nodes else None

    layers = {id(n): owner(n) for n in qdq.nodes}
    batch = (config.get("input_shapes") or [[None]])[0][0]
    feeds, real = chunked(sample, batch)
    fwalk = _FloatWalker(graph, feeds, [float_nodes[q.name].inputs[0] for q in layers.values() if q])
    values: Dict[str, Chunks] = {t: [f[t] for f in feeds] for t in qdq.inputs}
    uses = Counter(t for n in qdq.nodes for t in n.inputs)
    for node in qdq.nodes:
        args = [values[t] if t in values else [qdq.params[t]] * len(feeds) for t in node.inputs]
        qnode = layers[id(node)]
        if qnode is not None:
            check_time(f"the layer walk, at {qnode.name!r}")
            fnode = float_nodes[qnode.name]
            fparams = (graph.params[fnode.inputs[1]], graph.params[fnode.inputs[2]] if len(fnode.inputs) > 2 else None)
            layer = Layer(qnode, fnode, args[0], fwalk.get(fnode.inputs[0]), real, fparams)
            w, b = visit(layer)
            fwalk.release(fnode.inputs[0])
            args[1] = [w] * len(feeds)
            if b is not None and len(args) > 2:
                args[2] = [b] * len(feeds)
        outs = [evaluate_node(node, [a[c] for a in args]) for c in range(len(feeds))]
        for k, t in enumerate(node.outputs):
            values[t] = [o[k] for o in outs]
        for t in node.inputs:
            uses[t] -= 1
            if uses[t] <= 0:
                values.pop(t, None)
