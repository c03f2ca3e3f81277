"""TensorFlow frontend end to end: Keras 3 model -> freeze -> import -> passes -> export ->
run in TensorFlow, against the Keras outputs and the numpy evaluator."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tensorflow as tf
import keras

from ratelnn.errors import ModelError  # noqa: E402
from ratelnn.frontend.tensorflow import (TFModelHandler, export_graphdef, freeze_keras,  # noqa: E402
                                         freeze_saved_model, import_graphdef)
from ratelnn.ir.evaluate import evaluate  # noqa: E402
from ratelnn.ir.passes import run_default_passes  # noqa: E402

layers = keras.layers


def run_graph_def(graph_def, feeds, fetches):
    """Run a GraphDef in a TF1 session: feeds/fetches by node name."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run([f + ":0" for f in fetches], {k + ":0": v for k, v in feeds.items()})


def _randomize_batchnorm(model, rng):
    """Non-trivial BN statistics (drawn from ``rng``) so that folding is really exercised."""
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            gamma, beta, mean, var = layer.get_weights()
            n = gamma.shape
            layer.set_weights([rng.uniform(0.5, 1.5, n), rng.normal(0, 0.3, n), rng.normal(0, 0.3, n),
                               rng.uniform(0.5, 2.0, n)])


def roundtrip(model, rng, batch=2, numpy_evaluator=True):
    """Freeze, import (+ passes), export and run on inputs drawn from ``rng``; check TF (and the
    numpy evaluator, unless the graph holds Opaque ops) agree with Keras."""
    _randomize_batchnorm(model, rng)
    graph_def, ins, outs = freeze_keras(model)
    shapes = [[batch] + list(t.shape[1:]) for t in model.inputs]
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(ins, shapes)}
    want = model([feeds[n] for n in ins] if len(ins) > 1 else feeds[ins[0]], training=False)
    want = [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]

    graph = run_default_passes(import_graphdef(graph_def, ins, outs, shapes))
    graph.validate()
    assert graph.inputs == ins and graph.outputs == outs
    got_tf = run_graph_def(export_graphdef(graph), feeds, outs)
    got_np = evaluate(graph, feeds) if numpy_evaluator else {}
    for name, w, g in zip(outs, want, got_tf):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(w).max()))
        if numpy_evaluator:
            np.testing.assert_allclose(got_np[name], w, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(w).max()))
    return graph


def ops_of(graph):
    return [n.op for n in graph.nodes]


def _model(build, shape=(12, 12, 3)):
    inp = keras.Input(shape)
    return keras.Model(inp, build(inp))


def test_conv_bn_relu_folds_into_one_conv(rng):
    g = roundtrip(_model(lambda x: layers.ReLU()(layers.BatchNormalization()(
        layers.Conv2D(8, 3, strides=2, padding="same")(x)))), rng)
    assert ops_of(g) == ["Conv2D"]
    assert g.nodes[0].attrs["act"] == "relu" and g.nodes[0].attrs["pads"] == (0, 1, 0, 1)


