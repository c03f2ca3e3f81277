"""Keras ``keras.applications.MobileNetV3Small`` (1000 classes; hard-swish, squeeze-excite;
its own [0, 255] rescaling left out), frozen.

RANDOM WEIGHTS (fixed seed 0, ``ratelnn.testing.zoo.SEED``): no pretrained weights are fetched, so accuracy means
nothing; the metric is agreement with the FP32 model on scikit-image's sample photos
(central square crop resized, RGB scaled to [-1, 1]): top-1 agreement and mean cosine of
the 1000 logits.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ratelnn.testing import zoo

NAME = "mobilenet_v3_small_keras"
FRAMEWORK = "tensorflow"
DATASET = "sample_photos"
WEIGHTS = "random"
INPUTS = ["images"]
OUTPUTS = ["logits"]
INPUT_SHAPES = [[1, 224, 224, 3]]
TEST_INPUT_SHAPES = [[1, 64, 64, 3]]


def build(workdir, input_shapes=None) -> list:
    """Write the model with random weights into ``workdir`` at ``input_shapes`` (default
    :data:`INPUT_SHAPES`; reused when already there for those shapes)."""
    shapes = input_shapes or INPUT_SHAPES
    side = zoo.side_of(shapes, FRAMEWORK)

    def make(folder: Path) -> None:
        net = zoo.keras_application("MobileNetV3Small", side, include_preprocessing=False)
        zoo.write_frozen_keras(net, (side, side, 3), folder / f"{NAME}.pb", OUTPUTS)
    return zoo.cached_build(workdir, NAME, FRAMEWORK, shapes, make)


def preprocess(samples, input_shapes=None) -> np.ndarray:
    """sample_photos samples (uint8 RGB, any size) -> the model input at ``input_shapes``
    (default :data:`INPUT_SHAPES`), float32 in [-1, 1]."""
    return zoo.photo_input(samples, zoo.side_of(input_shapes or INPUT_SHAPES, FRAMEWORK), FRAMEWORK)
