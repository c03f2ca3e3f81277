"""The Gluon Fashion-MNIST CNN of the MXNet end-to-end test and the MXNet peer benchmark.

conv + BatchNorm + ReLU, max pooling, a residual block (two convs with BatchNorm and an
identity add), a stride-2 conv, average pooling in ceil mode and a dense layer: the op
families of the MXNet path. One epoch of Adam on the 60,000 training images (NCHW) takes
about a minute on 2 CPU cores and gives about 84% top-1 on the 10,000 test images.

:func:`cached_mx_fashion_cnn` keeps the trained model on disk as an MXNet checkpoint, keyed by
a hash of this file's source, the MXNet version and the training data, so that changing the
architecture or the recipe retrains and anything else reuses the weights.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Tuple

import numpy as np

EPOCHS = 1
BATCH_SIZE = 128
LEARNING_RATE = 3e-3
SEED = 0
EVAL_BATCH = 500
MODEL_NAME = "mx_residual_cnn"

MXModel = Tuple[Any, dict, dict]  # (symbol, arg_params, aux_params)


def to_nchw(images: np.ndarray) -> np.ndarray:
    """NHWC images (as :func:`ratelnn.datasets.load_fashion_mnist` gives) -> contiguous NCHW."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2))


def build_net(mx, width: int = 8):
    """An uninitialised Gluon HybridBlock: [N,1,28,28] float in [0,1] -> [N,10] logits.

    conv+BN+relu -> maxpool -> residual block (2 convs + BN, identity add) -> conv stride 2
    + BN + relu -> avg pool (ceil mode) -> dense on the flattened map. ``width``: channels
    of the 14x14 stage (the 7x7 stage has ``2 * width``)."""
    from mxnet.gluon import nn

    class ResidualCNN(mx.gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.stem = nn.HybridSequential()
                self.stem.add(nn.Conv2D(width, 3, padding=1, use_bias=False), nn.BatchNorm(),
                              nn.Activation("relu"), nn.MaxPool2D(2))
                self.res = nn.HybridSequential()
                self.res.add(nn.Conv2D(width, 3, padding=1, use_bias=False), nn.BatchNorm(),
                             nn.Activation("relu"), nn.Conv2D(width, 3, padding=1, use_bias=False),
                             nn.BatchNorm())
                self.head = nn.HybridSequential()
                self.head.add(nn.Conv2D(2 * width, 3, strides=2, padding=1, use_bias=False),
                              nn.BatchNorm(), nn.Activation("relu"), nn.AvgPool2D(2, ceil_mode=True),
                              nn.Dense(10))

        def hybrid_forward(self, F, x):
            x = self.stem(x)
            x = F.relu(x + self.res(x))
            return self.head(x)

    return ResidualCNN(prefix="fcnn_")


def train(mx, x_train: np.ndarray, y_train: np.ndarray, epochs: int = EPOCHS) -> MXModel:
    """Train :func:`build_net` (Adam, seeded) on NCHW ``x_train`` [N,1,28,28] and int labels
    ``y_train`` [N]; returns the exported ``(symbol, arg_params, aux_params)``."""
    from mxnet import autograd, gluon

    mx.random.seed(SEED)
    np.random.seed(SEED)
    net = build_net(mx)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": LEARNING_RATE})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    order = np.random.default_rng(SEED).permutation(len(x_train))
    for _ in range(epochs):
        for start in range(0, len(order), BATCH_SIZE):
            idx = order[start:start + BATCH_SIZE]
            data, label = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(len(idx))
    sym = net(mx.sym.var("data"))
    params = net.collect_params()
    arg = {k: v.data() for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v.data() for k, v in params.items() if k in sym.list_auxiliary_states()}
    return sym, arg, aux


def model_cache_key(x_train: np.ndarray, y_train: np.ndarray) -> str:
    """Hash (16 hex digits) of this module's source, the MXNet version, the labels and a
    sample of the training images."""
    h = hashlib.sha256(inspect.getsource(sys.modules[__name__]).encode())
    h.update(importlib.metadata.version("mxnet").encode())
    h.update(str(x_train.shape).encode())
    h.update(np.ascontiguousarray(x_train[::97]).tobytes())
    h.update(np.ascontiguousarray(y_train).tobytes())
    return h.hexdigest()[:16]


def cached_mx_fashion_cnn(mx, cache_dir: str | os.PathLike, x_train: np.ndarray,
                          y_train: np.ndarray) -> MXModel:
    """The trained model ``(symbol, arg_params, aux_params)``: loaded from the checkpoint in
    ``cache_dir`` if this source version trained it before, else trained on NCHW
    ``(x_train, y_train)`` and saved there (both files renamed into place only when complete)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    prefix = cache_dir / f"{MODEL_NAME}-{model_cache_key(x_train, y_train)}"
    files = [Path(f"{prefix}-0000.params"), Path(f"{prefix}-symbol.json")]  # symbol last: marks completion
    if not all(f.is_file() for f in files):
        sym, arg, aux = train(mx, x_train, y_train)
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            tmp_prefix = Path(tmp) / prefix.name
            mx.model.save_checkpoint(str(tmp_prefix), 0, sym, arg, aux)
            for f in files:
                os.replace(Path(tmp) / f.name, f)
    return mx.model.load_checkpoint(str(prefix), 0)


def predict(mx, model: MXModel, x: np.ndarray, batch: int = EVAL_BATCH) -> np.ndarray:
    """Outputs (logits) of ``model`` on NCHW images ``x``, ``batch`` at a time; ``len(x)``
    must be a multiple of ``batch``. Returns float32 [len(x), 10]."""
    if len(x) % batch:
        raise ValueError(f"{len(x)} images are not a multiple of the batch size {batch}")
    sym, arg, aux = model
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind([("data", (batch,) + x.shape[1:])], for_training=False)
    mod.set_params(arg, aux, allow_missing=False, allow_extra=False)
    out = []
    for start in range(0, len(x), batch):
        mod.forward(mx.io.DataBatch([mx.nd.array(x[start:start + batch])]), is_train=False)
        out.append(mod.get_outputs()[0].asnumpy())
    return np.concatenate(out)
