"""The datasets of the zoo: a registry of packed archives under ``AGRAPH_DATA_DIR``, checked
at run time (docs/agraph-datasets.md).

An archive ``<key>.tar`` or ``<key>.tgz`` holds ``<key>/meta.json`` (``{"format": 1, "key",
"count", "samples": "array"|"list", "labels": bool}``), ``<key>/labels.npy`` when labelled,
and the samples: ``<key>/samples.npy`` (one array, samples on axis 0) or, for samples of
different shapes, ``<key>/samples/<index 00000>.npy``.  :func:`pack` writes one
byte-reproducibly; :func:`get` checks presence, checksum and layout and raises
:class:`~agraph.errors.DatasetError` naming the file and the tutorial step.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np

from ratelnn.fileio import write_atomic

from . import imagenet, paths
from .errors import DatasetError, RegistryError

TUTORIAL = "docs/agraph-datasets.md"
FORMAT = 1
Builder = Callable[[], Tuple[np.ndarray, Optional[np.ndarray]]]


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """One registered dataset.  ``archive``: file name under the data root (``.tar``/``.tgz``);
    ``sha256``: the archive's expected checksum (None: not pinned); ``step``: the section of
    docs/agraph-datasets.md that makes it; ``builder``: makes ``(samples, labels)`` from what
    exists offline (None for user datasets packed by hand)."""

    key: str
    archive: str
    sha256: Optional[str]
    description: str
    step: str
    builder: Optional[Builder] = None

    def tutorial(self) -> str:
        return f"{TUTORIAL}, section '{self.step}'"


class Dataset:
    """A checked, loaded dataset: ``samples`` (an array, or an object array of arrays of
    different shapes), ``labels`` (int array or None), ``len()``, :meth:`batches`."""

    def __init__(self, spec: DatasetSpec, path: Path, samples: np.ndarray,
                 labels: Optional[np.ndarray], calibration: Optional["Dataset"] = None) -> None:
        self.spec, self.path, self.samples, self.labels = spec, path, samples, labels
        self.key = spec.key
        self.calibration = calibration

    def __len__(self) -> int:
        return len(self.samples)

    def batches(self, batch_size: int = 32, limit: Optional[int] = None
                ) -> Iterator[Tuple[np.ndarray, Optional[np.ndarray]]]:
        """``(samples, labels)`` chunks of at most ``batch_size`` of the first ``limit`` samples
        (all when None), in order; labels None for unlabelled datasets."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        n = len(self) if limit is None else min(int(limit), len(self))
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            yield self.samples[start:stop], None if self.labels is None else self.labels[start:stop]

    def calibration_batches(self, batch_size: int = 32, limit: Optional[int] = None
                            ) -> Iterator[Tuple[np.ndarray, Optional[np.ndarray]]]:
        """:meth:`batches` of the samples held out for calibration when the archive has them
        (evaluation never sees those), else of the dataset's first samples."""
        return (self.calibration or self).batches(batch_size, limit)

    def num_batches(self, batch_size: int = 32, limit: Optional[int] = None) -> int:
        n = len(self) if limit is None else min(int(limit), len(self))
        return -(-n // batch_size)


# --- builders: what exists offline -> (samples, labels) -------------------------------------

def _fashion_mnist() -> Tuple[np.ndarray, np.ndarray]:
    """The 10,000 test images (uint8 [N,28,28]) and labels of the Debian package
    dataset-fashion-mnist."""
    from ratelnn.datasets import FASHION_MNIST_DIR, FASHION_MNIST_FILES, read_idx_ubyte

    missing = [n for n in FASHION_MNIST_FILES.values() if not (FASHION_MNIST_DIR / n).is_file()]
    if missing:
        raise DatasetError(f"Fashion-MNIST files missing from {FASHION_MNIST_DIR}: {', '.join(missing)}; "
                           f"install them with apt-get install dataset-fashion-mnist ({TUTORIAL}, "
                           "section 'fashion_mnist')")
    images = read_idx_ubyte(FASHION_MNIST_DIR / FASHION_MNIST_FILES["test_images"], 3)
    labels = read_idx_ubyte(FASHION_MNIST_DIR / FASHION_MNIST_FILES["test_labels"], 1)
    return np.ascontiguousarray(images), labels.astype(np.int64)


DIGITS_TEST_FRACTION, DIGITS_SEED = 0.25, 0


def digits_split() -> Tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, test)`` of scikit-learn's 1,797 digits: the deterministic shuffle of
    ``ratelnn.datasets.load_digits_images`` (a quarter held out)."""
    order = np.random.default_rng(DIGITS_SEED).permutation(1797)
    n_test = int(round(1797 * DIGITS_TEST_FRACTION))
    return order[n_test:], order[:n_test]


def _digits() -> Tuple[np.ndarray, np.ndarray]:
    """The held-out 449 of scikit-learn's digits: float32 [N,8,8] in 0..16, int labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    _, test = digits_split()
    return digits.images[test].astype(np.float32), digits.target[test].astype(np.int64)


