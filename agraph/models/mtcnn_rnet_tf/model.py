"""MTCNN R-Net (refinement net) with the weights the ``mtcnn`` 1.0.0 package ships (MIT licence,
``mtcnn/assets/weights/rnet.lz4``), frozen from the package's Keras net.

``images`` [N,24,24,3] RGB scaled by (p - 127.5) / 128 -> box [N,4], prob [N,2]
(prob index 1 = face). Metric: face/non-face accuracy of argmax(prob) on lfw_face_nonface
(crops resized to 24x24, grey repeated to RGB).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ratelnn.testing import shipped, zoo

NAME = "mtcnn_rnet_tf"
FRAMEWORK = "tensorflow"
DATASET = "lfw_face_nonface"
WEIGHTS = "shipped"
INPUTS = ["images"]
OUTPUTS = ["box", "prob"]
INPUT_SHAPES = [[1, 24, 24, 3]]
TEST_INPUT_SHAPES = None      # already small; the architecture fixes the size


def build(workdir, input_shapes=None) -> list:
    """Write ``<NAME>.pb`` into ``workdir`` (reused when already there)."""
    shapes = zoo.fixed_shapes(NAME, INPUT_SHAPES, input_shapes)

    def make(folder: Path) -> None:
        shipped_keras = shipped.mtcnn_keras("rnet")
        zoo.write_frozen_keras(shipped_keras, INPUT_SHAPES[0][1:], folder / f"{NAME}.pb", OUTPUTS)
    return zoo.cached_build(workdir, NAME, FRAMEWORK, shapes, make)


def preprocess(samples: np.ndarray) -> np.ndarray:
    """lfw_face_nonface samples [N,25,25] -> [N,24,24,3] float32."""
    return zoo.mtcnn_input(samples, 24, FRAMEWORK)
