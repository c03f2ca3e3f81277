"""The framework-neutral graph IR.

A :class:`Graph` is an ordered list of :class:`Node` objects (kept in topological
order), a table of :class:`TensorInfo` (shape and dtype of every tensor), a table of
parameters (constant numpy arrays, e.g. weights) and the names of the graph inputs and
outputs.  Tensors are referred to by name everywhere; a tensor is produced either by a
node (it is in ``node.outputs``), by a parameter (``graph.params``) or is a graph input.

Quantization parameters live beside the graph in ``graph.qparams``
(tensor name -> :class:`QParams`): the quantizer fills it, the emitters and the compiler
read it.  The op vocabulary and the attribute names of each op are listed in
``docs/ir.md``; frontends translate to and from exactly that vocabulary.
"""
from __future__ import annotations

import copy
import dataclasses
import weakref
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from .graph_index import GraphIndex, NodeList, TensorList, interned, owner_refs


@dataclasses.dataclass(slots=True)
class TensorInfo:
    """Static type of a tensor: ``shape`` (tuple of ints, ``None`` for unknown dims)
    and ``dtype`` (a numpy dtype name such as ``"float32"`` or ``"int8"``)."""

    shape: Optional[Tuple[Optional[int], ...]]
    dtype: str = "float32"


@dataclasses.dataclass
class QParams:
    """Symmetric quantization of one tensor (zero point is always 0).

    ``dtype``: ``"int8"``, ``"uint8"``, ``"int16"`` or ``"int32"`` (biases).
    ``scale``: a float (per tensor) or a 1-D float array (per channel along ``axis``).
    Real value = integer * scale.
    """

    dtype: str
    scale: Any
    axis: Optional[int] = None

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    @property
    def qmin(self) -> int:
        return int(np.iinfo(self.dtype).min) if self.dtype != "uint8" else 0

    @property
    def qmax(self) -> int:
        return int(np.iinfo(self.dtype).max)


@dataclasses.dataclass(slots=True)
class Node:
    """One operation: ``op`` is an IR op name (docs/ir.md), ``inputs``/``outputs`` are
    tensor names, ``attrs`` holds op attributes (plain Python values / numpy arrays).
    Slotted: a node is one compact object, so a pass reading every node touches little memory."""

    name: str
    op: str
    inputs: List[str]
    outputs: List[str]
    attrs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    _indexes: Tuple[weakref.ref, ...] = dataclasses.field(default=(), init=False, repr=False, compare=False)

    def __repr__(self) -> str:  # short, for error messages and debugging
        return f"Node({self.name!r}, {self.op}, in={self.inputs}, out={self.outputs})"

    # The graphs holding a node index its tensors, name and op; every edit is reported to them.
    def __setattr__(self, key: str, value: Any) -> None:
        if key in ("inputs", "outputs"):
            before = tuple(getattr(self, key, ()))
            object.__setattr__(self, key, TensorList(value, self, key))
            self.tensors_edited(key, before)
        elif key in ("name", "op"):
            before = getattr(self, key, None)
            object.__setattr__(self, key, interned(value))
            for index in owner_refs(getattr(self, "_indexes", ())):
                index.relabel(self, key, before)
        else:
            object.__setattr__(self, key, value)

    def tensors_edited(self, field: str, before: Tuple[str, ...]) -> None:
        """``inputs`` or ``outputs`` (``field``) changed from ``before``."""
        after = tuple(getattr(self, field))
        for index in owner_refs(getattr(self, "_indexes", ())):
            index.retarget(self, field, before, after)

    def join_index(self, index: GraphIndex) -> None:
        self._indexes = tuple(r for r in self._indexes if r() is not None) + (weakref.ref(index),)

    def leave_index(self, index: GraphIndex) -> None:
        self._indexes = tuple(r for r in self._indexes if r() not in (index, None))

    def __getstate__(self) -> Dict[str, Any]:
        return {"name": self.name, "op": self.op, "inputs": list(self.inputs), "outputs": list(self.outputs),
                "attrs": self.attrs}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self._indexes = ()
        for k, v in state.items():
            setattr(self, k, v)


class GraphError(ValueError):
    """A graph is malformed (dangling tensor, cycle, duplicate name, ...)."""


