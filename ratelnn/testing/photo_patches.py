"""Colour patches of scikit-image's bundled photos and a small CNN that tells them apart: the
test model of the input processors (docs/architecture.md §6, "Input processors").

:func:`photo_patches` cuts ``SIZE`` x ``SIZE`` RGB patches from four photos (the class is the
photo); patches from the left ``TRAIN_FRACTION`` of each photo train, the rest test, so the
test patches are image regions the model never saw.  :func:`trained_patch_cnn` trains the
Keras CNN (a few seconds on 2 cores) on images normalised as ``(rgb - MEAN) / STD``.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")
SIZE = 16
STRIDE = 8
TRAIN_FRACTION = 0.7
MEAN = (123.675, 116.28, 103.53)   # RGB, pixel units (the ImageNet figures)
STD = (58.395, 57.12, 57.375)
SEED = 0
EPOCHS = 8


def photo_patches() -> Tuple[Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]:
    """``(train, test)``, each ``(uint8 RGB patches [N, SIZE, SIZE, 3], int64 labels [N])``."""
    import skimage.data

    split = {False: ([], []), True: ([], [])}
    for label, name in enumerate(PHOTOS):
        img = getattr(skimage.data, name)()[..., :3]
        h, w = img.shape[:2]
        edge = int(w * TRAIN_FRACTION)
        for y in range(0, h - SIZE + 1, STRIDE):
            for x in range(0, w - SIZE + 1, STRIDE):
                if x < edge <= x + SIZE - 1:
                    continue   # patches straddling the border belong to neither split
                images, labels = split[x >= edge]
                images.append(img[y:y + SIZE, x:x + SIZE])
                labels.append(label)
    return tuple((np.stack(split[k][0]).astype(np.uint8), np.array(split[k][1], np.int64))
                 for k in (False, True))


def normalized(rgb: np.ndarray) -> np.ndarray:
    """``(rgb - MEAN) / STD`` as float32 (NHWC)."""
    return ((rgb.astype(np.float64) - np.array(MEAN)) / np.array(STD)).astype(np.float32)


def nv12(rgb: np.ndarray, vu: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """``(raw [N, 3H/2, W, 1] uint8, decoded float RGB [N, H, W, 3])`` of RGB images: full-range
    BT.601 YUV420SP with 2x2-averaged chroma as a camera gives it (NV12; ``vu``: NV21), and its
    float decoding, the RGB a model fed that frame should see (chroma repeated 2x2, nothing
    clipped)."""
    rgb = rgb.astype(np.float64)
    y = rgb @ np.array([0.299, 0.587, 0.114])
    n, h, w = y.shape

    def codes(a: np.ndarray) -> np.ndarray:
        return np.clip(np.floor(a + 0.5), 0, 255).astype(np.uint8)

    def half(c: np.ndarray) -> np.ndarray:
        return c.reshape(n, h // 2, 2, w // 2, 2).mean(axis=(2, 4))

    ys, us, vs = codes(y), codes(half(128 + (rgb[..., 2] - y) / 1.772)), codes(half(128 + (rgb[..., 0] - y) / 1.402))
    pairs = np.stack([vs, us] if vu else [us, vs], -1).reshape(n, h // 2, w)
    raw = np.concatenate([ys, pairs], axis=1)[..., None]
    uf, vf = (c.astype(np.float64).repeat(2, 1).repeat(2, 2) - 128 for c in (us, vs))
    yf = ys.astype(np.float64)
    return raw, np.stack([yf + 1.402 * vf, yf - 0.344136 * uf - 0.714136 * vf, yf + 1.772 * uf], -1)


def trained_patch_cnn(rgb: np.ndarray, labels: np.ndarray, epochs: int = EPOCHS):
    """A Keras CNN ``[N, SIZE, SIZE, 3]`` normalised RGB -> ``[N, 4]`` softmax, trained with Adam."""
    import keras
    from keras import layers
    keras.utils.set_random_seed(SEED)
    images = keras.Input((SIZE, SIZE, 3), name="images")
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(images)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    model = keras.Model(images, layers.Softmax()(layers.Dense(len(PHOTOS))(x)), name="photo_patches")
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy")
    model.fit(normalized(rgb), labels, epochs=epochs, batch_size=64, verbose=0, shuffle=True)
    return model


def trained_patch_cnn_mx(mx, rgb: np.ndarray, labels: np.ndarray, epochs: int = EPOCHS):
    """The same CNN in Gluon, NCHW (``[N, 3, SIZE, SIZE]`` normalised RGB -> ``[N, 4]`` logits),
    trained with Adam; returns the exported ``(symbol, arg_params, aux_params)``."""
    from mxnet import autograd, gluon
    from mxnet.gluon import nn

    mx.random.seed(SEED)
    net = nn.HybridSequential(prefix="patches_")
    with net.name_scope():
        net.add(nn.Conv2D(16, 3, padding=1, activation="relu"), nn.MaxPool2D(2),
                nn.Conv2D(32, 3, padding=1, activation="relu"), nn.GlobalAvgPool2D(), nn.Dense(len(PHOTOS)))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 3e-3})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = np.ascontiguousarray(normalized(rgb).transpose(0, 3, 1, 2))
    rng = np.random.default_rng(SEED)
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(order), 64):
            idx = order[start:start + 64]
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(x[idx])), mx.nd.array(labels[idx]))
            loss.backward()
            trainer.step(len(idx))
    sym = net(mx.sym.var("data"))
    params = net.collect_params()
    return (sym, {k: v.data() for k, v in params.items() if k in sym.list_arguments()},
            {k: v.data() for k, v in params.items() if k in sym.list_auxiliary_states()})
