"""The ImageNet (ILSVRC2012) validation archive, built from a user's own copy
(docs/agraph-datasets.md, section 'imagenet'); nothing is downloaded.

Accepted sources (a folder, or a ``.tar`` of one, as ``ILSVRC2012_img_val.tar``):

- the synset-folder layout: ``n01440764/ILSVRC2012_val_00000293.JPEG``, ...; the folder names
  the class;
- the flat layout: ``ILSVRC2012_val_00000001.JPEG``, ... plus a label file (``labels=`` or
  found beside the images): the devkit's ``ILSVRC2012_validation_ground_truth.txt`` (one
  ILSVRC2012_ID per line, in file-number order; the devkit's ``meta.mat`` beside it maps the
  IDs to synsets), a ``filename label`` text file (label: a class index or a synset), or
  Kaggle's ``LOC_val_solution.csv`` (first synset of each PredictionString).

Class indices follow the sorted order of the 1,000 ILSVRC2012 synsets
(``agraph/imagenet_synsets.txt``: n01440764 = 0 ... n15075141 = 999), the order of the Keras
applications' and the Gluon model zoo's 1000 outputs.

The archive ``imagenet.tar`` holds the JPEG files as they are (not re-encoded), sorted by
file name, every :data:`CALIBRATION_EVERY`-th of them held out for calibration (evaluation
never sees them); ``meta.json`` lists every member's sha256 and original name, checked when
the member is read.  It is written under a temporary name and renamed when complete.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path, PurePosixPath
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ratelnn.fileio import write_atomic

from .errors import DatasetError

KEY = "imagenet"
ARCHIVE = f"{KEY}.tar"
SYNSETS_FILE = Path(__file__).with_name("imagenet_synsets.txt")
CALIBRATION_EVERY = 50     # images 49, 99, ... (sorted names): 2 % held out for calibration
IMAGE_SUFFIXES = (".jpeg", ".jpg")
SYNSET_PATTERN = re.compile(r"^n\d{8}$")
FILE_NUMBER = re.compile(r"ILSVRC2012_val_(\d{8})", re.IGNORECASE)
LABEL_FILES = ("LOC_val_solution.csv", "ILSVRC2012_validation_ground_truth.txt", "val.txt")
TUTORIAL = "docs/agraph-datasets.md, section 'imagenet'"


@functools.lru_cache(maxsize=1)
def synsets() -> Tuple[str, ...]:
    """The 1,000 ILSVRC2012 synsets in sorted order (index = class index)."""
    names = tuple(SYNSETS_FILE.read_text().split())
    assert len(names) == 1000 and list(names) == sorted(names), f"{SYNSETS_FILE} is not the sorted 1000"
    return names


@functools.lru_cache(maxsize=1)
def class_index() -> Dict[str, int]:
    """synset -> class index (sorted-synset order)."""
    return {s: i for i, s in enumerate(synsets())}


# -- reading the user's copy ------------------------------------------------------------------

Reader = Callable[[], bytes]


def _folder_files(root: Path) -> Dict[str, Reader]:
    return {p.relative_to(root).as_posix(): p.read_bytes for p in sorted(root.rglob("*")) if p.is_file()}


def _tar_files(path: Path) -> Dict[str, Reader]:
    try:
        tar = tarfile.open(path)
        members = [m for m in tar.getmembers() if m.isfile()]
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DatasetError(f"{path}: not a readable .tar: {e} ({TUTORIAL})") from None

    def reader(member: tarfile.TarInfo) -> Reader:
        return lambda: tar.extractfile(member).read()
    return {PurePosixPath(m.name).as_posix().lstrip("./"): reader(m) for m in members}


def source_files(source: Path) -> Dict[str, Reader]:
    """Relative path -> reader of every file of ``source`` (a folder or a tar archive)."""
    if source.is_dir():
        return _folder_files(source)
    if source.is_file():
        return _tar_files(source)
    raise DatasetError(f"{source}: no such folder or tar archive (the ImageNet validation images, {TUTORIAL})")


def _synset_of_folder(path: str) -> Optional[str]:
    parent = PurePosixPath(path).parent.name
    return parent if SYNSET_PATTERN.match(parent) else None


def _index_of(synset: str, where: str) -> int:
    try:
        return class_index()[synset]
    except KeyError:
        raise DatasetError(f"{where}: unknown synset {synset!r}, not one of the 1,000 ILSVRC2012 classes "
                           f"({SYNSETS_FILE.name}; {TUTORIAL})") from None


def _devkit_ids(meta: Path) -> Dict[int, str]:
    """ILSVRC2012_ID -> synset from the devkit's ``meta.mat``."""
    from scipy.io import loadmat

    try:
        table = loadmat(str(meta), squeeze_me=True)["synsets"]
        return {int(row["ILSVRC2012_ID"]): str(row["WNID"]) for row in table}
    except (KeyError, ValueError, TypeError, OSError) as e:
        raise DatasetError(f"{meta}: not the ImageNet devkit's meta.mat ({e!r}) ({TUTORIAL})") from None