def _lfw_face_nonface() -> Tuple[np.ndarray, np.ndarray]:
    """scikit-image's ``lfw_subset``: 100 faces then 100 non-faces, 25x25 grey float32 in
    [0, 1]; labels 1 = face, 0 = non-face."""
    from skimage import data

    images = data.lfw_subset().astype(np.float32)
    return images, np.array([1] * 100 + [0] * 100, dtype=np.int64)


SAMPLE_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field",
                 "immunohistochemistry", "colorwheel", "camera", "moon", "brick", "grass",
                 "gravel", "clock", "text", "page")


def _sample_photos() -> Tuple[np.ndarray, None]:
    """scikit-image's bundled photos (:data:`SAMPLE_PHOTOS`) as uint8 RGB HWC at their own
    sizes (grey ones repeated to 3 channels); unlabelled."""
    from skimage import data

    images = []
    for name in SAMPLE_PHOTOS:
        image = np.asarray(getattr(data, name)())
        if image.ndim == 2:
            image = np.repeat(image[..., None], 3, axis=2)
        images.append(np.ascontiguousarray(image[..., :3].astype(np.uint8)))
    samples = np.empty(len(images), dtype=object)
    samples[:] = images
    return samples, None


DATASETS: Dict[str, DatasetSpec] = {}


def register(spec: DatasetSpec, replace: bool = False) -> DatasetSpec:
    """Add ``spec`` to :data:`DATASETS`; a different spec under a taken key is an error."""
    if not spec.archive.endswith((".tar", ".tgz")):
        raise RegistryError(f"dataset {spec.key!r}: archive {spec.archive!r} must be a .tar or .tgz")
    old = DATASETS.get(spec.key)
    if old is not None and old != spec and not replace:
        raise RegistryError(f"dataset {spec.key!r} is already registered (archive {old.archive})")
    DATASETS[spec.key] = spec
    return spec


for _spec in (
    DatasetSpec("fashion_mnist", "fashion_mnist.tar",
                "ebd9a6fb387088f4717681f89ca7b9e987ed5ac1cf60524ba3b6b36b77a6b91d",
                "Fashion-MNIST test split, 10,000 uint8 28x28 images, 10 classes",
                "fashion_mnist", _fashion_mnist),
    DatasetSpec("digits", "digits.tar",
                "b6af2e46e03295aaf9cc87b3fd0024f66f3c82b38d68c423e0fdb27924359426",
                "scikit-learn digits, held-out 449 of 1,797 8x8 images (0..16), 10 classes",
                "digits", _digits),
    DatasetSpec("lfw_face_nonface", "lfw_face_nonface.tar",
                "6029efad1beafbf49285baddc1186ee9ed4cd370da906f5b01db4f7ca184e190",
                "scikit-image lfw_subset: 100 faces + 100 non-faces, 25x25 grey, labels 1/0",
                "lfw_face_nonface", _lfw_face_nonface),
    DatasetSpec(imagenet.KEY, imagenet.ARCHIVE, None,
                "ImageNet (ILSVRC2012) validation images from the user's copy, 1000 classes "
                "(sorted-synset order); 2 % held out for calibration",
                "imagenet"),
    DatasetSpec("sample_photos", "sample_photos.tar",
                "1b5d5a48f70a08c691c08641ba7c06681ecaa3ea881b9757d8ba18411d741b0d",
                "scikit-image sample photos, 15 uint8 RGB images at their own sizes, unlabelled",
                "sample_photos", _sample_photos),
):
    register(_spec)


def spec(key: str) -> DatasetSpec:
    """The registered spec of ``key``; RegistryError listing the known keys otherwise."""
    try:
        return DATASETS[key]
    except KeyError:
        raise RegistryError(f"unknown dataset {key!r}; registered: {', '.join(sorted(DATASETS))} "
                            f"(a model folder registers its own in dataset.json, docs/agraph.md)") from None


def prepare_command(key: str) -> str:
    """The command that builds the archive of ``key``."""
    return f"python -m agraph prepare {key}" + (" --from DIR_OR_TAR" if key == imagenet.KEY else "")


def archive_path(key: str, data_dir: Optional[os.PathLike] = None) -> Path:
    return Path(data_dir or paths.data_dir()) / spec(key).archive


# --- packing ---------------------------------------------------------------------------------

