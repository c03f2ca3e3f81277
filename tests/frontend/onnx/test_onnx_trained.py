"""A trained CNN (Keras, scikit-learn's 8x8 digits) written as ONNX from its weights with
``onnx.helper``, through calibration, the QDQ model and the compiled model: accuracy within
one point of the float model at every batch."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ratelnn  # noqa: E402
from ratelnn.frontend.onnx import converter  # noqa: E402


def _trained():
    import keras
    from keras import layers
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 1))
    h = layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    h = layers.MaxPooling2D(2)(h)
    h = layers.Conv2D(16, 3, padding="same", activation="relu")(h)
    h = layers.GlobalAveragePooling2D()(h)
    model = keras.Model(inp, layers.Softmax()(layers.Dense(10)(h)))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    model.fit(x[:1400], y[:1400], epochs=40, batch_size=32, verbose=0)
    return model, x.transpose(0, 3, 1, 2).copy(), y


def _as_onnx(model):
    (w1, b1), (w2, b2), (wd, bd) = [layer.get_weights() for layer in model.layers if layer.get_weights()]
    oihw = lambda w: np.ascontiguousarray(w.transpose(3, 2, 0, 1))  # noqa: E731
    nodes = [helper.make_node("Conv", ["images", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=1)]
    inits = {"w1": oihw(w1), "b1": b1, "w2": oihw(w2), "b2": b2, "wd": wd, "bd": bd}
    graph = helper.make_graph(nodes, "digits", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                              ["batch", 1, 8, 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _accuracy(session, x, y, batch):
    preds = [session.run(["probs"], {"images": x[i:i + batch]})[0].argmax(1) for i in range(0, len(x), batch)]
    return float(np.mean(np.concatenate(preds) == y))


def test_trained_digits_cnn_through_cal_quant_npu(tmp_path):
    keras_model, x, y = _trained()
    model = _as_onnx(keras_model)
    x_test, y_test = x[1400:], y[1400:]
    ref = keras_model.predict(x[1400:1432].transpose(0, 2, 3, 1), verbose=0)
    float_session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(float_session.run(["probs"], {"images": x[1400:1432]})[0], ref, atol=1e-5)
    cfg = {"input_nodes": ["images"], "output_nodes": ["probs"], "input_shapes": [[16, 1, 8, 8]],
           "output_dir": str(tmp_path)}
    conv = converter(model, cfg)
    conv.calibrate(x[:512], batch_size=16, progress=False)
    quant = ratelnn.onnx_session(conv.to_quant())
    npu = ratelnn.onnx_session(conv.to_npu())
    acc_float = _accuracy(float_session, x_test, y_test, 16)
    assert acc_float > 0.85
    for batch in (1, 3, 16):
        assert abs(_accuracy(quant, x_test, y_test, batch) - acc_float) <= 0.01
        assert abs(_accuracy(npu, x_test, y_test, batch) - acc_float) <= 0.01
