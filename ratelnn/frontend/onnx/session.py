"""``ratelnn.onnx_session``: ONNX Runtime with ratelnn's custom ops of the domain ``ratelnn``
(docs/onnx.md, "Custom ops").

ONNX Runtime loads custom-op libraries through its C API, whose headers neither its wheel
nor any package of the registries this project installs from ships.  So the custom ops run
beside ONNX Runtime instead of inside it: ONNX Runtime runs every standard node, split into
sub-models at the ratelnn nodes, and this session runs those nodes in between with the same
native code as the TensorFlow and MXNet ops:

- ``RatelMinMax`` (calibration model): a pass-through; the tensor is recorded into
  ``output_dir`` by the shared scan and statistics store (``ops/onnxruntime``), so the files
  are those of the other frameworks (docs/statistics.md);
- ``RatelEngineOp`` (compiled model): the engine set runs on the native executor
  (``ops/core``, through ``ratelnn.npu.native``), at any batch, and each run records its
  predicted device time under the node's ``engine_name`` (``ratelnn.npu.device_time``);
- ``RatelQuant`` (compiled model): the IR's ``Quant`` with its rounding mode
  (``QuantizeLinear`` only rounds half to even), by the same native loop as the other
  frameworks' quantize op (``ops/onnxruntime``).

A model without ratelnn nodes gets a plain ``onnxruntime.InferenceSession``.
"""
from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ...errors import ModelError
from ...frameworks import import_framework
from .model_io import DOMAIN, import_onnx, node_attrs
from ...runners import register_runner
from .runtime import onnx_session as _ort_session

_ERR_LEN = 1024


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def stage_options(threads: int):
    """``SessionOptions`` of the ONNX Runtime sessions that run between ratelnn's nodes:
    ``threads`` intra-op threads that block instead of spinning while waiting for work
    (``session.intra_op.allow_spinning`` 0).  By default ONNX Runtime's workers keep spinning
    on a core after a run, and here the native executor's own threads run next, on the same
    cores (measured on 2 cores: the engine's second thread got almost no CPU time)."""
    options = import_framework("onnxruntime").SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class _Stage:
    """The standard nodes computing ``targets`` from ``known`` tensors, as one ORT session
    (:func:`stage_options`)."""

    def __init__(self, model: Any, producers: Dict[str, Any], known: set, targets: Sequence[str], threads: int):
        self.threads = threads
        self.targets = [t for t in dict.fromkeys(targets) if t not in known]
        self.inputs: List[str] = []
        self.session = None
        if not self.targets:
            return
        inits = {t.name: t for t in model.graph.initializer}
        picked, seen, stack, inputs = [], set(), list(self.targets), []
        while stack:
            t = stack.pop()
            if t in seen or not t:
                continue
            seen.add(t)
            if t in known:
                inputs.append(t)
                continue
            if t in inits:
                continue
            node = producers.get(t)
            if node is None:
                raise ModelError(f"tensor {t!r} is neither an input nor produced in the model")
            if node.domain == DOMAIN:
                raise ModelError(f"internal: ratelnn node {node.name!r} reached out of order")
            if id(node) not in {id(n) for n in picked}:
                picked.append(node)
                stack.extend(node.input)
        order = {id(n): i for i, n in enumerate(model.graph.node)}
        picked.sort(key=lambda n: order[id(n)])
        self.inputs = sorted(set(inputs))
        self._parts = (model, picked, [inits[t] for t in seen if t in inits])

    def run(self, values: Dict[str, np.ndarray]) -> None:
        if not self.targets:
            return
        if self.session is None:   # made at the first run, when the inputs' types are known
            onnx = import_onnx()
            model, picked, used_inits = self._parts
            ins = [onnx.helper.make_tensor_value_info(t, onnx.helper.np_dtype_to_tensor_dtype(values[t].dtype),
                                                      [None] * values[t].ndim) for t in self.inputs]
            outs = [onnx.helper.make_value_info(t, onnx.TypeProto()) for t in self.targets]
            graph = onnx.helper.make_graph(picked, "stage", ins, outs, used_inits)
            sub = onnx.helper.make_model(graph, opset_imports=[o for o in model.opset_import if o.domain != DOMAIN])
            sub.ir_version = model.ir_version
            self.session = _ort_session(sub, stage_options(self.threads))
        outs = self.session.run(self.targets, {t: values[t] for t in self.inputs})
        values.update(zip(self.targets, outs))


