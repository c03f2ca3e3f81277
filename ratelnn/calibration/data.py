"""Calibration data sources -> batches of feed dicts (docs/calibration-data.md).

:class:`CalibrationData` accepts, for a model with inputs described by :class:`InputSpec`:

- a numpy array (single-input models): samples along axis 0;
- a dict ``{input name: array}`` (all arrays with the same number of samples);
- an iterable of arrays or of such dicts (each item is a chunk of samples, e.g. a batch);
- a path (``str`` or ``os.PathLike``) to
  - ``.npy``: an array, or a pickled dict of per-input arrays (``np.save(path, {...})``;
    loading it unpickles, so only use files you trust);
  - ``.bin``: raw little-endian float32 samples of a single-input model, each of the
    input's shape without the batch dimension (``input_shapes``);
  - a ``.tar``, ``.tgz``, ``.tar.gz`` or ``.zip`` archive, or a folder, of images (png,
    jpg, jpeg, bmp, gif, ppm, pgm, webp; preprocessed by the config keys :data:`IMAGE_KEYS`),
    ``.npy`` arrays, ``.bin`` raw samples or ``.npy`` dicts of per-input arrays, read in
    member-name order (:mod:`ratelnn.calibration.containers`; the config's
    ``calibration_format`` names the form when the members do not tell).

Whatever the form, samples are regrouped into batches of one size (the model's batch when
``input_shapes`` fixes it), so the same samples always give the same batches.  When the
model's batch is fixed, the last, partial batch is completed by repeating its own samples
(min/max and per-batch extremes are unchanged); :attr:`Batch.size` counts the real ones.

Every batch is checked: input names, rank, shape, and NaN/Inf values, with errors naming
the source and the sample index.
"""
from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import CalibrationError
from .containers import Container, ContainerError, format_name, is_container, load_npy, npy_header, suffix_of

DEFAULT_BATCH_SIZE = 32
# Config keys of image preprocessing (tar sources):
#   image_size: [h, w] to resize to (bilinear; default: the input's own H, W)
#   mean, std: scalar or one value per channel (in the config's channel order), in pixel
#              units 0..255; value = (pixel - mean) / std
#   channel_order: "RGB" or "BGR" (3-channel inputs); 1-channel inputs read grayscale
#   data_format: "NHWC" or "NCHW" (default: NHWC for tensorflow, NCHW for mxnet)
IMAGE_KEYS = ("image_size", "mean", "std", "channel_order", "data_format")


