"""A small quantization-aware-trained (QAT) Fashion-MNIST CNN written with TensorFlow's own
fake-quant ops (no tensorflow_model_optimization): the pre-quantized graphs of
tests/quantization/test_prequantized.py.

Activations: ``fake_quant_with_min_max_vars`` with ranges tracked during training as a moving
average of the batch's max |x| (``[0, a]`` after ReLU and at the input, ``[-a, a]`` on the
logits, as tfmot's MovingAverageQuantizer does); weights:
``fake_quant_with_min_max_vars_per_channel`` over ``[-max|w_c|, max|w_c|]``, narrow range.
"""
from __future__ import annotations

import numpy as np

TRAIN_SAMPLES = 12000
EPOCHS = 1
BATCH_SIZE = 128
SEED = 0


def _layers():
    import keras
    import tensorflow as tf

    class FakeQuantActivation(keras.layers.Layer):
        """Fake-quantizes its input over [0, a] (``signed``: [-a, a]), ``a`` the moving average
        of the batch max |x| (fixed ``a`` when ``fixed`` is given)."""

        def __init__(self, signed: bool = False, fixed=None, **kw):
            super().__init__(**kw)
            self.signed, self.fixed = signed, fixed

        def build(self, shape):
            self.a = self.add_weight(shape=(), initializer="zeros", trainable=False, name="a")
            self.seen = self.add_weight(shape=(), initializer="zeros", trainable=False, name="seen")

        def call(self, x, training=False):
            if self.fixed is not None:
                a = tf.constant(self.fixed, tf.float32)
            else:
                if training:
                    m = tf.reduce_max(tf.abs(x))
                    self.a.assign(tf.where(self.seen > 0, 0.9 * self.a + 0.1 * m, m))
                    self.seen.assign(1.0)
                a = tf.maximum(self.a, 1e-3)
            return tf.quantization.fake_quant_with_min_max_vars(x, -a if self.signed else tf.zeros_like(a), a)

    class FakeQuantDense(keras.layers.Layer):
        """Conv2D 3x3 SAME (``kernel`` > 0) or dense layer with per-channel fake-quantized
        weights and a float bias."""

        def __init__(self, units: int, kernel: int = 0, **kw):
            super().__init__(**kw)
            self.units, self.kernel = units, kernel

        def build(self, shape):
            wshape = (self.kernel, self.kernel, shape[-1], self.units) if self.kernel else (shape[-1], self.units)
            self.w = self.add_weight(shape=wshape, initializer="glorot_uniform", name="kernel")
            self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

        def call(self, x):
            m = tf.maximum(tf.reduce_max(tf.abs(self.w), axis=list(range(len(self.w.shape) - 1))), 1e-6)
            w = tf.quantization.fake_quant_with_min_max_vars_per_channel(self.w, -m, m, narrow_range=True)
            y = tf.nn.conv2d(x, w, 1, "SAME") if self.kernel else tf.matmul(x, w)
            return tf.nn.bias_add(y, self.b)

    return FakeQuantActivation, FakeQuantDense


def build_qat_cnn(width: int = 8):
    """[N,28,28,1] in [0,1] -> [N,10] fake-quantized logits."""
    import keras
    act, dense = _layers()
    images = keras.Input((28, 28, 1), name="images")
    x = act(fixed=1.0)(images)
    x = keras.layers.MaxPooling2D(2)(act()(keras.layers.ReLU()(dense(width, 3)(x))))
    x = keras.layers.MaxPooling2D(2)(act()(keras.layers.ReLU()(dense(2 * width, 3)(x))))
    logits = act(signed=True)(dense(10)(keras.layers.Flatten()(x)))
    return keras.Model(images, logits, name="qat_cnn")


def train_qat_cnn(x_train: np.ndarray, y_train: np.ndarray):
    """The QAT CNN trained on the first TRAIN_SAMPLES images for EPOCHS (a few seconds)."""
    import keras
    keras.utils.set_random_seed(SEED)
    model = build_qat_cnn()
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train[:TRAIN_SAMPLES], y_train[:TRAIN_SAMPLES], batch_size=BATCH_SIZE, epochs=EPOCHS, verbose=0)
    return model


def run_graph(graph_def, feeds, fetch: str, batch: int = 1000) -> np.ndarray:
    """Run a GraphDef on ``feeds`` ({placeholder: array}) in slices of ``batch`` rows."""
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    n = len(next(iter(feeds.values())))
    with tf.compat.v1.Session(graph=graph) as sess:
        return np.concatenate([sess.run(fetch, {k: v[i:i + batch] for k, v in feeds.items()})
                               for i in range(0, n, batch)])
