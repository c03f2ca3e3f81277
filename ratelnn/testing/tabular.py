"""Tabular classifiers whose input features span orders of magnitude, from scikit-learn's
real data sets: ``wine`` (178 samples, 13 chemical measurements; proline up to 1680, hue
about 1, nonflavanoid phenols 0.1-0.7) and ``breast_cancer`` (569 samples, 30 cell-nucleus
measurements; worst area up to 4254, fractal dimension about 0.06), each into a Keras MLP
that normalizes its raw input with an in-model ``keras.layers.Normalization`` (the
Keras-recommended preprocessing pattern).

Per-tensor INT8 quantization of the raw input, and of ``x - mean``, leaves the small-range
features a code or two: naive INT8 loses many points.  On wine, int16 on the two tensors
``analyze()`` names wins them back; on breast_cancer (ranges 10^5 apart) int16 is not
enough and ``analyze()`` suggests keeping the normalization in fp32 (docs/benchmarks.md,
accuracy section).
"""
from __future__ import annotations

import hashlib
import inspect
import os
import sys
from pathlib import Path
from typing import Tuple

import numpy as np

DATASETS = ("wine", "breast_cancer")
SEED = 0
EPOCHS = 100
BATCH_SIZE = 32
LEARNING_RATE = 1e-3

Split = Tuple[np.ndarray, np.ndarray]


def load_tabular_split(dataset: str = "wine", seed: int = SEED) -> Tuple[Split, Split]:
    """``(x_train, y_train), (x_test, y_test)``: half of the samples each, stratified; x
    float32 [N, features] raw measurements, y int64 [N] class indices."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
    x, y = getattr(datasets, f"load_{dataset}")(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x.astype(np.float32), y.astype(np.int64), test_size=0.5, random_state=seed, stratify=y)
    return (x_train, y_train), (x_test, y_test)


def train_tabular_mlp(x_train: np.ndarray, y_train: np.ndarray, seed: int = SEED):
    """A trained Keras model: raw features [N, F] -> Normalization -> Dense 64 relu ->
    Dense 32 relu -> Dense classes -> softmax (about 97% test top-1 on either data set;
    under 10 s on 2 cores)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    normalize = layers.Normalization()
    normalize.adapt(x_train)
    features = keras.Input((x_train.shape[1],), name="features")
    h = layers.Dense(64, activation="relu")(normalize(features))
    h = layers.Dense(32, activation="relu")(h)
    probabilities = layers.Softmax()(layers.Dense(int(y_train.max()) + 1)(h))
    model = keras.Model(features, probabilities, name="tabular_mlp")
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE), loss="sparse_categorical_crossentropy")
    model.fit(x_train, y_train, batch_size=BATCH_SIZE, epochs=EPOCHS, verbose=0)
    return model


def cached_tabular_mlp(cache_dir: str | os.PathLike, dataset: str, x_train: np.ndarray, y_train: np.ndarray):
    """:func:`train_tabular_mlp` of ``(x_train, y_train)``, loaded from ``cache_dir`` if this
    source version and Keras version trained it on the same data before, else trained and saved
    there (``tabular_mlp_<dataset>-<hash>.keras``, atomically)."""
    import keras

    from .fashion_cnn import cached_keras_model

    h = hashlib.sha256(inspect.getsource(sys.modules[__name__]).encode())
    for part in (keras.__version__.encode(), np.ascontiguousarray(x_train).tobytes(),
                 np.ascontiguousarray(y_train).tobytes()):
        h.update(part)
    path = Path(cache_dir) / f"tabular_mlp_{dataset}-{h.hexdigest()[:16]}.keras"
    return cached_keras_model(path, lambda: train_tabular_mlp(x_train, y_train))
