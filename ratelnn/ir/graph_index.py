"""The lookup tables a :class:`~ratelnn.ir.graph.Graph` keeps in step with every edit.

:class:`GraphIndex` holds the node order and, per tensor, the nodes producing and reading
it, and the nodes by name and by op: each lookup costs O(1) (O(k log k) for k readers or k
nodes of an op), so a pass over n nodes does O(n log n) work instead of rescanning the graph
per node, and a pass looking for one op visits only the nodes of that op.  The index cannot
go stale: a node's ``inputs``/``outputs`` are :class:`TensorList` objects that report every
edit (item assignment, append, slice edits, ...) to the indexes of the graphs holding the
node, and renaming a node, changing its op or assigning its lists reports too
(``Node.__setattr__``).
:class:`NodeList` is the graph's ``nodes``: a list-like view whose edits go through the index.
"""
from __future__ import annotations

import sys
import weakref
from collections.abc import MutableSequence
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

EDITING_METHODS = ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend",
                   "insert", "pop", "remove", "clear", "sort", "reverse")


def interned(name: Any) -> Any:
    """The shared copy of ``name`` (``sys.intern``; other than a plain str: unchanged): nodes,
    tables and sets holding a tensor name then hold one object, so a graph keeps one copy of
    each name and lookups match by identity instead of comparing characters."""
    return sys.intern(name) if type(name) is str else name


class TensorList(list):
    """A node's ``inputs`` or ``outputs`` (tensor names, :func:`interned`) that reports its
    edits to the node.  Copies and pickles are plain lists."""

    __slots__ = ("_node", "_field")

    def __init__(self, items: Iterable[str], node: Any, field: str) -> None:
        super().__init__(map(interned, items))
        self._node = node
        self._field = field

    def __reduce__(self):
        return (list, (list(self),))


def _reporting(name: str):
    edit = getattr(list, name)

    def method(self, *args):
        before = tuple(self)
        result = edit(self, *args)
        self._node.tensors_edited(self._field, before)
        return result
    method.__name__ = name
    return method


for _name in EDITING_METHODS:
    setattr(TensorList, _name, _reporting(_name))


def _add(table: Dict[str, Any], key: str, node: Any) -> None:
    """Record ``node`` under ``key``: the node itself while it is the only one, else a dict
    id(node) -> node (most tensors have one producer and one reader; this keeps lookups to
    one dict access)."""
    entry = table.get(key)
    if entry is None:
        table[key] = node
    elif type(entry) is dict:
        entry[id(node)] = node
    elif entry is not node:
        table[key] = {id(entry): entry, id(node): node}


def _drop(table: Dict[str, Any], key: str, node: Any) -> None:
    entry = table.get(key)
    if type(entry) is dict:
        entry.pop(id(node), None)
        if len(entry) == 1:
            table[key] = next(iter(entry.values()))
    elif entry is node:
        del table[key]