class DataError(CalibrationError, ValueError):
    """Calibration data are missing, malformed, or do not fit the model's inputs."""


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One model input: ``name`` (feed key), ``shape`` (dim 0 the batch; None = free), ``dtype``."""

    name: str
    shape: tuple
    dtype: str = "float32"


@dataclasses.dataclass
class Batch:
    """``feeds``: input name -> array of ``batch_size`` rows; the first ``size`` are real."""

    feeds: Dict[str, np.ndarray]
    size: int


Chunk = Dict[str, np.ndarray]


# ------------------------------------------------------------------ image preprocessing
@dataclasses.dataclass(frozen=True)
class ImagePreprocess:
    """Image -> model input sample (see :data:`IMAGE_KEYS`)."""

    size: tuple          # (h, w)
    channels: int        # 1 or 3
    mean: np.ndarray     # float32, broadcast over channels
    std: np.ndarray
    bgr: bool
    nchw: bool

    @classmethod
    def from_config(cls, spec: InputSpec, config: Mapping[str, Any], framework: str) -> "ImagePreprocess":
        config = for_input(config, spec.name)
        layout = config.get("data_format") or ("NCHW" if framework in ("mxnet", "onnx") else "NHWC")
        if layout not in ("NHWC", "NCHW"):
            raise DataError(f"config data_format must be 'NHWC' or 'NCHW', got {layout!r}")
        if len(spec.shape) != 4:
            raise DataError(f"a tar of images needs a 4-D image input; input {spec.name!r} "
                            f"has shape {list(spec.shape)}")
        h, w, c = (spec.shape[2], spec.shape[3], spec.shape[1]) if layout == "NCHW" else spec.shape[1:]
        size = config.get("image_size") or (h, w)
        if len(size) != 2 or any(s is None or int(s) <= 0 for s in size):
            raise DataError(f"config image_size must be [height, width], got {size!r}")
        if c not in (1, 3):
            raise DataError(f"input {spec.name!r} ({layout}, shape {list(spec.shape)}) has {c} "
                            "channels: images need 1 or 3 (is data_format right?)")
        order = config.get("channel_order") or "RGB"
        if order not in ("RGB", "BGR"):
            raise DataError(f"config channel_order must be 'RGB' or 'BGR', got {order!r}")
        mean = cls._per_channel("mean", config.get("mean", 0.0), c)
        std = cls._per_channel("std", config.get("std", 1.0), c)
        if np.any(std == 0):
            raise DataError(f"config std must not be 0, got {config.get('std')!r}")
        return cls((int(size[0]), int(size[1])), c, mean, std, order == "BGR", layout == "NCHW")

    @staticmethod
    def _per_channel(key: str, value: Any, channels: int) -> np.ndarray:
        arr = np.asarray(value if value is not None else (0.0 if key == "mean" else 1.0), np.float32).reshape(-1)
        if arr.size not in (1, channels):
            raise DataError(f"config {key} has {arr.size} values for {channels} channels")
        return arr

    def __call__(self, data: bytes, label: str) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(data)) as img:
                img = img.convert("L" if self.channels == 1 else "RGB")
                if img.size != (self.size[1], self.size[0]):
                    img = img.resize((self.size[1], self.size[0]), Image.BILINEAR)
                pixels = np.asarray(img, dtype=np.float32)
        except (UnidentifiedImageError, OSError) as e:
            raise DataError(f"{label}: not a readable image ({e})") from None
        if self.channels == 1:
            pixels = pixels[..., np.newaxis]
        elif self.bgr:
            pixels = pixels[..., ::-1]
        sample = (pixels - self.mean) / self.std
        return np.ascontiguousarray(sample.transpose(2, 0, 1) if self.nchw else sample)


def for_input(config: Mapping[str, Any], name: str) -> Dict[str, Any]:
    """``config`` with the per-input values (``{input name: value}``, docs/architecture.md §14)
    of the image keys, ``src_dtype``, ``calibration_format`` and the input-processor keys
    (``src_format``, ``src_layout``, ``csc_mode``, ``csc_mat``) replaced by ``name``'s."""
    out = dict(config)
    for key in IMAGE_KEYS + ("src_dtype", "calibration_format", "src_format", "src_layout", "csc_mode", "csc_mat"):
        value = out.get(key)
        if isinstance(value, Mapping):
            out[key] = next((v for k, v in value.items() if k in (name, f"{name}:0")), None)
    return out


def _scaled_uint8(values: np.ndarray, spec: InputSpec, config: Mapping[str, Any], framework: str,
                  label: str) -> np.ndarray:
    """``src_dtype: uint8`` array data: pixel codes 0..255 -> ``(v - mean) / std`` along the
    channel axis of the config's layout."""
    v = np.asarray(values)
    if v.dtype.kind not in "iu" and not np.array_equal(v, np.round(v)) or v.size and (v.min() < 0 or v.max() > 255):
        raise DataError(f"{label}: src_dtype uint8 but input {spec.name!r} holds values outside the "
                        "integers 0..255")
    layout = config.get("data_format") or ("NCHW" if framework in ("mxnet", "onnx") else "NHWC")
    channels = v.shape[1] if layout == "NCHW" and v.ndim == 4 else v.shape[-1]
    mean = ImagePreprocess._per_channel("mean", config.get("mean"), channels)
    std = ImagePreprocess._per_channel("std", config.get("std"), channels)
    if layout == "NCHW" and v.ndim == 4:
        mean, std = mean.reshape(-1, 1, 1), std.reshape(-1, 1, 1)
    return ((v.astype(np.float32) - mean) / std).astype(np.float32)


