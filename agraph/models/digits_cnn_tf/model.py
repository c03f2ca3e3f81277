"""Digits CNN (Keras 3, TensorFlow) on scikit-learn's 8x8 digits: conv 3x3 (16) + BN + ReLU,
conv 3x3 stride 2 (32) + ReLU, global average pooling concatenated with the flattened map,
dense + softmax.  Trained here once (seeded Adam, 30 epochs on the 1,348 training digits of the
split ``agraph.datasets.digits_split``, a few seconds), cached; about 97% held-out top-1."""
from __future__ import annotations

from pathlib import Path

import numpy as np

NAME = "digits_cnn_tf"
FRAMEWORK = "tensorflow"
DATASET = "digits"
WEIGHTS = "trained"
INPUTS = ["digits"]
OUTPUTS = ["probabilities"]
INPUT_SHAPES = [[1, 8, 8, 1]]
TEST_INPUT_SHAPES = None
SEED, EPOCHS, BATCH, LEARNING_RATE = 0, 30, 64, 1e-2


def _train(x: np.ndarray, y: np.ndarray):
    import keras
    from keras import layers

    keras.utils.set_random_seed(SEED)
    images = keras.Input((8, 8, 1), name="digits")
    h = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(16, 3, padding="same", use_bias=False)(images)))
    h = layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(h)
    h = layers.Concatenate()([layers.GlobalAveragePooling2D()(h), layers.Flatten()(h)])
    probabilities = layers.Softmax()(layers.Dense(10)(h))
    model = keras.Model(images, probabilities, name=NAME)
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE), loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=True)
    return model


def build(workdir: Path, input_shapes=None) -> list:
    """Train (first time) or load the CNN and freeze it to ``workdir/digits_cnn_tf.pb``."""
    from sklearn.datasets import load_digits

    from agraph.datasets import digits_split
    from agraph.training import cache_key, cached_frozen, cached_keras

    digits = load_digits()
    train, _ = digits_split()
    x, y = preprocess(digits.images[train]), digits.target[train].astype(np.int64)
    key = cache_key(__file__, "keras", [x, y])
    return [cached_frozen(NAME, key, lambda: cached_keras(NAME, key, lambda: _train(x, y)), OUTPUTS[0],
                          Path(workdir) / f"{NAME}.pb")]


def preprocess(samples: np.ndarray) -> np.ndarray:
    """float [N,8,8] in 0..16 -> float32 [N,8,8,1] in [0, 1]."""
    return (np.asarray(samples, dtype=np.float32) / 16.0)[..., None]
