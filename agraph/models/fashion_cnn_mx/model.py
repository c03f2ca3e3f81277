"""Fashion-MNIST residual CNN (MXNet Gluon, exported symbol): conv+BN+ReLU, max pooling, a
residual block, a stride-2 conv, ceil-mode average pooling, dense; the architecture and recipe
of ``ratelnn.testing.mx_fashion`` (1 epoch of seeded Adam on the 60,000 training images of the
Debian package dataset-fashion-mnist, about 84% test top-1), trained here once and cached."""
from __future__ import annotations

from pathlib import Path

import numpy as np

NAME = "fashion_cnn_mx"
FRAMEWORK = "mxnet"
DATASET = "fashion_mnist"
WEIGHTS = "trained"
INPUTS = ["data"]
OUTPUTS = ["fcnn_dense0_fwd"]
INPUT_SHAPES = [[1, 1, 28, 28]]
TEST_INPUT_SHAPES = None


def build(workdir: Path, input_shapes=None) -> list:
    """Train (first time) or load the CNN; write ``fashion_cnn_mx-symbol.json`` and
    ``fashion_cnn_mx-0000.params`` in ``workdir``."""
    from ratelnn.datasets import load_fashion_mnist
    from ratelnn.mxnet_compat import import_mxnet
    from ratelnn.testing.mx_fashion import cached_mx_fashion_cnn, to_nchw

    from agraph import paths
    from agraph.training import save_mx_checkpoint

    (x_train, y_train), _ = load_fashion_mnist()
    model = cached_mx_fashion_cnn(import_mxnet(), paths.weights_dir(), to_nchw(x_train), y_train)
    return save_mx_checkpoint(model, Path(workdir) / NAME)


def preprocess(samples: np.ndarray) -> np.ndarray:
    """uint8 [N,28,28] -> float32 [N,1,28,28] in [0, 1]."""
    return (np.asarray(samples, dtype=np.float32) / 255.0)[:, None]