# ------------------------------------------------------------------ sources -> chunks
def _npy_has_objects(path: Path) -> bool:
    """Whether the .npy header declares an object dtype (a pickled payload)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    try:
        return npy_header(head, str(path))[1].hasobject
    except ContainerError as e:
        raise DataError(str(e)) from None


def _load_npy(path: Path) -> Any:
    """A memory-mapped array, or the dict of arrays of a pickled 0-d object array."""
    if not _npy_has_objects(path):
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as e:
            raise DataError(f"{path}: not a valid .npy file ({e})") from None
    obj = np.load(path, allow_pickle=True)
    if obj.shape == () and isinstance(obj.item(), dict):
        return obj.item()
    raise DataError(f"{path}: holds an object array; expected a numeric array or a dict of arrays")


def _sample_shape(spec: InputSpec, label: str) -> tuple:
    shape = tuple(spec.shape[1:])
    if any(d is None for d in shape):
        raise DataError(f"{label}: raw .bin samples need the full sample shape of input {spec.name!r} "
                        f"in input_shapes, got {list(spec.shape)}")
    return shape


def _bin_dtype(spec: InputSpec, config: Mapping[str, Any]) -> np.dtype:
    """What a raw sample holds: uint8 pixel codes under ``src_dtype: uint8``, else the input's
    (little-endian) float type."""
    uint8 = for_input(config, spec.name).get("src_dtype") == "uint8"
    return np.dtype("u1") if uint8 else np.dtype(spec.dtype).newbyteorder("<")


def _bin_samples(size: int, spec: InputSpec, dtype: np.dtype, label: str) -> int:
    per_sample = int(np.prod(_sample_shape(spec, label))) * dtype.itemsize
    if size == 0 or size % per_sample:
        raise DataError(f"{label}: {size} bytes is not a whole number of {dtype.name} samples of shape "
                        f"{list(spec.shape[1:])} ({per_sample} bytes each)")
    return size // per_sample


def _bin_array(path: Path, spec: InputSpec, config: Mapping[str, Any]) -> np.ndarray:
    dtype = _bin_dtype(spec, config)
    _bin_samples(path.stat().st_size, spec, dtype, str(path))
    return np.memmap(path, dtype=dtype, mode="r").reshape((-1,) + _sample_shape(spec, str(path)))


def _as_samples(array: np.ndarray, spec: InputSpec, label: str) -> np.ndarray:
    """An array of one input as samples (one sample without the batch axis gets one), checked
    against the input's sample shape so that an error names the file it came from."""
    samples = array[np.newaxis] if array.ndim == len(spec.shape) - 1 else array
    if samples.ndim != len(spec.shape) or any(w is not None and w != g for w, g in zip(spec.shape[1:], samples.shape[1:])):
        raise DataError(f"{label}: input {spec.name!r} expects samples of shape {list(spec.shape[1:])}, "
                        f"got an array of shape {list(array.shape)}")
    return samples