def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def pack(key: str, samples: np.ndarray, labels: Optional[np.ndarray], path: os.PathLike) -> Path:
    """Write ``samples`` (array with samples on axis 0, or a sequence/object array of arrays
    of different shapes) and ``labels`` (None or [N]) as the archive ``path`` (``.tar`` or
    ``.tgz``; same inputs give the same bytes), atomically.  Returns the path."""
    path = Path(path)
    if not path.name.endswith((".tar", ".tgz")):
        raise DatasetError(f"{path}: a dataset archive must be named .tar or .tgz")
    ragged = isinstance(samples, (list, tuple)) or np.asarray(samples).dtype == object
    count = len(samples)
    if labels is not None and len(labels) != count:
        raise DatasetError(f"{path}: {count} samples but {len(labels)} labels")
    members = [(f"{key}/meta.json", json.dumps(
        {"format": FORMAT, "key": key, "count": count, "samples": "list" if ragged else "array",
         "labels": labels is not None}, sort_keys=True).encode())]
    if labels is not None:
        members.append((f"{key}/labels.npy", _npy_bytes(np.asarray(labels))))
    if ragged:
        members += [(f"{key}/samples/{i:05d}.npy", _npy_bytes(np.asarray(s))) for i, s in enumerate(samples)]
    else:
        members.append((f"{key}/samples.npy", _npy_bytes(np.asarray(samples))))

    def write(tmp: str) -> None:
        with open(tmp, "wb") as raw:
            zipped = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.name.endswith(".tgz") else None
            with tarfile.open(fileobj=zipped or raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
                for name, data in members:
                    _add(tar, name, data)
            if zipped:
                zipped.close()

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, write)
    return path


def prepare(key: str, data_dir: Optional[os.PathLike] = None, source: Optional[os.PathLike] = None,
            labels: Optional[os.PathLike] = None) -> Path:
    """Build the archive of ``key`` under the data root from what exists offline (the
    tutorial step of the dataset), verify its checksum, and return its path.  ``imagenet``
    is built from the user's copy at ``source`` (folder or tar; ``labels``: its label file
    when the images are not in synset folders, :mod:`agraph.imagenet`)."""
    s = spec(key)
    if key == imagenet.KEY:
        if source is None:
            raise DatasetError(f"dataset {key!r} is built from your copy of the ImageNet validation images: "
                               f"`python -m agraph prepare {key} --from DIR_OR_TAR` ({s.tutorial()})")
        return imagenet.prepare(Path(source), archive_path(key, data_dir), labels)
    if s.builder is None:
        raise DatasetError(f"dataset {key!r} has no builder: pack it by hand as {s.tutorial()} says")
    samples, labels = s.builder()
    path = pack(key, samples, labels, archive_path(key, data_dir))
    if s.sha256 and sha256_file(path) != s.sha256:
        raise DatasetError(f"{path}: built archive has sha256 {sha256_file(path)}, the registry pins "
                           f"{s.sha256}: the offline source of {key!r} differs from the one the zoo "
                           f"was published with ({s.tutorial()})")
    return path


# --- checking and loading --------------------------------------------------------------------

