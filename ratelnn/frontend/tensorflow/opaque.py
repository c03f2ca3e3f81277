"""Runs the IR's ``Opaque`` TensorFlow nodes (their NodeDef) with TensorFlow's own kernels, for
the numpy evaluator (``ratelnn.ir.evaluate.register_opaque_runner``): the op alone, its
inputs fed as arrays, so index arithmetic, ``StridedSlice``, ``GatherV2``, ``Split``, ``Sum``...
evaluate exactly as in the framework model."""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

from ...ir import Node
from ...ir.evaluate import EvaluationError

# (payload, input dtypes and shapes) -> the op as a TF function (one graph per node and shape)
_FUNCTIONS: Dict[Tuple, Callable] = {}


def _function(node: Node, inputs: Sequence[np.ndarray]) -> Callable:
    """The node's NodeDef imported alone behind placeholders of the inputs' dtypes and shapes,
    wrapped as a concrete function returning every output."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2, node_def_pb2
    op = node_def_pb2.NodeDef.FromString(node.attrs["payload"])
    op.name, op.device = "op", ""
    del op.input[:]
    graph_def = graph_pb2.GraphDef()
    for k, x in enumerate(inputs):
        placeholder = graph_def.node.add(name=f"input_{k}", op="Placeholder")
        placeholder.attr["dtype"].type = tf.as_dtype(x.dtype).as_datatype_enum
        op.input.append(placeholder.name)
    graph_def.node.append(op)
    fetches = [f"op:{k}" for k in range(len(node.outputs))]

    def imported(*args):
        return tf.graph_util.import_graph_def(graph_def, {f"input_{k}:0": a for k, a in enumerate(args)},
                                              fetches, name="")
    return tf.compat.v1.wrap_function(imported, [tf.TensorSpec(x.shape, x.dtype) for x in inputs])


def run_opaque(node: Node, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Outputs of the Opaque TF ``node`` on ``inputs`` (one array per output)."""
    arrays = [np.asarray(x) for x in inputs]
    key = (node.attrs["payload"], tuple((x.dtype.str, x.shape) for x in arrays))
    try:
        if key not in _FUNCTIONS:
            _FUNCTIONS[key] = _function(node, arrays)
        return [np.asarray(out) for out in _FUNCTIONS[key](*arrays)]
    except Exception as e:  # noqa: BLE001  TF's own errors, named by node
        raise EvaluationError(f"node {node.name!r} is an Opaque tensorflow op {node.attrs.get('type')!r}: "
                              f"TensorFlow could not run it on inputs {[x.shape for x in arrays]}: "
                              f"{(str(e).splitlines() or [''])[0][:300]}") from None
