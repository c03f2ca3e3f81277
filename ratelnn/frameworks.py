"""The model frameworks, imported only when ratelnn needs them.

No framework is a requirement of ratelnn itself: each comes with an extra
(pyproject.toml), ``pip install 'ratelnn[tensorflow]'`` (``tensorflow-cpu``),
``pip install 'ratelnn[mxnet]'`` and ``pip install 'ratelnn[onnx]'`` (``onnx`` and ONNX
Runtime, the ONNX frontend's framework).  An installed ``tensorflow`` distribution (not ``-cpu``)
in the same version range serves as well: ratelnn imports the ``tensorflow`` module, whichever
distribution installed it (with it, install ratelnn without the extra, which would add
``tensorflow-cpu`` beside it).  When ratelnn needs a framework that is not installed it
raises :class:`~ratelnn.errors.FrameworkNotInstalledError` naming the extra.
"""
from __future__ import annotations

import importlib
import importlib.util

from .errors import FrameworkNotInstalledError

# framework -> (module, display name, extra)
FRAMEWORKS = {"tensorflow": ("tensorflow", "TensorFlow", "tensorflow"),
              "mxnet": ("mxnet", "MXNet", "mxnet"),
              "onnx": ("onnx", "The onnx package", "onnx"),
              "onnxruntime": ("onnxruntime", "ONNX Runtime", "onnx")}


def not_installed(framework: str) -> FrameworkNotInstalledError:
    """The error saying ``framework`` is missing and which extra installs it."""
    module, name, extra = FRAMEWORKS[framework]
    also = (" (or an installed `tensorflow` / `tensorflow-cpu` in the range of that extra)"
            if framework == "tensorflow" else "")
    return FrameworkNotInstalledError(
        f"{name} is not installed, and ratelnn needs it here: pip install 'ratelnn[{extra}]'{also}")


def import_framework(framework: str):
    """The module of ``framework`` (a key of :data:`FRAMEWORKS`), imported; FrameworkNotInstalledError
    when it is not installed (an import error inside an installed framework propagates as is)."""
    module = FRAMEWORKS[framework][0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            raise not_installed(framework) from e
        raise


def import_tensorflow():
    """The ``tensorflow`` module (see :func:`import_framework`)."""
    return import_framework("tensorflow")


def package_dir(framework: str) -> str:
    """The installed package folder of ``framework``, found without importing it."""
    spec = importlib.util.find_spec(FRAMEWORKS[framework][0])
    if spec is None or not spec.submodule_search_locations:
        raise not_installed(framework)
    return list(spec.submodule_search_locations)[0]
