"""The add-model rules (docs/agraph.md, "Adding a model"): :func:`check` validates a model
folder and returns one :class:`Violation` per broken rule, each with its own message.

1. name: the folder name is the model name: lower-case ``[a-z0-9_]``, at least 6 characters,
   not generic (``test_image``, ``my_model``...), not already taken by another model.
2. files: the folder holds ``model.py`` and ``eval.py``.
3. model.py: it imports and declares NAME (== folder name), FRAMEWORK, DATASET, WEIGHTS,
   INPUTS, OUTPUTS, INPUT_SHAPES, TEST_INPUT_SHAPES, build(), preprocess() with valid values.
4. eval.py: ``evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None)``,
   exactly, returning a ModelMetrics.
5. model files: named after the model, ``<name>.pb``, ``<name>-symbol.json`` +
   ``<name>-0000.params`` or ``<name>.onnx``, in the folder and as build() writes them.
6. dataset: DATASET is registered (the zoo's, or the folder's ``dataset.json``), packed as a
   ``.tar``/``.tgz``, present and intact under AGRAPH_DATA_DIR.
7. run: build() and evaluate() on 2 samples at fp32 work and give a ModelMetrics of this
   model, dataset and stage (skipped with ``static=True``).
"""
from __future__ import annotations

import dataclasses
import inspect
import tempfile
import traceback
from pathlib import Path
from typing import List

from . import datasets, registry
from .errors import AGraphError, RegistryError

RULES = {1: "name", 2: "files", 3: "model.py", 4: "eval.py", 5: "model files", 6: "dataset", 7: "run"}
EVALUATE_SIGNATURE = "(run, dataset, stage, *, limit=None, batch_size=32, reference=None)"
MODEL_SUFFIXES = (".pb", ".params", "-symbol.json", ".onnx", ".h5", ".keras", ".tflite")


@dataclasses.dataclass(frozen=True)
class Violation:
    rule: int
    message: str

    def __str__(self) -> str:
        return f"rule {self.rule} ({RULES[self.rule]}): {self.message}"


def _reference_signature() -> inspect.Signature:
    def evaluate(run, dataset, stage, *, limit=None, batch_size=32, reference=None):
        pass
    return inspect.signature(evaluate)


def _shapes_ok(shapes, n: int) -> bool:
    return (isinstance(shapes, (list, tuple)) and len(shapes) == n and
            all(isinstance(s, (list, tuple)) and s and all(isinstance(d, int) and d > 0 for d in s)
                for s in shapes))


def _check_model_module(model, name: str) -> List[Violation]:
    found = []
    missing = [a for a in registry.MODEL_ATTRIBUTES if not hasattr(model, a)]
    if missing:
        return [Violation(3, f"model.py does not define {', '.join(missing)}")]
    if model.NAME != name:
        found.append(Violation(3, f"NAME = {model.NAME!r} differs from the folder name {name!r}"))
    if model.FRAMEWORK not in registry.FRAMEWORKS:
        found.append(Violation(3, f"FRAMEWORK = {model.FRAMEWORK!r}, expected one of {registry.FRAMEWORKS}"))
    if model.WEIGHTS not in registry.WEIGHT_SOURCES:
        found.append(Violation(3, f"WEIGHTS = {model.WEIGHTS!r}, expected one of {registry.WEIGHT_SOURCES}"))
    for attr in ("INPUTS", "OUTPUTS"):
        value = getattr(model, attr)
        if not (isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v for v in value)):
            found.append(Violation(3, f"{attr} = {value!r} must be a non-empty list of node names"))
    n = len(model.INPUTS) if isinstance(model.INPUTS, (list, tuple)) else -1
    if not _shapes_ok(model.INPUT_SHAPES, n):
        found.append(Violation(3, f"INPUT_SHAPES = {model.INPUT_SHAPES!r} must be one list of positive "
                                  f"ints per input ({n} inputs)"))
    if model.TEST_INPUT_SHAPES is not None and not _shapes_ok(model.TEST_INPUT_SHAPES, n):
        found.append(Violation(3, f"TEST_INPUT_SHAPES = {model.TEST_INPUT_SHAPES!r} must be None or one "
                                  f"list of positive ints per input"))
    for attr in ("build", "preprocess"):
        if not callable(getattr(model, attr)):
            found.append(Violation(3, f"{attr} must be a function"))
    return found