def sha256_file(path: os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_loaded: Dict[Tuple[str, str, int, int], Dataset] = {}


def _read_npy(tar: tarfile.TarFile, name: str, path: Path, s: DatasetSpec) -> np.ndarray:
    try:
        member = tar.extractfile(name)
    except KeyError:
        member = None
    if member is None:
        raise DatasetError(f"{path}: wrong layout, member {name!r} is missing ({s.tutorial()})")
    try:
        return np.load(io.BytesIO(member.read()), allow_pickle=False)
    except ValueError as e:
        raise DatasetError(f"{path}: member {name!r} is not a numpy array file: {e} ({s.tutorial()})") from None


def get(key: str, data_dir: Optional[os.PathLike] = None) -> Dataset:
    """The dataset ``key``, loaded from its archive after checking that the archive exists,
    matches the pinned checksum and has the documented layout.  Raises DatasetError naming
    the file and the tutorial step otherwise."""
    s = spec(key)
    path = archive_path(key, data_dir)
    if not path.is_file():
        raise DatasetError(f"dataset {key!r}: {path} is missing; make it with "
                           f"`{prepare_command(key)}` ({s.tutorial()}), or point "
                           f"AGRAPH_DATA_DIR at the folder that holds it")
    stat = path.stat()
    cache_key = (key, str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if cache_key in _loaded:
        return _loaded[cache_key]
    if s.sha256:
        digest = sha256_file(path)
        if digest != s.sha256:
            raise DatasetError(f"dataset {key!r}: {path} has sha256 {digest}, expected {s.sha256} "
                               f"(corrupt or from another source); rebuild it with "
                               f"`{prepare_command(key)}` ({s.tutorial()})")
    try:
        with tarfile.open(path) as tar:
            dataset = _load_members(tar, s, path)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DatasetError(f"dataset {key!r}: {path} is not a readable .tar/.tgz: {e} ({s.tutorial()})") from None
    _loaded[cache_key] = dataset
    return dataset


def _load_members(tar: tarfile.TarFile, s: DatasetSpec, path: Path) -> Dataset:
    names = set(tar.getnames())
    meta_name = f"{s.key}/meta.json"
    if meta_name not in names:
        raise DatasetError(f"{path}: wrong layout, no {meta_name!r} (members: "
                           f"{', '.join(sorted(names)[:5])}...) ({s.tutorial()})")
    try:
        meta = json.loads(tar.extractfile(meta_name).read())
        count, kind, labelled = int(meta["count"]), meta["samples"], bool(meta["labels"])
    except (ValueError, KeyError, TypeError) as e:
        raise DatasetError(f"{path}: {meta_name} is not valid ({e!r}) ({s.tutorial()})") from None
    if meta.get("format") != FORMAT or meta.get("key") != s.key:
        raise DatasetError(f"{path}: {meta_name} has format {meta.get('format')!r} key {meta.get('key')!r}, "
                           f"expected format {FORMAT} key {s.key!r} ({s.tutorial()})")
    if kind == "jpeg":
        return _jpeg_dataset(tar, meta, count, s, path)
    if kind == "array":
        samples = _read_npy(tar, f"{s.key}/samples.npy", path, s)
    elif kind == "list":
        samples = np.empty(count, dtype=object)
        samples[:] = [_read_npy(tar, f"{s.key}/samples/{i:05d}.npy", path, s) for i in range(count)]
    else:
        raise DatasetError(f"{path}: {meta_name} samples kind {kind!r} is not 'array' or 'list' ({s.tutorial()})")
    labels = _read_npy(tar, f"{s.key}/labels.npy", path, s) if labelled else None
    if len(samples) != count or (labels is not None and len(labels) != count):
        raise DatasetError(f"{path}: wrong layout, meta.json says {count} samples, archive holds "
                           f"{len(samples)} samples and {None if labels is None else len(labels)} labels "
                           f"({s.tutorial()})")
    return Dataset(s, path, samples, labels)


def _jpeg_dataset(tar: tarfile.TarFile, meta: dict, count: int, s: DatasetSpec, path: Path) -> Dataset:
    """A dataset of JPEG members (the ImageNet archive, :mod:`agraph.imagenet`): decoded when
    read; the last ``meta["calibration"]`` samples form ``dataset.calibration``."""
    if path.name.endswith(".tgz"):
        raise DatasetError(f"{path}: JPEG samples need a plain .tar, not a .tgz ({s.tutorial()})")
    try:
        held, names, digests = int(meta["calibration"]), list(meta["files"]), list(meta["sha256"])
    except (KeyError, TypeError, ValueError) as e:
        raise DatasetError(f"{path}: {s.key}/meta.json lacks {e} of a JPEG archive ({s.tutorial()})") from None
    members = {m.name: m for m in tar.getmembers()}
    spans = []
    for i in range(count + held):
        member = members.get(imagenet.member_name(i))
        if member is None:
            raise DatasetError(f"{path}: wrong layout, member {imagenet.member_name(i)!r} is missing ({s.tutorial()})")
        spans.append((member.offset_data, member.size))
    labels = _read_npy(tar, f"{s.key}/labels.npy", path, s)
    if len(names) != count + held or len(digests) != count + held or len(labels) != count + held:
        raise DatasetError(f"{path}: wrong layout, meta.json lists {len(names)} files and {len(digests)} checksums, "
                           f"labels.npy {len(labels)} labels for {count} + {held} samples ({s.tutorial()})")
    labels_digest = hashlib.sha256(_npy_bytes(labels)).hexdigest()
    if labels_digest != meta.get("labels_sha256"):
        raise DatasetError(f"{path}: member {s.key}/labels.npy does not match its sha256 in meta.json "
                           f"(corrupt) ({s.tutorial()})")

    def part(lo: int, hi: int, calibration: Optional[Dataset] = None) -> Dataset:
        samples = imagenet.JpegSamples(path, spans[lo:hi], digests[lo:hi], names[lo:hi])
        return Dataset(s, path, samples, labels[lo:hi], calibration)
    return part(0, count, part(count, count + held) if held else None)


def check_all(keys: Sequence[str] = (), data_dir: Optional[os.PathLike] = None) -> Dict[str, str]:
    """Status text per dataset (all registered when ``keys`` is empty): "ok" or the error."""
    status = {}
    for key in keys or sorted(DATASETS):
        try:
            status[key] = f"ok ({len(get(key, data_dir))} samples)"
        except DatasetError as e:
            status[key] = str(e)
    return status
