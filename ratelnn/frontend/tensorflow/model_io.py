"""A frozen TensorFlow GraphDef on disk (a binary ``.pb`` file) and what it holds: inputs,
outputs, the ops outside engines and the engines of a compiled graph (docs/cli.md)."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ...errors import ModelError
from ...fileio import write_atomic
from ...frameworks import import_tensorflow

ENGINE_OP = "RatelEngineOp"
# role of the ratelnn ops that sit outside engines
OP_ROLES = {"RatelQuant": "quantize", "RatelDequant": "dequantize", "RatelMinMax": "calibration"}
STRUCTURAL_OPS = {"Const", "Placeholder", "NoOp"}   # nodes that compute nothing


def read_graphdef(path: str) -> Any:
    """The GraphDef of the binary ``.pb`` file ``path``; ModelError if it holds none."""
    graph_def = import_tensorflow().compat.v1.GraphDef()
    try:
        with open(path, "rb") as f:
            graph_def.ParseFromString(f.read())
    except Exception as e:  # protobuf's DecodeError
        raise ModelError(f"{path} is not a binary TensorFlow GraphDef: {str(e) or type(e).__name__}") from None
    return graph_def


def save_model(graph_def: Any, base: str) -> List[str]:
    """Write ``graph_def`` to ``<base>.pb`` (binary, atomically); returns ``[that path]``."""
    write_atomic(f"{base}.pb", graph_def.SerializeToString())
    return [f"{base}.pb"]


def engine_nodes(graph_def: Any) -> List[Tuple[str, bytes]]:
    """``(engine name, engine bytes)`` of the ``RatelEngineOp`` nodes, in graph order."""
    return [(nd.attr["engine_name"].s.decode(errors="replace") or nd.name, nd.attr["engine"].s)
            for nd in graph_def.node if nd.op == ENGINE_OP]


def engine_sets(graph_def: Any) -> List[Tuple[str, List[bytes]]]:
    """``(engine name, [engine bytes, batch engine bytes...])`` of the ``RatelEngineOp``
    nodes, in graph order: each node's engine set (docs/multi-batch.md)."""
    return [(nd.attr["engine_name"].s.decode(errors="replace") or nd.name,
             [nd.attr["engine"].s, *(nd.attr["batch_engines"].list.s if "batch_engines" in nd.attr else [])])
            for nd in graph_def.node if nd.op == ENGINE_OP]


def describe(graph_def: Any) -> Dict[str, Any]:
    """What ``graph_def`` holds: ``inputs`` (Placeholders: name, dtype, shape with None for free
    sizes, None if the rank is unknown), ``outputs`` (computing nodes nothing consumes), ``ops``
    (computing nodes outside engines: name, op, role ``quantize``, ``dequantize``,
    ``calibration`` or ``float``), ``constants_bytes``, ``engines`` (:func:`engine_nodes`),
    ``engine_sets`` (:func:`engine_sets`)."""
    import tensorflow as tf
    consumed = {ref.lstrip("^").split(":")[0] for nd in graph_def.node for ref in nd.input}
    inputs = [{"name": nd.name, "dtype": tf.dtypes.as_dtype(nd.attr["dtype"].type).name,
               "shape": None if nd.attr["shape"].shape.unknown_rank else
               [None if d.size < 0 else int(d.size) for d in nd.attr["shape"].shape.dim]}
              for nd in graph_def.node if nd.op == "Placeholder"]
    outputs = [{"name": nd.name} for nd in graph_def.node if nd.name not in consumed and nd.op not in STRUCTURAL_OPS]
    ops = [{"name": nd.name, "op": nd.op, "role": OP_ROLES.get(nd.op, "float")} for nd in graph_def.node
           if nd.op not in STRUCTURAL_OPS and nd.op != ENGINE_OP]
    constants = sum(nd.attr["value"].tensor.ByteSize() for nd in graph_def.node if nd.op == "Const")
    return {"inputs": inputs, "outputs": outputs, "ops": ops, "constants_bytes": constants,
            "engines": engine_nodes(graph_def), "engine_sets": engine_sets(graph_def)}
