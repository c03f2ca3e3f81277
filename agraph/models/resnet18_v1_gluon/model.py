"""Gluon model zoo ``resnet18_v1`` (1000 classes) exported as symbol + params.

Weights: the pretrained ImageNet file when one is found (``--weights FILE`` or the
Gluon cache, :data:`IMAGENET`; never downloaded): ``WEIGHTS`` "imagenet", top-1 on the
ImageNet archive.  Otherwise RANDOM WEIGHTS (fixed seed 0): accuracy means nothing; the
metric is agreement with the FP32 model on sample_photos (``agraph.kinds``).
"""
from __future__ import annotations

import numpy as np

from agraph import kinds, weights

NAME = "resnet18_v1_gluon"
FRAMEWORK = "mxnet"
INPUTS = ["data"]
OUTPUTS = ["logits"]
INPUT_SHAPES = [[1, 3, 224, 224]]
TEST_INPUT_SHAPES = [[1, 3, 64, 64]]
ARCHITECTURE = "resnet18_v1"   # the Gluon model zoo name
IMAGENET = weights.ImageNetWeights("mxnet", "resnet18_v1-a0666292.params", "torch", 70.93,
                                   "Gluon model zoo table (mxnet.gluon.model_zoo.vision)",
                                   (), sha1="a0666292f0a30ff61f857b0b66efc0228eb6a54b")


def __getattr__(attribute):
    """``WEIGHTS``, ``DATASET`` and ``WEIGHTS_FILE`` follow the weights found (kinds.imagenet_attribute)."""
    return kinds.imagenet_attribute(NAME, IMAGENET, attribute)


def build(workdir, input_shapes=None) -> list:
    """Write the model with its weights (pretrained when found, else random) into ``workdir``
    at ``input_shapes`` (default :data:`INPUT_SHAPES`; reused when already there for those
    shapes and weights)."""
    return kinds.gluon_model_zoo(workdir, NAME, ARCHITECTURE, input_shapes or INPUT_SHAPES,
                                   kinds.imagenet_weights_file(NAME, IMAGENET))


def preprocess(samples, input_shapes=None) -> np.ndarray:
    """Images (uint8 RGB, any size) -> the model input at ``input_shapes`` (default
    :data:`INPUT_SHAPES`): the ImageNet preprocessing of its pretrained weights, or
    sample_photos' [-1, 1] crop with random weights."""
    return kinds.imagenet_input(NAME, IMAGENET, samples, input_shapes or INPUT_SHAPES)
