"""Gluon model zoo ``mobilenetv2_1.0`` (1000 classes) exported as symbol + params.

Weights: the pretrained ImageNet file when one is found (``--weights FILE`` or the
Gluon cache, :data:`IMAGENET`; never downloaded): ``WEIGHTS`` "imagenet", top-1 on the
ImageNet archive.  Otherwise RANDOM WEIGHTS (fixed seed 0): accuracy means nothing; the
metric is agreement with the FP32 model on sample_photos (``agraph.kinds``).
"""
from __future__ import annotations

import numpy as np

from agraph import kinds, weights

NAME = "mobilenet_v2_gluon"
FRAMEWORK = "mxnet"
INPUTS = ["data"]
OUTPUTS = ["logits"]
INPUT_SHAPES = [[1, 3, 224, 224]]
TEST_INPUT_SHAPES = [[1, 3, 64, 64]]   # its last pool is global; at 32x32 the cosine to FP32 drops to 0.48
ARCHITECTURE = "mobilenetv2_1.0"   # the Gluon model zoo name
IMAGENET = weights.ImageNetWeights("mxnet", "mobilenetv2_1.0-36da4ff1.params", "torch", 71.92,
                                   "Gluon model zoo table (mxnet.gluon.model_zoo.vision)",
                                   ((-0.12, "MQBench, TensorRT backend"), (-0.66, "widest published PTQ drop cited beside it")), sha1="36da4ff1867abccd32b29592d79fc753bca5a215")


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