class RatelSession:
    """Runs an ONNX model holding ratelnn nodes (see the module doc); ``run`` and
    ``get_inputs``/``get_outputs`` as ``onnxruntime.InferenceSession``."""

    def __init__(self, model: Any, intra_op_threads: int = 0):
        onnx = import_onnx()
        self.model = model
        self.threads = intra_op_threads or min(os.cpu_count() or 1, 8)
        g = model.graph
        self.producers = {t: n for n in g.node for t in n.output}
        self.custom = [n for n in g.node if n.domain == DOMAIN]
        unknown = [n for n in self.custom if n.op_type not in ("RatelMinMax", "RatelEngineOp", "RatelQuant")]
        if unknown:
            raise ModelError(f"node {unknown[0].name!r}: unknown ratelnn op {unknown[0].op_type!r}")
        self._engines: Dict[int, Any] = {}
        self._quants: Dict[int, "_NativeQuant"] = {}
        self._stages: Dict[tuple, List[_Stage]] = {}
        self._lib = None
        calibration = all(n.op_type == "RatelMinMax" for n in self.custom)
        self._float = _ort_session(_float_view(model), stage_options(self.threads)) if calibration else None
        self.output_names = [o.name for o in g.output]
        self._onnx = onnx

    # -- InferenceSession-like surface
    def get_inputs(self):
        return [_Arg(vi) for vi in self.model.graph.input
                if vi.name not in {t.name for t in self.model.graph.initializer}]

    def get_outputs(self):
        return [_Arg(vi) for vi in self.model.graph.output]

    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any], run_options: Any = None):
        fetches = list(output_names or self.output_names)
        feeds = {k: np.asarray(v) for k, v in input_feed.items()}
        if self._float is not None:
            return self._run_calibration(fetches, feeds)
        return self._run_staged(fetches, feeds)

    # -- calibration: one ORT session of the float model, then the statistics
    def _run_calibration(self, fetches: List[str], feeds: Dict[str, np.ndarray]):
        observed = [n.input[0] for n in self.custom]
        wanted = [self._alias(t) for t in fetches]
        names = [t for t in dict.fromkeys(wanted + observed) if t not in feeds]
        values = dict(zip(names, self._float.run(names, feeds))) if names else {}
        values.update(feeds)
        for node in self.custom:
            self._record(node, values[node.input[0]])
        return [values[t] for t in wanted]

    def _alias(self, tensor: str) -> str:
        """A RatelMinMax output is its input."""
        node = self.producers.get(tensor)
        while node is not None and node.op_type == "RatelMinMax" and node.domain == DOMAIN:
            tensor = node.input[0]
            node = self.producers.get(tensor)
        return tensor

    def _library(self):
        from ... import oplib
        if self._lib is None:
            self._lib = oplib.ort_init()
        return self._lib

    def _record(self, node: Any, x: np.ndarray) -> None:
        self._library()
        a = node_attrs(node)
        x = np.ascontiguousarray(x, np.float32)
        err = ctypes.create_string_buffer(_ERR_LEN)
        output_dir = os.path.abspath(_text(a["output_dir"]))
        rc = self._lib.ratelnn_ort_minmax_record(output_dir.encode(), _text(a["tensor_name"]).encode(),
                                                 x.ctypes.data, x.size, float(a.get("ema_decay", 0.9)), err, _ERR_LEN)
        if rc != 0:
            from ...errors import CalibrationError
            raise CalibrationError(err.value.decode(errors="replace"))

    # -- compiled: ORT stages between the ratelnn nodes
    def _run_staged(self, fetches: List[str], feeds: Dict[str, np.ndarray]):
        key = (tuple(fetches), tuple(sorted(feeds)))
        if key not in self._stages:
            known = set(feeds)
            stages = []
            for node in self.custom:
                stages.append(_Stage(self.model, self.producers, known, list(node.input), self.threads))
                known |= set(stages[-1].targets) | set(node.output)
            stages.append(_Stage(self.model, self.producers, known, fetches, self.threads))
            self._stages[key] = stages
        stages = self._stages[key]
        values = dict(feeds)
        for stage, node in zip(stages, self.custom):
            stage.run(values)
            outs = self._run_custom(node, [values[t] for t in node.input])
            values.update(zip(node.output, outs))
        stages[-1].run(values)
        return [values[t] for t in fetches]

    def _run_custom(self, node: Any, inputs: List[np.ndarray]) -> List[np.ndarray]:
        """One ratelnn node; the attributes of quantize and engine nodes are read at their
        first run only (an engine's are its engine bytes)."""
        if node.op_type == "RatelMinMax":
            self._record(node, inputs[0])
            return inputs
        if node.op_type == "RatelQuant":
            if id(node) not in self._quants:
                self._quants[id(node)] = _NativeQuant(node.name, node_attrs(node))
            return [self._quants[id(node)].run(self._library(), inputs[0], self.threads)]
        from ...npu.batching import decode_engine_set, run_engine_set
        if id(node) not in self._engines:
            a = node_attrs(node)
            name = _text(a.get("engine_name", node.name))
            engines = decode_engine_set(a["engine"], a.get("batch_engines", []), name)
            self._engines[id(node)] = (engines, _EngineTimer(self._library(), a, engines, name))
        engines, timer = self._engines[id(node)]
        arrays = [np.ascontiguousarray(x) for x in inputs]
        outs = run_engine_set(engines, arrays, backend="native", num_threads=self.threads)
        timer.record(arrays[0].shape[0])
        return outs


