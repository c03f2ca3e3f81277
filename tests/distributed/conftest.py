"""Fixtures of the Ray tests: one local Ray instance of 2 workers for the whole session (its
start costs seconds) and the trained Fashion-MNIST CNN as a frozen graph with its data."""
from __future__ import annotations

import numpy as np
import pytest

BATCH = 16
SAMPLES = 190            # 12 batches, the last one partial (padded as in one process)


@pytest.fixture(scope="session")
def executor():
    pytest.importorskip("ray")
    from ratelnn.distributed import RayExecutor

    ex = RayExecutor(num_workers=2, threads_per_worker=1, shard_batches=2)
    yield ex
    ex.shutdown()


@pytest.fixture(scope="session")
def model(fashion_mnist, fashion_cnn):
    """(frozen GraphDef, input nodes, output nodes, SAMPLES training images)."""
    import ratelnn
    from ratelnn.frontend.tensorflow import freeze_keras

    ratelnn.tf_init()
    (x_train, _), _ = fashion_mnist
    graph_def, inputs, outputs = freeze_keras(fashion_cnn)
    images = x_train[np.random.default_rng(17).permutation(len(x_train))[:SAMPLES]]
    return graph_def, inputs, outputs, np.ascontiguousarray(images)


@pytest.fixture(scope="session")
def make_converter(model):
    """converter(output_dir, algorithm="naive", **config) of the Fashion CNN."""
    from ratelnn.frontend.tensorflow import converter

    def make(output_dir, algorithm="naive", **extra):
        graph_def, inputs, outputs, _ = model
        return converter(graph_def, dict({"input_nodes": inputs, "output_nodes": outputs,
                                          "input_shapes": [[BATCH, 28, 28, 1]], "output_dir": str(output_dir),
                                          "quantize_algorithm": algorithm}, **extra))
    return make
