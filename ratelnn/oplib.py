"""Build, cache and load the custom-op libraries of ``ops/`` (docs/architecture.md §2, §5).

``ops_library_path("tensorflow")`` compiles every ``ops/core/*.cc`` and
``ops/tensorflow/*.cc`` into one shared library with TensorFlow's compile and link flags
(cached by :func:`ratelnn._build.build_library`; the key includes the TensorFlow version),
``tf_init()`` loads it into TensorFlow. ``ops_library_path("mxnet")`` compiles the same core
with ``ops/mxnet/*.cc`` and MXNet's ``lib_api.cc`` (from the installed wheel), ``mx_init()``
loads it with ``mx.library.load``. ``flush_statistics()`` makes a loaded library write its
in-memory calibration statistics to disk (docs/statistics.md).
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import threading
from pathlib import Path
from typing import Dict, List, Tuple

from ._build import OPS_DIR, avx512fp16_off_flags, build_library
from .errors import CalibrationError
from .frameworks import import_tensorflow, package_dir
from .mxnet_compat import import_mxnet

FRAMEWORKS = ("tensorflow", "mxnet", "onnxruntime")
ONNX_DOMAIN = "ratelnn"   # the ONNX domain of the custom ops the onnxruntime library implements (docs/onnx.md)

_lock = threading.Lock()
_library_paths: Dict[str, str] = {}  # framework -> .so path, as built in this process
_tf_module = None
_mx_loaded = False


def _check_framework(framework: str) -> None:
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; expected one of {FRAMEWORKS}")


def core_sources() -> List[str]:
    """The framework-independent sources both op libraries link (ops/core), compiled with
    ``ratelnn._build.core_flags`` of the library's flags."""
    return [str(p) for p in sorted((OPS_DIR / "core").glob("*.cc"))]


def tensorflow_sources() -> List[str]:
    """The TensorFlow glue of the TensorFlow op library (ops/tensorflow), compiled with
    :func:`tensorflow_build_flags`; the library also links :func:`core_sources`."""
    return [str(p) for p in sorted((OPS_DIR / "tensorflow").glob("*.cc"))]


def tensorflow_build_flags() -> Tuple[List[str], List[str]]:
    """``(compile flags, link flags)`` of the TensorFlow op library, besides
    ``ratelnn._build.COMPILE_FLAGS``."""
    tf = import_tensorflow()

    compile_flags = list(tf.sysconfig.get_compile_flags()) + [
        "-DNDEBUG",
        "-Wno-deprecated-declarations",  # TF headers use their own deprecated APIs
        # The include paths already differ per TF install; the version define makes the
        # cache key change with the TF version even when the path does not.
        f"-DRATELNN_TF_VERSION={tf.__version__}",
    ] + avx512fp16_off_flags()
    return compile_flags, list(tf.sysconfig.get_link_flags())


def _build_tensorflow_library() -> str:
    compile_flags, link_flags = tensorflow_build_flags()
    return str(build_library("ratelnn_tf", tensorflow_sources(), compile_flags, link_flags,
                             core_sources=core_sources()))


def _mxnet_package_dir() -> Path:
    """The installed ``mxnet`` package directory, found without importing MXNet."""
    return Path(package_dir("mxnet"))


def mxnet_build_flags() -> Tuple[List[str], List[str]]:
    """``(compile flags, link flags)`` of the MXNet op library, besides
    ``ratelnn._build.COMPILE_FLAGS``."""
    mx_dir = _mxnet_package_dir()
    version = importlib.metadata.version("mxnet")
    compile_flags = [
        f"-I{mx_dir / 'include'}",
        "-DNDEBUG",
        # libmxnet.so 1.9.1 (pip wheel) is built with the pre-C++11 std::string ABI, but
        # lib_api passes only C types across the boundary (and -Bsymbolic below binds our
        # std:: symbols to our own definitions), so the library takes TensorFlow's C++11 ABI
        # and shares its ops/core objects with the TensorFlow and C API libraries.
        "-D_GLIBCXX_USE_CXX11_ABI=1",
        f"-DRATELNN_MX_VERSION={version}",
    ]
    # -Bsymbolic: calls inside the library bind to its own definitions, never to libmxnet's
    return compile_flags, ["-Wl,-Bsymbolic", "-pthread"]


def _build_mxnet_library() -> str:
    compile_flags, link_flags = mxnet_build_flags()
    return str(build_library("ratelnn_mx", mxnet_sources(), compile_flags, link_flags,
                             core_sources=core_sources()))


def mxnet_sources() -> List[str]:
    """The MXNet glue of the MXNet op library, ops/mxnet and the wheel's lib_api.cc, compiled
    with :func:`mxnet_build_flags`; the library also links :func:`core_sources`."""
    lib_api_cc = _mxnet_package_dir() / "src" / "lib_api.cc"
    if not lib_api_cc.is_file():
        raise FileNotFoundError(f"{lib_api_cc} is missing: the MXNet wheel ships it with lib_api.h")
    glue = sorted((OPS_DIR / "mxnet").glob("*.cc"))
    return [str(p) for p in glue] + [str(lib_api_cc)]


def _build_onnxruntime_library() -> str:
    """ops/onnxruntime with the core: a plain C API library (ctypes), no framework header."""
    glue = sorted((OPS_DIR / "onnxruntime").glob("*.cc"))
    return str(build_library("ratelnn_ort", glue, ["-DNDEBUG", "-D_GLIBCXX_USE_CXX11_ABI=1"], ["-pthread"],
                             core_sources=core_sources()))


