"""Reading and writing ONNX models (docs/onnx.md): a ``ModelProto`` or a path, opset checks,
external data; what a model holds (inputs, outputs, ops outside engines, engines: docs/cli.md).

A model given as a path is loaded with its external data from the model's folder; a
``ModelProto`` whose initializers still point to external files is read from
``base_dir`` (the folder of the path it was loaded from).  Every problem is a ModelError
naming the file or the node.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ...errors import ModelError
from ...frameworks import import_framework
from ...oplib import ONNX_DOMAIN as DOMAIN   # the ONNX domain of ratelnn's custom ops

MIN_OPSET = 13        # the oldest default-domain opset the frontend reads
DOMAIN_VERSION = 1
_SUBGRAPH_OPS = ("If", "Loop", "Scan")
ENGINE_OP = "RatelEngineOp"
# role of the nodes outside engines that are no float computation (ONNX op types)
OP_ROLES = {"RatelMinMax": "calibration", "RatelQuant": "quantize", "QuantizeLinear": "quantize",
            "DequantizeLinear": "dequantize"}


def import_onnx():
    """The ``onnx`` module; FrameworkNotInstalledError naming the extra when it is missing."""
    return import_framework("onnx")


def max_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` knows."""
    return int(import_onnx().defs.onnx_opset_version())


def load_model(model: Any) -> Tuple[Any, Optional[str]]:
    """``(ModelProto with every initializer's data loaded, folder of the model file or None)``
    for a ModelProto, a path or serialized bytes; ModelError for a missing or unreadable
    file, missing external data, an opset out of range or control flow."""
    onnx = import_onnx()
    base_dir = None
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise ModelError(f"ONNX model file {str(path)!r} does not exist")
        base_dir = str(path.parent)
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as e:  # protobuf's DecodeError and friends
            raise ModelError(f"cannot read ONNX model {str(path)!r}: {e}") from e
    elif isinstance(model, bytes):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(model)
        except Exception as e:
            raise ModelError(f"cannot parse the ONNX model bytes: {e}") from e
    elif isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    else:
        raise ModelError(f"an ONNX model must be an onnx.ModelProto or a path, got {type(model).__name__}")
    load_external(proto, base_dir)
    check_model(proto)
    return proto, base_dir


def load_external(proto: Any, base_dir: Optional[str]) -> None:
    """Read the external data of every initializer into the proto; ModelError naming the
    initializer and the file when it cannot be read."""
    onnx = import_onnx()
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data
    for tensor in proto.graph.initializer:
        if not uses_external_data(tensor):
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "?")
        if base_dir is None:
            raise ModelError(f"initializer {tensor.name!r} keeps its data in the external file {location!r}: "
                             "give the model as a path (or load it with onnx.load) so that the file can be found")
        file = os.path.join(base_dir, location)
        if not os.path.isfile(file):
            raise ModelError(f"initializer {tensor.name!r}: external data file {file!r} does not exist")
        try:
            load_external_data_for_tensor(tensor, base_dir)
        except Exception as e:
            raise ModelError(f"initializer {tensor.name!r}: cannot read external data file {file!r}: {e}") from e
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]


