"""Digits CNN (MXNet Gluon, exported symbol) on scikit-learn's 8x8 digits: conv 3x3 (16) + BN
+ ReLU, conv 3x3 stride 2 (32) + ReLU, dense.  Trained here once (seeded Adam, 40 epochs on the
1,348 training digits of ``agraph.datasets.digits_split``, a few seconds), cached; about 97%
held-out top-1."""
from __future__ import annotations

from pathlib import Path

import numpy as np

NAME = "digits_cnn_mx"
FRAMEWORK = "mxnet"
DATASET = "digits"
WEIGHTS = "trained"
INPUTS = ["data"]
OUTPUTS = ["dcnn_dense0_fwd"]
INPUT_SHAPES = [[1, 1, 8, 8]]
TEST_INPUT_SHAPES = None
SEED, EPOCHS, BATCH, LEARNING_RATE = 0, 40, 32, 3e-3


def _train(mx, x: np.ndarray, y: np.ndarray):
    from mxnet import autograd, gluon
    from mxnet.gluon import nn

    mx.random.seed(SEED)
    net = nn.HybridSequential(prefix="dcnn_")
    with net.name_scope():
        net.add(nn.Conv2D(16, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
                nn.Conv2D(32, 3, strides=2, padding=1, activation="relu"), nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": LEARNING_RATE})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.default_rng(SEED)
    for _ in range(EPOCHS):
        order = rng.permutation(len(x))
        for start in range(0, len(order), BATCH):
            idx = order[start:start + BATCH]
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(x[idx])), mx.nd.array(y[idx]))
            loss.backward()
            trainer.step(len(idx))
    sym = net(mx.sym.var("data"))
    params = net.collect_params()
    arg = {k: v.data() for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v.data() for k, v in params.items() if k in sym.list_auxiliary_states()}
    return sym, arg, aux


def build(workdir: Path, input_shapes=None) -> list:
    """Train (first time, cached) or load the CNN; write ``digits_cnn_mx-symbol.json`` and
    ``digits_cnn_mx-0000.params`` in ``workdir``."""
    import shutil
    import tempfile

    from sklearn.datasets import load_digits

    from ratelnn.mxnet_compat import import_mxnet

    from agraph import paths
    from agraph.datasets import digits_split
    from agraph.training import cache_key, save_mx_checkpoint

    mx = import_mxnet()
    digits = load_digits()
    train, _ = digits_split()
    x, y = preprocess(digits.images[train]), digits.target[train].astype(np.float32)
    cache = paths.weights_dir() / f"{NAME}-{cache_key(__file__, 'mxnet', [x, y])}"
    if not Path(f"{cache}-symbol.json").is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
            files = save_mx_checkpoint(_train(mx, x, y), Path(tmp) / cache.name)
            for f in reversed(files):  # params first, the symbol last marks completion
                shutil.move(str(f), str(cache.parent / f.name))
    return save_mx_checkpoint(mx.model.load_checkpoint(str(cache), 0), Path(workdir) / NAME)


def preprocess(samples: np.ndarray) -> np.ndarray:
    """float [N,8,8] in 0..16 -> float32 [N,1,8,8] in [0, 1]."""
    return (np.asarray(samples, dtype=np.float32) / 16.0)[:, None]
