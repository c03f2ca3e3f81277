"""Engines: the compiled form of one NPU region (docs/architecture.md §6, ratelnn/proto/engine.proto).

- :class:`Engine` is a read-only Python view of engine bytes: ``Engine.from_bytes(b)``
  parses them with the protobuf runtime and validates them with the native validator
  (ops/core/npu_engine.cc, the single implementation of the checks of
  docs/npu-arithmetic.md); bad bytes raise :class:`EngineError`.
  ``engine.run(arrays, backend="reference" | "native")`` executes it.
- :class:`EngineBuilder` constructs engines in code (used by the compiler and the tests).
- :func:`quantize_multiplier`, :func:`make_lut` and :func:`make_softmax_table` compute the
  integer parameters of instructions from real scales at compile time.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import threading
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..proto import engine_pb2 as pb
from .memory_plan import plan_memory

from .format import (ACTIVATION_DTYPES, DTYPE_CODES, DTYPES, FORMAT_MAJOR, FORMAT_MINOR, MAX_MULTIPLIER,  # noqa: F401
                     MAX_PRODUCT, MAX_SHIFT, MAX_TENSOR_ELEMENTS, MAX_TOTAL_BYTES, OPCODES, SPLIT_MODES, EngineError,
                     qabs, qrange, seal)


# Engine.decoded's cache: (bytes, label) -> Engine, least recently used first.
DECODED_CACHE_BYTES = 256 << 20
DECODED_CACHE_ENGINES = 64
_decoded: "collections.OrderedDict[Tuple[bytes, Optional[str]], Engine]" = collections.OrderedDict()
_decoded_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """An engine tensor: ``shape`` at the compiled batch size (dim 0 is the batch and is
    free at run time), numpy ``dtype``, ``scale`` (real value = code * scale)."""

    id: int
    name: str
    shape: Tuple[int, ...]
    dtype: np.dtype
    scale: float


class Engine:
    """Read-only view of validated engine bytes (see the module docstring)."""

    def __init__(self, proto: "pb.Engine", data: bytes) -> None:
        self.proto = proto
        self._bytes = data
        self.tensors = [TensorSpec(t.id, t.name, tuple(int(d) for d in t.shape), DTYPES[t.dtype], float(t.scale))
                        for t in proto.tensors]
        self.inputs = [self.tensors[i] for i in proto.inputs]
        self.outputs = [self.tensors[i] for i in proto.outputs]
        self._native = None
        self._constants: Optional[List[np.ndarray]] = None

    @classmethod
    def from_bytes(cls, data: bytes, label: Optional[str] = None) -> "Engine":
        """Parse and validate ``data``; ``label`` names the engine in errors (default: its
        own name).  Raises :class:`EngineError` on any problem."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise EngineError(f"engine {label or ''!r}: expected bytes, got {type(data).__name__}")
        data = bytes(data)
        from . import native  # the validator is native code: one implementation of the checks
        native_engine = native.NativeEngine(data, label)
        proto = pb.Engine()
        try:
            proto.ParseFromString(data)
        except Exception as exc:  # protobuf's DecodeError and friends
            raise EngineError(f"engine {label or ''!r}: cannot parse engine bytes: {exc}") from exc
        eng = cls(proto, data)
        eng._native = native_engine
        return eng

    @classmethod
    def decoded(cls, data: bytes, label: Optional[str] = None) -> "Engine":
        """``from_bytes(data, label)``, decoded once: the same bytes and label give the same
        (read-only, thread-safe to run) Engine from a small process-wide cache, so code that
        runs a graph's engines call after call (``run_compiled``) validates and packs their
        weights once.  Bounded to :data:`DECODED_CACHE_BYTES` of engine bytes."""
        if not isinstance(data, bytes):
            return cls.from_bytes(data, label)
        key = (data, label)
        with _decoded_lock:
            eng = _decoded.get(key)
            if eng is not None:
                _decoded.move_to_end(key)
                return eng
        eng = cls.from_bytes(data, label)
        with _decoded_lock:
            _decoded[key] = eng
            total = sum(len(k[0]) for k in _decoded)
            while len(_decoded) > 1 and (total > DECODED_CACHE_BYTES or len(_decoded) > DECODED_CACHE_ENGINES):
                old_key, _ = _decoded.popitem(last=False)
                total -= len(old_key[0])
        return eng

    def to_bytes(self) -> bytes:
        return self._bytes

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def batch_size(self) -> int:
        return int(self.proto.batch_size)

    @property
    def batch_sizes(self) -> List[int]:
        """Every batch size the engine was compiled for: ``batch_size``, then its batch plans'
        (format 1.2, docs/multi-batch.md), ascending."""
        return [self.batch_size, *(int(p.batch_size) for p in self.proto.batch_plans)]

    @property
    def instructions(self):
        return self.proto.instructions

    def narrow_adds(self) -> List[str]:
        """Names of the ADD/SUB instructions the native executor runs on its narrow 8-bit path
        (integer parameters checked on every code pair at load; docs/npu-arithmetic.md)."""
        return [self.proto.instructions[k].name for k in self._native.narrow_adds()]

    @property
    def format_version(self) -> Tuple[int, int]:
        return (self.proto.format_version.major, self.proto.format_version.minor)

    @property
    def constants(self) -> List[np.ndarray]:
        """Constants as numpy arrays (decoded once)."""
        if self._constants is None:
            self._constants = [np.frombuffer(c.data, dtype=DTYPES[c.dtype].newbyteorder("<"))
                               .astype(DTYPES[c.dtype]).reshape(tuple(c.shape)) for c in self.proto.constants]
        return self._constants

    def check_inputs(self, arrays: Sequence[np.ndarray]) -> Tuple[List[np.ndarray], int]:
        """Check run-time inputs against the engine: count, dtype, shape[1:], one batch N >= 1
        (the native check of ops/core/npu_io.h, shared with the TF and MXNet ops, for both
        executors), and the sizes at N against the run-time limits (:meth:`check_size`), before
        anything is copied or allocated.  Returns the inputs as C-contiguous arrays and N."""
        arrays = [np.asarray(a) for a in arrays]
        batch = self._native.check_inputs(arrays, min_batch=1)
        self._native.check_size(batch)
        return [np.ascontiguousarray(a) for a in arrays], batch

    def check_size(self, batch: int, max_tensor_elements: int = 0, max_total_bytes: int = 0) -> None:
        """Raise :class:`EngineError` naming the tensor if an activation tensor at ``batch`` has
        more than ``max_tensor_elements`` elements or all of them more than ``max_total_bytes``
        bytes; with both 0, the run-time limits (``RATELNN_MAX_TENSOR_ELEMENTS``,
        ``RATELNN_MAX_TOTAL_BYTES``, defaults :data:`MAX_TENSOR_ELEMENTS`, :data:`MAX_TOTAL_BYTES`)."""
        self._native.check_size(batch, max_tensor_elements, max_total_bytes)

    def run(self, arrays: Sequence[np.ndarray], backend: str = "reference", num_threads: int = 2) -> List[np.ndarray]:
        """Execute on integer inputs (any batch size N); returns the output arrays.  Sizes at
        batch N are checked against the run-time limits (:meth:`check_size`) first.

        Raises :class:`~ratelnn.npu.device.DeviceUnavailableError` if the engine is placed on a
        device or cores the local emulated runtime lacks (``RATELNN_DEVICES``)."""
        from .device import check_placement
        check_placement(self.name, self.proto.device_id, self.proto.core_ids)
        inputs, batch = self.check_inputs(arrays)  # sizes checked before anything is allocated
        if backend == "reference":
            from .reference import run_reference
            return run_reference(self, inputs)
        if backend == "native":
            return self._native.run(inputs, batch, [(s.shape, s.dtype) for s in self.outputs], num_threads)
        raise ValueError(f"backend must be 'reference' or 'native', got {backend!r}")

    def __repr__(self) -> str:
        return (f"Engine({self.name!r}, batch={self.batch_size}, {len(self.instructions)} instructions, "
                f"inputs={[t.name for t in self.inputs]}, outputs={[t.name for t in self.outputs]})")