class GraphIndex:
    """Node order (a sequence number per node: later in the graph = larger), producers and
    readers of each tensor, and nodes by name and by op (one node, or id(node) -> node when
    several, so duplicates are kept and answered like a scan in graph order would)."""

    def __init__(self) -> None:
        self.order: Dict[int, Any] = {}          # sequence number -> node, in graph order
        self.seq: Dict[int, int] = {}            # id(node) -> sequence number
        self.next_seq = 0
        self.listing: Optional[List[Any]] = None  # list(order.values()) while no edit made it stale
        self.producers: Dict[str, Any] = {}      # tensor -> node, or id(node) -> node
        self.readers: Dict[str, Any] = {}
        self.names: Dict[str, Any] = {}
        self.ops: Dict[str, Any] = {}
        self.suffix: Dict[str, int] = {}         # unique_name base -> last suffix tried

    # -------------------------------------------------------------- membership
    def nodes(self) -> List[Any]:
        if self.listing is None:
            self.listing = list(self.order.values())
        return self.listing

    def contains(self, node: Any) -> bool:
        return id(node) in self.seq

    def append(self, node: Any) -> None:
        if id(node) in self.seq:
            raise ValueError(f"node {node.name!r} is already in the graph")
        self.seq[id(node)] = self.next_seq
        self.order[self.next_seq] = node
        self.next_seq += 1
        if self.listing is not None:
            self.listing.append(node)
        self._link(node)

    def discard(self, node: Any) -> None:
        s = self.seq.pop(id(node), None)
        if s is None:
            return
        del self.order[s]
        self.listing = None
        self._unlink(node)

    def replace(self, old: Any, new: Any) -> None:
        """``new`` takes ``old``'s place in the order."""
        if id(new) in self.seq:
            raise ValueError(f"node {new.name!r} is already in the graph")
        s = self.seq.pop(id(old))
        self._unlink(old)
        self.seq[id(new)] = s
        self.order[s] = new
        self.listing = None
        self._link(new)

    def reset(self, nodes: Iterable[Any]) -> None:
        """Make ``nodes`` the graph's nodes, in this order (nodes kept stay indexed)."""
        nodes = list(nodes)
        kept = {id(n) for n in nodes}
        if len(kept) != len(nodes):
            seen: set = set()
            twice = next(n for n in nodes if id(n) in seen or seen.add(id(n)))
            raise ValueError(f"node {twice.name!r} is twice in the node list")
        old = self.order.values()
        for node in old:
            if id(node) not in kept:
                self._unlink(node)
        before = self.seq
        self.order = dict(enumerate(nodes))
        self.seq = {id(n): i for i, n in enumerate(nodes)}
        self.next_seq = len(nodes)
        self.listing = None
        for node in nodes:
            if id(node) not in before:
                self._link(node)

    def _link(self, node: Any) -> None:
        node.join_index(self)
        self._entries(node, _add)

    def _unlink(self, node: Any) -> None:
        node.leave_index(self)
        self._entries(node, _drop)

    def _entries(self, node: Any, edit) -> None:
        """Apply ``edit`` (:func:`_add` or :func:`_drop`) to every table entry of ``node``."""
        for t in node.outputs:
            edit(self.producers, t, node)
        for t in node.inputs:
            edit(self.readers, t, node)
        edit(self.names, node.name, node)
        edit(self.ops, node.op, node)

    # -------------------------------------------------------------- edits of a member node
    def retarget(self, node: Any, field: str, before: Tuple[str, ...], after: Tuple[str, ...]) -> None:
        table = self.producers if field == "outputs" else self.readers
        for t in set(before) - set(after):
            _drop(table, t, node)
        for t in after:
            _add(table, t, node)

    def relabel(self, node: Any, field: str, before: str) -> None:
        """``node``'s ``name`` or ``op`` (``field``) changed from ``before``."""
        table = self.names if field == "name" else self.ops
        _drop(table, before, node)
        _add(table, getattr(node, field), node)

    # -------------------------------------------------------------- lookups
    def first(self, entry: Any) -> Any:
        if type(entry) is not dict:
            return entry
        return min(entry.values(), key=lambda n: self.seq[id(n)])

    def last(self, entry: Any) -> Any:
        if type(entry) is not dict:
            return entry
        return max(entry.values(), key=lambda n: self.seq[id(n)])

    def in_order(self, entry: Any) -> List[Any]:
        if type(entry) is not dict:
            return [entry]
        return sorted(entry.values(), key=lambda n: self.seq[id(n)])

    def nodes_of(self, ops: Iterable[str]) -> List[Any]:
        """Member nodes whose op is one of ``ops``, in graph order."""
        found: List[Any] = []
        for op in set(ops):
            entry = self.ops.get(op)
            if entry is not None:
                found.extend(entry.values() if type(entry) is dict else (entry,))
        return sorted(found, key=lambda n: self.seq[id(n)])


class NodeList(MutableSequence):
    """A graph's ``nodes``: reads like a list; appending, removing a node by identity and
    replacing cost O(1), other positional edits rebuild the order in O(n)."""

    def __init__(self, index: GraphIndex) -> None:
        self._index = index

    def __len__(self) -> int:
        return len(self._index.seq)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._index.nodes())

    def __reversed__(self) -> Iterator[Any]:
        return reversed(self._index.nodes())

    def __getitem__(self, i):
        return self._index.nodes()[i]

    def __contains__(self, node: Any) -> bool:
        return self._index.contains(node)

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, NodeList)) else NotImplemented

    def __add__(self, other) -> List[Any]:
        return list(self) + list(other)

    def __repr__(self) -> str:
        return repr(self._index.nodes())

    def _edit(self, edit) -> None:
        nodes = list(self._index.nodes())
        edit(nodes)
        self._index.reset(nodes)

    def __setitem__(self, i, value) -> None:
        if isinstance(i, int):
            old = self._index.nodes()[i]
            if value is not old:
                self._index.replace(old, value)
            return
        value = list(value)
        self._edit(lambda nodes: nodes.__setitem__(i, value))

    def __delitem__(self, i) -> None:
        self._edit(lambda nodes: nodes.__delitem__(i))

    def insert(self, i: int, node: Any) -> None:
        self._edit(lambda nodes: nodes.insert(i, node))

    def append(self, node: Any) -> None:
        self._index.append(node)

    def extend(self, nodes: Iterable[Any]) -> None:
        for node in list(nodes):
            self._index.append(node)

    def __iadd__(self, nodes: Iterable[Any]) -> "NodeList":
        self.extend(nodes)
        return self

    def remove(self, node: Any) -> None:
        if not self._index.contains(node):
            raise ValueError(f"node {getattr(node, 'name', node)!r} is not in the graph")
        self._index.discard(node)

    def index(self, node: Any, *args) -> int:
        for i, n in enumerate(self._index.nodes()):
            if n is node:
                return i
        raise ValueError(f"node {getattr(node, 'name', node)!r} is not in the graph")

    def clear(self) -> None:
        self._index.reset([])

    def sort(self, **kwargs) -> None:
        self._edit(lambda nodes: nodes.sort(**kwargs))

    def reverse(self) -> None:
        self._edit(lambda nodes: nodes.reverse())


def owner_refs(indexes: List[weakref.ref]) -> List[GraphIndex]:
    """The live indexes among ``indexes`` (weak references)."""
    return [idx for idx in (ref() for ref in indexes) if idx is not None]
