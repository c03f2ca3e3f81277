"""The Fashion-MNIST CNN of the end-to-end acceptance test (Keras 3).

It holds every op family the TensorFlow path must handle: conv + BatchNorm + ReLU, a
depthwise conv, a residual add, a concat, max and average pooling, global average pooling,
a dense layer and a softmax. On 2 CPU cores it trains in tens of seconds (2 epochs) to about
89% top-1 on the 10,000 test images.

:func:`cached_fashion_cnn` keeps the trained model on disk, keyed by a hash of this file's
source, the Keras version and the training data, so that changing the architecture or the
training recipe retrains and anything else reuses the weights.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

INPUT_SHAPE = (28, 28, 1)  # H, W, C of one Fashion-MNIST image
NUM_CLASSES = 10
EPOCHS = 2
BATCH_SIZE = 128
PEAK_LEARNING_RATE = 4e-3
SEED = 0


def build_fashion_cnn(width: int = 16):
    """An untrained Keras functional model: [N,28,28,1] float in [0,1] -> [N,10] softmax.

    ``width``: channels of the 14x14 stage (the 7x7 stage has ``2 * width``).
    """
    import keras
    from keras import layers

    def bn_relu(x):
        return layers.ReLU()(layers.BatchNormalization()(x))

    images = keras.Input(INPUT_SHAPE, name="images")
    x = bn_relu(layers.Conv2D(width, 3, strides=2, padding="same", use_bias=False)(images))
    residual = bn_relu(layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x))
    residual = layers.BatchNormalization()(layers.Conv2D(width, 1, use_bias=False)(residual))
    x = layers.ReLU()(layers.Add()([x, residual]))
    side = layers.Conv2D(width, 1, activation="relu")(x)
    x = layers.Concatenate()([x, side])
    x = layers.MaxPooling2D(2)(x)
    x = bn_relu(layers.Conv2D(2 * width, 3, padding="same", use_bias=False)(x))
    pooled = layers.GlobalAveragePooling2D()(x)
    local = layers.Flatten()(layers.AveragePooling2D(2, padding="same")(x))
    x = layers.Concatenate()([pooled, local])
    probabilities = layers.Softmax()(layers.Dense(NUM_CLASSES)(x))
    return keras.Model(images, probabilities, name="fashion_cnn")


def train_fashion_cnn(model, x_train: np.ndarray, y_train: np.ndarray, epochs: int = EPOCHS):
    """Train ``model`` in place with Adam and a cosine-decayed learning rate; returns it.

    ``x_train``: float32 [N,28,28,1] in [0,1]; ``y_train``: int [N] class indices.
    """
    import keras

    keras.utils.set_random_seed(SEED)
    steps = epochs * int(np.ceil(len(x_train) / BATCH_SIZE))
    schedule = keras.optimizers.schedules.CosineDecay(PEAK_LEARNING_RATE, steps)
    model.compile(optimizer=keras.optimizers.Adam(schedule),
                  loss="sparse_categorical_crossentropy", jit_compile=False)
    model.fit(x_train, y_train, batch_size=BATCH_SIZE, epochs=epochs, verbose=0)
    return model


def model_cache_key(x_train: np.ndarray, y_train: np.ndarray) -> str:
    """Hash (16 hex digits) of this module's source, the Keras version, the labels and a
    sample of the training images."""
    import keras

    h = hashlib.sha256(inspect.getsource(sys.modules[__name__]).encode())
    h.update(keras.__version__.encode())
    h.update(str(x_train.shape).encode())
    h.update(np.ascontiguousarray(x_train[::97]).tobytes())
    h.update(np.ascontiguousarray(y_train).tobytes())
    return h.hexdigest()[:16]


def cached_keras_model(path: str | os.PathLike, train):
    """The Keras model saved at ``path`` (``.keras``), else ``train()``'s result, saved there
    atomically (a temporary file in the same folder, then renamed)."""
    import keras

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        return keras.models.load_model(path, compile=False)
    model = train()
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".keras")
    os.close(fd)
    try:
        model.save(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return model


def cached_fashion_cnn(cache_dir: str | os.PathLike, x_train: np.ndarray, y_train: np.ndarray):
    """The trained CNN: loaded from ``cache_dir`` if this source version trained it before,
    else built, trained on ``(x_train, y_train)`` and saved there (atomically)."""
    path = Path(cache_dir) / f"fashion_cnn-{model_cache_key(x_train, y_train)}.keras"
    return cached_keras_model(path, lambda: train_fashion_cnn(build_fashion_cnn(), x_train, y_train))
