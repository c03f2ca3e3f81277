"""Keras ``keras.applications.EfficientNetB0`` (1000 classes; swish, squeeze-excite), frozen
with its own input Rescaling/Normalization layers.

RANDOM WEIGHTS (fixed seed 0): accuracy means nothing; the metric is agreement with the FP32
model on sample_photos (``agraph.kinds``, "random-weight architectures").
"""
from __future__ import annotations

import numpy as np

from agraph import kinds

NAME = "efficientnet_b0_keras"
FRAMEWORK = "tensorflow"
DATASET = "sample_photos"
WEIGHTS = "random"
INPUTS = ["images"]
OUTPUTS = ["logits"]
INPUT_SHAPES = [[1, 224, 224, 3]]
TEST_INPUT_SHAPES = [[1, 32, 32, 3]]   # the smallest keras.applications accepts
ARCHITECTURE = "EfficientNetB0"   # the keras.applications constructor


def build(workdir, input_shapes=None) -> list:
    """Write the model with random weights into ``workdir`` at ``input_shapes`` (default
    :data:`INPUT_SHAPES`; reused when already there for those shapes)."""
    return kinds.keras_application(workdir, NAME, OUTPUTS, ARCHITECTURE, input_shapes or INPUT_SHAPES)


def preprocess(samples, input_shapes=None) -> np.ndarray:
    """sample_photos samples (uint8 RGB, any size) -> the model input at ``input_shapes``
    (default :data:`INPUT_SHAPES`), float32 in [-1, 1]."""
    return kinds.photo_input(samples, input_shapes or INPUT_SHAPES, FRAMEWORK)
