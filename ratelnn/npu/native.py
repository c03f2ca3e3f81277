"""ctypes binding of the native NPU executor (ops/core/npu_*.cc, ops/capi/npu_capi.cc).

The library ``ratelnn_npu`` is built on first use and cached (ratelnn/_build.py).
:class:`NativeEngine` owns one decoded, validated engine on the C++ side.

The kernels run one of the instruction-set paths of :data:`ISA_PATHS`, the best the CPU
supports unless ``RATELNN_ISA`` names another (ops/core/isa.h); :func:`native_isa` says
which, :func:`force_isa` switches paths (to compare them: they compute the same bits).
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .. import oplib
from .._build import OPS_DIR, build_library
from .format import DTYPE_CODES, EngineError

_ERR_LEN = 4096
_lib = None
_lib_lock = threading.Lock()


# Kernel paths in the order of ops/core/isa.h's Isa (the capability ladder: the last one a CPU
# supports is its default); every one gives the same bits (docs/npu-arithmetic.md).
ISA_PATHS = ("portable", "avx2", "avx_vnni", "avx512", "avx512_vnni", "amx")
ISA_ENV = "RATELNN_ISA"


def library_sources() -> List[Path]:
    """Sources of the native executor library (no framework dependency): the executor of
    ops/core and its C API."""
    core = OPS_DIR / "core"
    return sorted(core.glob("npu_*.cc")) + [core / "isa.cc", OPS_DIR / "capi" / "npu_capi.cc"]


# The C API passes C types only, so any C++ library ABI does; TensorFlow's (the C++11 one)
# lets the executor's objects be those the TensorFlow op library already compiled.
CAPI_FLAGS = ["-D_GLIBCXX_USE_CXX11_ABI=1"]


def library_path() -> Path:
    """Path of the built (cached) native executor library."""
    *core, capi = library_sources()
    return build_library("ratelnn_npu", [capi], CAPI_FLAGS, core_sources=core)


def _load():
    global _lib
    with _lib_lock:
        if _lib is None:
            lib = ctypes.CDLL(str(library_path()))
            lib.ratel_npu_engine_create.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                                    ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
            lib.ratel_npu_engine_create.restype = ctypes.c_int
            lib.ratel_npu_engine_free.argtypes = [ctypes.c_void_p]
            lib.ratel_npu_engine_free.restype = None
            lib.ratel_npu_engine_run.argtypes = [
                ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
                ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
            lib.ratel_npu_engine_run.restype = ctypes.c_int
            lib.ratel_npu_engine_check_inputs.argtypes = [
                ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int),
                ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p,
                ctypes.c_size_t]
            lib.ratel_npu_engine_check_inputs.restype = ctypes.c_int
            lib.ratel_npu_engine_check_size.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                                         ctypes.c_char_p, ctypes.c_size_t]
            lib.ratel_npu_engine_check_size.restype = ctypes.c_int
            lib.ratel_npu_peak_macs.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t]
            lib.ratel_npu_peak_macs.restype = ctypes.c_int64
            lib.ratel_npu_wire_schema.argtypes = []
            lib.ratel_npu_wire_schema.restype = ctypes.c_char_p
            lib.ratelnn_isa_active.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            lib.ratelnn_isa_active.restype = ctypes.c_char_p
            lib.ratelnn_isa_supported.argtypes = [ctypes.c_char_p]
            lib.ratelnn_isa_supported.restype = ctypes.c_int
            lib.ratelnn_isa_set.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
            lib.ratelnn_isa_set.restype = ctypes.c_int
            i64p = ctypes.POINTER(ctypes.c_int64)
            lib.ratel_npu_add_narrow_plan.argtypes = [i64p, i64p]
            lib.ratel_npu_add_narrow_plan.restype = ctypes.c_int
            lib.ratel_npu_add_narrow_mismatches.argtypes = [i64p, i64p, i64p]
            lib.ratel_npu_add_narrow_mismatches.restype = ctypes.c_int64
            lib.ratel_npu_engine_narrow_adds.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int64]
            lib.ratel_npu_engine_narrow_adds.restype = ctypes.c_int64
            _lib = lib
    return _lib


def native_isa() -> str:
    """The kernel path the native executor runs (one of :data:`ISA_PATHS`).  Raises
    :class:`EngineError` when ``RATELNN_ISA`` names an unknown path or one this CPU lacks."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    name = _load().ratelnn_isa_active(err, _ERR_LEN)
    if name is None:
        raise EngineError(err.value.decode(errors="replace"))
    return name.decode()


def supported_isas() -> Tuple[str, ...]:
    """The paths of :data:`ISA_PATHS` this CPU (and OS) can run, in that order (the last is
    the default)."""
    lib = _load()
    return tuple(p for p in ISA_PATHS if lib.ratelnn_isa_supported(p.encode()) == 1)


