"""Loading an MXNet model: a ``(symbol, arg_params, aux_params)`` tuple or a checkpoint
prefix, checked and held as parsed symbol JSON plus numpy parameters."""
from __future__ import annotations

import dataclasses
import glob
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ...errors import ModelError
from ...mxnet_compat import import_mxnet

# variable attr recording a dtype MXNet 1.9 NDArrays cannot hold (int16 is carried as int32)
RATEL_DTYPE_ATTR = "__ratel_dtype__"


@dataclasses.dataclass
class MXModel:
    """A parsed symbol: ``nodes`` (symbol-JSON node dicts, topologically ordered, each
    ``inputs`` entry ``[node_index, output_index, version]``), ``heads`` (the symbol's
    outputs as ``[node_index, output_index, version]``), ``num_outputs`` per node, and
    the parameters by name as numpy arrays (``arg_params``, ``aux_params``)."""

    nodes: List[Dict[str, Any]]
    heads: List[List[int]]
    num_outputs: List[int]
    arg_params: Dict[str, np.ndarray]
    aux_params: Dict[str, np.ndarray]

    def param(self, name: str) -> Optional[np.ndarray]:
        """The value of parameter ``name`` (arg or aux), None if there is none."""
        return self.arg_params.get(name, self.aux_params.get(name))

    def symbol_json(self, heads: List[List[int]]) -> str:
        """Symbol JSON of these nodes with the given ``heads`` (for shape inference)."""
        return json.dumps({"nodes": self.nodes, "arg_nodes": [i for i, n in enumerate(self.nodes) if n["op"] == "null"],
                           "heads": heads, "attrs": {"mxnet_version": ["int", 10901]}})


def load_model(graph_def: Any) -> MXModel:
    """Parse ``graph_def``: a ``(symbol, arg_params, aux_params)`` tuple (symbol as an
    ``mx.sym.Symbol`` or its JSON text, params as dicts of NDArrays or numpy arrays) or a
    checkpoint prefix (``<prefix>-symbol.json`` + ``<prefix>-0000.params``, or the latest
    epoch present).  Raises ModelError for anything else, naming what is wrong."""
    if isinstance(graph_def, (str, os.PathLike)):
        return _parse(*read_checkpoint(os.fspath(graph_def)))
    if isinstance(graph_def, (tuple, list)) and len(graph_def) == 3:
        symbol, arg_params, aux_params = graph_def
        return _parse(_symbol_json(symbol), _numpy_params(arg_params, "arg_params"),
                      _numpy_params(aux_params, "aux_params"))
    raise ModelError("an MXNet model is a (symbol, arg_params, aux_params) tuple or a checkpoint prefix, "
                     f"got {type(graph_def).__name__}")


def _symbol_json(symbol: Any) -> Any:
    mx = import_mxnet()
    if isinstance(symbol, mx.sym.Symbol):
        return json.loads(symbol.tojson())
    if isinstance(symbol, str):
        try:
            return json.loads(symbol)
        except json.JSONDecodeError as e:
            raise ModelError(f"malformed symbol JSON: {e}") from e
    raise ModelError(f"the first element of the model tuple must be an mx.sym.Symbol or its JSON text, "
                     f"got {type(symbol).__name__}")


def _numpy_params(params: Optional[Mapping[str, Any]], what: str) -> Dict[str, np.ndarray]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ModelError(f"{what} must be a dict of name -> NDArray, got {type(params).__name__}")
    out = {}
    for name, value in params.items():
        out[str(name)] = value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
    return out


