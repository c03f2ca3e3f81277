"""Calibration samples kept as files inside a container: a tar (``.tar``, ``.tgz``,
``.tar.gz``), a zip (``.zip``) or a folder (docs/calibration-data.md "Archives and folders").

A container holds members of one *format* (Pulsar2's ``calibration_format``):

- ``image``: one image a member (png, jpg, ...), one sample each;
- ``numpy``: ``.npy`` arrays of one input, each one sample (the input's shape without the
  batch) or several (with it);
- ``binary``: ``.bin`` raw little-endian samples of one input, of the input's sample shape
  and the dtype its ``src_dtype`` says (uint8 pixel codes or float32);
- ``numpy_object``: ``.npy`` dicts ``{input name: array}`` (``np.save(path, {...})``), each
  one sample or several of every input (unpickled when read: trusted files only).

Members are read in name order; the format is given or inferred from the member suffixes.
:class:`Container` lists the members and their sample counts (reading only the headers of
``.npy`` arrays)
and yields the members' arrays from any sample on.
"""
from __future__ import annotations

import dataclasses
import io
import tarfile
import zipfile
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..config_forms import CALIBRATION_FORMATS
from ..errors import CalibrationError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".webp")
TAR_SUFFIXES = (".tar", ".tgz", ".tar.gz")
ZIP_SUFFIXES = (".zip",)
ARCHIVE_SUFFIXES = TAR_SUFFIXES + ZIP_SUFFIXES
NPY_HEADER_BYTES = 1 << 16   # enough for any .npy header numpy writes
_SUFFIX_FORMATS = {".npy": "numpy", ".bin": "binary", **{s: "image" for s in IMAGE_SUFFIXES}}

# one member's bytes -> {input name: array of samples}
Decoder = Callable[[bytes, str], Dict[str, np.ndarray]]


class ContainerError(CalibrationError, ValueError):
    """A container of calibration samples is unreadable or does not fit the model's inputs."""


def is_container(path: Path) -> bool:
    """Whether ``path`` is a folder or names an archive type this module reads."""
    return path.is_dir() or suffix_of(path) in ARCHIVE_SUFFIXES


def suffix_of(path: Path) -> str:
    name = path.name.lower()
    return ".tar.gz" if name.endswith(".tar.gz") else path.suffix.lower()


def format_name(value: object, where: str) -> str:
    """A native format name from either spelling (``NumpyObject`` -> ``numpy_object``)."""
    found = CALIBRATION_FORMATS.get(str(value).lower())
    if found is None:
        raise ContainerError(f"{where}: calibration_format {value!r} is not one of Image, Numpy, "
                             "Binary, NumpyObject")
    return found


@dataclasses.dataclass(frozen=True)
class Member:
    name: str       # path inside the container
    size: int       # bytes
    samples: int    # samples it holds


