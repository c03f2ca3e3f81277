"""ONNX Runtime, the framework of the ONNX frontend: plain sessions, the Opaque-node
runner of the numpy evaluator and the shape probe of the importer."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

from ...errors import ModelError
from ...frameworks import import_framework
from ...ir import Node, TensorInfo
from .model_io import DOMAIN, import_onnx


def _ort():
    return import_framework("onnxruntime")


def _serialized(model: Any) -> bytes:
    onnx = import_onnx()
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if isinstance(model, bytes):
        return model
    raise ModelError(f"an ONNX model must be an onnx.ModelProto, got {type(model).__name__}")


def uses_custom_ops_of(source: Any) -> bool:
    """Whether the serialized model ``source`` holds nodes of the domain ``ratelnn``."""
    if not isinstance(source, bytes):
        return False
    model = import_onnx().ModelProto()
    model.ParseFromString(source)
    return any(n.domain == DOMAIN for n in model.graph.node)


# ONNX Runtime's fused int8 kernels (QLinearConv, QLinearMatMul, ...) that it makes of QDQ
# patterns multiply u8 x s8 pairs with vpmaddubsw where the CPU has no VNNI (AVX2, AVX-512
# without VNNI): the pair sums saturate at int16, and outputs drift far from what the QDQ
# model computes (measured on an AVX2-only EPYC: 0.44 on outputs of magnitude 1.2).  With
# this entry "1" the Quantize/Dequantize nodes stay as they are and the model computes its
# QDQ semantics on every CPU (docs/onnx.md, "Running the QDQ model").
DISABLE_QDQ_FUSION = "session.disable_quant_qdq"


def _has_entry(options: Any, key: str) -> bool:
    try:
        options.get_session_config_entry(key)
    except Exception:   # ONNX Runtime raises when the entry was never set
        return False
    return True


def onnx_session(model: Any, options: Any = None, intra_op_threads: int = 0):
    """An ``onnxruntime.InferenceSession`` (CPU) for ``model`` (ModelProto, serialized bytes
    or path).  ``options``: ``SessionOptions`` to start from; unless they set
    :data:`DISABLE_QDQ_FUSION`, it is set to "1" (QDQ models compute their QDQ semantics)."""
    ort = _ort()
    options = options or ort.SessionOptions()
    if intra_op_threads:
        options.intra_op_num_threads = intra_op_threads
    if not _has_entry(options, DISABLE_QDQ_FUSION):
        options.add_session_config_entry(DISABLE_QDQ_FUSION, "1")
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else _serialized(model)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as e:
        text = str(e)
        if f"{DOMAIN}:Ratel" in text or uses_custom_ops_of(source):
            raise ModelError(f"the model holds ratelnn custom ops (domain {DOMAIN!r}) that this ONNX Runtime "
                             f"session has not registered: create it with ratelnn.onnx_session(model). {text}") from e
        raise ModelError(f"ONNX Runtime cannot load the model: {text}") from e


def _single_node_model(proto: Any, inputs: Sequence[np.ndarray], opset: int = 0):
    onnx = import_onnx()
    from .model_io import max_opset
    ins = [onnx.helper.make_tensor_value_info(t, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for t, v in zip([t for t in proto.input if t], inputs)]
    outs = [onnx.helper.make_value_info(t, onnx.TypeProto()) for t in proto.output if t]
    graph = onnx.helper.make_graph([proto], "opaque", ins, outs)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset or max_opset())])


def run_opaque(node: Node, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Run an Opaque ONNX node alone in ONNX Runtime (for the numpy evaluator)."""
    onnx = import_onnx()
    proto = onnx.NodeProto()
    proto.ParseFromString(bytes(node.attrs["payload"]))
    slots = node.attrs.get("input_slots", range(len(node.inputs)))
    names = list(proto.input)
    for k, slot in enumerate(slots):
        names[slot] = f"in{k}"
    out_names = [f"out{k}" if t else "" for k, t in enumerate(proto.output)]
    del proto.input[:], proto.output[:]
    proto.input.extend(names)
    proto.output.extend(out_names)
    arrays = [np.asarray(v) for v in inputs]
    session = onnx_session(_single_node_model(proto, arrays))
    fetch = [out_names[s] for s in node.attrs.get("output_slots", range(len(node.outputs)))]
    return list(session.run(fetch, {f"in{k}": v for k, v in enumerate(arrays)}))


def probe_shapes(model: Any, input_shapes: Mapping[str, Sequence[int]],
                 tensors: Sequence[str]) -> Dict[str, TensorInfo]:
    """Shapes and dtypes of ``tensors`` from one ONNX Runtime run of ``model`` on zeros at
    ``input_shapes``; ModelError when ONNX Runtime cannot run it."""
    onnx = import_onnx()
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    for t in tensors:
        probe.graph.output.add().name = t
    feeds = {}
    for vi in probe.graph.input:
        if vi.name in input_shapes:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type or 1)
            feeds[vi.name] = np.zeros(tuple(input_shapes[vi.name]), dtype)
    try:
        values = onnx_session(probe).run(list(tensors), feeds)
    except ModelError:
        raise
    except Exception as e:
        raise ModelError(f"ONNX Runtime cannot run the model at input_shapes {dict(input_shapes)} to find the "
                         f"shapes of {list(tensors)[:5]}: {str(e).splitlines()[0]}") from e
    return {t: TensorInfo(tuple(v.shape), str(v.dtype)) for t, v in zip(tensors, values)}
