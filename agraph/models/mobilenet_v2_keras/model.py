"""Keras ``keras.applications.MobileNetV2`` (alpha 1.0, 1000 classes), frozen.

Weights: the pretrained ImageNet file when one is found (``--weights FILE`` or the
Keras cache, :data:`IMAGENET`; never downloaded): ``WEIGHTS`` "imagenet", top-1 on the
ImageNet archive.  Otherwise RANDOM WEIGHTS (fixed seed 0): accuracy means nothing; the
metric is agreement with the FP32 model on sample_photos (``agraph.kinds``).
"""
from __future__ import annotations

import numpy as np

from agraph import kinds, weights

NAME = "mobilenet_v2_keras"
FRAMEWORK = "tensorflow"
INPUTS = ["images"]
OUTPUTS = ["logits"]
INPUT_SHAPES = [[1, 224, 224, 3]]
TEST_INPUT_SHAPES = [[1, 64, 64, 3]]
ARCHITECTURE = "MobileNetV2"   # the keras.applications constructor
IMAGENET = weights.ImageNetWeights("tensorflow", "mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_224.h5", "tf", 71.3,
                                   "Keras applications table (keras.io/api/applications)",
                                   ((-0.12, "MQBench, TensorRT backend"), (-0.66, "widest published PTQ drop cited beside it")))


def __getattr__(attribute):
    """``WEIGHTS``, ``DATASET`` and ``WEIGHTS_FILE`` follow the weights found (kinds.imagenet_attribute)."""
    return kinds.imagenet_attribute(NAME, IMAGENET, attribute)


def build(workdir, input_shapes=None) -> list:
    """Write the model with its weights (pretrained when found, else random) into ``workdir``
    at ``input_shapes`` (default :data:`INPUT_SHAPES`; reused when already there for those
    shapes and weights)."""
    return kinds.keras_application(workdir, NAME, OUTPUTS, ARCHITECTURE, input_shapes or INPUT_SHAPES,
                                   kinds.imagenet_weights_file(NAME, IMAGENET))


def preprocess(samples, input_shapes=None) -> np.ndarray:
    """Images (uint8 RGB, any size) -> the model input at ``input_shapes`` (default
    :data:`INPUT_SHAPES`): the ImageNet preprocessing of its pretrained weights, or
    sample_photos' [-1, 1] crop with random weights."""
    return kinds.imagenet_input(NAME, IMAGENET, samples, input_shapes or INPUT_SHAPES)