def _check_eval_module(evaluate_module) -> List[Violation]:
    evaluate = getattr(evaluate_module, "evaluate", None)
    if not callable(evaluate):
        return [Violation(4, "eval.py does not define evaluate()")]
    try:
        signature = inspect.signature(evaluate)
    except (TypeError, ValueError):
        return [Violation(4, "evaluate is not a Python function")]
    if signature.replace(return_annotation=inspect.Signature.empty) != _reference_signature() and \
            _plain(signature) != _plain(_reference_signature()):
        return [Violation(4, f"evaluate{_plain(signature)} differs from the shared signature "
                             f"evaluate{EVALUATE_SIGNATURE}")]
    return []


def _plain(signature: inspect.Signature) -> str:
    """The signature without annotations, as text."""
    params = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=params, return_annotation=inspect.Signature.empty))


def _check_model_files(folder: Path, name: str) -> List[Violation]:
    allowed = {f"{name}.pb", f"{name}-symbol.json", f"{name}-0000.params", f"{name}.onnx"}
    return [Violation(5, f"{f.name} is a model file not named after the model (expected "
                         f"{name}.pb, {name}-symbol.json + {name}-0000.params or {name}.onnx)")
            for f in sorted(folder.iterdir())
            if f.is_file() and f.name.endswith(MODEL_SUFFIXES) and f.name not in allowed]


def _check_dataset(folder: Path, model) -> List[Violation]:
    try:
        registry.register_folder_dataset(folder)
    except RegistryError as e:
        return [Violation(6, str(e))]
    key = getattr(model, "DATASET", None)
    if key not in datasets.DATASETS:
        return [Violation(6, f"DATASET = {key!r} is not registered (zoo datasets: "
                             f"{', '.join(sorted(datasets.DATASETS))}); add a dataset.json to the folder")]
    try:
        datasets.get(key)
    except AGraphError as e:
        return [Violation(6, str(e))]
    return []


def _check_run(folder: Path, name: str, model) -> List[Violation]:
    from . import flow

    try:
        entry = registry.entry(folder)
        size = "test" if model.TEST_INPUT_SHAPES else "full"
        with tempfile.TemporaryDirectory() as tmp:
            try:
                files = flow.build_fp32(entry, size, Path(tmp))
            except AGraphError as e:
                return [Violation(5, str(e))]
            graph = flow._read(entry.framework, files)
            result = flow.evaluate_graph(entry, graph, "fp32", size, limit=2, batch_size=2)
    except AGraphError as e:
        return [Violation(7 if "ModelMetrics" not in str(e) else 4, str(e))]
    except Exception as e:  # the model's own code failed: report where
        where = traceback.extract_tb(e.__traceback__)[-1]
        return [Violation(7, f"build/evaluate failed: {type(e).__name__}: {e} ({where.filename}:{where.lineno})")]
    wrong = [f"{k} {getattr(result, k)!r} (expected {v!r})"
             for k, v in (("model", name), ("dataset", model.DATASET), ("stage", "fp32"))
             if getattr(result, k) != v]
    if wrong:
        return [Violation(4, f"evaluate() returned a ModelMetrics with {', '.join(wrong)}")]
    return []


def check(folder, static: bool = False) -> List[Violation]:
    """Every rule ``folder`` breaks (empty: the folder may join the zoo).  ``static``: skip
    rule 7 (building and running the model)."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        return [Violation(2, f"{folder} is not a folder")]
    name = folder.name
    found = []
    reason = registry.valid_name(name)
    if reason:
        found.append(Violation(1, reason))
    taken = registry.folders(added=False).get(name)
    if taken is not None and taken.resolve() != folder:
        found.append(Violation(1, f"model name {name!r} is already taken by {taken}"))
    for fname in ("model.py", "eval.py"):
        if not (folder / fname).is_file():
            found.append(Violation(2, f"{folder} has no {fname}"))
    found += _check_model_files(folder, name)
    if any(v.rule == 2 for v in found):
        return found
    try:
        model, evaluate_module = registry.import_folder(folder, fresh=True)
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        return found + [Violation(3, f"model.py or eval.py does not import: {type(e).__name__}: {e} "
                                     f"({where.filename}:{where.lineno})")]
    model_violations = _check_model_module(model, name)
    found += model_violations + _check_eval_module(evaluate_module)
    found += _check_dataset(folder, model)
    if not static and not found:
        found += _check_run(folder, name, model)
    return found
