"""Build, cache and load the custom-op libraries of ``ops/`` (DESIGN §2, §5).

``ops_library_path("tensorflow")`` compiles every ``ops/core/*.cc`` and
``ops/tensorflow/*.cc`` into one shared library with TensorFlow's compile and link flags
(cached by :func:`ratelnn._build.build_library`; the key includes the TensorFlow version),
``tf_init()`` loads it into TensorFlow, and ``flush_statistics()`` makes a loaded library
write its in-memory calibration statistics to disk (docs/statistics.md).
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Dict, List

from ._build import OPS_DIR, build_library
from .errors import CalibrationError

FRAMEWORKS = ("tensorflow", "mxnet")
MXNET_NOT_READY = "MXNet ops: issue 4"

_lock = threading.Lock()
_library_paths: Dict[str, str] = {}  # framework -> .so path, as built in this process
_tf_module = None


def _check_framework(framework: str) -> None:
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; expected one of {FRAMEWORKS}")
    if framework == "mxnet":
        raise NotImplementedError(MXNET_NOT_READY)


def _tensorflow_sources() -> List[str]:
    core = sorted((OPS_DIR / "core").glob("*.cc"))
    glue = sorted((OPS_DIR / "tensorflow").glob("*.cc"))
    return [str(p) for p in core + glue]


def _build_tensorflow_library() -> str:
    import tensorflow as tf

    compile_flags = list(tf.sysconfig.get_compile_flags()) + [
        "-DNDEBUG",
        "-Wno-deprecated-declarations",  # TF headers use their own deprecated APIs
        # The include paths already differ per TF install; the version define makes the
        # cache key change with the TF version even when the path does not.
        f"-DRATELNN_TF_VERSION={tf.__version__}",
    ]
    link_flags = list(tf.sysconfig.get_link_flags())
    return str(build_library("ratelnn_tf", _tensorflow_sources(), compile_flags, link_flags))


def ops_library_path(framework: str = "tensorflow") -> str:
    """Path of the op library for ``framework``, building it on first use (cached on disk
    across processes, and in memory within this process).

    Raises ValueError for an unknown framework, NotImplementedError for "mxnet" (not yet
    available) and ``ratelnn._build.BuildError`` if compilation fails.
    """
    _check_framework(framework)
    with _lock:
        if framework not in _library_paths:
            _library_paths[framework] = _build_tensorflow_library()
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
            import tensorflow as tf

            _tf_module = tf.load_op_library(path)
        return _tf_module


def mx_init():
    """Load the MXNet op library (not available yet)."""
    raise NotImplementedError(MXNET_NOT_READY)


def flush_statistics() -> None:
    """Make the op library loaded in this process (if any) write all in-memory calibration
    statistics to their ``output_dir`` now. No-op when no library is loaded.

    Raises CalibrationError if a statistics file cannot be written.
    """
    with _lock:
        paths = list(_library_paths.values())
    for path in paths:
        try:  # RTLD_NOLOAD: a handle only if TF (or anyone) already loaded this file
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        lib.ratelnn_stats_last_error.restype = ctypes.c_char_p
        if lib.ratelnn_stats_flush_all() != 0:
            message = lib.ratelnn_stats_last_error().decode(errors="replace")
            raise CalibrationError(f"writing calibration statistics failed: {message}")
