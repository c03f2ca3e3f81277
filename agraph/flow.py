"""The high-level flow over ``ratelnn``'s converters (docs/agraph.md, "Usage"):
:func:`load` (FP32), :func:`quantize`, :func:`compile`, :func:`get` (a stage from the store,
built on first use), :func:`evaluate` and :func:`eval_model`.

Every built model goes into the store (:mod:`agraph.store`) keyed by a hash of its folder's
source, the input size and the quantization options, so a second call reuses it.  Calibration
runs the calibration model over the first ``calibration_samples`` samples of the model's own
dataset (the original SDK's ``eval_model(graph_cal)``); statistics go to
``$AGRAPH_HOME/work/<name>[-test]/stats``.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

import ratelnn
from ratelnn.calibration.progress import Progress
from ratelnn.runners import run_model

from . import datasets, paths, registry
from .errors import AGraphError, RegistryError, RuleError, StoreError
from .metrics import STAGES, ModelMetrics
from .store import Store

CALIBRATION_SAMPLES = 256
BATCH_SIZE = 32
ENGINE_OPS = ("RatelEngineOp", "_ratel_engine_op", "ratel_engine_op")
QUANT_OPS = ("RatelQuant", "_ratel_quant", "ratel_quant", "QuantizeLinear")


@dataclasses.dataclass
class Model:
    """A zoo model at one stage: ``graph`` is a GraphDef (TensorFlow), ``(symbol,
    arg_params, aux_params)`` (MXNet) or an ``onnx.ModelProto`` (ONNX); ``files`` its files
    in the store."""

    entry: registry.ModelEntry
    stage: str
    size: str
    graph: Any
    files: List[Path]

    @property
    def name(self) -> str:
        return self.entry.name

    def input_shapes(self, batch: Optional[int] = None) -> List[List[int]]:
        shapes = self.entry.input_shapes(self.size)
        return [[batch or s[0]] + list(s[1:]) for s in shapes]

    def runner(self) -> Callable[[List[np.ndarray]], List[np.ndarray]]:
        """``run(inputs) -> outputs``: the model on numpy inputs (one per INPUTS) in its framework."""
        framework, inputs, outputs = self.entry.framework, self.entry.inputs, self.entry.outputs
        _init(framework)

        def run(arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
            arrays = [arrays] if isinstance(arrays, np.ndarray) else list(arrays)
            if len(arrays) != len(inputs):
                raise AGraphError(f"model {self.name!r} takes {len(inputs)} inputs {inputs}, got {len(arrays)}")
            feeds = {name: np.asarray(a, dtype=np.float32) for name, a in zip(inputs, arrays)}
            return run_model(framework, self.graph, feeds, outputs)
        return run


def _init(framework: str) -> None:
    """Load the framework's op library (ONNX: ``ratelnn.onnx_session`` loads its own)."""
    if framework != "onnx":
        (ratelnn.tf_init if framework == "tensorflow" else ratelnn.mx_init)()


def _entry(name_or_model) -> registry.ModelEntry:
    return name_or_model.entry if isinstance(name_or_model, Model) else registry.entry(name_or_model)