class _NativeQuant:
    """One RatelQuant node's attributes, parsed once, run by ``ratelnn_ort_quantize``."""

    def __init__(self, name: str, attrs: Mapping[str, Any]):
        self.name = name
        self.dtype = np.dtype(_text(attrs["dtype"]))
        self.round_mode = _text(attrs.get("round_mode", "half_away_from_zero")).encode()
        per_channel = "scales" in attrs
        self.scales = np.ascontiguousarray(attrs["scales"] if per_channel else [attrs["scale"]], np.float32)
        self.num_scales = len(self.scales) if per_channel else 0
        self.axis = int(attrs["axis"]) if per_channel else 0

    def run(self, lib: Any, x: np.ndarray, threads: int) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        q = np.empty(x.shape, self.dtype)
        dims = (ctypes.c_int64 * max(x.ndim, 1))(*x.shape)
        err = ctypes.create_string_buffer(_ERR_LEN)
        rc = lib.ratelnn_ort_quantize(x.ctypes.data, q.ctypes.data, dims, x.ndim, str(self.dtype).encode(),
                                      self.scales.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), self.num_scales,
                                      self.axis, self.round_mode, threads, err, _ERR_LEN)
        if rc != 0:
            raise ModelError(f"node {self.name!r}: {err.value.decode(errors='replace')}")
        return q


class _EngineTimer:
    """The device-time recorder of one ``RatelEngineOp`` node, in the ONNX Runtime op
    library's account (``ratelnn_ort_engine_timer_*``): the cycles the TensorFlow and MXNet
    engine ops record for the same engine set, cores and batch."""

    def __init__(self, lib: Any, attrs: Mapping[str, Any], engines: Sequence[Any], name: str):
        blobs = [bytes(attrs["engine"]), *(bytes(b) for b in attrs.get("batch_engines", []))]
        cores = attrs.get("core_ids") or list(engines[0].proto.core_ids)
        device = int(attrs.get("device_id", engines[0].proto.device_id))
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERR_LEN)
        rc = lib.ratelnn_ort_engine_timer_create((ctypes.c_char_p * len(blobs))(*blobs),
                                                 (ctypes.c_int64 * len(blobs))(*map(len, blobs)), len(blobs),
                                                 name.encode(), device, len(cores), ctypes.byref(handle),
                                                 err, _ERR_LEN)
        if rc != 0:
            raise ModelError(err.value.decode(errors="replace"))
        self._lib, self._handle = lib, handle
        self._free = weakref.finalize(self, lib.ratelnn_ort_engine_timer_free, handle)

    def record(self, batch: int) -> None:
        """Adds one run of ``batch`` samples."""
        err = ctypes.create_string_buffer(_ERR_LEN)
        if self._lib.ratelnn_ort_engine_timer_record(self._handle, int(batch), err, _ERR_LEN) != 0:
            raise ModelError(err.value.decode(errors="replace"))


