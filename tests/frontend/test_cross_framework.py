"""One network in Keras (NHWC) and Gluon (NCHW) with the same weights compiles, from the
same calibration statistics, to engines whose integer outputs are identical."""
from __future__ import annotations

import os

import numpy as np

import ratelnn
from ratelnn.calibration.stats import load_statistics
from ratelnn.compiler import compile_graph
from ratelnn.npu.engine import Engine
from ratelnn.quantization.policy import calibration_tensors
from ratelnn.quantization.quantizer import quantize

os.environ.setdefault("OMP_NUM_THREADS", "1")  # see tests/api/test_mx_e2e.py

BATCH = 16


def keras_net():
    """conv3x3(8, same, relu) -> maxpool 2 -> conv3x3(16, valid, relu) -> GAP -> dense(10)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(3)
    x = keras.Input((28, 28, 1), name="images")
    h = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    h = layers.MaxPooling2D(2)(h)
    h = layers.Conv2D(16, 3, padding="valid", activation="relu")(h)
    h = layers.Dense(10)(layers.GlobalAveragePooling2D()(h))
    model = keras.Model(x, h)
    for layer in model.layers:  # non-zero biases, so that the bias path is compared too
        if getattr(layer, "bias", None) is not None:
            layer.bias.assign(np.random.default_rng(1).uniform(-0.1, 0.1, layer.bias.shape))
    return model


def gluon_port(mx, model):
    """The same network in Gluon (NCHW) with the Keras weights: (sym, arg_params, aux_params)."""
    from mxnet.gluon import nn

    net = nn.HybridSequential(prefix="port_")
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, padding=1, activation="relu"), nn.MaxPool2D(2),
                nn.Conv2D(16, 3, activation="relu"), nn.GlobalAvgPool2D(), nn.Dense(10))
    net.initialize()
    net(mx.nd.zeros((1, 1, 28, 28)))
    keras_weights = [l.get_weights() for l in model.layers if l.get_weights()]
    gluon_layers = [b for b in net if hasattr(b, "weight")]
    for block, (w, b) in zip(gluon_layers, keras_weights):
        w = w.transpose(3, 2, 0, 1) if w.ndim == 4 else w.T  # HWIO -> OIHW, [K, M] -> [M, K]
        block.weight.set_data(mx.nd.array(w))
        block.bias.set_data(mx.nd.array(b))
    sym = net(mx.sym.var("data"))
    arg = {k: v.data() for k, v in net.collect_params().items()}
    return sym, arg, {}


def only_engine(graph):
    engines = [n for n in graph.nodes if n.op == "Engine"]
    assert len(engines) == 1, [n.op for n in graph.nodes]
    return Engine.from_bytes(engines[0].attrs["engine"])


def test_keras_and_gluon_engines_agree_bit_for_bit(fashion_mnist, tmp_path):
    from ratelnn.frontend.mxnet import converter as mx_converter
    from ratelnn.frontend.tensorflow import converter as tf_converter, freeze_keras
    from ratelnn.mxnet_compat import import_mxnet
    from ratelnn.testing import run_graph

    mx = import_mxnet()
    ratelnn.tf_init()
    ratelnn.mx_init()
    (x_train, _), (x_test, _) = fashion_mnist
    model = keras_net()
    graph_def, inputs, outputs = freeze_keras(model)
    tf_config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[BATCH, 28, 28, 1]],
                 "output_dir": str(tmp_path / "tf")}
    tf_conv = tf_converter(graph_def, tf_config)
    mx_model = gluon_port(mx, model)
    mx_config = {"input_nodes": ["data"], "output_nodes": [mx_model[0].list_outputs()[0]],
                 "input_shapes": [[BATCH, 1, 28, 28]], "output_dir": str(tmp_path / "mx")}
    mx_conv = mx_converter(mx_model, mx_config)

    # the float models agree (the port is right)
    sample = x_test[:BATCH]
    keras_out = model.predict(sample, verbose=0)
    mx_out = mx_model[0].eval(mx.cpu(), data=mx.nd.array(sample.transpose(0, 3, 1, 2)),
                              **mx_model[1])[0].asnumpy()
    np.testing.assert_allclose(mx_out, keras_out, rtol=1e-4, atol=1e-4)

    # calibrate once (TensorFlow) and give the MXNet IR the same statistics, tensor by tensor
    run_graph(tf_conv.to_cal(), inputs[0] + ":0", outputs[0] + ":0", x_train[:8 * BATCH], BATCH)
    tf_stats = load_statistics(tf_config["output_dir"])
    tf_tensors = calibration_tensors(tf_conv.graph, tf_conv.config)
    mx_tensors = calibration_tensors(mx_conv.graph, mx_conv.config)
    assert len(tf_tensors) == len(mx_tensors) > 0
    mx_stats = {m: tf_stats[t] for t, m in zip(tf_tensors, mx_tensors)}
    tf_q = quantize(tf_conv.graph, tf_stats, tf_conv.config)
    mx_q = quantize(mx_conv.graph, mx_stats, mx_conv.config)
    for t, m in zip(tf_tensors, mx_tensors):
        assert tf_q.qparams[t] == mx_q.qparams[m], (t, m)

    tf_engine = only_engine(compile_graph(tf_q, tf_conv.config))
    mx_engine = only_engine(compile_graph(mx_q, mx_conv.config))
    in_dtype = tf_engine.inputs[0].dtype
    codes = np.random.default_rng(5).integers(np.iinfo(in_dtype).min, np.iinfo(in_dtype).max + 1,
                                              (BATCH, 28, 28, 1)).astype(in_dtype)
    nchw = np.ascontiguousarray(codes.transpose(0, 3, 1, 2))
    mx_input = codes if tuple(mx_engine.inputs[0].shape[1:]) == (28, 28, 1) else nchw
    (tf_codes,) = tf_engine.run([codes], backend="native")
    (mx_codes,) = mx_engine.run([mx_input], backend="native")
    assert tf_codes.dtype == mx_codes.dtype and np.issubdtype(tf_codes.dtype, np.integer)
    np.testing.assert_array_equal(tf_codes, mx_codes)
    # and through the MXNet custom op, in MXNet
    mx_op_codes = mx.nd.ratel_engine_op(mx.nd.array(mx_input, dtype=str(mx_input.dtype)),
                                        **_engine_attrs(mx_engine))
    np.testing.assert_array_equal(mx_op_codes.asnumpy().astype(tf_codes.dtype), tf_codes)
    assert len(np.unique(tf_codes)) > 10  # a non-degenerate output


def _engine_attrs(engine: Engine) -> dict:
    from ratelnn.frontend.mxnet.attrs import encode_custom_attrs
    return encode_custom_attrs("Engine", {"engine": engine.to_bytes(), "engine_name": engine.name,
                                          "num_outputs": 1})
