"""A depthwise-separable Keras CNN on scikit-learn's 8x8 digits with deliberately imbalanced
channel ranges: the test model of the accuracy passes (docs/quantization.md, "Accuracy passes").

:func:`trained_dwsep` trains it (a few seconds on 2 cores) and :func:`imbalance` then
multiplies each depthwise output channel by a factor spanning ``spread`` (log-uniform) and
divides the pointwise weights reading it by the same factor: the float function is unchanged
(ReLU is positively homogeneous), but the tensor between them has channels a thousand times
apart, so one per-tensor activation scale leaves the small ones a few codes.  This is the
per-channel range imbalance that cross-layer equalization removes.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import sys
from pathlib import Path

import numpy as np

SEED = 0
EPOCHS = 30
BATCH = 32


def build_dwsep(width: int = 16):
    """Untrained model: [N,8,8,1] in [0,1] -> [N,10] softmax."""
    import keras
    from keras import layers
    images = keras.Input((8, 8, 1), name="images")
    x = layers.Conv2D(width, 3, padding="same", activation="relu")(images)
    x = layers.DepthwiseConv2D(3, padding="same", activation="relu", name="dw1")(x)
    x = layers.Conv2D(2 * width, 1, activation="relu", name="pw1")(x)
    x = layers.DepthwiseConv2D(3, strides=2, padding="same", activation="relu", name="dw2")(x)
    x = layers.Conv2D(2 * width, 1, activation="relu", name="pw2")(x)
    x = layers.GlobalAveragePooling2D()(x)
    probabilities = layers.Softmax()(layers.Dense(10)(x))
    return keras.Model(images, probabilities, name="dwsep_digits")


def trained_dwsep(x_train: np.ndarray, y_train: np.ndarray, epochs: int = EPOCHS):
    """The model of :func:`build_dwsep` trained with Adam (deterministic seed)."""
    import keras
    keras.utils.set_random_seed(SEED)
    model = build_dwsep()
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy")
    model.fit(x_train, y_train, epochs=epochs, batch_size=BATCH, verbose=0, shuffle=True)
    return model


def cached_dwsep(cache_dir, x_train: np.ndarray, y_train: np.ndarray):
    """:func:`trained_dwsep`, its weights cached in ``cache_dir`` (an ``.npz`` keyed by this
    module's source, the Keras version and the training data)."""
    import keras
    h = hashlib.sha256(inspect.getsource(sys.modules[__name__]).encode())
    h.update(keras.__version__.encode())
    h.update(np.ascontiguousarray(x_train).tobytes())
    h.update(np.ascontiguousarray(y_train).tobytes())
    path = Path(cache_dir) / f"dwsep_digits-{h.hexdigest()[:16]}.npz"
    if path.is_file():
        with np.load(path) as f:
            model = build_dwsep()
            model.set_weights([f[f"w{i}"] for i in range(len(f.files))])
            return model
    model = trained_dwsep(x_train, y_train)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, **{f"w{i}": w for i, w in enumerate(model.get_weights())})
    os.replace(tmp, path)
    return model


def imbalance(model, spread: float = 1000.0, seed: int = SEED):
    """Scale every depthwise layer's output channels by log-uniform factors in
    ``[1/sqrt(spread), sqrt(spread)]`` and the following pointwise layer's input channels by
    the inverse, in place; returns ``model`` (same float function)."""
    rng = np.random.default_rng(seed)
    for dw_name, pw_name in (("dw1", "pw1"), ("dw2", "pw2")):
        dw, pw = model.get_layer(dw_name), model.get_layer(pw_name)
        kernel, bias = dw.get_weights()            # [3,3,C,1], [C]
        channels = bias.size
        f = np.exp(rng.uniform(-0.5, 0.5, channels) * np.log(spread)).astype(np.float32)
        dw.set_weights([kernel * f.reshape(1, 1, channels, 1), bias * f])
        w, b = pw.get_weights()                    # [1,1,C,O], [O]
        pw.set_weights([w / f.reshape(1, 1, channels, 1), b])
    return model
