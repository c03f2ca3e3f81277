"""Gluon model zoo ``squeezenet1.1`` (1000 classes; fire modules, ceil-mode pooling) exported as symbol + params.

Weights: the pretrained ImageNet file when one is found (``--weights FILE`` or the
Gluon cache, :data:`IMAGENET`; never downloaded): ``WEIGHTS`` "imagenet", top-1 on the
ImageNet archive.  Otherwise RANDOM WEIGHTS (fixed seed 0): accuracy means nothing; the
metric is agreement with the FP32 model on sample_photos (``agraph.kinds``).
"""
from __future__ import annotations

import numpy as np

from agraph import kinds, weights

NAME = "squeezenet_gluon"
FRAMEWORK = "mxnet"
INPUTS = ["data"]
OUTPUTS = ["logits"]
INPUT_SHAPES = [[1, 3, 224, 224]]
TEST_INPUT_SHAPES = None   # its last pool is a fixed 13x13 window: 224x224 only
ARCHITECTURE = "squeezenet1.1"   # the Gluon model zoo name
IMAGENET = weights.ImageNetWeights("mxnet", "squeezenet1.1-33ba0f93.params", "torch", 54.96,
                                   "Gluon model zoo table (mxnet.gluon.model_zoo.vision)",
                                   (), sha1="33ba0f93753c83d86e1eb397f38a667eaf2e9376")


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
