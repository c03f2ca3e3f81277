"""Preprocessing the zoo datasets into a model folder's inputs."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from .registry import NCHW_FRAMEWORKS


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
    """NHWC float batch -> float32 in the framework layout (MXNet, ONNX: NCHW)."""
    x = np.asarray(x, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework in NCHW_FRAMEWORKS else x


def mtcnn_input(samples: np.ndarray, side: int, framework: str) -> np.ndarray:
    """``lfw_face_nonface`` samples -> MTCNN input: RGB ``side`` x ``side``, (p - 127.5) / 128."""
    return to_framework((lfw_pixels(samples, side, 3) - 127.5) / 128.0, framework)


def fer_input(samples: np.ndarray, framework: str, side: int = 64) -> np.ndarray:
    """``lfw_face_nonface`` samples -> fer's emotion net input: grey 64x64 in [-1, 1]."""
    return to_framework(lfw_pixels(samples, side, 1) / 127.5 - 1.0, framework)


def photo_input(samples: Iterable[np.ndarray], side: int, framework: str) -> np.ndarray:
    """``sample_photos`` samples -> [N, side, side, 3] (MXNet NCHW) in [-1, 1]."""
    return to_framework(photo_pixels(samples, side) / 127.5 - 1.0, framework)


# ImageNet: the input scaling each set of pretrained weights was trained with, as
# (channel order, scale, shift): input = pixels[..., order] * scale + shift, pixels RGB in [0, 255].
_MEAN, _STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
IMAGENET_PIXELS = {
    "tf": ((0, 1, 2), np.full(3, 1 / 127.5), np.full(3, -1.0)),            # Keras MobileNets: [-1, 1]
    "caffe": ((2, 1, 0), np.ones(3), -np.array([103.939, 116.779, 123.68])),  # Keras ResNet50: BGR - mean
    "torch": ((0, 1, 2), 1 / (255 * _STD), -_MEAN / _STD),                  # Keras DenseNet, Gluon
    # Keras EfficientNet normalizes inside; built with weights=None it lacks the extra
    # 1/sqrt(std) rescaling its "imagenet" build adds after that: applied to the pixels instead
    "efficientnet": ((0, 1, 2), 1 / np.sqrt(_STD), 255 * _MEAN * (1 - 1 / np.sqrt(_STD))),
}
CROP_FRACTION = 224 / 256   # resize the shorter side to side / 0.875, central side x side crop


def imagenet_pixels(samples: Iterable[np.ndarray], side: int) -> np.ndarray:
    """Decoded ImageNet images (uint8 RGB HWC, any size) -> float32 [N, side, side, 3] in
    [0, 255]: shorter side resized (bilinear) to ``round(side / 0.875)``, central crop."""
    from PIL import Image
    out = []
    for image in samples:
        image = _uint8(image)
        image = np.repeat(image[..., None], 3, axis=-1) if image.ndim == 2 else image[..., :3]
        h, w = image.shape[:2]
        short = int(round(side / CROP_FRACTION))
        size = (short, max(side, int(round(h * short / w)))) if w <= h else (max(side, int(round(w * short / h))), short)
        resized = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize(size, Image.BILINEAR), np.float32)
        top, left = (resized.shape[0] - side) // 2, (resized.shape[1] - side) // 2
        out.append(resized[top:top + side, left:left + side])
    return np.stack(out)


def imagenet_input(samples: Iterable[np.ndarray], side: int, framework: str, pixels: str) -> np.ndarray:
    """Decoded ImageNet images -> the input of weights trained with ``pixels`` scaling
    (:data:`IMAGENET_PIXELS`), [N, side, side, 3] (MXNet NCHW) float32."""
    order, scale, shift = IMAGENET_PIXELS[pixels]
    x = imagenet_pixels(samples, side)[..., list(order)] * scale + shift
    return to_framework(x, framework)