class Graph:
    """A dataflow graph in the IR. See the module docstring.  ``nodes`` reads like a list of
    nodes; the graph keeps an index of it (:mod:`ratelnn.ir.graph_index`) that every edit of
    ``nodes`` or of a node's ``inputs``/``outputs``/``name`` updates."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._index = GraphIndex()
        self._nodes = NodeList(self._index)
        self.tensors: Dict[str, TensorInfo] = {}
        self.params: Dict[str, np.ndarray] = {}
        self.inputs: List[str] = []
        self.outputs: List[str] = []
        self.qparams: Dict[str, QParams] = {}
        self.meta: Dict[str, Any] = {}

    @property
    def nodes(self) -> NodeList:
        return self._nodes

    @nodes.setter
    def nodes(self, nodes: Iterable[Node]) -> None:
        try:
            self._index.reset(nodes)
        except ValueError as e:
            raise GraphError(str(e)) from None

    def __getstate__(self) -> Dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_index", "_nodes")}
        state["nodes"] = list(self.nodes)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        state = dict(state)
        nodes = state.pop("nodes")
        self.__dict__.update(state)
        self._index = GraphIndex()
        self._nodes = NodeList(self._index)
        self.nodes = nodes

    # ------------------------------------------------------------------ building
    def add_input(self, name: str, shape, dtype: str = "float32") -> str:
        name = interned(name)
        self.inputs.append(name)
        self.tensors[name] = TensorInfo(_shape(shape), dtype)
        return name

    def add_param(self, name: str, value: np.ndarray) -> str:
        name = interned(name)
        value = np.asarray(value)
        self.params[name] = value
        self.tensors[name] = TensorInfo(tuple(value.shape), str(value.dtype))
        return name

    def add_node(self, node: Node, output_infos: Optional[Sequence[TensorInfo]] = None) -> Node:
        """Append ``node``; ``output_infos`` (one per output) records the output types."""
        if output_infos is not None and len(output_infos) != len(node.outputs):
            raise GraphError(f"{node}: {len(output_infos)} output infos for {len(node.outputs)} outputs")
        if self._index.contains(node):
            raise GraphError(f"node {node.name!r} is already in graph {self.name!r}")
        self._index.append(node)
        if output_infos is not None:
            for t, info in zip(node.outputs, output_infos):
                self.tensors[t] = info
        return node

    # ------------------------------------------------------------------ queries
    def node(self, name: str) -> Node:
        """The node called ``name`` (the first in graph order if several are)."""
        entry = self._index.names.get(name)
        if entry is None:
            raise KeyError(f"no node named {name!r} in graph {self.name!r}")
        return self._index.first(entry)

    def producer(self, tensor: str) -> Optional[Node]:
        """The node producing ``tensor`` (None for inputs and params; the last in graph order
        if several do)."""
        entry = self._index.producers.get(tensor)
        return None if entry is None else self._index.last(entry)

    def consumers(self, tensor: str) -> List[Node]:
        """The nodes reading ``tensor``, in graph order, each once."""
        entry = self._index.readers.get(tensor)
        return [] if entry is None else self._index.in_order(entry)

    def nodes_of(self, ops: Iterable[str]) -> List[Node]:
        """The nodes whose op is one of ``ops``, in graph order (O(k log k) for k of them)."""
        return self._index.nodes_of(ops)

    def consumer_map(self) -> Dict[str, List[Node]]:
        m: Dict[str, List[Node]] = defaultdict(list)
        for n in self.nodes:
            for t in n.inputs:
                m[t].append(n)
        return m

    def is_param(self, tensor: str) -> bool:
        return tensor in self.params

    def shape(self, tensor: str):
        return self.tensors[tensor].shape

    def dtype(self, tensor: str) -> str:
        return self.tensors[tensor].dtype

    def unique_name(self, base: str) -> str:
        """A node/tensor name not used yet: ``base``, else ``base_<i>`` with ``i`` counting up
        from the last suffix handed out for ``base``."""
        def used(name: str) -> bool:
            return name in self.tensors or name in self._index.names
        if not used(base):
            return base
        i = self._index.suffix.get(base, 0) + 1
        while used(f"{base}_{i}"):
            i += 1
        self._index.suffix[base] = i
        return f"{base}_{i}"

    # ------------------------------------------------------------------ editing
    def replace_uses(self, old: str, new: str, skip: Iterable[Node] = ()) -> None:
        """Make every consumer of tensor ``old`` (and the graph outputs) read ``new``."""
        skip_ids = {id(n) for n in skip}
        for n in self.consumers(old):
            if id(n) not in skip_ids:
                n.inputs = [new if t == old else t for t in n.inputs]
        if old in self.outputs:
            self.outputs = [new if t == old else t for t in self.outputs]

    def remove_nodes(self, nodes: Iterable[Node]) -> None:
        """Drop ``nodes`` (those not in the graph are ignored); O(1) per node."""
        for n in nodes:
            self._index.discard(n)

    def replace_node(self, old: Node, new: Node) -> None:
        """Put ``new`` in ``old``'s place in the node order."""
        if not self._index.contains(old):
            raise GraphError(f"node {old.name!r} is not in graph {self.name!r}")
        if self._index.contains(new):
            raise GraphError(f"node {new.name!r} is already in graph {self.name!r}")
        self._index.replace(old, new)

    def upstream(self, tensors: Iterable[str]) -> Set[str]:
        """``tensors`` and every tensor they depend on (all outputs of the nodes producing them,
        inputs and params included)."""
        reached: Set[str] = set()
        stack = list(tensors)
        while stack:
            t = stack.pop()
            if t in reached:
                continue
            reached.add(t)
            n = self.producer(t)
            if n is not None:
                stack.extend(n.inputs)
                reached.update(n.outputs)
        return reached

    def prune(self) -> None:
        """Drop nodes, params and tensor infos that no graph output depends on (the graph
        inputs keep their infos)."""
        live = self.upstream(self.outputs)
        self.remove_nodes([n for n in self.nodes if not any(t in live for t in n.outputs)])
        self.params = {k: v for k, v in self.params.items() if k in live}
        live.update(self.inputs)
        self.tensors = {k: v for k, v in self.tensors.items() if k in live}
        self.qparams = {k: v for k, v in self.qparams.items() if k in live}

    def toposort(self) -> None:
        """Reorder nodes topologically; raises GraphError on cycles or dangling inputs."""
        known = set(self.inputs) | set(self.params)
        order: List[Node] = []
        state: Dict[int, int] = {}
        for root in self.nodes:
            stack = [(root, 0)]
            while stack:
                n, i = stack.pop()
                if i == 0:
                    s = state.get(id(n))
                    if s == 2:
                        continue
                    if s == 1:
                        raise GraphError(f"cycle through node {n.name!r}")
                    state[id(n)] = 1
                if i < len(n.inputs):
                    stack.append((n, i + 1))
                    t = n.inputs[i]
                    p = self.producer(t)
                    if p is None:
                        if t not in known:
                            raise GraphError(f"node {n.name!r} reads tensor {t!r} that nothing produces")
                    elif state.get(id(p)) != 2:
                        if state.get(id(p)) == 1:
                            raise GraphError(f"cycle through node {p.name!r}")
                        stack.append((p, 0))
                else:
                    state[id(n)] = 2
                    order.append(n)
        self.nodes = order

    def validate(self) -> None:
        """Check names are unique, every input is produced and the graph is acyclic."""
        seen = set()
        for n in self.nodes:
            if n.name in seen:
                raise GraphError(f"duplicate node name {n.name!r}")
            seen.add(n.name)
        produced = set(self.inputs) | set(self.params)
        for n in self.nodes:
            for t in n.outputs:
                if t in produced:
                    raise GraphError(f"tensor {t!r} produced twice (by {n.name!r})")
                produced.add(t)
        for t in self.outputs:
            if t not in produced:
                raise GraphError(f"graph output {t!r} is not produced by any node")
        self.toposort()

    def copy(self) -> "Graph":
        """A deep copy (parameters are copied too, so passes may edit them); built field by
        field, which is several times faster than ``copy.deepcopy`` on large graphs."""
        memo: Dict[int, Any] = {}
        g = Graph(self.name)
        g.nodes = [Node(n.name, n.op, list(n.inputs), list(n.outputs), _copied(n.attrs, memo))
                   for n in self.nodes]
        infos: Dict[int, TensorInfo] = {}
        g.tensors = {t: infos.setdefault(id(i), TensorInfo(i.shape, i.dtype)) for t, i in self.tensors.items()}
        g.params = {t: _copied(v, memo) for t, v in self.params.items()}
        g.inputs, g.outputs = list(self.inputs), list(self.outputs)
        g.qparams = {t: QParams(q.dtype, _copied(q.scale, memo), q.axis) for t, q in self.qparams.items()}
        g.meta = copy.deepcopy(self.meta, memo)
        return g

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {len(self.nodes)} nodes, {len(self.params)} params, "
                f"inputs={self.inputs}, outputs={self.outputs})")


