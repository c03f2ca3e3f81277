"""Session-wide fixtures: the Fashion-MNIST data and the trained Fashion-MNIST CNN; per test,
``rng``: a random generator of the test's own.

The trained CNN is built once per pytest session and also kept on disk under the pytest
cache directory (``.pytest_cache/d/ratelnn-models``), keyed by a hash of its builder's
source, so reruns skip training. ``pytest --cache-clear`` retrains.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# MXNet's OpenMP pool oversubscribes the 2 cores next to TensorFlow's threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# TensorFlow's oneDNN graph rewrites are on by default on AVX-512 VNNI/BF16/AMX CPUs and off
# on AVX2-only ones, and TF reads TF_ENABLE_ONEDNN_OPTS once per process.  So the README's
# test command runs the suite with the rewrites forced on, then the tests marked
# `tensorflow` again with them off: every TF graph this SDK writes runs both ways on every
# machine.  A test module that mentions TensorFlow or Keras gets the mark, except tests
# marked `no_tf_math`: they build, cache or compile the op library, run only ratelnn's own
# ops, or run no TensorFlow kernel at all (MXNet, the IR's numpy reference, native engines,
# config and registry checks, Keras models built or frozen but never run), so the rewrites
# (which replace TF's Conv2D/MatMul/... kernels) cannot change them; and tests marked `run_once`:
# they run TensorFlow, but check something the rewrites cannot change (that a wheel installs and
# builds its ops), on graphs other tests run both ways.
_TF_WORDS = ("tensorflow", "keras", "tf_init", "freeze_")


def pytest_configure(config):
    config.addinivalue_line("markers", "tensorflow: runs TensorFlow (rerun with TF_ENABLE_ONEDNN_OPTS=0)")
    config.addinivalue_line("markers", "no_tf_math: mentions TensorFlow but runs none of the kernels its "
                                       "oneDNN rewrites replace (run once)")
    config.addinivalue_line("markers", "run_once: runs TensorFlow, but checks what the oneDNN rewrites cannot "
                                       "change, on graphs other tests run both ways (run once)")


def pytest_collection_modifyitems(config, items):
    sources = {}
    for item in items:
        path = str(item.fspath)
        if path not in sources:
            try:
                with open(path) as f:
                    sources[path] = any(word in f.read() for word in _TF_WORDS)
            except OSError:
                sources[path] = False
        if sources[path] and not any(item.get_closest_marker(m) for m in ("no_tf_math", "run_once")):
            item.add_marker(pytest.mark.tensorflow)


@pytest.fixture
def rng(request):
    """A numpy generator of the test's own, seeded from its id (path, name and parameters):
    its draws do not depend on which tests ran before it in the same worker."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def fashion_mnist():
    """``(x_train, y_train), (x_test, y_test)`` from the Debian package dataset-fashion-mnist:
    float32 NHWC images in [0, 1] (60,000 / 10,000 of 28x28x1), int64 labels."""
    from ratelnn.datasets import load_fashion_mnist

    return load_fashion_mnist()


@pytest.fixture(scope="session")
def fashion_cnn(request, fashion_mnist):
    """The Keras CNN of ``ratelnn.testing.fashion_cnn``, trained on the Fashion-MNIST train
    split (about 89% test top-1); cached on disk across sessions."""
    from ratelnn.testing import cached_fashion_cnn

    (x_train, y_train), _ = fashion_mnist
    cache_dir = request.config.cache.mkdir("ratelnn-models")
    return cached_fashion_cnn(cache_dir, x_train, y_train)


@pytest.fixture(scope="session")
def mx():
    """MXNet with ratelnn's ops loaded (``ratelnn.mx_init``)."""
    import ratelnn
    ratelnn.mx_init()
    from ratelnn.mxnet_compat import import_mxnet
    return import_mxnet()
