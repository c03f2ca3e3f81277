"""Fashion-MNIST CNN (Keras 3, TensorFlow): conv+BN+ReLU, a depthwise residual block, concat,
max/average/global pooling, dense + softmax; the architecture and training recipe of
``ratelnn.testing.fashion_cnn`` (2 epochs of Adam on the 60,000 training images of the Debian
package dataset-fashion-mnist, about 89% test top-1), trained here once and cached."""
from __future__ import annotations

from pathlib import Path

import numpy as np

NAME = "fashion_cnn_tf"
FRAMEWORK = "tensorflow"
DATASET = "fashion_mnist"
WEIGHTS = "trained"
INPUTS = ["images"]
OUTPUTS = ["probabilities"]
INPUT_SHAPES = [[1, 28, 28, 1]]
TEST_INPUT_SHAPES = None


def build(workdir: Path, input_shapes=None) -> list:
    """Train (first time) or load the CNN and freeze it to ``workdir/fashion_cnn_tf.pb`` (the
    frozen bytes are cached beside the weights)."""
    import inspect

    from ratelnn.datasets import load_fashion_mnist
    from ratelnn.testing import fashion_cnn

    from agraph import paths
    from agraph.training import cache_key, cached_frozen

    (x_train, y_train), _ = load_fashion_mnist()
    key = cache_key(__file__, "keras", [x_train[::97], y_train]) + \
        cache_key(inspect.getsourcefile(fashion_cnn), "keras", [])[:8]
    return [cached_frozen(NAME, key, lambda: fashion_cnn.cached_fashion_cnn(paths.weights_dir(), x_train, y_train),
                          OUTPUTS[0], Path(workdir) / f"{NAME}.pb")]


def preprocess(samples: np.ndarray) -> np.ndarray:
    """uint8 [N,28,28] -> float32 [N,28,28,1] in [0, 1]."""
    return (np.asarray(samples, dtype=np.float32) / 255.0)[..., None]
