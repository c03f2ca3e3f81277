"""Dataset loaders (ratelnn.datasets) and the GraphDef runner (ratelnn.testing)."""
from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from ratelnn.datasets import (FASHION_MNIST_FILES, DatasetError, load_digits_images,
                              load_fashion_mnist, read_idx_ubyte)


@pytest.mark.no_tf_math
def test_fashion_mnist_splits_are_nhwc_float_in_unit_range(fashion_mnist):
    (x_train, y_train), (x_test, y_test) = fashion_mnist
    assert x_train.shape == (60000, 28, 28, 1) and x_test.shape == (10000, 28, 28, 1)
    assert x_train.dtype == np.float32 and y_train.shape == (60000,)
    assert x_train.min() == 0.0 and x_train.max() == 1.0
    assert set(np.unique(y_test)) == set(range(10))
    assert np.bincount(y_test).tolist() == [1000] * 10  # the published balanced test split


@pytest.mark.no_tf_math
def test_missing_fashion_mnist_names_files_and_the_package(tmp_path):
    with pytest.raises(DatasetError, match="apt-get install -y dataset-fashion-mnist") as info:
        load_fashion_mnist(tmp_path)
    assert "t10k-images-idx3-ubyte.gz" in str(info.value)


def _write_idx(path, header: bytes, payload: bytes) -> None:
    with gzip.open(path, "wb") as f:
        f.write(header + payload)


@pytest.mark.no_tf_math
def test_idx_reader_rejects_wrong_size_and_wrong_type(tmp_path):
    good = tmp_path / "good.gz"
    _write_idx(good, struct.pack(">HBBII", 0, 8, 2, 2, 3), bytes(range(6)))
    assert read_idx_ubyte(good, 2).tolist() == [[0, 1, 2], [3, 4, 5]]
    short = tmp_path / "short.gz"
    _write_idx(short, struct.pack(">HBBII", 0, 8, 2, 2, 3), bytes(5))
    with pytest.raises(DatasetError, match="short.gz.*holds 5"):
        read_idx_ubyte(short, 2)
    with pytest.raises(DatasetError, match="good.gz: not an IDX ubyte file with 3 dimensions"):
        read_idx_ubyte(good, 3)


@pytest.mark.no_tf_math
def test_fashion_mnist_with_mismatched_label_count_is_an_error(tmp_path):
    images = struct.pack(">HBBIII", 0, 8, 3, 2, 28, 28), bytes(2 * 28 * 28)
    labels = struct.pack(">HBBI", 0, 8, 1, 3), bytes(3)
    for key, name in FASHION_MNIST_FILES.items():
        _write_idx(tmp_path / name, *(images if key.endswith("images") else labels))
    with pytest.raises(DatasetError, match="2 images but 3 labels"):
        load_fashion_mnist(tmp_path)


@pytest.mark.no_tf_math
def test_digits_split_is_deterministic_disjoint_and_complete():
    (x_train, y_train), (x_test, y_test) = load_digits_images()
    assert x_train.shape[1:] == (8, 8, 1) and x_train.dtype == np.float32
    assert len(x_train) + len(x_test) == 1797 and len(x_test) == 449
    assert 0.0 <= x_train.min() and x_train.max() == 1.0
    (x_again, _), _ = load_digits_images()
    np.testing.assert_array_equal(x_train, x_again)
    train_rows = {row.tobytes() for row in x_train}
    assert sum(row.tobytes() in train_rows for row in x_test) < 10  # only exact duplicates
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits_images(test_fraction=1.0)


def test_run_graph_pads_the_last_batch_for_fixed_batch_graphs():
    import tensorflow as tf

    from ratelnn.testing import graph_accuracy, run_graph

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (4, 3), name="x")
        tf.identity(x * 2.0, name="y")
    data = np.arange(30, dtype=np.float32).reshape(10, 3)
    out = run_graph(graph.as_graph_def(), "x:0", "y:0", data, batch_size=4)
    np.testing.assert_array_equal(out, data * 2.0)
    labels = np.argmax(data * 2.0, axis=1)
    labels[0] = 0  # argmax is column 2 everywhere: one row in ten is now wrong
    assert graph_accuracy(graph.as_graph_def(), "x:0", "y:0", data, labels, 4) == 0.9
