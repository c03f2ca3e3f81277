"""Gluon model zoo ``mobilenetv2_1.0`` (1000 classes) exported as symbol + params.

RANDOM WEIGHTS (fixed seed 0): accuracy means nothing; the metric is agreement with the FP32
model on sample_photos (``agraph.kinds``, "random-weight architectures").
"""
from __future__ import annotations

import numpy as np

from agraph import kinds

NAME = "mobilenet_v2_gluon"
FRAMEWORK = "mxnet"
DATASET = "sample_photos"
WEIGHTS = "random"
INPUTS = ["data"]
OUTPUTS = ["logits"]
INPUT_SHAPES = [[1, 3, 224, 224]]
TEST_INPUT_SHAPES = [[1, 3, 64, 64]]   # its last pool is global; at 32x32 the cosine to FP32 drops to 0.48
ARCHITECTURE = "mobilenetv2_1.0"   # the Gluon model zoo name


def build(workdir, input_shapes=None) -> list:
    """Write the model with random weights into ``workdir`` at ``input_shapes`` (default
    :data:`INPUT_SHAPES`; reused when already there for those shapes)."""
    return kinds.gluon_model_zoo(workdir, NAME, ARCHITECTURE, input_shapes or INPUT_SHAPES)


def preprocess(samples, input_shapes=None) -> np.ndarray:
    """sample_photos samples (uint8 RGB, any size) -> the model input at ``input_shapes``
    (default :data:`INPUT_SHAPES`), float32 in [-1, 1]."""
    return kinds.photo_input(samples, input_shapes or INPUT_SHAPES, FRAMEWORK)
