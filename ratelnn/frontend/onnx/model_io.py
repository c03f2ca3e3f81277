"""Reading and writing ONNX models (docs/onnx.md): a ``ModelProto`` or a path, opset checks,
external data.

A model given as a path is loaded with its external data from the model's folder; a
``ModelProto`` whose initializers still point to external files is read from
``base_dir`` (the folder of the path it was loaded from).  Every problem is a ModelError
naming the file or the node.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Tuple

from ...errors import ModelError
from ...frameworks import import_framework

MIN_OPSET = 13        # the oldest default-domain opset the frontend reads
DOMAIN = "ratelnn"    # the ONNX domain of ratelnn's custom ops (docs/onnx.md)
DOMAIN_VERSION = 1
_SUBGRAPH_OPS = ("If", "Loop", "Scan")


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
