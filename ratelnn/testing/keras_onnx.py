"""A Keras model written as ONNX by tf2onnx (``pip install tf2onnx``), for tests and benches
that run one model through both the TensorFlow and the ONNX path."""
from __future__ import annotations

from typing import Any, NamedTuple

OPSET = 17


class KerasONNX(NamedTuple):
    """The exported ``onnx.ModelProto`` and the names of its single input and output."""
    model: Any
    input: str
    output: str


def keras_to_onnx(model: Any, nchw: bool = True, opset: int = OPSET) -> KerasONNX:
    """``model`` (a single-input Keras model taking [N, H, W, C]) as ONNX at any batch.

    ``nchw``: the ONNX input takes [N, C, H, W] (tf2onnx's ``inputs_as_nchw``; the layout
    transposes inside the graph are optimised away), else the Keras [N, H, W, C]."""
    import tensorflow as tf
    import tf2onnx

    name = model.inputs[0].name.split(":")[0]
    spec = (tf.TensorSpec((None, *model.input_shape[1:]), tf.float32, name=name),)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset,
                                          inputs_as_nchw=[name] if nchw else None)
    return KerasONNX(proto, proto.graph.input[0].name, proto.graph.output[0].name)
