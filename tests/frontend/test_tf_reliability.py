"""Graph checks at the door (docs/reliability.md): TF1 control flow, integer graph inputs
and constants that would expand beyond max_expanded_constant_bytes end in a ModelError
naming the node, before any work (no raw KeyError, no hang)."""
from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

from ratelnn.errors import ModelError
from ratelnn.frontend.tensorflow import converter


def cfg(tmp_path, shape, out="y", **extra):
    return {"input_nodes": ["x"], "output_nodes": [out], "input_shapes": [shape],
            "output_dir": str(tmp_path / "out"), **extra}


def tf1_graph(build):
    g = tf.Graph()
    with g.as_default():
        build()
    return g.as_graph_def()


@pytest.fixture
def v1_control_flow():
    tf.compat.v1.disable_control_flow_v2()
    yield
    tf.compat.v1.enable_control_flow_v2()


def test_tf1_cond_is_refused_as_control_flow_naming_the_node(tmp_path, v1_control_flow):
    def build():
        x = tf.compat.v1.placeholder(tf.float32, (2, 4), name="x")
        h = tf.compat.v1.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)
        tf.nn.relu(h, name="y")
    with pytest.raises(ModelError, match=r"control flow is not supported: .*'cond/\w+' \((Switch|Merge)\)"):
        converter(tf1_graph(build), cfg(tmp_path, [2, 4]))


def test_tf1_while_loop_is_refused_as_control_flow(tmp_path, v1_control_flow):
    def build():
        x = tf.compat.v1.placeholder(tf.float32, (2, 4), name="x")
        _, h = tf.compat.v1.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0),
                                       [tf.constant(0), x])
        tf.nn.relu(h, name="y")
    with pytest.raises(ModelError, match="control flow is not supported"):
        converter(tf1_graph(build), cfg(tmp_path, [2, 4]))


def test_integer_input_feeding_a_quantized_op_is_refused_naming_it():
    """The frontend-neutral guard (model_handler.py): an integer input read by an IR op."""
    from ratelnn.model_handler import _integer_inputs_checked
    from ratelnn.ir import Graph, Node, TensorInfo
    g = Graph("int_relu")
    g.add_input("x", (2, 4), "int32")
    g.add_node(Node("y", "Relu", ["x"], ["y"], {}), [TensorInfo((2, 4), "int32")])
    g.outputs = ["y"]
    with pytest.raises(ModelError, match="input 'x' is int32.*node 'y' \\(Relu\\) reads it"):
        _integer_inputs_checked(g)


def test_integer_arithmetic_stays_in_tensorflow(tmp_path):
    def build():
        x = tf.compat.v1.placeholder(tf.int32, (2, 4), name="x")
        h = tf.cast(tf.nn.relu(x * 3 + 1), tf.float32)
        tf.nn.relu(tf.matmul(h, np.ones((4, 3), np.float32)), name="y")
    conv = converter(tf1_graph(build), cfg(tmp_path, [2, 4]))
    assert {n.op for n in conv.graph.nodes if n.outputs[0].startswith(("mul", "add", "Relu"))} == {"Opaque"}
    conv.calibrate(np.arange(16, dtype=np.int32).reshape(4, 4), progress=False)
    assert any(n.op == "RatelEngineOp" for n in conv.to_npu().node)


def test_integer_input_through_a_cast_still_converts(tmp_path):
    def build():
        x = tf.compat.v1.placeholder(tf.int32, (2, 4), name="x")
        tf.nn.relu(tf.matmul(tf.cast(x, tf.float32), np.ones((4, 3), np.float32)), name="y")
    conv = converter(tf1_graph(build), cfg(tmp_path, [2, 4]))
    conv.calibrate(np.arange(16, dtype=np.int32).reshape(4, 4), progress=False)
    assert conv.to_npu() is not None


def splat_matmul_graph():
    """283-ish bytes: a splat Const of shape [4, 2^26] feeding a MatMul."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, (1, 4), name="x")
        w = tf.constant(0.5, shape=(4, 1 << 26), dtype=tf.float32)
        tf.matmul(x, w, name="y")
    return tf1_graph(build)


def test_splat_constant_beyond_the_limit_is_refused_before_folding(tmp_path):
    graph_def = splat_matmul_graph()
    assert graph_def.ByteSize() < 400
    start = time.monotonic()
    with pytest.raises(ModelError, match=r"constant '\w+' of shape \[4, 67108864\] expands .* "
                                         r"max_expanded_constant_bytes"):
        converter(graph_def, cfg(tmp_path, [1, 4]))
    assert time.monotonic() - start < 30


def test_constant_limit_is_configurable(tmp_path):
    with pytest.raises(ModelError, match="max_expanded_constant_bytes = 1,000"):
        def build():
            x = tf.compat.v1.placeholder(tf.float32, (1, 4), name="x")
            tf.matmul(x, tf.constant(0.5, shape=(4, 1000)), name="y")
        converter(tf1_graph(build), cfg(tmp_path, [1, 4], max_expanded_constant_bytes=1000))


def test_integer_input_into_an_embedding_converts_and_runs_correctly(tmp_path):
    """Keras' Embedding computes on the int32 ids (Less, AddV2, SelectV2: negative ids wrap)
    before its GatherV2: integer arithmetic stays a framework op, the float path after the
    Gather is quantized and compiled, and the compiled model equals the quantized one."""
    import keras
    from ratelnn.frontend.tensorflow import freeze_keras
    from ratelnn.testing import run_graph
    rng = np.random.default_rng(0)
    ids = keras.Input((6,), dtype="int32", name="chars")
    h = keras.layers.Flatten()(keras.layers.Embedding(40, 8, name="emb")(ids))
    model = keras.Model(ids, keras.layers.Dense(5, activation="softmax", name="probs")(h))
    model.get_layer("emb").set_weights([rng.normal(0, 1, (40, 8)).astype(np.float32)])
    graph_def, inputs, outputs = freeze_keras(model, [[None, 6]])
    assert any(n.op == "AddV2" and n.input[0] == "chars" for n in graph_def.node)  # integer arithmetic
    x = rng.integers(0, 40, (64, 6)).astype(np.int32)
    conv = converter(graph_def, {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[8, 6]],
                                 "output_dir": str(tmp_path / "out")})
    conv.calibrate(x, progress=False)
    compiled, quant = conv.to_npu(), conv.to_quant()
    assert any(n.op == "RatelEngineOp" for n in compiled.node)
    want, got = (run_graph(g, inputs[0], outputs[0], x, 8) for g in (graph_def, compiled))
    np.testing.assert_array_equal(got, run_graph(quant, inputs[0], outputs[0], x, 8))
    assert np.abs(want - got).mean() < 0.02 and (want.argmax(1) == got.argmax(1)).mean() >= 0.95
