"""MTCNN O-Net (output net) ported to MXNet with the weights the ``mtcnn`` 1.0.0 package ships (MIT
licence, ``mtcnn/assets/weights/onet.lz4``): the same graph written as an MXNet symbol,
kernels HWIO -> OIHW, dense rows reordered to NCHW flatten order, PReLU alphas as gammas
(``agraph.shipped.mtcnn_mx``; matches the Keras original to ~1e-6).

``data`` [N,3,48,48] RGB scaled by (p - 127.5) / 128 -> box [N,4], landmarks [N,10], prob [N,2]
(prob index 1 = face). Metric: face/non-face accuracy of argmax(prob) on lfw_face_nonface.
"""
from __future__ import annotations

import numpy as np

from agraph import inputs, kinds, shipped

NAME = "mtcnn_onet_mx"
FRAMEWORK = "mxnet"
DATASET = "lfw_face_nonface"
WEIGHTS = "shipped"
INPUTS = ["data"]
OUTPUTS = ["box", "landmarks", "prob"]
INPUT_SHAPES = [[1, 3, 48, 48]]
TEST_INPUT_SHAPES = None      # already small; the architecture fixes the size
SIDE = 48   # input height and width


def build(workdir, input_shapes=None) -> list:
    """Write ``<NAME>-symbol.json / -0000.params`` into ``workdir`` (reused when already there)."""
    return kinds.shipped_mx(workdir, NAME, INPUT_SHAPES, input_shapes, lambda mx: shipped.mtcnn_mx(mx, "onet"))


def preprocess(samples: np.ndarray) -> np.ndarray:
    """lfw_face_nonface samples [N,25,25] -> [N,3,48,48] float32."""
    return inputs.mtcnn_input(samples, SIDE, FRAMEWORK)