@functools.lru_cache(maxsize=1)
def ratelnn_fingerprint() -> str:
    """sha256 of ratelnn's Python sources and C++ op sources (``ops/`` beside the package, or
    the wheel's ``_ops_src``): a stored quantized or compiled model is reused only by the
    ratelnn that made it."""
    package = Path(ratelnn.__file__).resolve().parent
    roots = [package, package.parent / "ops", package / "_ops_src"]
    h = hashlib.sha256(ratelnn.__version__.encode())
    for root in roots:
        for f in sorted(root.rglob("*")) if root.is_dir() else []:
            if f.suffix in (".py", ".cc", ".h", ".inc", ".proto") and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(root.parent)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _key(entry: registry.ModelEntry, stage: str, size: str, options: Dict[str, Any]) -> str:
    text = json.dumps({"source": entry.source_hash(), "stage": stage, "size": size,
                       "ratelnn": ratelnn_fingerprint() if stage != "fp32" else "",
                       "options": options if stage != "fp32" else {}},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


model_file_names = registry.model_file_names


def _read(framework: str, files: Sequence[Path]) -> Any:
    if framework == "tensorflow":
        from ratelnn.frontend.tensorflow.model_io import read_graphdef
        return read_graphdef(str(files[0]))
    if framework == "onnx":
        from ratelnn.frontend.onnx.model_io import import_onnx
        return import_onnx().load(str(files[0]))
    from ratelnn.frontend.mxnet.model_io import load_checkpoint
    (symbol,) = [str(f) for f in files if str(f).endswith("-symbol.json")]
    return load_checkpoint(symbol[: -len("-symbol.json")])


def _write(framework: str, graph: Any, folder: Path, base: str) -> List[Path]:
    if framework in ("tensorflow", "onnx"):
        (path,) = [folder / f for f in model_file_names(base, framework)]
        path.write_bytes(graph.SerializeToString(deterministic=True))
        return [path]
    from ratelnn.frontend.mxnet.model_io import save_model
    return [Path(p) for p in save_model(graph, str(folder / base))]


def build_fp32(entry: registry.ModelEntry, size: str, workdir: Path) -> List[Path]:
    """Run the folder's ``build()`` into ``workdir`` and check the files it names (rule 5)."""
    kwargs = {"input_shapes": entry.input_shapes(size)} if size == "test" else {}
    written = [Path(p) for p in entry.model.build(workdir, **kwargs)]
    expected = model_file_names(entry.name, entry.framework)
    names = sorted(p.name for p in written)
    if names != sorted(expected) or not all(p.is_file() for p in written):
        raise RuleError(f"model {entry.name!r}: build() wrote {names}, expected files named after the "
                        f"model: {expected} (docs/agraph.md, rule 5)")
    return [workdir / n for n in expected]


def load(name_or_folder, size: str = "full", store: Optional[Store] = None) -> Model:
    """The FP32 model ``name`` (a registered name or a model folder path), from the store or
    built (and stored) on first use.  ``size``: "full" or "test" (TEST_INPUT_SHAPES)."""
    return get(name_or_folder, "fp32", size=size, store=store)


def work_dir(entry: registry.ModelEntry, size: str) -> Path:
    return paths.home() / "work" / (entry.name if size == "full" else f"{entry.name}-{size}")


def _reduced(entry: registry.ModelEntry, size: str):
    """The TEST_INPUT_SHAPES when ``size`` is "test" and the model has them, else None."""
    return entry.input_shapes("test") if size == "test" and entry.model.TEST_INPUT_SHAPES else None


def preprocess_for(entry: registry.ModelEntry, size: str = "full"):
    """The model's ``preprocess``; at a reduced size, with ``input_shapes=`` the reduced
    shapes (a model whose input size follows its build shapes takes that keyword)."""
    shapes = _reduced(entry, size)
    if shapes is None:
        return entry.model.preprocess
    return lambda samples: entry.model.preprocess(samples, input_shapes=shapes)


def calibration_data(entry: registry.ModelEntry, samples: int, batch_size: int, size: str = "full"):
    """Preprocessed inputs of the first ``samples`` calibration samples of the model's dataset
    (its held-out calibration part when it has one, else its first samples): an array (one
    input) or a dict input name -> array."""
    dataset = datasets.get(entry.dataset)
    preprocess = preprocess_for(entry, size)
    chunks = [_as_list(preprocess(x)) for x, _ in dataset.calibration_batches(batch_size, samples)]
    arrays = [np.concatenate([c[i] for c in chunks]) for i in range(len(entry.inputs))]
    return arrays[0] if len(arrays) == 1 else dict(zip(entry.inputs, arrays))


def _as_list(x) -> List[np.ndarray]:
    return [x] if isinstance(x, np.ndarray) else list(x)


def converter_config(model: Model, batch_size: int = BATCH_SIZE,
                     config: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The converter config of a zoo model: its inputs, outputs and shapes at ``batch_size``,
    engines named after it, statistics under :func:`work_dir`, plus the model's optional
    ``CONVERTER_CONFIG`` (model.py) and ``config`` (which wins)."""
    return {"input_nodes": model.entry.inputs, "output_nodes": model.entry.outputs,
            "input_shapes": model.input_shapes(batch_size), "model_name": model.entry.name,
            "output_dir": str(work_dir(model.entry, model.size) / "stats"),
            **getattr(model.entry.model, "CONVERTER_CONFIG", {}), **(config or {})}


def converter(model: Model, batch_size: int = BATCH_SIZE, config: Optional[Dict[str, Any]] = None):
    """The ``ratelnn`` converter of an FP32 model (:func:`converter_config`)."""
    return framework_converter(model.entry.framework)(model.graph, converter_config(model, batch_size, config))


def framework_converter(framework: str):
    """``converter`` of the ratelnn frontend of ``framework``."""
    if framework == "tensorflow":
        from ratelnn.frontend.tensorflow import converter
    elif framework == "onnx":
        from ratelnn.frontend.onnx import converter
    else:
        from ratelnn.frontend.mxnet import converter
    return converter


def _options(calibration_samples: int, batch_size: int, config: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return {"calibration_samples": calibration_samples, "batch_size": batch_size, "config": config or {}}


def get(name_or_model, stage: str = "npu", *, size: str = "full", build: bool = True,
        calibration_samples: int = CALIBRATION_SAMPLES, batch_size: int = BATCH_SIZE,
        config: Optional[Dict[str, Any]] = None, executor: Any = None, progress: bool = True,
        store: Optional[Store] = None, force: bool = False) -> Model:
    """The model at ``stage`` ("fp32" | "quant" | "npu") from the store; if it is not there
    (or was built from other sources or options) and ``build``, built and stored first.
    ``config``: extra converter keys (e.g. ``quantize_algorithm``); ``executor``: passed to
    ``calibrate`` (e.g. a ``ratelnn.distributed.RayExecutor``); ``force``: rebuild this stage
    and those it needs even if stored (a stored file that fails its checksum is an error
    otherwise)."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    store = store or Store()
    entry = _entry(name_or_model)
    options = _options(calibration_samples, batch_size, config)
    key = _key(entry, stage, size, options)
    files = None if force else store.lookup(entry.name, stage, size, key)
    if files is None:
        if not build:
            raise RegistryError(f"the store {store.root} holds no {stage} model of {entry.name!r} "
                                f"({size} size) built from its current sources; build it with "
                                f"`python -m agraph build {entry.name}` or import a store archive")
        with tempfile.TemporaryDirectory(dir=_tmp_parent(store)) as tmp:
            written = _build_stage(entry, stage, size, Path(tmp), options, executor, progress, store, force)
            meta = {"framework": entry.framework, "dataset": entry.dataset, "weights": entry.weights,
                    "options": options if stage != "fp32" else {}}
            files = store.put(entry.name, stage, size, key, written, meta)
    by_name = {f.name: f for f in files}
    expected = model_file_names(entry.name, entry.framework)
    if sorted(by_name) != sorted(expected):
        raise StoreError(f"store entry {store.entry_dir(entry.name, stage, size)} holds {sorted(by_name)}, "
                         f"expected {expected}; rebuild with `python -m agraph build {entry.name} --force`")
    files = [by_name[n] for n in expected]  # symbol before params
    return Model(entry, stage, size, _read(entry.framework, files), files)


def _tmp_parent(store: Store) -> str:
    store.root.mkdir(parents=True, exist_ok=True)
    return str(store.root)


def _build_stage(entry, stage, size, tmp: Path, options, executor, progress, store, force) -> List[Path]:
    if stage == "fp32":
        return build_fp32(entry, size, tmp)
    fp32 = get(entry.name, "fp32", size=size, store=store, force=force)
    conv = converter(fp32, options["batch_size"], options["config"])
    if stage == "quant":
        stats = Path(conv.config["output_dir"])
        if stats.exists():
            shutil.rmtree(stats)
        data = calibration_data(entry, options["calibration_samples"], options["batch_size"], size)
        conv.calibrate(data, progress=progress, executor=executor)
        return _write(entry.framework, conv.to_quant(), tmp, entry.name)
    quant = get(entry.name, "quant", size=size, store=store, executor=executor, progress=progress, force=force,
                **{k: options[k] for k in ("calibration_samples", "batch_size", "config")})
    return _write(entry.framework, conv.to_npu(quant.graph), tmp, entry.name)


def quantize(name_or_model, **kwargs) -> Any:
    """The quantized model (GraphDef or MXNet tuple) of a zoo model: calibrated on its dataset,
    ``to_quant``; keyword arguments as :func:`get`."""
    return get(name_or_model, "quant", **kwargs).graph


def compile(name_or_model, **kwargs) -> Any:  # noqa: A001 - the contract's name
    """The compiled model (engines inside) of a zoo model; keyword arguments as :func:`get`."""
    return get(name_or_model, "npu", **kwargs).graph


def npu_figures(graph_npu: Any) -> Dict[str, Any]:
    """Cost-model figures of a compiled model: ``latency_ms`` of one sample, ``throughput_fps``
    with all cores of its device, ``engines``."""
    from ratelnn.profile import model_engines, profile

    engines = model_engines(graph_npu)
    if not engines:
        return {"engines": 0}
    p = profile(graph_npu, batch_size=1)
    return {"latency_ms": p.latency_s * 1e3, "throughput_fps": p.throughput, "engines": len(engines),
            "device": int(engines[0][1].proto.device_id)}


def stage_of(framework: str, graph: Any) -> str:
    """"npu" if ``graph`` holds engines, "quant" if it holds Quant ops (an ONNX model:
    ``QuantizeLinear``), else "fp32"."""
    if framework == "tensorflow":
        ops = {n.op for n in graph.node}
    elif framework == "onnx":
        ops = {n.op_type for n in graph.graph.node}
    else:
        ops = {n["op"] for n in json.loads(graph[0].tojson())["nodes"]}
    if ops & set(ENGINE_OPS):
        return "npu"
    return "quant" if ops & set(QUANT_OPS) else "fp32"


def _on_executor(executor, entry, dataset, model_graph, reference_graph, run, reference, stage, size, limit,
                 batch_size, progress):
    """``(run, reference)`` answering the dataset's batches from outputs computed on ``executor``."""
    from .parallel import Replay, outputs_on

    preprocess = preprocess_for(entry, size)
    batches = [[np.asarray(a, dtype=np.float32) for a in _as_list(preprocess(x))]
               for x, _ in dataset.batches(batch_size, limit)]
    outputs = outputs_on(executor, entry.framework, model_graph, entry.inputs, entry.outputs, batches,
                         f"{entry.name} {stage}", progress)
    run = Replay(zip(batches, outputs), run)
    if reference_graph is not None:
        ref_outputs = outputs_on(executor, entry.framework, reference_graph, entry.inputs, entry.outputs,
                                 batches, f"{entry.name} fp32 reference", progress)
        reference = Replay(zip(batches, ref_outputs), reference)
    return run, reference


class _LastOutputs:
    """``run`` that remembers its last inputs and outputs; :meth:`again` answers the same
    inputs from memory and runs any others."""

    def __init__(self, run) -> None:
        self.run, self.last = run, (None, None)

    def __call__(self, inputs):
        outputs = self.run(inputs)
        self.last = (inputs, outputs)
        return outputs

    def again(self, inputs):
        last_inputs, outputs = self.last
        if last_inputs is not None and len(last_inputs) == len(inputs) and \
                all(a is b for a, b in zip(last_inputs, inputs)):
            return outputs
        return self.run(inputs)


def _progress_run(run, total: int, label: str, enabled: bool):
    bar = Progress(total, label, enabled=enabled)

    def wrapped(inputs):
        out = run(inputs)
        bar.update()
        return out
    return wrapped, bar


def evaluate_graph(entry: registry.ModelEntry, model_graph: Any, stage: str, size: str = "full",
                   limit: Optional[int] = None, batch_size: int = BATCH_SIZE, progress: bool = False,
                   reference_graph: Any = None, executor: Any = None) -> ModelMetrics:
    """Run ``entry``'s ``evaluate()`` on ``model_graph`` (any form) at ``stage``; the
    reference is ``reference_graph`` (the FP32 model), or the model itself when None.
    ``executor``: compute the model's (and reference's) outputs of every dataset batch on
    it first (:mod:`agraph.parallel`); the metrics are the same."""
    dataset = datasets.get(entry.dataset)
    run = Model(entry, stage, size, model_graph, []).runner()
    reference = None if reference_graph is None else Model(entry, "fp32", size, reference_graph, []).runner()
    if executor is not None:
        run, reference = _on_executor(executor, entry, dataset, model_graph, reference_graph, run, reference,
                                      stage, size, limit, batch_size, progress)
    run = _LastOutputs(run)
    # at fp32 the reference is the model itself: reuse the outputs of the same inputs
    reference = run.again if reference is None else reference
    wrapped, bar = _progress_run(run, dataset.num_batches(batch_size, limit),
                                 f"{entry.name} {stage}", progress)
    start = time.perf_counter()
    with bar:
        shapes = _reduced(entry, size)
        if shapes is not None and hasattr(entry.eval, "evaluate_at"):  # the model at its reduced size
            result = entry.eval.evaluate_at(shapes, wrapped, dataset, stage, limit=limit, batch_size=batch_size,
                                            reference=reference)
        else:
            result = entry.eval.evaluate(wrapped, dataset, stage, limit=limit, batch_size=batch_size,
                                         reference=reference)
    wall = time.perf_counter() - start
    if not isinstance(result, ModelMetrics):
        raise RuleError(f"model {entry.name!r}: evaluate() returned {type(result).__name__}, "
                        "not agraph.metrics.ModelMetrics (docs/agraph.md, rule 4)")
    result.wall_time_s = wall
    if stage == "npu":
        result.npu = npu_figures(model_graph)
    return result


def evaluate(name_or_model, stage: str = "fp32", *, limit: Optional[int] = None,
             batch_size: int = BATCH_SIZE, size: str = "full", progress: bool = True,
             executor: Any = None, store: Optional[Store] = None, **build_options) -> ModelMetrics:
    """Evaluate a zoo model at ``stage`` on (the first ``limit`` samples of) its dataset with
    its ``evaluate()``; builds the stage on first use.  Fills ``wall_time_s`` and, for "npu",
    the cost-model figures.  ``executor`` (a ``ratelnn.distributed.RayExecutor``) runs the
    model's batches on its workers; the metrics are the same (docs/agraph.md, "Evaluation on
    Ray").  To calibrate on it, build the stage first with ``get(..., executor=)``."""
    # calibration stays in this process: a RayExecutor's calibration actors keep the CPUs that
    # the evaluation's map_blocks tasks then wait for (docs/agraph.md, "Evaluation on Ray")
    model = get(name_or_model, stage, size=size, progress=progress, store=store, **build_options)
    reference = None if stage == "fp32" else get(model.entry.name, "fp32", size=size, store=store).graph
    return evaluate_graph(model.entry, model.graph, stage, size, limit, batch_size, progress, reference,
                          executor)


def eval_model(graph: Any, name: str, *, stage: Optional[str] = None, limit: Optional[int] = None,
               batch_size: int = BATCH_SIZE, size: str = "full", progress: bool = True,
               store: Optional[Store] = None) -> ModelMetrics:
    """Run any form of zoo model ``name`` (``graph``: e.g. a calibration model from
    ``to_cal()``, a quantized or compiled one) over its dataset with its ``evaluate()``.
    ``stage`` defaults to what ``graph`` holds (a calibration model counts as "fp32")."""
    entry = _entry(name)
    stage = stage or stage_of(entry.framework, graph)
    reference = get(entry.name, "fp32", size=size, store=store).graph
    return evaluate_graph(entry, graph, stage, size, limit, batch_size, progress, reference)