def test_depthwise_bn_relu6_folds_into_grouped_conv(rng):
    g = roundtrip(_model(lambda x: layers.ReLU(6.0)(layers.BatchNormalization()(
        layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same", use_bias=False)(x)))), rng)
    assert ops_of(g) == ["Conv2D"]
    conv = g.nodes[0]
    assert conv.attrs["groups"] == 3 and conv.attrs["act"] == "relu6"
    assert g.params[conv.inputs[1]].shape == (3, 3, 1, 6)


def test_residual_concat_and_pools(rng):
    def build(x):
        a = layers.Conv2D(4, 3, padding="same", activation="relu")(x)
        b = layers.Conv2D(4, 1)(x)
        s = layers.Add()([a, b])
        c = layers.Concatenate()([s, layers.Conv2D(2, 1)(x)])
        m = layers.MaxPooling2D(3, strides=2, padding="same")(c)
        v = layers.AveragePooling2D(2, padding="valid")(c)
        v2 = layers.AveragePooling2D(3, strides=2, padding="same")(c)
        return layers.Concatenate()([m, v, v2])
    g = roundtrip(_model(build), rng)
    assert sorted(set(ops_of(g))) == ["Add", "AvgPool", "Concat", "Conv2D", "MaxPool"]
    assert not any(n.op in ("BiasAdd", "Relu", "Identity") for n in g.nodes)


def test_gap_dense_softmax(rng):
    g = roundtrip(_model(lambda x: layers.Dense(5, activation="softmax")(
        layers.GlobalAveragePooling2D()(layers.Conv2D(6, 3)(x)))), rng)
    assert ops_of(g) == ["Conv2D", "Mean", "MatMul", "Softmax"]
    assert g.nodes[1].attrs["axes"] == (1, 2) and g.nodes[1].attrs["keepdims"] is False


def test_leaky_sigmoid_tanh_dense_bn(rng):
    def build(x):
        h = layers.LeakyReLU(0.1)(layers.BatchNormalization()(layers.Dense(7)(x)))
        return layers.Multiply()([layers.Activation("sigmoid")(h), layers.Activation("tanh")(h)])
    g = roundtrip(_model(build, shape=(9,)), rng)
    assert ops_of(g).count("MatMul") == 1 and "BatchNorm" not in ops_of(g)
    assert g.nodes[0].attrs["act"] == "leaky_relu"
    assert sorted(ops_of(g)[1:]) == ["Mul", "Sigmoid", "Tanh"]


def test_zero_padding_flatten_reshape(rng):
    g = roundtrip(_model(lambda x: layers.Dense(3)(layers.Flatten()(layers.Reshape((15, 13, 3))(
        layers.Flatten()(layers.ZeroPadding2D(((1, 0), (2, 1)))(x)))))), rng)
    assert ops_of(g) == ["Pad", "Reshape", "Reshape", "Reshape", "MatMul"]
    assert g.nodes[0].attrs["pads"] == ((0, 0), (1, 0), (2, 1), (0, 0))


def test_unsupported_op_stays_opaque_and_runs(rng):
    def build(x):
        h = layers.Conv2D(4, 3, padding="same")(x)
        return layers.Lambda(lambda t: tf.math.cumsum(t, axis=2))(h) + 1.0
    g = roundtrip(_model(build), rng, numpy_evaluator=False)
    opaque = [n for n in g.nodes if n.op == "Opaque"]
    assert [n.attrs["type"] for n in opaque] == ["Cumsum"]
    assert opaque[0].inputs[0] == g.nodes[0].outputs[0]


def test_dynamic_batch_is_specialised():
    model = _model(lambda x: layers.Conv2D(2, 3)(x))
    graph_def, ins, outs = freeze_keras(model)
    g = import_graphdef(graph_def, ins, outs, [[5, 12, 12, 3]])
    assert g.tensors[ins[0]].shape == (5, 12, 12, 3)
    conv = next(n for n in g.nodes if n.op == "Conv2D")
    assert g.tensors[conv.outputs[0]].shape == (5, 10, 10, 2)
    exported = export_graphdef(run_default_passes(g))
    placeholder = next(n for n in exported.node if n.op == "Placeholder")
    # input_shapes fix the IR's batch; the exported graph keeps the model's free batch (docs/architecture.md §3)
    assert [d.size for d in placeholder.attr["shape"].shape.dim] == [-1, 12, 12, 3]


def test_nchw_conv_and_pool_match_nhwc_tensorflow(rng):
    """TF's CPU kernels are NHWC-only: check the NCHW import with the numpy evaluator
    against TensorFlow running the NHWC equivalent."""
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    x = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        inp = tf.compat.v1.placeholder(tf.float32, [None, 3, 9, 9], name="x")
        y = tf.nn.conv2d(inp, w, strides=[1, 1, 2, 2], padding="SAME", data_format="NCHW")
        y = tf.nn.bias_add(y, np.arange(4, dtype=np.float32), data_format="NCHW")
        tf.nn.max_pool2d(y, 2, 1, "VALID", data_format="NCHW", name="out")
    g = run_default_passes(import_graphdef(graph.as_graph_def(), ["x"], ["out"], [[1, 3, 9, 9]]))
    assert ops_of(g) == ["Conv2D", "MaxPool"] and g.nodes[0].attrs["layout"] == "NCHW"
    want = tf.nn.max_pool2d(tf.nn.conv2d(x.transpose(0, 2, 3, 1), w, 2, "SAME") + np.arange(4), 2, 1, "VALID")
    got = evaluate(g, {"x": x})["out"]
    np.testing.assert_allclose(got.transpose(0, 2, 3, 1), want.numpy(), rtol=1e-4, atol=1e-5)
    conv = next(n for n in export_graphdef(g).node if n.op == "Conv2D")
    assert conv.attr["data_format"].s == b"NCHW"
    assert conv.attr["padding"].s == b"SAME"   # the pads are SAME's: never EXPLICIT


def test_handler_import_graph_validates_and_runs_passes():
    model = _model(lambda x: layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(3, 3)(x))))
    graph_def, ins, outs = freeze_keras(model)
    config = {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[1, 12, 12, 3]], "output_dir": "/tmp"}
    from ratelnn.config import normalize
    g = TFModelHandler().import_graph(graph_def, normalize(config, "tensorflow"))
    assert ops_of(g) == ["Conv2D"] and g.outputs == outs


# ---------------------------------------------------------------- errors
@pytest.fixture(scope="module")
def small_graph_def():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="input")
        tf.nn.relu(tf.matmul(x, np.ones((4, 2), np.float32)), name="output")
    return graph.as_graph_def()


def test_unknown_node_names_list_close_matches(small_graph_def):
    with pytest.raises(ModelError, match=r"output node 'outputt' .*close matches: \['output'\]"):
        import_graphdef(small_graph_def, ["input"], ["outputt"], [[1, 4]])
    with pytest.raises(ModelError, match="input node 'inpt'"):
        import_graphdef(small_graph_def, ["inpt"], ["output"], [[1, 4]])