class Container:
    """The members of one format in a tar, zip or folder, with their sample counts.

    ``fmt``: a native format name (``image``, ``numpy``, ``binary``, ``numpy_object``) or
    None (inferred from the member suffixes; a container mixing them needs it)."""

    def __init__(self, path: Path, fmt: Optional[str]) -> None:
        self.path = path
        self.kind = "folder" if path.is_dir() else ("zip" if suffix_of(path) in ZIP_SUFFIXES else "tar")
        listing = self._listing()
        found = sorted({_SUFFIX_FORMATS[suffix_of(Path(n))] for n, _ in listing
                        if suffix_of(Path(n)) in _SUFFIX_FORMATS})
        if fmt is None:
            if not found:
                raise ContainerError(f"{path}: no images ({', '.join(IMAGE_SUFFIXES)}), .npy or .bin "
                                     f"files in the {self.kind}")
            if len(found) > 1:
                raise ContainerError(f"{path}: the {self.kind} mixes {' and '.join(found)} files; set "
                                     "calibration_format (Image, Numpy, Binary or NumpyObject)")
            fmt = found[0]
            if fmt == "numpy" and self._first_npy_is_object(listing):
                fmt = "numpy_object"
        self.format = fmt
        wanted = "numpy" if fmt == "numpy_object" else fmt
        self.listing = [(n, s) for n, s in listing if _SUFFIX_FORMATS.get(suffix_of(Path(n))) == wanted]
        if not self.listing:
            raise ContainerError(f"{path}: calibration_format {fmt} but the {self.kind} has no "
                                 f"{'images' if fmt == 'image' else ('.bin' if fmt == 'binary' else '.npy')} files")

    # ---- reading the container
    def _listing(self) -> List[Tuple[str, int]]:
        """(name, size) of every regular file, sorted by name."""
        try:
            if self.kind == "folder":
                out = [(p.relative_to(self.path).as_posix(), p.stat().st_size)
                       for p in self.path.rglob("*") if p.is_file()]
            elif self.kind == "zip":
                with zipfile.ZipFile(self.path) as z:
                    out = [(i.filename, i.file_size) for i in z.infolist() if not i.is_dir()]
            else:
                with tarfile.open(self.path, "r:*") as t:
                    out = [(m.name, m.size) for m in t.getmembers() if m.isfile()]
        except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
            raise ContainerError(f"{self.path}: not a readable {self.kind} ({e})") from None
        return sorted(out)

    def read(self, names: Sequence[str], limit: Optional[int] = None) -> Iterator[Tuple[str, bytes]]:
        """``(name, bytes)`` of each member of ``names``, in that order; at most ``limit``
        bytes of each when given."""
        n_bytes = -1 if limit is None else limit
        try:
            if self.kind == "folder":
                for n in names:
                    with open(self.path / n, "rb") as f:
                        yield n, f.read(n_bytes)
            elif self.kind == "zip":
                with zipfile.ZipFile(self.path) as z:
                    for n in names:
                        with z.open(n) as f:
                            yield n, f.read(n_bytes)
            else:
                with tarfile.open(self.path, "r:*") as t:
                    for n in names:
                        f = t.extractfile(n)
                        yield n, f.read(n_bytes) if f is not None else b""
        except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, KeyError) as e:
            raise ContainerError(f"{self.path}: cannot read a member ({e})") from None

    def _first_npy_is_object(self, listing: List[Tuple[str, int]]) -> bool:
        first = next(n for n, _ in listing if suffix_of(Path(n)) == ".npy")
        _, data = next(self.read([first], NPY_HEADER_BYTES))
        return npy_header(data, f"{self.path}:{first}")[1].hasobject

    def label(self, name: str) -> str:
        return f"{self.path}:{name}"

    # ---- samples
    def members(self, count: Callable[[str, int, bytes], int]) -> List[Member]:
        """Every member with its sample count, ``count(name, size, data)``: ``data`` is the
        header of a ``numpy`` member, the whole of a ``numpy_object`` one, else empty."""
        if self.format == "image":
            return [Member(n, s, 1) for n, s in self.listing]
        if self.format == "binary":
            return [Member(n, s, count(n, s, b"")) for n, s in self.listing]
        limit = NPY_HEADER_BYTES if self.format == "numpy" else None
        sizes = dict(self.listing)
        return [Member(n, sizes[n], count(n, sizes[n], data)) for n, data in self.read(list(sizes), limit)]

    def arrays(self, members: Sequence[Member], decode: Decoder, first: int = 0) -> Iterator[Dict[str, np.ndarray]]:
        """The decoded arrays of the members from sample ``first`` on (members before it are
        not read; the first one read is cut at ``first``)."""
        skip, todo = first, []
        for m in members:
            if skip >= m.samples:
                skip -= m.samples
                continue
            todo.append((m, skip))
            skip = 0
        cut = dict((m.name, s) for m, s in todo)
        for name, data in self.read([m.name for m, _ in todo]):
            arrays = decode(data, self.label(name))
            start = cut[name]
            yield {k: v[start:] for k, v in arrays.items()} if start else arrays


def npy_header(data: bytes, label: str) -> Tuple[tuple, np.dtype]:
    """``(shape, dtype)`` from the header of ``.npy`` bytes."""
    fmt = np.lib.format
    f = io.BytesIO(data)
    try:
        version = fmt.read_magic(f)
        shape, _, dtype = fmt._read_array_header(f, version)
    except ValueError as e:
        raise ContainerError(f"{label}: not a valid .npy file ({e})") from None
    return shape, dtype


def load_npy(data: bytes, label: str, objects: bool) -> object:
    """The array of ``.npy`` bytes, or (``objects``) the dict of a pickled 0-d object array."""
    try:
        obj = np.load(io.BytesIO(data), allow_pickle=objects)
    except (ValueError, OSError, EOFError) as e:
        raise ContainerError(f"{label}: not a valid .npy file ({e})") from None
    if not objects:
        return obj
    if obj.shape == () and isinstance(obj.item(), dict):
        return obj.item()
    raise ContainerError(f"{label}: calibration_format NumpyObject needs a dict of input name -> array "
                         "(np.save(path, {...}))")