def _ground_truth(lines: List[str], path: Path) -> Dict[str, int]:
    """The devkit's ground truth: line i (1-based) is the ILSVRC2012_ID of val image i."""
    meta = next((m for m in (path.with_name("meta.mat"), path.parent.parent / "data" / "meta.mat") if m.is_file()),
                None)
    if meta is None:
        raise DatasetError(f"{path}: the devkit's ground truth holds ILSVRC2012_IDs; its meta.mat (devkit "
                           f"data/meta.mat, mapping them to synsets) must be beside it ({TUTORIAL})")
    ids = _devkit_ids(meta)
    labels = {}
    for number, line in enumerate(lines, 1):
        where = f"{path}, line {number}"
        try:
            synset = ids[int(line)]
        except (ValueError, KeyError):
            raise DatasetError(f"{where}: {line!r} is not an ILSVRC2012_ID listed in {meta}") from None
        labels[f"{number:08d}"] = _index_of(synset, where)
    return labels


def _pairs(lines: List[str], path: Path) -> Dict[str, int]:
    """``filename label`` lines; label = class index 0..999 or a synset."""
    labels = {}
    for number, line in enumerate(lines, 1):
        where = f"{path}, line {number}"
        parts = line.replace(",", " ").split()
        if len(parts) != 2:
            raise DatasetError(f"{where}: expected 'filename label', got {line!r} ({TUTORIAL})")
        name, label = parts
        if SYNSET_PATTERN.match(label):
            labels[_key_of(name)] = _index_of(label, where)
        elif label.isdigit() and int(label) < 1000:
            labels[_key_of(name)] = int(label)
        else:
            raise DatasetError(f"{where}: label {label!r} is neither a class index 0..999 nor a synset")
    return labels


def _loc_solution(text: str, path: Path) -> Dict[str, int]:
    """Kaggle's ``LOC_val_solution.csv``: ImageId, PredictionString (synset x y x y ...)."""
    rows = csv.DictReader(io.StringIO(text))
    if not rows.fieldnames or not {"ImageId", "PredictionString"} <= set(rows.fieldnames):
        raise DatasetError(f"{path}: expected the columns ImageId,PredictionString of LOC_val_solution.csv")
    labels = {}
    for number, row in enumerate(rows, 2):
        tokens = (row["PredictionString"] or "").split()
        if not tokens:
            raise DatasetError(f"{path}, line {number}: image {row['ImageId']!r} has no synset")
        labels[_key_of(row["ImageId"])] = _index_of(tokens[0], f"{path}, line {number}")
    return labels


def _key_of(name: str) -> str:
    """The 8-digit file number of an ILSVRC2012 val image name, else its stem."""
    match = FILE_NUMBER.search(name)
    return match.group(1) if match else PurePosixPath(name).stem


def read_labels(path: Path) -> Dict[str, int]:
    """Image key (:func:`_key_of`) -> class index from a label file in any accepted form."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: unreadable label file ({e}) ({TUTORIAL})") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise DatasetError(f"{path}: the label file is empty ({TUTORIAL})")
    if lines[0].startswith("ImageId"):
        return _loc_solution(text, path)
    if all(line.isdigit() for line in lines):
        return _ground_truth(lines, path)
    return _pairs(lines, path)


def _find_label_file(source: Path) -> Optional[Path]:
    folder = source if source.is_dir() else source.parent
    for name in LABEL_FILES:
        for candidate in (folder / name, folder.parent / name):
            if candidate.is_file():
                return candidate
    return None


def labelled_images(source: Path, labels: Optional[Path] = None) -> List[Tuple[str, Reader, int]]:
    """``(name, reader, class index)`` of every JPEG of ``source``, sorted by file name."""
    files = {n: r for n, r in source_files(source).items() if n.lower().endswith(IMAGE_SUFFIXES)}
    if not files:
        raise DatasetError(f"{source}: holds no .JPEG image (expected the ILSVRC2012 validation images, "
                           f"in synset folders or flat with a label file; {TUTORIAL})")
    in_folders = {n: _synset_of_folder(n) for n in files}
    flat = [n for n, s in in_folders.items() if s is None]
    table: Dict[str, int] = {}
    if flat:
        labels = labels or _find_label_file(source)
        if labels is None:
            raise DatasetError(f"{source}: {flat[0]} (and {len(flat) - 1} more) is not in a synset folder and "
                               f"no label file was given (--labels FILE: {', '.join(LABEL_FILES)}; {TUTORIAL})")
        table = read_labels(Path(labels))
    found = []
    for name in sorted(files, key=lambda n: (PurePosixPath(n).name, n)):
        synset = in_folders[name]
        if synset is not None:
            index = _index_of(synset, f"{source}: {name}")
        else:
            index = table.get(_key_of(name))
            if index is None:
                raise DatasetError(f"{source}: {name} has no label in {labels} ({TUTORIAL})")
        found.append((name, files[name], index))
    return found


def _checked_jpeg(name: str, data: bytes, source: Path) -> bytes:
    """``data`` if it decodes as a whole JPEG image; DatasetError naming the file otherwise."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format != "JPEG":
                raise ValueError(f"a {image.format} file, not a JPEG")
            image.load()
    except Exception as e:  # PIL raises many types for broken files
        raise DatasetError(f"{source}: {name} is not a readable JPEG image ({e}) ({TUTORIAL})") from None
    return data


