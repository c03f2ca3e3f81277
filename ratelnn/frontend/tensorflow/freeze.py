"""Freeze Keras 3 models and SavedModels into GraphDefs that ratelnn can convert.

Both helpers return ``(graph_def, input_names, output_names)``: the node names to put
in the config's ``input_nodes`` / ``output_nodes``.
"""
from __future__ import annotations

import heapq
import os
import re
import shutil
import tempfile
from typing import List, Optional, Sequence, Tuple

from ...errors import ModelError


def _frozen(concrete_function) -> Tuple[object, List[str], List[str]]:
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    frozen = convert_variables_to_constants_v2(concrete_function)
    graph_def = _canonical_order(frozen.graph.as_graph_def())
    inputs = [t.name.split(":")[0] for t in frozen.inputs if t.dtype != tf.resource]
    outputs = [t.name[:-2] if t.name.endswith(":0") else t.name for t in frozen.outputs]
    return graph_def, inputs, outputs


def _canonical_order(graph_def):
    """``graph_def`` with its nodes in one deterministic order: topological (data and control
    edges), ties broken by node name.  TensorFlow's freezing emits the same nodes in an order
    that depends on Python's hash seed, so one model froze to different bytes in two
    processes (docs/architecture.md §9: the store promises byte-identical builds).  Nodes on
    a cycle (TF1 loops) follow in name order."""
    nodes = {n.name: n for n in graph_def.node}
    users = {name: [] for name in nodes}
    pending = {}
    for node in graph_def.node:
        deps = {ref.lstrip("^").split(":")[0] for ref in node.input} & nodes.keys()
        pending[node.name] = len(deps)
        for dep in deps:
            users[dep].append(node.name)
    ready = [name for name, count in pending.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for user in users[name]:
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, user)
    placed = set(order)
    order += sorted(name for name in nodes if name not in placed)
    canonical = type(graph_def)()
    canonical.CopyFrom(graph_def)
    del canonical.node[:]
    canonical.node.extend(nodes[name] for name in order)
    return canonical


def _placeholder_name(name: str, index: int) -> str:
    clean = re.sub(r"[^A-Za-z0-9_.\-/]", "_", name or "")
    return clean if re.match(r"[A-Za-z]", clean) else f"input_{index}"


def freeze_keras(model, input_shapes: Optional[Sequence[Sequence[Optional[int]]]] = None):
    """Freeze a Keras 3 model (inference mode) into a GraphDef.

    ``input_shapes``: one shape per model input (``None`` dims stay dynamic); default
    the model's own input shapes.  Returns ``(graph_def, input_names, output_names)``.
    """
    import tensorflow as tf
    model_inputs = list(getattr(model, "inputs", None) or [])
    if input_shapes is None:
        if not model_inputs:
            raise ModelError("the Keras model has no known inputs (build it or pass input_shapes)")
        input_shapes = [tuple(t.shape) for t in model_inputs]
    names = [_placeholder_name(getattr(t, "name", ""), i) for i, t in enumerate(model_inputs)]
    names += [f"input_{i}" for i in range(len(names), len(input_shapes))]
    dtypes = [getattr(t, "dtype", "float32") for t in model_inputs] + ["float32"] * len(input_shapes)
    specs = [tf.TensorSpec(list(s), tf.as_dtype(d), name=n)
             for s, d, n in zip(input_shapes, dtypes, names)]

    @tf.function
    def run(*args):
        return model(args[0] if len(args) == 1 else list(args), training=False)

    return _frozen(run.get_concrete_function(*specs))


def freeze_saved_model(path: str, signature: str = "serving_default"):
    """Freeze signature ``signature`` of the SavedModel at ``path`` into a GraphDef.

    A SavedModel written by older Keras with optimizer slots (which TF 2.16+ cannot restore:
    ``'_UserObject' object has no attribute 'add_slot'``) is loaded from a temporary copy
    whose object graph lists no slots; inference does not use them.
    Returns ``(graph_def, input_names, output_names)``.
    """
    import tensorflow as tf
    try:
        try:
            loaded = tf.saved_model.load(str(path))
        except AttributeError as e:
            if "slot" not in str(e):
                raise
            with tempfile.TemporaryDirectory(prefix="ratelnn-savedmodel-") as tmp:
                loaded = tf.saved_model.load(_copy_without_slots(str(path), tmp))
                if signature not in loaded.signatures:
                    raise ModelError(f"SavedModel {path!r} has no signature {signature!r}; "
                                     f"it has {sorted(loaded.signatures.keys())}")
                return _frozen(loaded.signatures[signature])
    except (OSError, ValueError, AttributeError, TypeError, KeyError) as e:
        raise ModelError(f"cannot load SavedModel {path!r}: {type(e).__name__}: {e}") from e
    if signature not in loaded.signatures:
        raise ModelError(f"SavedModel {path!r} has no signature {signature!r}; "
                         f"it has {sorted(loaded.signatures.keys())}")
    return _frozen(loaded.signatures[signature])


def _copy_without_slots(path: str, tmp: str) -> str:
    """A copy of the SavedModel at ``path`` under ``tmp`` whose object graph lists no
    optimizer slot variables; returns the copy's path."""
    from tensorflow.core.protobuf import saved_model_pb2
    copy = os.path.join(tmp, "model")
    shutil.copytree(path, copy)
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(copy, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    for meta_graph in proto.meta_graphs:
        for node in meta_graph.object_graph_def.nodes:
            del node.slot_variables[:]
    with open(os.path.join(copy, "saved_model.pb"), "wb") as f:
        f.write(proto.SerializeToString())
    return copy
