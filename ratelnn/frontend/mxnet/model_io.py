"""An MXNet checkpoint on disk (``<prefix>-symbol.json`` + ``<prefix>-0000.params``) and what it
holds: inputs, outputs, ops outside engines, engines (docs/cli.md); parsing is :mod:`.model`'s."""
from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Mapping, Tuple

from ...fileio import write_atomic
from ...mxnet_compat import import_mxnet
from ...oplib import mx_init
from .attrs import CUSTOM_OPS, as_int, as_tuple, decode_custom_attrs, node_attrs
from .importer import tensor_name
from .model import load_model, read_checkpoint

ENGINE_OP = CUSTOM_OPS["Engine"]
# role of the ratelnn ops that sit outside engines
OP_ROLES = {CUSTOM_OPS["Quant"]: "quantize", CUSTOM_OPS["Dequant"]: "dequantize", CUSTOM_OPS["MinMax"]: "calibration"}
DTYPES = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8", 6: "int64"}  # __dtype__ codes


def load_checkpoint(prefix: str) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """``(mx.sym.Symbol, arg_params, aux_params)`` (NDArrays) of the checkpoint at ``prefix``,
    with the ratelnn ops loaded (:func:`ratelnn.mx_init`) so that the symbol can hold them."""
    mx = import_mxnet()
    mx_init()
    sym_json, arg_params, aux_params = read_checkpoint(prefix)
    return (mx.sym.load_json(json.dumps(sym_json)), {k: mx.nd.array(v, dtype=v.dtype) for k, v in arg_params.items()},
            {k: mx.nd.array(v, dtype=v.dtype) for k, v in aux_params.items()})


def save_model(model: Tuple[Any, Mapping[str, Any], Mapping[str, Any]], prefix: str) -> List[str]:
    """Write the ``(symbol, arg_params, aux_params)`` ``model`` as ``<prefix>-symbol.json`` and
    ``<prefix>-0000.params`` (each atomically); returns their paths."""
    mx = import_mxnet()
    symbol, arg_params, aux_params = model
    params = {**{f"arg:{k}": v for k, v in arg_params.items()}, **{f"aux:{k}": v for k, v in aux_params.items()}}
    paths = [f"{prefix}-symbol.json", f"{prefix}-0000.params"]
    write_atomic(paths[1], lambda tmp: mx.nd.save(tmp, params))
    write_atomic(paths[0], symbol.tojson().encode())
    return paths


def engine_nodes(nodes: Iterable[Mapping[str, Any]]) -> List[Tuple[str, bytes]]:
    """``(engine name, engine bytes)`` of the ``ratel_engine_op`` nodes among symbol-JSON
    ``nodes``, in order."""
    found = []
    for node in nodes:
        if node["op"] == ENGINE_OP:
            attrs = decode_custom_attrs("Engine", node_attrs(node))
            found.append((attrs["engine_name"] or node["name"], attrs["engine"]))
    return found


def engine_sets(nodes: Iterable[Mapping[str, Any]]) -> List[Tuple[str, List[bytes]]]:
    """``(engine name, [engine bytes, batch engine bytes...])`` of the ``ratel_engine_op``
    nodes among symbol-JSON ``nodes``, in order (docs/multi-batch.md)."""
    found = []
    for node in nodes:
        if node["op"] == ENGINE_OP:
            attrs = decode_custom_attrs("Engine", node_attrs(node))
            found.append((attrs["engine_name"] or node["name"], [attrs["engine"], *attrs.get("batch_engines", [])]))
    return found


def describe(graph_def: Any) -> Dict[str, Any]:
    """What the model ``graph_def`` (anything :func:`.model.load_model` reads) holds, as
    ``frontend.tensorflow.model_io.describe`` has it; inputs are the variables that are no
    parameter, outputs the heads."""
    model = load_model(graph_def)
    params = set(model.arg_params) | set(model.aux_params)
    inputs, ops = [], []
    for node in model.nodes:
        attrs = node_attrs(node)
        if node["op"] == "null" and node["name"] not in params:
            shape = attrs.get("__shape__")
            inputs.append({"name": node["name"], "dtype": DTYPES.get(as_int(attrs.get("__dtype__"), 0), "?"),
                           "shape": list(as_tuple(shape)) if shape else None})
        elif node["op"] not in ("null", ENGINE_OP):
            ops.append({"name": node["name"], "op": node["op"], "role": OP_ROLES.get(node["op"], "float")})
    return {"inputs": inputs, "outputs": [{"name": tensor_name(model, ref)} for ref in model.heads], "ops": ops,
            "constants_bytes": sum(v.nbytes for v in (*model.arg_params.values(), *model.aux_params.values())),
            "engines": engine_nodes(model.nodes), "engine_sets": engine_sets(model.nodes)}