class _Arg:
    def __init__(self, vi: Any):
        self.name = vi.name
        self.shape = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def _float_view(model: Any) -> Any:
    """``model`` with each RatelMinMax node an Identity (the pass-through it is)."""
    onnx = import_onnx()
    view = onnx.ModelProto()
    view.CopyFrom(model)
    for node in view.graph.node:
        if node.domain == DOMAIN and node.op_type == "RatelMinMax":
            node.op_type, node.domain = "Identity", ""
            del node.attribute[:]
    outputs = {o.name for o in view.graph.output} | {i.name for i in view.graph.input}
    for node in model.graph.node:   # the observed tensors, fetched for the statistics
        if node.domain == DOMAIN and node.op_type == "RatelMinMax" and node.input[0] not in outputs:
            view.graph.output.add().name = node.input[0]
            outputs.add(node.input[0])
    kept = [o for o in view.opset_import if o.domain != DOMAIN]
    del view.opset_import[:]
    view.opset_import.extend(kept)
    return view


def onnx_session(model: Any, intra_op_threads: int = 0):
    """A session that runs ``model`` (``onnx.ModelProto``, bytes or path) with ratelnn's
    custom ops of the domain ``ratelnn`` (calibration, compiled models): the one call that
    makes them runnable.  A model without them gets a plain ``onnxruntime.InferenceSession``."""
    onnx = import_onnx()
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model))
    elif isinstance(model, bytes):
        proto = onnx.ModelProto()
        proto.ParseFromString(model)
        model = proto
    if any(n.domain == DOMAIN for n in model.graph.node):
        return RatelSession(model, intra_op_threads)
    return _ort_session(model, intra_op_threads=intra_op_threads)


class ONNXRunner:
    """An ONNX model in one ONNX Runtime session; ``run`` feeds by input name and fetches
    tensor names (graph outputs, or any intermediate tensor, which it adds as an output)."""

    def __init__(self, model: Any) -> None:
        onnx = import_onnx()
        if not isinstance(model, onnx.ModelProto):
            raise ModelError(f"an ONNX model must be an onnx.ModelProto, got {type(model).__name__}")
        self.model = model
        self.sessions: Dict[tuple, Any] = {}

    def _session(self, fetches: Sequence[str]):
        outputs = {o.name for o in self.model.graph.output}
        extra = tuple(sorted(set(fetches) - outputs))
        if extra not in self.sessions:
            model = self.model
            if extra:
                model = type(self.model)()
                model.CopyFrom(self.model)
                known = {t for n in model.graph.node for t in n.output}
                unknown = [t for t in extra if t not in known]
                if unknown:
                    raise ModelError(f"the ONNX model has no tensor {unknown[0]!r}")
                for t in extra:
                    model.graph.output.add().name = t
            self.sessions[extra] = onnx_session(model)
        return self.sessions[extra]

    def run(self, feeds: Mapping[str, np.ndarray], fetches: Sequence[str]) -> List[np.ndarray]:
        session = self._session(fetches)
        inputs = {i.name for i in session.get_inputs()}
        unknown = [k for k in feeds if k not in inputs]
        if unknown:
            raise ModelError(f"the ONNX model has no input {unknown[0]!r}; inputs: {sorted(inputs)}")
        return list(session.run(list(fetches), dict(feeds)))

    def close(self) -> None:
        self.sessions.clear()


register_runner("onnx", ONNXRunner)
