"""The numpy evaluator runs a TF graph's Opaque nodes (StridedSlice, GatherV2, Split, Sum, ...)
with TensorFlow's kernels: the float IR evaluates to the frozen graph's outputs."""
import numpy as np
import pytest

from ratelnn.frontend.tensorflow import converter, freeze_keras
from ratelnn.ir import Node
from ratelnn.ir.evaluate import EvaluationError, evaluate, evaluate_node
from ratelnn.runners import run_model


def _text_model():
    """Character ids [N, 6] -> Embedding -> drop the first step (StridedSlice) -> gate split
    (Split) -> sigmoid * tanh -> sum over time (Sum) -> Dense softmax; the index arithmetic of
    the Embedding's Gather stays integer."""
    import keras
    from keras import layers, ops
    keras.utils.set_random_seed(0)
    ids = keras.Input((6,), dtype="int32", name="ids")
    e = layers.Embedding(20, 8)(ids)
    a, b = layers.Lambda(lambda t: ops.split(t[:, 1:], 2, axis=-1))(e)
    s = layers.Lambda(lambda t: ops.sum(ops.sigmoid(t[0]) * ops.tanh(t[1]), axis=1))([a, b])
    return keras.Model(ids, layers.Dense(5, activation="softmax")(s))


def test_float_ir_with_opaque_ops_matches_tensorflow(tmp_path):
    graph_def, inputs, outputs = freeze_keras(_text_model(), [(None, 6)])
    conv = converter(graph_def, {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[4, 6]],
                                 "output_dir": str(tmp_path)})
    kinds = {n.attrs.get("type") for n in conv.graph.nodes if n.op == "Opaque"}
    assert {"StridedSlice", "GatherV2", "Split", "Sum"} <= kinds, kinds
    ids = np.random.default_rng(1).integers(0, 20, (4, 6)).astype(np.int32)
    expected = run_model("tensorflow", graph_def, {inputs[0]: ids}, outputs)[0]
    got = evaluate(conv.graph, {conv.graph.inputs[0]: ids})[conv.graph.outputs[0]]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_opaque_op_tensorflow_cannot_run_names_the_node():
    node = Node("bad", "Opaque", ["x"], ["bad"], {"framework": "tensorflow", "type": "NoSuchOp",
                                                  "payload": b"\n\x03bad\x12\x08NoSuchOp"})
    with pytest.raises(EvaluationError, match="node 'bad' is an Opaque tensorflow op 'NoSuchOp'"):
        evaluate_node(node, [np.zeros(3, np.float32)])