def test_wrong_input_rank_or_dim(small_graph_def):
    with pytest.raises(ModelError, match=r"'input' has rank 3"):
        import_graphdef(small_graph_def, ["input"], ["output"], [[1, 4, 1]])
    # a fixed dim may change (docs/quantization.md "Graph patches"); one the graph cannot take names the node
    with pytest.raises(ModelError, match=r"input_shapes \[\[1, 5\]\]: node 'MatMul' \(MatMul\) cannot take them"):
        import_graphdef(small_graph_def, ["input"], ["output"], [[1, 5]])


def test_not_frozen_graph_is_refused():
    v = tf.Variable(np.ones((4, 2), np.float32))
    fn = tf.function(lambda x: tf.matmul(x, v)).get_concrete_function(tf.TensorSpec([1, 4], tf.float32))
    graph_def = fn.graph.as_graph_def()
    out = fn.outputs[0].name.split(":")[0]
    with pytest.raises(ModelError, match="graph is not frozen: variable op .*freeze_keras"):
        import_graphdef(graph_def, [fn.inputs[0].name.split(":")[0]], [out], [[1, 4]])


def test_malformed_graph_defs(small_graph_def):
    dangling = tf.compat.v1.GraphDef()
    dangling.CopyFrom(small_graph_def)
    dangling.node[-1].input[0] = "missing_node"
    with pytest.raises(ModelError, match="reads 'missing_node'"):
        import_graphdef(dangling, ["input"], ["output"], [[1, 4]])
    duplicate = tf.compat.v1.GraphDef()
    duplicate.CopyFrom(small_graph_def)
    duplicate.node.add().CopyFrom(small_graph_def.node[-1])
    with pytest.raises(ModelError, match="duplicate node name 'output'"):
        import_graphdef(duplicate, ["input"], ["output"], [[1, 4]])
    cyclic = tf.compat.v1.GraphDef()
    cyclic.CopyFrom(small_graph_def)
    matmul = next(n for n in cyclic.node if n.op == "MatMul")
    matmul.input[0] = "output"
    with pytest.raises(ModelError, match="cycle"):
        import_graphdef(cyclic, ["input"], ["output"], [[1, 4]])
    with pytest.raises(ModelError, match="expected a frozen tf.compat.v1.GraphDef, got dict"):
        import_graphdef({"node": []}, ["input"], ["output"], [[1, 4]])


# ---------------------------------------------------------------- quantization ops
@pytest.fixture(scope="module")
def ratel_ops():
    import ratelnn
    ratelnn.tf_init()


def test_quant_ops_export_and_reimport(ratel_ops, tmp_path, rng):
    from ratelnn.ir import Graph, Node, TensorInfo
    g = Graph()
    g.add_input("x", (2, 3))
    info = [TensorInfo((2, 3))]
    g.add_node(Node("mm", "MinMax", ["x"], ["mm"], {"tensor_name": "x", "output_dir": str(tmp_path)}), info)
    g.add_node(Node("q", "Quant", ["mm"], ["q"], {"dtype": "int8", "scales": [0.1, 0.2, 0.05], "axis": 1,
                                                   "round_mode": "half_away_from_zero"}), [TensorInfo((2, 3), "int8")])
    g.add_node(Node("out", "Dequant", ["q"], ["out"], {"scales": [0.1, 0.2, 0.05], "axis": 1}), info)
    g.outputs = ["out"]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    graph_def = export_graphdef(g)
    (got,) = run_graph_def(graph_def, {"x": x}, ["out"])
    np.testing.assert_array_equal(got, evaluate(g, {"x": x})["out"])
    back = import_graphdef(graph_def, ["x"], ["out"], [[2, 3]])
    assert ops_of(back) == ["MinMax", "Quant", "Dequant"]
    assert back.nodes[1].attrs["scales"] == pytest.approx([0.1, 0.2, 0.05]) and back.nodes[1].attrs["dtype"] == "int8"
    assert back.nodes[0].attrs["tensor_name"] == "x"


def test_freeze_saved_model_two_inputs(tmp_path, rng):
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    model = keras.Model([a, b], layers.Dense(3, activation="relu")(layers.Add()([a, b])))
    model.export(str(tmp_path / "sm"), verbose=False)
    graph_def, ins, outs = freeze_saved_model(str(tmp_path / "sm"))
    assert sorted(ins) == ["a", "b"] and len(outs) == 1
    g = run_default_passes(import_graphdef(graph_def, ins, outs, [[2, 4], [2, 4]]))
    feeds = {n: rng.standard_normal((2, 4)).astype(np.float32) for n in ins}
    (got,) = run_graph_def(export_graphdef(g), feeds, outs)
    np.testing.assert_allclose(got, np.asarray(model([feeds["a"], feeds["b"]])), rtol=1e-5, atol=1e-6)
    with pytest.raises(ModelError, match="no signature 'nope'"):
        freeze_saved_model(str(tmp_path / "sm"), "nope")


def test_freeze_saved_model_bad_paths_are_model_errors(tmp_path):
    with pytest.raises(ModelError, match="cannot load SavedModel"):
        freeze_saved_model(str(tmp_path / "missing"))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "saved_model.pb").write_bytes(b"\x00not a protobuf")
    with pytest.raises(ModelError, match="cannot load SavedModel"):
        freeze_saved_model(str(tmp_path / "junk"))