# ------------------------------------------------------------------ compile-time helpers
def _round_half_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def quantize_multiplier(real: float, acc_bound: int = 1) -> Tuple[int, int]:
    """Integer ``(M, s)`` with ``M / 2**s ≈ real`` (``real >= 0``), as precise as the
    constraints allow: ``0 <= M < 2**31``, ``0 <= s <= 62`` and ``acc_bound * M <= 2**62``
    where ``acc_bound`` is the largest |accumulator| the multiplier is applied to."""
    if not (math.isfinite(real) and real >= 0):
        raise EngineError(f"requantization multiplier must be finite and >= 0, got {real}")
    acc_bound = max(int(acc_bound), 1)
    # real * 2**s >= 2**31 > MAX_MULTIPLIER for every s >= 32 - exponent(real): start below
    start = MAX_SHIFT if real == 0 else min(MAX_SHIFT, max(0, 31 - math.frexp(real)[1]))
    for s in range(start, -1, -1):
        m = _round_half_away(real * 2.0 ** s)
        if m <= MAX_MULTIPLIER and acc_bound * m <= MAX_PRODUCT:
            return m, s
    raise EngineError(f"requantization multiplier {real} too large for accumulator bound {acc_bound}")


def quantize_real(values: np.ndarray, scale: float, dtype) -> np.ndarray:
    """``clamp(round_half_away(values / scale))`` in float64, as ``dtype``."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.asarray(values, dtype=np.float64) / scale
        r = np.sign(v) * np.floor(np.abs(v) + 0.5)
    lo, hi = qrange(dtype)
    return np.clip(np.nan_to_num(r, nan=0.0), lo, hi).astype(dtype)


def make_lut(fn: Callable[[np.ndarray], np.ndarray], in_dtype, in_scale: float, out_dtype,
             out_scale: float) -> np.ndarray:
    """Table of a LUT instruction: entry ``k`` is the output code of input code
    ``qmin(in_dtype) + k``: ``quantize(fn(code * in_scale), out_scale, out_dtype)``.
    256 entries for 8-bit inputs, 65536 for int16."""
    lo, hi = qrange(in_dtype)
    codes = np.arange(lo, hi + 1, dtype=np.float64)
    with np.errstate(all="ignore"):
        real = np.asarray(fn(codes * in_scale), dtype=np.float64)
    return quantize_real(real, out_scale, out_dtype)


SOFTMAX_TABLE_BITS = 24  # exp table values are round(2**24 * exp(-k * in_scale))


def make_softmax_table(in_dtype, in_scale: float, out_scale: float, row_length: int) -> Tuple[np.ndarray, int, int]:
    """Parameters of a SOFTMAX instruction: ``(table, M, s)``.  ``table[k] =
    round(2**24 * exp(-k * in_scale))`` (int32, one entry per possible ``max - x``) and
    ``M / 2**s ≈ 1 / out_scale`` with ``row_length * 2**24 * 2**s <= 2**62``."""
    lo, hi = qrange(in_dtype)
    k = np.arange(hi - lo + 1, dtype=np.float64)
    table = np.floor(np.exp(-k * in_scale) * 2.0 ** SOFTMAX_TABLE_BITS + 0.5).astype(np.int32)
    max_s = MAX_SHIFT - SOFTMAX_TABLE_BITS - max(int(row_length) - 1, 0).bit_length()
    for s in range(max(max_s, 0), -1, -1):
        m = _round_half_away(2.0 ** s / out_scale)
        if m <= MAX_MULTIPLIER:
            return table, m, s
    raise EngineError(f"softmax output scale {out_scale} too small")


# ------------------------------------------------------------------ builder
ATTR_NAMES = ("strides", "dilations", "pads", "groups", "ksize", "act_min", "act_max", "count_include_pad",
              "axes", "axis", "perm", "pad_value", "multipliers", "shifts", "keepdims")


class EngineBuilder:
    """Build an engine in code.

    ``b = EngineBuilder("name", batch_size=2)``; ``t = b.tensor(name, shape, dtype, scale)``;
    ``c = b.const(name, array)``; ``b.add("CONV2D", [t], [u], consts=[...], strides=(1, 1), ...)``;
    ``b.set_io(inputs=[t], outputs=[u])``; ``engine = b.build()`` (plans memory, serializes,
    validates).  Attribute names are the fields of ``Attrs`` in engine.proto; an ``act_min``/
    ``act_max`` of None is left unset (the dtype range)."""

    def __init__(self, name: str, batch_size: int) -> None:
        self.proto = pb.Engine(name=name, batch_size=int(batch_size))
        self.proto.format_version.major = FORMAT_MAJOR
        self.proto.format_version.minor = FORMAT_MINOR

    def tensor(self, name: str, shape: Sequence[int], dtype, scale: float) -> int:
        """Add an activation tensor (``shape[0]`` is the batch); returns its id."""
        t = self.proto.tensors.add(id=len(self.proto.tensors), name=name, shape=[int(d) for d in shape],
                                   dtype=DTYPE_CODES[np.dtype(dtype)], scale=float(scale))
        return t.id

    def const(self, name: str, array: np.ndarray) -> int:
        """Add a constant (int8, uint8, int16 or int32 array); returns its id."""
        a = np.asarray(array)
        code = DTYPE_CODES.get(a.dtype)
        if code is None:
            raise EngineError(f"constant {name!r}: unsupported dtype {a.dtype}")
        c = self.proto.constants.add(id=len(self.proto.constants), name=name, dtype=code, shape=list(a.shape),
                                     data=np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())
        return c.id

    def add(self, opcode: str, inputs: Sequence[int], outputs: Sequence[int], consts: Sequence[int] = (),
            name: str = "", **attrs) -> "pb.Instruction":
        """Append an instruction (executed in order)."""
        unknown = set(attrs) - set(ATTR_NAMES)
        if unknown:
            raise EngineError(f"instruction {name!r}: unknown attributes {sorted(unknown)}")
        ins = self.proto.instructions.add(opcode=OPCODES[opcode], inputs=list(inputs), outputs=list(outputs),
                                          consts=list(consts), name=name)
        for key, value in attrs.items():
            if value is None:
                continue
            if isinstance(value, (list, tuple, np.ndarray)):
                getattr(ins.attrs, key).extend(int(v) for v in np.ravel(value))
            else:
                setattr(ins.attrs, key, bool(value) if key in ("count_include_pad", "keepdims") else int(value))
        return ins

    def set_io(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        del self.proto.inputs[:], self.proto.outputs[:]
        self.proto.inputs.extend(inputs)
        self.proto.outputs.extend(outputs)

    def set_placement(self, device_id: int = 0, core_ids: Sequence[int] = (), split_mode: str = "SPLIT_NONE") -> None:
        self.proto.device_id = int(device_id)
        del self.proto.core_ids[:]
        self.proto.core_ids.extend(int(c) for c in core_ids)
        self.proto.split_mode = SPLIT_MODES[split_mode]

    def plan_memory(self) -> None:
        """Fill sram_offset/sram_size of every tensor and sram_bytes (memory_plan.py)."""
        n_ins = len(self.proto.instructions)
        first = {t: -1 for t in self.proto.inputs}
        last: Dict[int, int] = {}
        for k, ins in enumerate(self.proto.instructions):
            for t in ins.outputs:
                first.setdefault(t, k)
                last.setdefault(t, k)
            for t in ins.inputs:
                last[t] = k
        for t in self.proto.outputs:
            last[t] = n_ins
        sizes, lifetimes = [], []
        for t in self.proto.tensors:
            sizes.append(int(np.prod(t.shape, dtype=np.int64)) * DTYPES[t.dtype].itemsize if t.shape else 0)
            lifetimes.append((first.get(t.id, -1), last.get(t.id, first.get(t.id, -1))))
        offsets, total = plan_memory(sizes, lifetimes)
        for t, off, size in zip(self.proto.tensors, offsets, sizes):
            t.sram_offset, t.sram_size = off, size
        self.proto.sram_bytes = total

    def to_bytes(self) -> bytes:
        """The engine bytes with their checksum (format.seal)."""
        return seal(self.proto)

    def build(self, plan_memory: bool = True) -> Engine:
        """Plan memory (unless told not to), serialize and validate; returns the Engine."""
        if plan_memory:
            self.plan_memory()
        return Engine.from_bytes(self.to_bytes())
