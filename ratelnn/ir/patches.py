"""Graph patches of the config, applied to the IR right after import, before the passes
(docs/architecture.md §14, docs/quantization.md "Graph patches").

- ``op_processors``: ``[{op_name: ... | op_type: ..., attrs: {name: value}}]`` sets IR
  attributes (docs/ir.md) of the named nodes or of every node of an op type (any spelling of
  :func:`ratelnn.ir.registry.config_op_types`); the shapes downstream of a patched node are
  inferred again by evaluating each node on zeros (:func:`reinfer_shapes`).
- ``const_processors``: ``[{name: ..., data: [...] | data_path: x.npy}]`` replaces the value
  of a constant; the new value must have the constant's shape and convert to its dtype
  without changing any value.

(``input_shapes`` that change fixed dims are the frontends' own shape inference.)
"""
from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, List, Mapping, Sequence, Set

import numpy as np

from ..config_forms import ConfigError
from ..errors import ModelError
from . import registry
from .evaluate import evaluate_node
from .graph import Graph, TensorInfo

OP_KEYS = ("op_name", "op_type", "attrs")
CONST_KEYS = ("name", "data", "data_path")


def apply_patches(graph: Graph, config: Mapping[str, Any]) -> Graph:
    """``graph`` with the config's ``const_processors`` and ``op_processors`` applied (in place)."""
    for i, entry in enumerate(config.get("const_processors") or []):
        _replace_const(graph, entry, f"const_processors[{i}]")
    patched: Set[str] = set()
    for i, entry in enumerate(config.get("op_processors") or []):
        patched |= _set_attrs(graph, entry, f"op_processors[{i}]")
    if patched:
        reinfer_shapes(graph, patched)
    return graph


def _entry_keys(entry: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    stray = sorted(set(entry) - set(allowed))
    if stray:
        raise ConfigError(f"{where}: unknown keys {stray}; an entry takes {', '.join(allowed)}")


def _names(value: Any, where: str) -> List[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where} must be a name or a list of names, got {value!r}")
    return list(names)


# ---------------------------------------------------------------- op_processors
def _set_attrs(graph: Graph, entry: Mapping[str, Any], where: str) -> Set[str]:
    _entry_keys(entry, OP_KEYS, where)
    attrs = entry.get("attrs")
    if not isinstance(attrs, Mapping) or not attrs:
        raise ConfigError(f"{where}.attrs must be a mapping of attribute name -> value, got {attrs!r}")
    if ("op_name" in entry) == ("op_type" in entry):
        raise ConfigError(f"{where} must name op_name or op_type (one of them)")
    if "op_name" in entry:
        names = _names(entry["op_name"], f"{where}.op_name")
        nodes = [n for n in graph.nodes if n.name in names or set(names) & set(n.outputs)]
        missing = [m for m in names if not any(n.name == m or m in n.outputs for n in nodes)]
        if missing:
            raise ModelError(f"{where}: no node named {missing} in the model")
    else:
        ops = set().union(*(registry.config_op_types(t, f"{where}.op_type")
                            for t in _names(entry["op_type"], f"{where}.op_type")))
        nodes = [n for n in graph.nodes if n.op in ops]
        if not nodes:
            raise ModelError(f"{where}: the model has no node of op type {entry['op_type']!r} "
                             f"(IR ops {sorted(ops)})")
    for node in nodes:
        for key, value in attrs.items():
            if key not in node.attrs:
                raise ModelError(f"{where}: node {node.name!r} ({node.op}) has no attribute {key!r}; "
                                 f"its attributes: {sorted(node.attrs)} (docs/ir.md)")
            node.attrs[key] = _like(node.attrs[key], value, f"{where}.attrs.{key} (node {node.name!r})")
    return {n.name for n in nodes}


def _like(old: Any, value: Any, where: str) -> Any:
    """``value`` in the type of the attribute's current value ``old``; ConfigError if it is not."""
    def fail(expect: str):
        raise ConfigError(f"{where} must be {expect} like the current value {old!r}, got {value!r}")

    if isinstance(old, bool):
        return value if isinstance(value, bool) else fail("true or false")
    if isinstance(old, numbers.Integral):
        return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            else fail("an integer")
    if isinstance(old, numbers.Real):
        return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) \
            else fail("a number")
    if isinstance(old, str):
        return value if isinstance(value, str) else fail("a string")
    if isinstance(old, (tuple, list)):
        if not isinstance(value, (list, tuple)) or len(value) != len(old):
            fail(f"a list of {len(old)} values")
        return type(old)(_like(o, v, where) for o, v in zip(old, value))
    if isinstance(old, np.ndarray):
        arr = np.asarray(value, dtype=old.dtype)
        return arr if arr.shape == old.shape else fail(f"an array of shape {list(old.shape)}")
    return fail(f"a {type(old).__name__}")