def default_opset(proto: Any) -> int:
    return next((int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


def check_model(proto: Any) -> None:
    """ModelError for an opset outside ``[MIN_OPSET, max_opset()]`` or a control-flow node."""
    opset, newest = default_opset(proto), max_opset()
    if not MIN_OPSET <= opset <= newest:
        raise ModelError(f"the model uses ONNX opset {opset}; ratelnn reads opsets {MIN_OPSET} to {newest} "
                         "(convert it with onnx.version_converter.convert_version first)")
    for node in proto.graph.node:
        if node.op_type in _SUBGRAPH_OPS and node.domain in ("", "ai.onnx"):
            raise ModelError(f"node {node.name or node.output[0]!r} is an ONNX {node.op_type}: control flow "
                             "(If, Loop, Scan) is not supported; export the model with the loop unrolled")


def save_model(proto: Any, path: "str | os.PathLike", external_data: bool = False) -> None:
    """Write ``proto`` to ``path`` through a temporary file renamed into place; with
    ``external_data`` the initializers go to ``<name>.data`` beside it."""
    from ...fileio import write_atomic
    onnx = import_onnx()
    path = Path(path)
    if not external_data:
        write_atomic(str(path), proto.SerializeToString())
        return
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    write_atomic(str(path), lambda tmp: onnx.save_model(copy, tmp, save_as_external_data=True,
                                                        all_tensors_to_one_file=True,
                                                        location=path.name + ".data", size_threshold=0))


def write_model(proto: Any, base: str) -> List[str]:
    """Write ``proto`` to ``<base>.onnx`` (atomically); returns ``[that path]`` (the form
    writer of ``ratelnn build``, as the other frontends' ``save_model``)."""
    save_model(proto, f"{base}.onnx")
    return [f"{base}.onnx"]


def qdq_nodes(proto: Any) -> List[str]:
    """Names of the standard-domain nodes of ``proto`` that quantize or dequantize (the
    ONNX spellings of the registry's QDQ ops): a QDQ model has some, a float model none."""
    from ...ir import registry
    spellings = {s for name in registry.QDQ_OPS for s in registry.get(name).onnx}
    return [n.name or n.output[0] for n in proto.graph.node if n.domain in ("", "ai.onnx") and n.op_type in spellings]


def node_attrs(node: Any) -> Dict[str, Any]:
    """The attributes of the ``NodeProto`` ``node`` as Python values (bytes for strings)."""
    onnx = import_onnx()
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _engine_name(node: Any, attrs: Dict[str, Any]) -> str:
    name = attrs.get("engine_name", b"")
    return (name.decode(errors="replace") if isinstance(name, bytes) else str(name)) or node.name


def engine_sets(proto: Any) -> List[Tuple[str, List[bytes]]]:
    """``(engine name, [engine bytes, batch engine bytes...])`` of the ``RatelEngineOp``
    nodes, in graph order: each node's engine set (docs/multi-batch.md)."""
    found = []
    for node in proto.graph.node:
        if node.domain == DOMAIN and node.op_type == ENGINE_OP:
            attrs = node_attrs(node)
            found.append((_engine_name(node, attrs), [bytes(attrs["engine"]),
                                                      *(bytes(b) for b in attrs.get("batch_engines", []))]))
    return found


def engine_nodes(proto: Any) -> List[Tuple[str, bytes]]:
    """``(engine name, engine bytes)`` of the ``RatelEngineOp`` nodes, in graph order."""
    return [(name, blobs[0]) for name, blobs in engine_sets(proto)]


def describe(proto: Any) -> Dict[str, Any]:
    """What ``proto`` holds, as ``frontend.tensorflow.model_io.describe`` has it: ``inputs``
    (graph inputs that are no initializer: name, dtype, shape with None for a symbolic or
    unknown size, None if the rank is unknown), ``outputs`` (the graph outputs), ``ops``
    (nodes outside engines: name, op, role ``quantize``, ``dequantize``, ``calibration`` or
    ``float``), ``constants_bytes`` (initializers), ``engines``, ``engine_sets``."""
    onnx = import_onnx()
    initializers = {t.name for t in proto.graph.initializer}
    inputs = []
    for vi in proto.graph.input:
        if vi.name in initializers:
            continue
        t = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "?"
        shape = [int(d.dim_value) if d.HasField("dim_value") else None for d in t.shape.dim] \
            if t.HasField("shape") else None
        inputs.append({"name": vi.name, "dtype": dtype, "shape": shape})
    ops = [{"name": n.name or n.output[0], "op": n.op_type, "role": OP_ROLES.get(n.op_type, "float")}
           for n in proto.graph.node if not (n.domain == DOMAIN and n.op_type == ENGINE_OP)]
    return {"inputs": inputs, "outputs": [{"name": o.name} for o in proto.graph.output], "ops": ops,
            "constants_bytes": sum(t.ByteSize() for t in proto.graph.initializer),
            "engines": engine_nodes(proto), "engine_sets": engine_sets(proto)}
