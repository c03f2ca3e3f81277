"""Quantized and compiled models take any batch when the original did.

``input_shapes`` (here batch 1) fix only what calibration and compilation need: the exported
placeholders keep the original free batch, and reshapes that followed the batch (Keras
``Flatten``/``Reshape``, MXNet ``Reshape(shape=(0, -1))``, ``FullyConnected(flatten=False)``)
keep -1.  Batches of 1, 3 and 16 through the quantized and the compiled model give, row by
row, the outputs of batch-1 runs of the same model: bit-identical for the compiled model
(integer engines), allclose for the quantized one (float ops may vectorise differently).
"""
from __future__ import annotations

import numpy as np

from ratelnn.runners import run_model

BATCHES = (1, 3, 16)


def _check_any_batch(framework, models, input_name, output_name, x):
    for form, model in models.items():
        single = np.concatenate([run_model(framework, model, {input_name: x[i:i + 1]}, [output_name])[0]
                                 for i in range(max(BATCHES))])
        for batch in BATCHES:
            got = run_model(framework, model, {input_name: x[:batch]}, [output_name])[0]
            assert got.shape[0] == batch, (form, batch, got.shape)
            if form == "npu":
                np.testing.assert_array_equal(got, single[:batch], err_msg=f"{form} batch {batch}")
            else:
                np.testing.assert_allclose(got, single[:batch], rtol=1e-5, atol=1e-6,
                                           err_msg=f"{form} batch {batch}")


def test_tensorflow_quantized_and_compiled_take_any_batch(tmp_path):
    import tensorflow as tf
    from tensorflow.keras import layers

    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras

    ratelnn.tf_init()
    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input((12, 12, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = layers.MaxPooling2D()(x)
    x = layers.DepthwiseConv2D(3, padding="same", bias_initializer="ones")(x)
    x = layers.Flatten()(x)                        # Keras 3: a Reshape of a computed shape
    x = layers.Dense(12, activation="relu")(x)
    x = layers.Reshape((3, 4))(x)                  # computed shape too
    x = layers.Dense(5)(x)
    out = layers.Softmax()(layers.Flatten()(x))
    graph_def, ins, outs = freeze_keras(tf.keras.Model(inp, out))
    c = converter(graph_def, {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[1, 12, 12, 3]],
                              "output_dir": str(tmp_path)})
    rng = np.random.default_rng(0)
    cal = c.to_cal()
    for _ in range(8):
        run_model("tensorflow", cal, {ins[0]: rng.random((1, 12, 12, 3), dtype=np.float32)}, [outs[0]])
    models = {"quant": c.to_quant(), "npu": c.to_npu()}
    for form, g in {"cal": cal, **models}.items():
        placeholder = next(n for n in g.node if n.op == "Placeholder")
        assert [d.size for d in placeholder.attr["shape"].shape.dim] == [-1, 12, 12, 3], form
    assert any(n.op == "RatelEngineOp" for n in models["npu"].node)
    _check_any_batch("tensorflow", models, ins[0], outs[0], rng.random((16, 12, 12, 3), dtype=np.float32))


def test_tensorflow_fixed_batch_stays_fixed(tmp_path):
    """A placeholder the user fixed to batch 1 stays batch 1."""
    import tensorflow as tf

    from ratelnn.frontend.tensorflow import converter

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4], name="x")
        tf.nn.relu(tf.matmul(x, np.ones((4, 2), np.float32)), name="out")
    c = converter(graph.as_graph_def(), {"input_nodes": ["x"], "output_nodes": ["out"],
                                         "input_shapes": [[1, 4]], "output_dir": str(tmp_path)})
    placeholder = next(n for n in c.to_cal().node if n.op == "Placeholder")
    assert [d.size for d in placeholder.attr["shape"].shape.dim] == [1, 4]


def test_mxnet_quantized_and_compiled_take_any_batch(tmp_path):
    import ratelnn
    from ratelnn.frontend.mxnet import converter
    from ratelnn.mxnet_compat import import_mxnet
    from ratelnn.oplib import flush_statistics

    ratelnn.mx_init()
    mx = import_mxnet()
    data = mx.sym.var("data")
    x = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1), name="conv")
    x = mx.sym.Activation(x, act_type="relu", name="relu")
    x = mx.sym.Reshape(x, shape=(0, -1), name="flat")
    x = mx.sym.FullyConnected(x, num_hidden=6, name="fc")
    x = mx.sym.Reshape(x, shape=(-1, 2, 3), name="rows")
    x = mx.sym.FullyConnected(x, num_hidden=4, flatten=False, name="fc2")
    out = mx.sym.Flatten(x, name="out")
    rng = np.random.default_rng(0)
    args = {"conv_weight": rng.standard_normal((4, 3, 3, 3)), "conv_bias": rng.standard_normal(4),
            "fc_weight": rng.standard_normal((6, 256)) * 0.05, "fc_bias": rng.standard_normal(6),
            "fc2_weight": rng.standard_normal((4, 3)), "fc2_bias": rng.standard_normal(4)}
    model = (out, {k: mx.nd.array(v.astype(np.float32)) for k, v in args.items()}, {})
    c = converter(model, {"input_nodes": ["data"], "output_nodes": ["out"], "input_shapes": [[1, 3, 8, 8]],
                          "output_dir": str(tmp_path)})
    cal = c.to_cal()
    for _ in range(8):
        run_model("mxnet", cal, {"data": rng.random((1, 3, 8, 8), dtype=np.float32)}, ["out"])
    flush_statistics()
    models = {"quant": c.to_quant(), "npu": c.to_npu()}
    _check_any_batch("mxnet", models, "data", "out", rng.random((16, 3, 8, 8), dtype=np.float32))