def read_checkpoint(prefix: str) -> Tuple[Any, Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """``(symbol JSON as parsed, arg_params, aux_params)`` (numpy) of ``<prefix>-symbol.json``
    and ``<prefix>-0000.params`` (else the newest epoch); ModelError names a bad file."""
    mx = import_mxnet()
    sym_path = f"{prefix}-symbol.json"
    epoch0 = f"{prefix}-0000.params"
    candidates = sorted(glob.glob(glob.escape(prefix) + "-[0-9][0-9][0-9][0-9].params"))
    params_path = epoch0 if os.path.exists(epoch0) else (candidates[-1] if candidates else epoch0)
    missing = [p for p in (sym_path, params_path) if not os.path.isfile(p)]
    if missing:
        raise ModelError(f"checkpoint prefix {prefix!r}: missing file(s) {missing}")
    try:
        with open(sym_path) as f:
            sym_json = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelError(f"{sym_path}: malformed symbol JSON: {e}") from e
    try:
        saved = mx.nd.load(params_path)
    except mx.base.MXNetError as e:
        raise ModelError(f"{params_path}: not an MXNet params file: {str(e).splitlines()[0]}") from e
    if isinstance(saved, list) and not saved:
        saved = {}   # mx.nd.save of an empty dict (e.g. every weight inside engines) reads back as []
    if not isinstance(saved, dict):
        raise ModelError(f"{params_path}: holds a list of arrays, not named arg:/aux: params")
    arg_params, aux_params = {}, {}
    for key, value in saved.items():
        kind, _, name = key.partition(":")
        if kind not in ("arg", "aux") or not name:
            raise ModelError(f"{params_path}: key {key!r} is not 'arg:<name>' or 'aux:<name>'")
        (arg_params if kind == "arg" else aux_params)[name] = value.asnumpy()
    return sym_json, arg_params, aux_params


def _parse(sym_json: Any, arg_params: Dict[str, np.ndarray], aux_params: Dict[str, np.ndarray]) -> MXModel:
    if not isinstance(sym_json, dict) or not isinstance(sym_json.get("nodes"), list) \
            or not isinstance(sym_json.get("heads"), list):
        raise ModelError("malformed symbol JSON: not an MXNet symbol (no 'nodes' and 'heads' lists)")
    nodes = sym_json["nodes"]
    names = set()
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("op"), str) or not isinstance(node.get("name"), str):
            raise ModelError(f"malformed symbol JSON: node {i} has no 'op'/'name' strings")
        if node["name"] in names:
            raise ModelError(f"malformed symbol JSON: duplicate node name {node['name']!r}")
        names.add(node["name"])
        node.setdefault("inputs", [])
        if not isinstance(node["inputs"], list) or not isinstance(node.get("attrs", {}), dict):
            raise ModelError(f"malformed symbol JSON: node {node['name']!r} has 'inputs' that are not a list "
                             "or 'attrs' that are not an object")
        for ref in node["inputs"]:
            _check_ref(ref, i, f"node {node['name']!r}")
    for ref in sym_json["heads"]:
        _check_ref(ref, len(nodes), "heads")
    return MXModel(nodes, sym_json["heads"], _num_outputs(sym_json), arg_params, aux_params)


def _check_ref(ref: Any, limit: int, where: str) -> None:
    ok = isinstance(ref, list) and len(ref) >= 2 and all(isinstance(v, int) for v in ref)
    if not ok or not 0 <= ref[0] < limit or ref[1] < 0:
        raise ModelError(f"malformed symbol JSON: {where} has input {ref!r}, which is not an earlier node's output")


def _num_outputs(sym_json: Dict[str, Any]) -> List[int]:
    """Outputs per node: from ``node_row_ptr`` when present, else 1 + the largest index read."""
    nodes = sym_json["nodes"]
    row_ptr = sym_json.get("node_row_ptr")
    if isinstance(row_ptr, list) and len(row_ptr) == len(nodes) + 1:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in row_ptr) \
                or any(row_ptr[i + 1] <= row_ptr[i] for i in range(len(nodes))):
            raise ModelError("malformed symbol JSON: node_row_ptr is not an increasing list of integers")
        return [row_ptr[i + 1] - row_ptr[i] for i in range(len(nodes))]
    counts = [1] * len(nodes)
    for ref in [r for n in nodes for r in n["inputs"]] + sym_json["heads"]:
        counts[ref[0]] = max(counts[ref[0]], ref[1] + 1)
    return counts
