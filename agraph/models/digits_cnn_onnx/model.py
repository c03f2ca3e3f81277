"""Digits CNN (ONNX, exported from Keras 3 with tf2onnx) on scikit-learn's 8x8 digits: conv 3x3
(16) + ReLU, max pooling 2x2, conv 3x3 (32) + ReLU, global average pooling, dense + softmax.
Trained here once (seeded Adam, 40 epochs on the 1,348 training digits of the split
``agraph.datasets.digits_split``, a few seconds), exported with its input NCHW and the batch
open, cached; about 99% held-out top-1."""
from __future__ import annotations

from pathlib import Path

import numpy as np

NAME = "digits_cnn_onnx"
FRAMEWORK = "onnx"
DATASET = "digits"
WEIGHTS = "trained"
INPUTS = ["digits"]
OUTPUTS = ["probabilities"]
INPUT_SHAPES = [[1, 1, 8, 8]]
TEST_INPUT_SHAPES = None
SEED, EPOCHS, BATCH, LEARNING_RATE = 0, 40, 64, 1e-2


def _train(x: np.ndarray, y: np.ndarray):
    """The Keras model (NHWC [N,8,8,1]) trained on ``x``, ``y``."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(SEED)
    images = keras.Input((8, 8, 1), name=INPUTS[0])
    h = layers.Conv2D(16, 3, padding="same", activation="relu")(images)
    h = layers.MaxPooling2D(2)(h)
    h = layers.Conv2D(32, 3, padding="same", activation="relu")(h)
    probabilities = layers.Softmax()(layers.Dense(10)(layers.GlobalAveragePooling2D()(h)))
    model = keras.Model(images, probabilities, name=NAME)
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE), loss="sparse_categorical_crossentropy")
    model.fit(x[..., None], y, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=True)
    return model


def build(workdir: Path, input_shapes=None) -> list:
    """Train (first time) or load the CNN and write it to ``workdir/digits_cnn_onnx.onnx``."""
    from sklearn.datasets import load_digits

    from agraph.datasets import digits_split
    from agraph.training import cache_key, cached_keras, cached_onnx

    digits = load_digits()
    train, _ = digits_split()
    x, y = preprocess(digits.images[train])[:, 0], digits.target[train].astype(np.int64)
    key = cache_key(__file__, "tf2onnx", [x, y])
    return [cached_onnx(NAME, key, lambda: cached_keras(NAME, key, lambda: _train(x, y)), OUTPUTS[0],
                        Path(workdir) / f"{NAME}.onnx")]


def preprocess(samples: np.ndarray) -> np.ndarray:
    """float [N,8,8] in 0..16 -> float32 [N,1,8,8] in [0, 1]."""
    return (np.asarray(samples, dtype=np.float32) / 16.0)[:, None]