_BUILDERS = {"tensorflow": _build_tensorflow_library, "mxnet": _build_mxnet_library,
             "onnxruntime": _build_onnxruntime_library}


def ops_library_path(framework: str = "tensorflow") -> str:
    """Path of the op library for ``framework`` ("tensorflow", "mxnet" or "onnxruntime"), building it on
    first use (cached on disk across processes, and in memory within this process).

    Raises ValueError for an unknown framework and ``ratelnn._build.BuildError`` if
    compilation fails.
    """
    _check_framework(framework)
    with _lock:
        if framework not in _library_paths:
            _library_paths[framework] = _BUILDERS[framework]()
        return _library_paths[framework]


def tf_init():
    """Load the TensorFlow op library (building it if needed); idempotent.

    Returns the module from ``tf.load_op_library``: ``tf_init().ratel_quant(...)``,
    ``.ratel_dequant(...)``, ``.ratel_min_max(...)``.
    """
    global _tf_module
    path = ops_library_path("tensorflow")
    with _lock:
        if _tf_module is None:
            _tf_module = import_tensorflow().load_op_library(path)
        return _tf_module


def mx_init():
    """Load the MXNet op library (building it if needed) with ``mx.library.load``;
    idempotent, also when the library was already loaded by path.

    Afterwards ``mx.sym``/``mx.nd`` have ``ratel_minmax``, ``ratel_quant``,
    ``ratel_dequant`` and ``ratel_engine_op`` (attributes: docs/mxnet.md). Returns the path
    of the loaded library.
    """
    global _mx_loaded
    path = ops_library_path("mxnet")
    with _lock:
        if not _mx_loaded:
            mx = import_mxnet()
            if not hasattr(mx.nd, "ratel_engine_op"):  # not loaded by path already
                mx.library.load(path, verbose=False)
            _mx_loaded = True
        return path


def loaded_libraries() -> List[ctypes.CDLL]:
    """Handles of the op libraries this process has loaded (RTLD_NOLOAD: never loads one)."""
    with _lock:
        paths = list(_library_paths.values())
    handles = []
    for path in paths:
        try:
            handles.append(ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW))
        except OSError:
            continue
    return handles


def flush_statistics(output_dir: "str | os.PathLike | None" = None) -> None:
    """Make the op library loaded in this process (if any) write its in-memory calibration
    statistics now: those of ``output_dir`` (as an absolute path, the form the calibration
    ops carry), or of every directory when None. No-op when no library is loaded.

    Raises CalibrationError if a statistics file cannot be written. A directory whose write
    failed keeps its statistics and does not affect the flush of any other directory.
    """
    for lib in loaded_libraries():
        lib.ratelnn_stats_last_error.restype = ctypes.c_char_p
        if output_dir is None:
            failed = lib.ratelnn_stats_flush_all() != 0
        else:
            path = os.path.abspath(os.fspath(output_dir)).encode()
            failed = lib.ratelnn_stats_flush_dir(ctypes.c_char_p(path)) != 0
        if failed:
            message = lib.ratelnn_stats_last_error().decode(errors="replace")
            raise CalibrationError(f"writing calibration statistics failed: {message}")


def forget_statistics(output_dir: "str | os.PathLike") -> bool:
    """Drop the in-memory calibration statistics this process holds for ``output_dir``
    without writing them (a fresh start). True if a loaded library held some."""
    path = os.path.abspath(os.fspath(output_dir)).encode()
    dropped = False
    for lib in loaded_libraries():
        dropped |= bool(lib.ratelnn_stats_forget_dir(ctypes.c_char_p(path)))
    return dropped


_ort_library = None


def ort_init() -> ctypes.CDLL:
    """Load the ONNX Runtime op library (building it if needed); idempotent.  Its entry
    points serve ``ratelnn.onnx_session`` (ratelnn/frontend/onnx/session.py)."""
    global _ort_library
    path = ops_library_path("onnxruntime")
    with _lock:
        if _ort_library is None:
            lib = ctypes.CDLL(path)
            lib.ratelnn_ort_minmax_record.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                                      ctypes.c_int64, ctypes.c_double, ctypes.c_char_p,
                                                      ctypes.c_size_t]
            lib.ratelnn_ort_minmax_record.restype = ctypes.c_int
            lib.ratelnn_ort_quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                                                 ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_float),
                                                 ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int,
                                                 ctypes.c_char_p, ctypes.c_size_t]
            lib.ratelnn_ort_quantize.restype = ctypes.c_int
            lib.ratelnn_ort_engine_timer_create.argtypes = [ctypes.POINTER(ctypes.c_char_p),
                                                            ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
                                                            ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64,
                                                            ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                                            ctypes.c_size_t]
            lib.ratelnn_ort_engine_timer_create.restype = ctypes.c_int
            lib.ratelnn_ort_engine_timer_record.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p,
                                                            ctypes.c_size_t]
            lib.ratelnn_ort_engine_timer_record.restype = ctypes.c_int
            lib.ratelnn_ort_engine_timer_free.argtypes = [ctypes.c_void_p]
            lib.ratelnn_ort_engine_timer_free.restype = None
            _ort_library = lib
        return _ort_library
