"""A CNN trained on scikit-learn's 8x8 digits (Keras, a few seconds) and written as an ONNX
graph from its weights with ``onnx.helper``: the trained ONNX model of the ONNX command-line,
tuning and Ray tests.  Digits ``0 .. TRAIN-1`` train it; the rest (497) are held out."""
from __future__ import annotations

import functools

import numpy as np

TRAIN = 1300


@functools.lru_cache(maxsize=1)
def trained_digits_cnn():
    """A Keras CNN trained briefly on the 8x8 digits, once per process; ``(model, x NCHW
    float32 [1797,1,8,8], labels)``."""
    import keras
    from keras import layers
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 1))
    h = layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
    h = layers.MaxPooling2D(2)(h)
    h = layers.Conv2D(16, 3, padding="same", activation="relu")(h)
    model = keras.Model(inp, layers.Softmax()(layers.Dense(10)(layers.Flatten()(h))))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    model.fit(x[:TRAIN], digits.target[:TRAIN], epochs=8, batch_size=32, verbose=0)
    return model, x.transpose(0, 3, 1, 2).copy(), digits.target


def digits_as_onnx(weights):
    """The CNN of the Keras ``weights`` ([(w1, b1), (w2, b2), (wd, bd)], Keras layouts) as an
    NCHW ONNX graph ``images`` [batch,1,8,8] -> ``probs`` [batch,10] with a free batch, built
    with onnx.helper."""
    from onnx import TensorProto, helper, numpy_helper
    (w1, b1), (w2, b2), (wd, bd) = weights
    oihw = lambda w: np.ascontiguousarray(w.transpose(3, 2, 0, 1))  # noqa: E731
    wd = wd.reshape(4, 4, 16, 10).transpose(2, 0, 1, 3).reshape(256, 10)   # Keras flattens HWC, ONNX CHW
    nodes = [helper.make_node("Conv", ["images", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=1)]
    inits = {"w1": oihw(w1), "b1": b1, "w2": oihw(w2), "b2": b2, "wd": wd, "bd": bd}
    graph = helper.make_graph(nodes, "digits",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 1, 8, 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def trained_digits_onnx():
    """``(onnx model, x, labels)`` of :func:`trained_digits_cnn`."""
    keras_model, x, y = trained_digits_cnn()
    return digits_as_onnx([layer.get_weights() for layer in keras_model.layers if layer.get_weights()]), x, y
