"""Preprocessing the zoo datasets into a model folder's inputs."""
from __future__ import annotations

from typing import Iterable

import numpy as np


def _resize(image: np.ndarray, side: int) -> np.ndarray:
    """uint8 image [H, W] or [H, W, C] -> float32 [side, side(, C)], bilinear (PIL)."""
    from PIL import Image
    return np.asarray(Image.fromarray(image).resize((side, side), Image.BILINEAR), np.float32)


def _uint8(image: np.ndarray) -> np.ndarray:
    """A float image in [0, 1] (as scikit-image gives) or a uint8 one -> uint8."""
    image = np.asarray(image)
    if image.dtype == np.uint8:
        return image
    return np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)


def lfw_pixels(samples: np.ndarray, side: int, channels: int) -> np.ndarray:
    """``lfw_face_nonface`` samples [N, 25, 25] grey (float in [0, 1] or uint8) -> float32
    pixels in [0, 255], [N, side, side, channels] (grey repeated)."""
    resized = np.stack([_resize(_uint8(s), side) for s in samples])[..., None]
    return np.repeat(resized, channels, axis=-1)


def photo_pixels(samples: Iterable[np.ndarray], side: int) -> np.ndarray:
    """``sample_photos`` samples (uint8 HWC RGB of any size; grey or RGBA accepted) ->
    float32 [N, side, side, 3] in [0, 255]: the central square crop, resized."""
    out = []
    for image in samples:
        image = _uint8(image)
        image = np.repeat(image[..., None], 3, axis=-1) if image.ndim == 2 else image[..., :3]
        h, w = image.shape[:2]
        top, left = (h - min(h, w)) // 2, (w - min(h, w)) // 2
        out.append(_resize(np.ascontiguousarray(image[top:top + min(h, w), left:left + min(h, w)]), side))
    return np.stack(out)


def to_framework(x: np.ndarray, framework: str) -> np.ndarray:
    """NHWC float batch -> float32 in the framework layout (MXNet: NCHW)."""
    x = np.asarray(x, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "mxnet" else x


def mtcnn_input(samples: np.ndarray, side: int, framework: str) -> np.ndarray:
    """``lfw_face_nonface`` samples -> MTCNN input: RGB ``side`` x ``side``, (p - 127.5) / 128."""
    return to_framework((lfw_pixels(samples, side, 3) - 127.5) / 128.0, framework)


def fer_input(samples: np.ndarray, framework: str, side: int = 64) -> np.ndarray:
    """``lfw_face_nonface`` samples -> fer's emotion net input: grey 64x64 in [-1, 1]."""
    return to_framework(lfw_pixels(samples, side, 1) / 127.5 - 1.0, framework)


def photo_input(samples: Iterable[np.ndarray], side: int, framework: str) -> np.ndarray:
    """``sample_photos`` samples -> [N, side, side, 3] (MXNet NCHW) in [-1, 1]."""
    return to_framework(photo_pixels(samples, side) / 127.5 - 1.0, framework)