def set_isa(name: str) -> None:
    """Run the native kernels on path ``name`` from now on, in this process: the executor's
    and those of the loaded TensorFlow/MXNet op libraries (engine ops, calibration scans).
    Raises :class:`EngineError` for an unknown path or one this CPU lacks."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    for lib in [_load(), *oplib.loaded_libraries()]:
        if lib.ratelnn_isa_set(str(name).encode(), err, _ERR_LEN) != 0:
            raise EngineError(err.value.decode(errors="replace"))


def wire_schema() -> str:
    """The engine.proto field numbers, kinds and enum ranges the native reader is written
    against (ops/core/npu_format.h), as text lines (tests/npu/test_wire_constants.py)."""
    return _load().ratel_npu_wire_schema().decode()


@contextlib.contextmanager
def force_isa(name: str) -> Iterator[str]:
    """Run every native kernel of this process on path ``name`` inside the ``with`` block
    (see :func:`set_isa`), then return to the path that was active before.
    ``RATELNN_ISA=name`` does the same for a whole process."""
    previous = native_isa()
    set_isa(name)
    try:
        yield name
    finally:
        set_isa(previous)


# The narrow ADD path (ops/core/npu_add_narrow.h): the function of a spec, and the parameters of a plan.
NARROW_SPEC = ("at", "bt", "ma", "mb", "s", "lo", "hi", "requant", "m2", "s2", "lo2", "hi2")
NARROW_PLAN = ("ma", "mb", "c", "t", "wide", "lo", "hi", "two_stage", "m2", "c2", "t2", "wide2", "lo2", "hi2")


def _narrow_spec(spec: dict):
    """``spec`` (keys of :data:`NARROW_SPEC`; ``at``/``bt`` dtype names, ``requant`` and its keys
    optional) as the C array; raises :class:`EngineError` for a missing key."""
    full = {"requant": 0, "m2": 0, "s2": 0, "lo2": 0, "hi2": 0, **spec}
    missing = [k for k in NARROW_SPEC if k not in full]
    if missing:
        raise EngineError(f"narrow ADD spec: missing keys {missing}")
    full["at"], full["bt"] = DTYPE_CODES[np.dtype(full["at"])], DTYPE_CODES[np.dtype(full["bt"])]
    return (ctypes.c_int64 * 12)(*[int(full[k]) for k in NARROW_SPEC])


def add_narrow_plan(spec: dict) -> Optional[dict]:
    """The narrow parameters the native executor derives at load for the ADD (+ REQUANT) ``spec``
    (``{"at", "bt": 8-bit dtype names, "ma", "mb" (SUB: negated), "s", "lo", "hi"}`` and, for a
    fused REQUANT, ``requant=1, m2, s2, lo2, hi2``), checked on every code pair; ``None`` when
    there are none (the executor then keeps its double/int64 path)."""
    plan = (ctypes.c_int64 * 14)()
    rc = _load().ratel_npu_add_narrow_plan(_narrow_spec(spec), plan)
    if rc < 0:
        raise EngineError(f"narrow ADD spec out of bounds: {spec}")
    return dict(zip(NARROW_PLAN, [int(v) for v in plan])) if rc == 1 else None


def add_narrow_mismatches(spec: dict, plan: dict) -> Tuple[int, Optional[Tuple[int, int]]]:
    """The exhaustive check of the native executor: how many code pairs (a, b) ``plan`` (keys of
    :data:`NARROW_PLAN`) gets wrong against ``spec``, and the first such pair (None if none)."""
    first = (ctypes.c_int64 * 2)(0, 0)
    values = (ctypes.c_int64 * 14)(*[int(plan[k]) for k in NARROW_PLAN])
    bad = _load().ratel_npu_add_narrow_mismatches(_narrow_spec(spec), values, first)
    if bad < 0:
        raise EngineError(f"narrow ADD spec or plan out of bounds: {spec}, {plan}")
    return int(bad), ((int(first[0]), int(first[1])) if bad else None)


class NativeEngine:
    """A validated engine held by the native library.  Construction validates ``data``
    and raises :class:`EngineError` with the native message on any problem."""

    def __init__(self, data: bytes, label: Optional[str] = None) -> None:
        self._lib = _load()
        self._handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERR_LEN)
        rc = self._lib.ratel_npu_engine_create(data, len(data), label.encode() if label else None,
                                               ctypes.byref(self._handle), err, _ERR_LEN)
        if rc != 0:
            self._handle = None
            raise EngineError(err.value.decode(errors="replace"))

    def check_inputs(self, inputs: Sequence[np.ndarray], min_batch: int = 1) -> int:
        """The native check of run-time inputs (ops/core/npu_io.h): count, dtype, shape[1:],
        one batch >= ``min_batch``.  Returns the batch; raises :class:`EngineError`."""
        n = len(inputs)
        # a non-native byte order is not the engine's dtype even when the name matches
        names = [(a.dtype.name if a.dtype.isnative else a.dtype.str).encode() for a in inputs]
        dtypes = (ctypes.c_char_p * max(n, 1))(*names)
        ranks = (ctypes.c_int * max(n, 1))(*[a.ndim for a in inputs])
        flat = [int(d) for a in inputs for d in a.shape]
        dims = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        batch = ctypes.c_int64(-1)
        err = ctypes.create_string_buffer(_ERR_LEN)
        if self._lib.ratel_npu_engine_check_inputs(self._handle, n, dtypes, ranks, dims, int(min_batch),
                                                   ctypes.byref(batch), err, _ERR_LEN) != 0:
            raise EngineError(err.value.decode(errors="replace"))
        return int(batch.value)

    def check_size(self, batch: int, max_tensor_elements: int = 0, max_total_bytes: int = 0) -> None:
        """Every activation tensor at ``batch`` within the limits (ops/core/npu_io.h): the given
        ones, or when both are 0 the run-time limits (``RATELNN_MAX_TENSOR_ELEMENTS``,
        ``RATELNN_MAX_TOTAL_BYTES`` or their defaults).  Raises :class:`EngineError` naming the tensor."""
        err = ctypes.create_string_buffer(_ERR_LEN)
        if self._lib.ratel_npu_engine_check_size(self._handle, int(batch), int(max_tensor_elements),
                                                 int(max_total_bytes), err, _ERR_LEN) != 0:
            raise EngineError(err.value.decode(errors="replace"))

    def run(self, inputs: Sequence[np.ndarray], batch: int, outputs: Sequence[Tuple[Tuple[int, ...], np.dtype]],
            num_threads: int = 2) -> List[np.ndarray]:
        """Run on C-contiguous ``inputs`` at batch ``batch``; ``outputs`` lists
        ``(compiled shape, dtype)`` of each engine output.  Sizes are checked before the
        outputs are allocated."""
        self.check_size(batch)
        results = [np.empty((batch,) + tuple(shape[1:]), dtype=dtype) for shape, dtype in outputs]
        in_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        in_sizes = (ctypes.c_int64 * max(len(inputs), 1))(*[a.nbytes for a in inputs])
        out_ptrs = (ctypes.c_void_p * max(len(results), 1))(*[a.ctypes.data for a in results])
        out_sizes = (ctypes.c_int64 * max(len(results), 1))(*[a.nbytes for a in results])
        err = ctypes.create_string_buffer(_ERR_LEN)
        rc = self._lib.ratel_npu_engine_run(self._handle, batch, in_ptrs, in_sizes, len(inputs), out_ptrs, out_sizes,
                                            len(results), int(num_threads), err, _ERR_LEN)
        if rc != 0:
            raise EngineError(err.value.decode(errors="replace"))
        return results

    def narrow_adds(self) -> List[int]:
        """Indices of the ADD/SUB instructions that run the narrow 8-bit path (checked at load)."""
        n = self._lib.ratel_npu_engine_narrow_adds(self._handle, None, 0)
        out = (ctypes.c_int32 * max(n, 1))()
        self._lib.ratel_npu_engine_narrow_adds(self._handle, out, n)
        return [int(v) for v in out[:n]]

    def __del__(self) -> None:
        if getattr(self, "_handle", None):
            self._lib.ratel_npu_engine_free(self._handle)
            self._handle = None


def peak_gmacs(seconds: float = 0.2, repeats: int = 5) -> dict:
    """The measured multiply-add peak of one core on the active kernel path: a register-only
    loop of the path's GEMM instruction (tdpbusd tiles on amx, vpdpbusd zmm on avx512_vnni, ymm on avx_vnni) run by the calling thread
    (ctypes releases the GIL) for about ``seconds``, ``repeats`` times.  Returns
    ``{"gmacs_per_core": median GMAC/s, "instruction": name, "path": native_isa()}``.  For
    benchmarks: a shared machine lowers it."""
    import statistics
    import time
    lib = _load()
    name = ctypes.create_string_buffer(256)
    iters = 1 << 16
    while True:  # calibrate the round count to about `seconds`
        start = time.perf_counter()
        lib.ratel_npu_peak_macs(iters, name, 256)
        if time.perf_counter() - start > seconds / 4 or iters > 1 << 40:
            break
        iters *= 4
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        macs = lib.ratel_npu_peak_macs(iters, name, 256)
        rates.append(macs / (time.perf_counter() - start) / 1e9)
    return {"gmacs_per_core": statistics.median(rates), "instruction": name.value.decode(), "path": native_isa()}
