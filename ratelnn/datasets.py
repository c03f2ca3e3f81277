"""Small image datasets for examples, tests and benchmarks.

Both loaders return ``(x_train, y_train), (x_test, y_test)``: images as float32 NHWC arrays
with values in [0, 1], labels as int64 class indices in ``[0, 10)``.

- :func:`load_fashion_mnist` reads the IDX files of the Debian package
  ``dataset-fashion-mnist`` (60,000 train / 10,000 test images of 28x28x1).
- :func:`load_digits_images` takes scikit-learn's bundled ``load_digits`` (1,797 images of
  8x8x1), split deterministically into train and test.
"""
from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path
from typing import Tuple

import numpy as np

from .errors import RatelError

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
_IDX_UBYTE = 0x08  # IDX type code of unsigned bytes

Split = Tuple[np.ndarray, np.ndarray]


class DatasetError(RatelError, FileNotFoundError):
    """A dataset's files are missing or malformed; the message says how to get them."""


def read_idx_ubyte(path: Path, ndim: int) -> np.ndarray:
    """Read a gzipped IDX file of unsigned bytes with ``ndim`` dimensions -> uint8 array.

    Raises :class:`DatasetError` naming the file when its header or size is wrong.
    """
    with gzip.open(path, "rb") as f:
        data = f.read()
    header_len = 4 + 4 * ndim
    if len(data) < header_len:
        raise DatasetError(f"{path}: truncated IDX file ({len(data)} bytes)")
    zero, type_code, file_ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or type_code != _IDX_UBYTE or file_ndim != ndim:
        raise DatasetError(f"{path}: not an IDX ubyte file with {ndim} dimensions "
                           f"(header type 0x{type_code:02x}, {file_ndim} dims)")
    shape = struct.unpack(f">{ndim}I", data[4:header_len])
    expected = int(np.prod(shape))
    if len(data) - header_len != expected:
        raise DatasetError(f"{path}: header says {shape} = {expected} bytes of data, "
                           f"file holds {len(data) - header_len}")
    return np.frombuffer(data, dtype=np.uint8, offset=header_len).reshape(shape)


def load_fashion_mnist(directory: str | os.PathLike = FASHION_MNIST_DIR) -> Tuple[Split, Split]:
    """Fashion-MNIST from the Debian package files in ``directory``.

    Returns ``(x_train [60000,28,28,1], y_train [60000]), (x_test [10000,28,28,1],
    y_test [10000])``; images float32 in [0, 1], labels int64.
    Raises :class:`DatasetError` telling to ``apt-get install dataset-fashion-mnist`` when a
    file is missing.
    """
    directory = Path(directory)
    missing = [n for n in FASHION_MNIST_FILES.values() if not (directory / n).is_file()]
    if missing:
        raise DatasetError(
            f"Fashion-MNIST files missing from {directory}: {', '.join(missing)}. "
            "Install them with: apt-get update && apt-get install -y dataset-fashion-mnist")
    arrays = {key: read_idx_ubyte(directory / name, 3 if key.endswith("images") else 1)
              for key, name in FASHION_MNIST_FILES.items()}
    splits = []
    for part in ("train", "test"):
        images, labels = arrays[f"{part}_images"], arrays[f"{part}_labels"]
        if len(images) != len(labels):
            raise DatasetError(f"{directory}: {part} split has {len(images)} images "
                               f"but {len(labels)} labels")
        x = (images.astype(np.float32) / 255.0)[..., np.newaxis]
        splits.append((x, labels.astype(np.int64)))
    return splits[0], splits[1]


def load_digits_images(test_fraction: float = 0.25, seed: int = 0) -> Tuple[Split, Split]:
    """scikit-learn's 8x8 digits as ``(x_train, y_train), (x_test, y_test)``.

    Images float32 ``[N, 8, 8, 1]`` in [0, 1] (the raw values 0..16 divided by 16), labels
    int64. The split is a deterministic shuffle by ``seed``; ``test_fraction`` of the 1,797
    images go to the test split.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[..., np.newaxis]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return (x[train], y[train]), (x[test], y[test])