# -- the archive ------------------------------------------------------------------------------

def member_name(i: int) -> str:
    return f"{KEY}/samples/{i:05d}.jpg"


def split(count: int) -> Tuple[List[int], List[int]]:
    """``(evaluation, calibration)`` positions of ``count`` sorted images: every
    :data:`CALIBRATION_EVERY`-th for calibration (at least one when there are 2 or more)."""
    held = [i for i in range(count) if i % CALIBRATION_EVERY == CALIBRATION_EVERY - 1]
    if not held and count >= 2:
        held = [count - 1]
    kept = [i for i in range(count) if i not in set(held)]
    return kept, held


def prepare(source: Path, path: Path, labels: Optional[Path] = None) -> Path:
    """Write the archive of the ImageNet validation images at ``source`` (folder or tar) to
    ``path``; every image is decoded once to check it.  Returns ``path``."""
    source = Path(source)
    images = labelled_images(source, Path(labels) if labels else None)
    evaluation, calibration = split(len(images))
    order = evaluation + calibration
    names = [images[i][0] for i in order]
    index = np.array([images[i][2] for i in order], dtype=np.int64)
    buffer = io.BytesIO()
    np.save(buffer, index, allow_pickle=False)

    def write(tmp: str) -> None:
        digests = []
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
            _add(tar, f"{KEY}/labels.npy", buffer.getvalue())
            for position, i in enumerate(order):
                name, read, _ = images[i]
                data = _checked_jpeg(name, read(), source)
                digests.append(hashlib.sha256(data).hexdigest())
                _add(tar, member_name(position), data)
            meta = {"format": 1, "key": KEY, "count": len(evaluation), "calibration": len(calibration),
                    "samples": "jpeg", "labels": True, "files": names, "sha256": digests,
                    "labels_sha256": hashlib.sha256(buffer.getvalue()).hexdigest()}
            _add(tar, f"{KEY}/meta.json", json.dumps(meta, indent=0, sort_keys=True).encode())

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, write)
    return path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


class JpegSamples:
    """Lazily decoded JPEG members of a plain ``.tar``: ``len()``, ``[i]`` (uint8 RGB [H, W, 3])
    and ``[a:b]`` (an object array of them).  Each member is checked against its sha256."""

    def __init__(self, path: Path, spans: Sequence[Tuple[int, int]], digests: Sequence[str],
                 names: Sequence[str]) -> None:
        self.path, self.spans, self.digests, self.names = Path(path), list(spans), list(digests), list(names)

    def __len__(self) -> int:
        return len(self.spans)

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    def __getitem__(self, item):
        if isinstance(item, slice):
            out = np.empty(len(range(*item.indices(len(self)))), dtype=object)
            out[:] = [self._decode(i) for i in range(*item.indices(len(self)))]
            return out
        return self._decode(int(item))

    def _decode(self, i: int) -> np.ndarray:
        from PIL import Image

        offset, size = self.spans[i]
        with open(self.path, "rb") as f:
            f.seek(offset)
            data = f.read(size)
        if hashlib.sha256(data).hexdigest() != self.digests[i]:
            raise DatasetError(f"{self.path}: member {i:05d} ({self.names[i]}) does not match its sha256 in "
                               f"meta.json (corrupt); rebuild it with `python -m agraph prepare {KEY} --from ...` "
                               f"({TUTORIAL})")
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB"))
