"""AGraph test environment: a session-wide ``AGRAPH_HOME`` in a temporary folder, the
datasets the trained models use prepared into a temporary ``AGRAPH_DATA_DIR``, and the
trained weights cached under the pytest cache (``ratelnn-models``, shared with the suite's
Fashion-MNIST fixtures: same builders, same keys), so reruns skip training; the Keras and
Gluon weight caches are empty folders."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")

PREPARED = ("fashion_mnist", "digits")


@pytest.fixture(scope="session", autouse=True)
def empty_framework_caches(tmp_path_factory):
    """Empty Keras and Gluon model caches: pretrained ImageNet weights a machine holds in
    ~/.keras or ~/.mxnet must not turn the random-weight architectures into ``imagenet``."""
    with pytest.MonkeyPatch.context() as mp:
        for variable in ("KERAS_HOME", "MXNET_HOME"):
            mp.setenv(variable, str(tmp_path_factory.mktemp(variable.lower())))
        yield


@pytest.fixture(scope="session")
def agraph_data(tmp_path_factory):
    """A data root holding the prepared archives of :data:`PREPARED`."""
    from agraph import datasets

    root = tmp_path_factory.mktemp("agraph-data")
    for key in PREPARED:
        datasets.prepare(key, root)
    return root


@pytest.fixture(scope="session")
def agraph_session(request, agraph_data, tmp_path_factory):
    """Sets AGRAPH_HOME / AGRAPH_DATA_DIR / AGRAPH_WEIGHTS_DIR for the session."""
    values = {"AGRAPH_HOME": str(tmp_path_factory.mktemp("agraph-home")),
              "AGRAPH_DATA_DIR": str(agraph_data),
              "AGRAPH_WEIGHTS_DIR": str(request.config.cache.mkdir("ratelnn-models"))}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in values.items():
            mp.setenv(key, value)
        yield values
