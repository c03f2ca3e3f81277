"""The model registry: every folder ``agraph/models/<name>/`` holding a ``model.py`` is a zoo
model, and so is every such folder under the roots of ``AGRAPH_MODELS_PATH`` or added with
:func:`add_folder` (docs/agraph.md, "Adding a model").  A folder may register its own dataset
in ``dataset.json`` (``{"key", "archive", "sha256", "description"}``)."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from . import datasets, paths, weights
from .errors import RegistryError

ZOO_DIR = Path(__file__).resolve().parent / "models"
# the code the model folders share: part of every folder's source_hash
SHARED_SOURCES = tuple(Path(__file__).resolve().parent / f for f in ("kinds.py", "builders.py", "inputs.py",
                                                                      "shipped.py", "weights.py"))
FRAMEWORKS = ("tensorflow", "mxnet", "onnx")
# frameworks whose image inputs are NCHW (TensorFlow takes NHWC)
NCHW_FRAMEWORKS = ("mxnet", "onnx")
WEIGHT_SOURCES = ("trained", "shipped", "imagenet", "random")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
MIN_NAME_LENGTH = 6
# names that say nothing about the model (docs/agraph.md, rule 1)
GENERIC_NAMES = {"test_image", "test_model", "testing", "my_model", "mymodel", "model1", "models",
                 "network", "example", "sample", "samples", "untitled", "new_model", "default",
                 "tmp_model", "temp_model", "classifier", "detector", "baseline", "test_net"}
MODEL_ATTRIBUTES = ("NAME", "FRAMEWORK", "DATASET", "WEIGHTS", "INPUTS", "OUTPUTS", "INPUT_SHAPES",
                    "TEST_INPUT_SHAPES", "build", "preprocess")
_USER_PACKAGE = "agraph_user_models"
_extra_folders: List[Path] = []


@dataclasses.dataclass
class ModelEntry:
    """A loaded model folder: its ``model`` and ``eval`` modules and their declared names."""

    name: str
    folder: Path
    model: types.ModuleType
    eval: types.ModuleType
    builtin: bool

    framework = property(lambda self: self.model.FRAMEWORK)
    dataset = property(lambda self: self.model.DATASET)
    weights = property(lambda self: self.model.WEIGHTS)
    inputs = property(lambda self: list(self.model.INPUTS))
    outputs = property(lambda self: list(self.model.OUTPUTS))

    def input_shapes(self, size: str = "full") -> List[List[int]]:
        """Shapes at ``size`` "full" or "test" (the reduced ones; full if the model has none)."""
        if size not in ("full", "test"):
            raise ValueError(f"size must be 'full' or 'test', got {size!r}")
        shapes = self.model.TEST_INPUT_SHAPES if size == "test" else None
        return [list(s) for s in (shapes or self.model.INPUT_SHAPES)]

    @property
    def weights_file(self) -> Optional[Path]:
        """The pretrained weights file the model loads (``WEIGHTS_FILE``), or None."""
        return getattr(self.model, "WEIGHTS_FILE", None)

    def source_hash(self) -> str:
        """sha256 of the folder's ``*.py`` and ``*.json`` files (names and bytes), of the
        code the folders share (:data:`SHARED_SOURCES`: ``agraph/kinds.py``,
        ``builders.py``, ``inputs.py``, ``shipped.py``, ``weights.py``) and of the weights
        file it loads: the store key of everything built from this folder."""
        h = hashlib.sha256()
        if self.weights_file is not None:
            h.update(b"weights\0" + weights.digest(self.weights_file).encode() + b"\0")
        for f in sorted(self.folder.iterdir()):
            if f.is_file() and f.suffix in (".py", ".json"):
                h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        for shared in SHARED_SOURCES:
            h.update(shared.name.encode() + b"\0" + shared.read_bytes() + b"\0")
        return h.hexdigest()


def model_file_names(name: str, framework: str) -> List[str]:
    """The FP32 files a model must have, named after it (rule 5): TensorFlow ``<name>.pb``,
    MXNet ``<name>-symbol.json`` + ``<name>-0000.params``, ONNX ``<name>.onnx``."""
    if framework == "tensorflow":
        return [f"{name}.pb"]
    if framework == "onnx":
        return [f"{name}.onnx"]
    return [f"{name}-symbol.json", f"{name}-0000.params"]


def valid_name(name: str) -> Optional[str]:
    """Why ``name`` is not a valid model name, or None if it is (rule 1)."""
    if not NAME_PATTERN.match(name):
        return f"model name {name!r} must be lower-case letters, digits and '_', starting with a letter"
    if len(name) < MIN_NAME_LENGTH:
        return f"model name {name!r} is too short ({len(name)} < {MIN_NAME_LENGTH} characters): say what the model is"
    if name in GENERIC_NAMES or name.startswith("test_") or name.endswith("_test"):
        return f"model name {name!r} is generic: name the architecture and dataset, e.g. 'resnet18_sample_photos'"
    return None


def add_folder(folder) -> Path:
    """Register a model folder outside the zoo for this process (replacing an added folder of
    the same name); returns its path."""
    folder = Path(folder).resolve()
    _extra_folders[:] = [f for f in _extra_folders if f.name != folder.name] + [folder]
    return folder


def folders(added: bool = True) -> Dict[str, Path]:
    """Model name -> folder: the zoo's, then those under AGRAPH_MODELS_PATH, then (``added``)
    those of :func:`add_folder`; a later folder cannot shadow an earlier name."""
    found: Dict[str, Path] = {}
    for folder in sorted(ZOO_DIR.iterdir()):
        if folder.is_dir() and (folder / "model.py").is_file() and not folder.name.startswith(("_", ".")):
            found[folder.name] = folder
    user = [f for root in paths.user_model_roots() if root.is_dir() for f in sorted(root.iterdir())]
    for folder in user + (_extra_folders if added else []):
        if folder.is_dir() and (folder / "model.py").is_file() and folder.name not in found:
            found[folder.name] = folder.resolve()
    return found


def _import_file(module_name: str, path: Path) -> types.ModuleType:
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def import_folder(folder: Path, fresh: bool = False):
    """``(model module, eval module or None)`` of a model folder.  Zoo folders import as
    ``agraph.models.<name>``; others as ``agraph_user_models.<name>`` (relative imports work).
    ``fresh``: re-read a user folder's files even if imported before.  Errors while importing
    propagate as they are (check.py reports them)."""
    folder = Path(folder).resolve()
    if folder.parent == ZOO_DIR:
        package = f"agraph.models.{folder.name}"
        model = importlib.import_module(f"{package}.model")
        evaluate = importlib.import_module(f"{package}.eval") if (folder / "eval.py").is_file() else None
        return model, evaluate
    if _USER_PACKAGE not in sys.modules:
        root = types.ModuleType(_USER_PACKAGE)
        root.__path__ = []
        sys.modules[_USER_PACKAGE] = root
    package = f"{_USER_PACKAGE}.{folder.name}"
    module = sys.modules.get(package)
    if fresh or module is None or list(getattr(module, "__path__", [])) != [str(folder)]:
        for key in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
            del sys.modules[key]
        module = types.ModuleType(package)
        module.__path__ = [str(folder)]
        sys.modules[package] = module
    model = sys.modules.get(f"{package}.model") or _import_file(f"{package}.model", folder / "model.py")
    evaluate = None
    if (folder / "eval.py").is_file():
        evaluate = sys.modules.get(f"{package}.eval") or _import_file(f"{package}.eval", folder / "eval.py")
    return model, evaluate


def register_folder_dataset(folder: Path) -> Optional[str]:
    """Register the dataset of ``folder/dataset.json`` if there is one; returns its key."""
    path = Path(folder) / "dataset.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        spec = datasets.DatasetSpec(key=str(data["key"]), archive=str(data["archive"]),
                                    sha256=data.get("sha256"), description=str(data.get("description", "")),
                                    step="Your own dataset")
    except (ValueError, KeyError, TypeError) as e:
        raise RegistryError(f"{path}: not a valid dataset.json ({e!r}); it needs \"key\" and \"archive\"") from None
    datasets.register(spec, replace=True)
    return spec.key


def entry(name_or_folder) -> ModelEntry:
    """The registered model ``name`` (or the model folder at a path); RegistryError if it
    is unknown or its folder does not load."""
    text = str(name_or_folder)
    if "/" in text or (Path(text).is_dir() and (Path(text) / "model.py").is_file()):
        folder = Path(text).resolve()
        name = folder.name
        if folders(added=False).get(name, folder) != folder:
            raise RegistryError(f"model name {name!r} of {folder} is already taken by {folders()[name]}")
        add_folder(folder)
    else:
        name = text
        known = folders()
        if name not in known:
            raise RegistryError(f"unknown model {name!r}; `python -m agraph list` shows the "
                                f"{len(known)} registered models")
        folder = known[name]
    if not (folder / "model.py").is_file():
        raise RegistryError(f"{folder}: no model.py, not a model folder")
    register_folder_dataset(folder)
    try:
        model, evaluate = import_folder(folder)
    except Exception as e:
        raise RegistryError(f"model {name!r}: {folder} does not import: {type(e).__name__}: {e}") from e
    missing = [a for a in MODEL_ATTRIBUTES if not hasattr(model, a)]
    if missing or evaluate is None or not hasattr(evaluate, "evaluate"):
        raise RegistryError(f"model {name!r} ({folder}) breaks the folder rules "
                            f"(missing {missing or 'eval.py evaluate()'}): run `python -m agraph check {folder}`")
    return ModelEntry(name, folder, model, evaluate, builtin=folder.parent == ZOO_DIR)


def list_models(names: Sequence[str] = ()) -> List[ModelEntry]:
    """Entries of ``names`` (when empty: every model of the zoo and of AGRAPH_MODELS_PATH;
    folders used by path are not listed), in name order."""
    return [entry(n) for n in (names or sorted(folders(added=False)))]


def counts(entries: Sequence[ModelEntry]) -> Dict[str, int]:
    """Models per framework."""
    result = {f: 0 for f in FRAMEWORKS}
    for e in entries:
        result[e.framework] = result.get(e.framework, 0) + 1
    return result


def describe(e: ModelEntry) -> Dict[str, Any]:
    """One row of ``python -m agraph list``."""
    return {"name": e.name, "framework": e.framework, "dataset": e.dataset, "weights": e.weights,
            "input_shapes": e.input_shapes("full"), "test_input_shapes": e.model.TEST_INPUT_SHAPES,
            "folder": str(e.folder), "zoo": e.builtin}