_IMMUTABLE = (str, int, float, bool, bytes, type(None), np.generic)


def _copied(value: Any, memo: Dict[int, Any]) -> Any:
    """``copy.deepcopy(value, memo)`` for what attributes and parameters hold (numbers,
    strings, numeric arrays, and lists, tuples and dicts of them), written out: the generic
    deepcopy dispatch costs more than the copying.  Anything else goes to ``copy.deepcopy``;
    an object reached twice is copied once (``memo``, keyed by ``id``, as deepcopy's)."""
    if isinstance(value, _IMMUTABLE):
        return value
    done = memo.get(id(value))
    if done is not None:
        return done
    if type(value) is np.ndarray and value.dtype != object:
        out: Any = value.copy()
    elif type(value) is list:
        out = [_copied(v, memo) for v in value]
    elif type(value) is tuple:
        out = tuple(_copied(v, memo) for v in value)
    elif type(value) is dict:
        out = {k: _copied(v, memo) for k, v in value.items()}
    else:
        return copy.deepcopy(value, memo)
    memo[id(value)] = out
    memo.setdefault(id(memo), []).append(value)   # keeps ``value`` alive while its id is a key
    return out


def _shape(shape) -> Optional[Tuple[Optional[int], ...]]:
    if shape is None:
        return None
    return tuple(None if d is None or (isinstance(d, int) and d < 0) else int(d) for d in shape)