# ------------------------------------------------------------------ the data set
class CalibrationData:
    """Iterable of :class:`Batch` for a model with inputs ``inputs`` (see the module docstring).

    ``config``: the converter config (image keys); ``framework`` picks the default image
    layout; ``batch_size``: None = the model's fixed batch, else :data:`DEFAULT_BATCH_SIZE`.
    """

    def __init__(self, data: Any, inputs: Sequence[InputSpec], config: Optional[Mapping[str, Any]] = None,
                 batch_size: Optional[int] = None, framework: str = "tensorflow") -> None:
        self.inputs = list(inputs)
        self.config = dict(config or {})
        self.framework = framework
        self.names = [s.name for s in self.inputs]
        fixed = {s.shape[0] for s in self.inputs if s.shape and s.shape[0] is not None}
        if len(fixed) > 1:
            raise DataError(f"the model's inputs have different fixed batch sizes {sorted(fixed)}")
        self.fixed_batch = fixed.pop() if fixed else None
        if batch_size is not None and (int(batch_size) <= 0 or
                                       (self.fixed_batch is not None and int(batch_size) != self.fixed_batch)):
            raise DataError(f"batch_size={batch_size} but the model is specialised for batch "
                            f"{self.fixed_batch} (input_shapes); pass batch_size=None")
        self.batch_size = int(batch_size or self.fixed_batch or DEFAULT_BATCH_SIZE)
        limit = self.config.get("calibration_size")   # at most this many samples; -1 or None: all
        self.limit = None if limit in (None, -1) else int(limit)
        self._images: set = set()   # inputs read from images (already preprocessed)
        self.label, self._chunks, self.num_samples = self._open(data)
        if self.limit and self.num_samples is not None:
            self.num_samples = min(self.num_samples, int(self.limit))

    @property
    def num_batches(self) -> Optional[int]:
        """Number of batches, or None when the source's length is unknown."""
        if self.num_samples is None:
            return None
        return -(-self.num_samples // self.batch_size)

    # ---- opening a source
    def _single_input(self, form: str) -> InputSpec:
        if len(self.inputs) != 1:
            raise DataError(f"{form} can only feed a single-input model; this model has inputs "
                            f"{self.names}: give a dict of per-input arrays instead")
        return self.inputs[0]

    def _open(self, data: Any):
        """(label, chunk iterator factory, number of samples or None)."""
        if isinstance(data, (str, os.PathLike)):
            return self._open_path(Path(data))
        if isinstance(data, np.ndarray):
            spec = self._single_input("an array")
            return "array", lambda first=0: self._array_chunks({spec.name: data}, first=first), \
                len(data) if data.ndim else 0
        if isinstance(data, Mapping) and data and all(isinstance(v, (str, os.PathLike)) for v in data.values()):
            arrays = {k: self._input_file(Path(v), self._spec(k)) for k, v in data.items()}
            return "files", lambda first=0: self._array_chunks(arrays, "files", first), \
                self._dict_length(arrays, "files")
        if isinstance(data, Mapping):
            arrays = {k: np.asarray(v) for k, v in data.items()}
            return "dict", lambda first=0: self._array_chunks(arrays, first=first), self._dict_length(arrays, "dict")
        if isinstance(data, Iterable):
            return "iterable", lambda first=0: self._iterable_chunks(data), None
        raise DataError(f"calibration data must be an array, a dict of arrays, an iterable of "
                        f"either, or a path; got {type(data).__name__}")

    def _open_path(self, path: Path):
        if not path.exists():
            raise DataError(f"calibration data file {path} does not exist")
        label = str(path)
        if is_container(path):
            return self._open_container(path)
        if not path.is_file():
            raise DataError(f"calibration data path {path} is not a file")
        suffix = suffix_of(path)
        if suffix == ".npy":
            obj = _load_npy(path)
            if isinstance(obj, dict):
                arrays = {k: np.asarray(v) for k, v in obj.items()}
                return label, lambda first=0: self._array_chunks(arrays, label, first), \
                    self._dict_length(arrays, label)
            spec = self._single_input(f"{path} (one array)")
            return label, lambda first=0: self._array_chunks({spec.name: obj}, label, first), \
                len(obj) if obj.ndim else 0
        if suffix == ".bin":
            spec = self._single_input(f"{path} (raw samples)")
            arr = _bin_array(path, spec, self.config)
            return label, lambda first=0: self._array_chunks({spec.name: arr}, label, first), len(arr)
        raise DataError(f"{path}: unknown calibration data file type {suffix!r} "
                        f"(use .npy, .bin, .tar, .tgz, .tar.gz, .zip or a folder)")

    def _container(self, path: Path, spec: Optional[InputSpec]):
        """``(container, members, decode)`` of an archive or folder; ``spec``: the one input it
        feeds (None: the model's single input, or every input for NumpyObject members)."""
        given = for_input(self.config, spec.name if spec else (self.names[0] if len(self.names) == 1 else ""))
        fmt = given.get("calibration_format")
        try:
            box = Container(path, format_name(fmt, str(path)) if fmt else None)
        except ContainerError as e:
            raise DataError(str(e)) from None
        if box.format == "numpy_object":
            if spec is not None:
                raise DataError(f"{path}: holds dicts of per-input arrays (NumpyObject); the file of input "
                                f"{spec.name!r} must hold that input's samples")

            def decode(data: bytes, label: str) -> Chunk:
                d = load_npy(data, label, objects=True)
                return {k: _as_samples(np.asarray(v), self._spec(k), label) for k, v in d.items()}

            def count(name: str, size: int, data: bytes) -> int:
                chunk = decode(data, box.label(name))
                return len(next(iter(chunk.values()))) if chunk else 0
            return box, box.members(count), decode
        spec = spec or self._single_input(f"{path} ({box.format} samples)")
        if box.format == "image":
            self._images.add(spec.name)
            preprocess = ImagePreprocess.from_config(spec, self.config, self.framework)
            return box, box.members(lambda *_: 1), lambda data, label: {spec.name: preprocess(data, label)[np.newaxis]}
        if box.format == "binary":
            dtype = _bin_dtype(spec, self.config)
            shape = _sample_shape(spec, str(path))
            return box, box.members(lambda name, size, _: _bin_samples(size, spec, dtype, box.label(name))), \
                lambda data, label: {spec.name: np.frombuffer(data, dtype).reshape((-1,) + shape)}

        def count_npy(name: str, size: int, data: bytes) -> int:
            shape, dtype = npy_header(data, box.label(name))
            if dtype.hasobject or len(shape) not in (len(spec.shape) - 1, len(spec.shape)):
                raise DataError(f"{box.label(name)}: input {spec.name!r} expects samples of shape "
                                f"{list(spec.shape[1:])}, got an array of {dtype} and shape {list(shape)}")
            return 1 if len(shape) == len(spec.shape) - 1 else shape[0]
        return box, box.members(count_npy), \
            lambda data, label: {spec.name: _as_samples(load_npy(data, label, objects=False), spec, label)}

    def _open_container(self, path: Path):
        box, members, decode = self._container(path, None)

        def chunks(first: int = 0) -> Iterator[Chunk]:
            try:
                yield from box.arrays(members, decode, first)
            except ContainerError as e:
                raise DataError(str(e)) from None
        return str(path), chunks, sum(m.samples for m in members)

    def _spec(self, key: str) -> InputSpec:
        return self.inputs[self.names.index(self._key(key))]

    def _input_file(self, path: Path, spec: InputSpec) -> np.ndarray:
        """All samples of one input from its own file (``calibration_data: {input: path}``)."""
        if not path.exists():
            raise DataError(f"calibration data file {path} for input {spec.name!r} does not exist")
        if is_container(path):
            box, members, decode = self._container(path, spec)
            parts, held = [], 0
            for chunk in box.arrays(members, decode):
                parts.append(chunk[spec.name])
                held += len(parts[-1])
                if self.limit and held >= self.limit:
                    break
            return np.concatenate(parts)
        suffix = suffix_of(path)
        if suffix == ".npy":
            obj = _load_npy(path)
            if isinstance(obj, dict):
                raise DataError(f"{path}: holds a dict; the file of input {spec.name!r} must hold one array")
            return obj
        if suffix == ".bin":
            return _bin_array(path, spec, self.config)
        raise DataError(f"{path}: unknown calibration data file type {suffix!r} "
                        "(use .npy, .bin, an archive or a folder)")

    def _dict_length(self, arrays: Mapping[str, np.ndarray], label: str) -> int:
        lengths = {k: (len(v) if v.ndim else 0) for k, v in arrays.items()}
        if len(set(lengths.values())) > 1:
            raise DataError(f"{label}: inputs have different numbers of samples {lengths}")
        return next(iter(lengths.values()), 0)

    def _array_chunks(self, arrays: Mapping[str, np.ndarray], label: str = "data",
                      first: int = 0) -> Iterator[Chunk]:
        n = self._dict_length(arrays, label)
        for start in range(first, n, self.batch_size):
            yield {k: v[start:start + self.batch_size] for k, v in arrays.items()}

    def _iterable_chunks(self, items: Iterable) -> Iterator[Chunk]:
        for i, item in enumerate(items):
            if isinstance(item, Mapping):
                yield {k: np.asarray(v) for k, v in item.items()}
            elif isinstance(item, np.ndarray) or np.ndim(item) > 0:
                yield {self._single_input(f"item {i} of the iterable (an array)").name: np.asarray(item)}
            else:
                raise DataError(f"item {i} of the calibration iterable is a {type(item).__name__}; "
                                "expected an array or a dict of input name -> array")

    # ---- checking and batching
    def _key(self, key: str) -> str:
        base = key[:-2] if key.endswith(":0") else key
        if base not in self.names:
            raise DataError(f"{self.label}: unknown input {key!r}; the model's inputs are {self.names}")
        return base

    def _checked(self, chunk: Chunk, first_sample: int) -> Chunk:
        chunk = {self._key(k): v for k, v in chunk.items()}
        missing = [n for n in self.names if n not in chunk]
        if missing:
            raise DataError(f"{self.label}: no values for inputs {missing} (samples from {first_sample})")
        out = {}
        for spec in self.inputs:
            v = chunk[spec.name]
            if v.ndim != len(spec.shape):
                raise DataError(f"{self.label}: input {spec.name!r} expects rank {len(spec.shape)} "
                                f"(shape {list(spec.shape)}), got shape {list(v.shape)} "
                                f"(samples from {first_sample})")
            bad = [i for i, (want, got) in enumerate(zip(spec.shape[1:], v.shape[1:]), 1)
                   if want is not None and want != got]
            if bad:
                raise DataError(f"{self.label}: input {spec.name!r} expects samples of shape "
                                f"{list(spec.shape[1:])}, got {list(v.shape[1:])} (samples from {first_sample})")
            kind = np.asarray(v).dtype.kind
            if kind not in "fiub":
                what = {"c": "complex numbers", "U": "strings", "S": "bytes", "O": "Python objects",
                        "M": "dates", "m": "time deltas"}.get(kind, f"dtype {np.asarray(v).dtype}")
                raise DataError(f"{self.label}: input {spec.name!r} holds {what} "
                                f"({np.asarray(v).dtype}); calibration data must be real numbers "
                                f"(it is converted to {spec.dtype})")
            if for_input(self.config, spec.name).get("src_dtype") == "uint8" and spec.name not in self._images:
                v = _scaled_uint8(v, spec, for_input(self.config, spec.name), self.framework, self.label)
            v = np.asarray(v, dtype=spec.dtype)
            if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
                row = int(np.argwhere(~np.isfinite(v.reshape(len(v), -1)).all(axis=1)).min())
                raise DataError(f"{self.label}: input {spec.name!r} sample {first_sample + row} "
                                "holds NaN or Inf")
            out[spec.name] = v
        lengths = {len(v) for v in out.values()}
        if len(lengths) > 1:
            raise DataError(f"{self.label}: inputs have different numbers of samples in one chunk "
                            f"({ {k: len(v) for k, v in out.items()} })")
        return out

    def _batch(self, parts: List[Chunk]) -> Batch:
        feeds = {n: np.concatenate([p[n] for p in parts]) if len(parts) > 1 else parts[0][n]
                 for n in self.names}
        size = len(feeds[self.names[0]])
        if self.fixed_batch is not None and size < self.fixed_batch:
            rows = np.arange(self.fixed_batch) % size
            feeds = {n: v[rows] for n, v in feeds.items()}
        return Batch({n: np.ascontiguousarray(v) for n, v in feeds.items()}, size)

    def __iter__(self) -> Iterator[Batch]:
        return self.batches()

    def batches(self, start: int = 0, stop: Optional[int] = None) -> Iterator[Batch]:
        """Batches ``start`` (inclusive) to ``stop`` (exclusive) of the sequence ``iter(self)``
        gives, identical to it.  Sources of known length (arrays, .npy, .bin, tar archives)
        begin reading at batch ``start``; an iterable is read from its beginning."""
        if stop is not None and stop <= start:
            return
        seekable = self.num_samples is not None
        first = start * self.batch_size if seekable else 0
        index = start if seekable else 0
        pending: List[Chunk] = []
        held = 0
        seen = first
        for raw in self._chunks(first):
            if self.limit and seen >= self.limit:
                break
            chunk = self._checked(raw, seen)
            n = len(chunk[self.names[0]])
            if self.limit and seen + n > self.limit:
                chunk = {k: v[:self.limit - seen] for k, v in chunk.items()}
                n = self.limit - seen
            seen += n
            offset = 0
            while offset < n:
                take = min(self.batch_size - held, n - offset)
                pending.append({k: v[offset:offset + take] for k, v in chunk.items()})
                held += take
                offset += take
                if held == self.batch_size:
                    if index >= start:
                        yield self._batch(pending)
                    pending, held = [], 0
                    index += 1
                    if stop is not None and index >= stop:
                        return
        if held and index >= start:
            yield self._batch(pending)
        if seen == 0:
            raise DataError(f"{self.label}: no calibration samples")


def model_inputs(graph) -> List[InputSpec]:
    """The :class:`InputSpec` of each input of an IR graph (shapes as specialised)."""
    return [InputSpec(name, tuple(graph.tensors[name].shape), graph.tensors[name].dtype)
            for name in graph.inputs]