def reinfer_shapes(graph: Graph, changed_nodes: Set[str]) -> None:
    """Infer the output shapes of ``changed_nodes`` and of every node downstream again by
    evaluating each on zeros (params: their values); a ModelError names a node that cannot
    take its new input shapes.  A free batch (None) stays free."""
    changed: Set[str] = set()
    for node in graph.nodes:
        if node.name not in changed_nodes and not changed.intersection(node.inputs):
            continue
        feeds = []
        for t in node.inputs:
            if t in graph.params:
                feeds.append(graph.params[t])
                continue
            info = graph.tensors[t]
            if info.shape is None:
                raise ModelError(f"node {node.name!r} ({node.op}): the shape of its input {t!r} is unknown, "
                                 "so its output shape cannot be inferred after the op_processors")
            feeds.append(np.zeros([1 if d is None else d for d in info.shape], info.dtype))
        shapes = [list(f.shape) for f in feeds]
        try:
            outs = evaluate_node(node, feeds)
            if any(0 in o.shape for o in outs):
                raise ValueError(f"its output would be empty ({[list(o.shape) for o in outs]})")
        except Exception as e:  # noqa: BLE001 - any evaluation failure means the shapes do not fit
            raise ModelError(f"after the op_processors, node {node.name!r} ({node.op}) cannot take its "
                             f"inputs of shapes {shapes}: {e}") from None
        for t, value in zip(node.outputs, outs):
            old = graph.tensors.get(t, TensorInfo(None))
            new = tuple(value.shape)
            if old.shape and old.shape[0] is None and new:
                new = (None,) + new[1:]
            if new != old.shape:
                graph.tensors[t] = TensorInfo(new, old.dtype)
                changed.add(t)


# ---------------------------------------------------------------- const_processors
def _replace_const(graph: Graph, entry: Mapping[str, Any], where: str) -> None:
    _entry_keys(entry, CONST_KEYS, where)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name must be the name of a constant, got {name!r}")
    key = name[:-2] if name.endswith(":0") and name not in graph.params else name
    if key not in graph.params:
        import difflib
        close = difflib.get_close_matches(key, list(graph.params), n=3)
        raise ModelError(f"{where}: {name!r} is not a constant the model computes with"
                         f"{f' (close: {close})' if close else ''}")
    if ("data" in entry) == ("data_path" in entry):
        raise ConfigError(f"{where} must give data (a list) or data_path (a .npy file), one of them")
    old = graph.params[key]
    if "data_path" in entry:
        path = Path(entry["data_path"])
        if path.suffix.lower() != ".npy" or not path.is_file():
            raise ConfigError(f"{where}.data_path {str(path)!r} is not an existing .npy file")
        try:
            new = np.load(path, allow_pickle=False)
        except ValueError as e:
            raise ConfigError(f"{where}.data_path {str(path)!r}: not a numeric .npy file ({e})") from None
    else:
        try:
            new = np.asarray(entry["data"])
        except ValueError as e:
            raise ConfigError(f"{where}.data is not a rectangular list of numbers ({e})") from None
    if new.dtype.kind not in "biuf":
        raise ConfigError(f"{where}: the new value holds {new.dtype}, not numbers")
    if new.shape != old.shape:
        raise ConfigError(f"{where}: constant {key!r} has shape {list(old.shape)}, the new value "
                          f"{list(new.shape)}")
    cast = new.astype(old.dtype)
    if not np.array_equal(cast.astype(np.float64), new.astype(np.float64), equal_nan=True):
        raise ConfigError(f"{where}: constant {key!r} is {old.dtype}; the new value ({new.dtype}) "
                          f"does not convert to it without changing values")
    graph.params[key] = cast
