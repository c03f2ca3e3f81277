"""MTCNN O-Net (output net) with the weights the ``mtcnn`` 1.0.0 package ships (MIT licence,
``mtcnn/assets/weights/onet.lz4``), frozen from the package's Keras net.

``images`` [N,48,48,3] RGB scaled by (p - 127.5) / 128 -> box [N,4], landmarks [N,10], prob [N,2]
(prob index 1 = face). Metric: face/non-face accuracy of argmax(prob) on lfw_face_nonface
(crops resized to 48x48, grey repeated to RGB).
"""
from __future__ import annotations

import numpy as np

from agraph import inputs, kinds, shipped

NAME = "mtcnn_onet_tf"
FRAMEWORK = "tensorflow"
DATASET = "lfw_face_nonface"
WEIGHTS = "shipped"
INPUTS = ["images"]
OUTPUTS = ["box", "landmarks", "prob"]
INPUT_SHAPES = [[1, 48, 48, 3]]
TEST_INPUT_SHAPES = None      # already small; the architecture fixes the size
SIDE = 48   # input height and width


def build(workdir, input_shapes=None) -> list:
    """Write ``<NAME>.pb`` into ``workdir`` (reused when already there)."""
    return kinds.shipped_keras(workdir, NAME, OUTPUTS, INPUT_SHAPES, input_shapes, lambda: shipped.mtcnn_keras("onet"))


def preprocess(samples: np.ndarray) -> np.ndarray:
    """lfw_face_nonface samples [N,25,25] -> [N,48,48,3] float32."""
    return inputs.mtcnn_input(samples, SIDE, FRAMEWORK)
