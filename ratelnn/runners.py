"""Run a framework model (float, calibration, quantized or compiled form) on numpy feeds.

:func:`run_model` is the one entry point: ``run_model(framework, model, feeds, fetches)``
returns one array per fetch.  The framework objects it builds are cached per model object,
so calling it batch after batch reuses them:

- TensorFlow: the GraphDef is imported once into a ``tf.Graph`` run by one
  ``tf.compat.v1.Session`` (kept for the lifetime of the cache entry).  A compiled model whose
  every op runs on the NPU (:func:`runs_on_caller_thread`) is run on the calling thread
  (:func:`tf_session_options`): no hand-off to TensorFlow's inter-op pool per call.  Grappler
  optimizes each graph in one round, not TensorFlow's default two (:func:`tf_session_options`).
- MXNet: the ``(symbol, arg_params, aux_params)`` tuple is bound once per set of input
  shapes (an executor per shape set).

The cache holds the last :data:`CACHE_SIZE` models by identity: a model object changed in
place after a first run keeps running as it was; pass a new object (or call
:func:`clear_cache`) to run the changed model.
"""
from __future__ import annotations

import atexit
import collections
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import ModelError
from .frameworks import import_tensorflow

FRAMEWORKS = ("tensorflow", "mxnet", "onnx")
CACHE_SIZE = 4


def _tensor_name(name: str) -> str:
    """TensorFlow tensor name of a node or tensor name: ``"x"`` -> ``"x:0"``."""
    return name if ":" in name else name + ":0"


# The ops of a compiled model that runs wholly on the NPU: the engines, the quantize /
# dequantize at their borders, and what carries no work.
NPU_ONLY_OPS = frozenset({"Placeholder", "Const", "Identity", "NoOp", "RatelQuant", "RatelDequant", "RatelEngineOp"})


def runs_on_caller_thread(graph_def: Any) -> bool:
    """Whether ``graph_def`` is a compiled model with all its work in one RatelEngineOp node
    (plus the Quant/Dequant at its borders): a handful of ops in a chain, where TensorFlow's
    own advice is to run ``Session::Run`` on the calling thread, since handing each call to
    the inter-op pool costs about as much as the run's other overhead (~75 us of ~190 per
    call on 2 vCPUs, docs/benchmarks.md).  Several engines (a joint graph) may run side by
    side on the inter-op pool, so they keep TensorFlow's defaults."""
    ops = [node.op for node in graph_def.node]
    return ops.count("RatelEngineOp") == 1 and set(ops) <= NPU_ONLY_OPS


def tf_session_options(graph_def: Any, intra_op_threads: int = 0, inter_op_threads: int = 0):
    """``(ConfigProto, RunOptions or None)`` to run ``graph_def`` with: Grappler's optimizers
    in one round (TensorFlow's default runs them twice: on a deep graph the second round costs
    about as much as the first and finds little in a frozen graph, docs/benchmarks.md "Pass
    scaling"); for a model that :func:`runs_on_caller_thread`, a session inter-op pool and
    RunOptions that run each call on the calling thread (``inter_op_thread_pool=-1``);
    otherwise TensorFlow's defaults.  Thread counts of 0 leave TensorFlow's choice (one per core)."""
    tf = import_tensorflow()
    from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra_op_threads,
                                      inter_op_parallelism_threads=inter_op_threads)
    config.graph_options.rewrite_options.meta_optimizer_iterations = RewriterConfig.ONE
    if not runs_on_caller_thread(graph_def):
        return config, None
    config.inter_op_parallelism_threads = 0
    config.session_inter_op_thread_pool.add().num_threads = 1
    return config, tf.compat.v1.RunOptions(inter_op_thread_pool=-1)


def static_dims(shape: Any) -> Optional[Tuple[Optional[int], ...]]:
    """A ``tf.TensorShape`` as a tuple of dims (None where unknown), or None for an unknown rank."""
    return None if shape.rank is None else tuple(shape.as_list())


def fits(shape: Tuple[int, ...], dims: Optional[Tuple[Optional[int], ...]]) -> bool:
    """Whether an array of ``shape`` may feed a tensor of :func:`static_dims` ``dims`` (checked
    in plain Python: ``TensorShape.is_compatible_with`` costs more than the rest of a call's
    Python)."""
    if dims is None:
        return True
    return len(shape) == len(dims) and all(d is None or d == n for d, n in zip(dims, shape))


class SessionCallable:
    """One step of a ``tf.compat.v1.Session`` prepared once: ``call(*arrays)`` feeds ``arrays``
    (one per feed tensor, in order) and returns the fetched arrays (a list).

    The step is prepared through TensorFlow's ``Session._make_callable_from_options`` (the C
    API's ``TF_SessionMakeCallable``: the feed and fetch names are resolved and the executors
    looked up once, not on every call as ``Session.run`` does); ``how`` says whether it was,
    or why the calls go through ``Session.run`` (that private method is missing).  Every
    array is cast to its feed's dtype and its shape checked against the feed's static shape,
    as ``Session.run`` does; a wrong count, shape or value raises :class:`ModelError`."""

    def __init__(self, session: Any, fetches: Sequence[Any], feeds: Sequence[Any], run_options: Any = None) -> None:
        tf = import_tensorflow()
        self.feeds, self.fetches = list(feeds), list(fetches)
        self._dtypes = [t.dtype.as_numpy_dtype for t in self.feeds]
        self._shapes = [static_dims(t.shape) for t in self.feeds]
        make = getattr(session, "_make_callable_from_options", None)
        if make is None:
            self.how = ("Session.run: this TensorFlow's Session has no _make_callable_from_options "
                        f"(TensorFlow {tf.__version__})")
            self._call = lambda *arrays: session.run(self.fetches, dict(zip(self.feeds, arrays)), options=run_options)
            return
        from tensorflow.core.protobuf.config_pb2 import CallableOptions
        options = CallableOptions(feed=[t.name for t in self.feeds], fetch=[t.name for t in self.fetches])
        if run_options is not None:
            options.run_options.CopyFrom(run_options)
        self.how = "Session._make_callable_from_options"
        step = make(options)
        self._call = step

    def __call__(self, *arrays: Any) -> List[np.ndarray]:
        if len(arrays) != len(self.feeds):
            raise ModelError(f"the step takes {len(self.feeds)} feed arrays "
                             f"({', '.join(t.name for t in self.feeds)}), got {len(arrays)}")
        cast = []
        for tensor, dtype, shape, value in zip(self.feeds, self._dtypes, self._shapes, arrays):
            try:
                value = np.asarray(value, dtype=dtype)
            except (TypeError, ValueError) as e:
                raise ModelError(f"cannot feed {tensor.name} ({np.dtype(dtype).name}): {e}") from None
            if value.shape != shape and not fits(value.shape, shape):
                raise ModelError(f"cannot feed an array of shape {value.shape} to {tensor.name} of shape {tensor.shape}")
            cast.append(value)
        return list(self._call(*cast))


def session_callable(session: Any, fetches: Sequence[Any], feeds: Sequence[Any],
                     run_options: Any = None) -> SessionCallable:
    """``session``'s step from ``feeds`` to ``fetches`` (``tf.Tensor`` lists) prepared once
    (:class:`SessionCallable`), run with ``run_options`` (a ``RunOptions`` or None)."""
    return SessionCallable(session, fetches, feeds, run_options)


class TFRunner:
    """A GraphDef in its own ``tf.Graph`` and ``Session`` (:func:`tf_session_options`); ``run``
    feeds by node or tensor name, through one :func:`session_callable` per set of feed and
    fetch names (prepared on first use)."""

    def __init__(self, graph_def: Any) -> None:
        tf = import_tensorflow()

        if not isinstance(graph_def, tf.compat.v1.GraphDef):
            raise ModelError(f"a TensorFlow model must be a GraphDef, got {type(graph_def).__name__}")
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        config, self.run_options = tf_session_options(graph_def)
        self.session = tf.compat.v1.Session(graph=self.graph, config=config)
        self.steps: Dict[Tuple, SessionCallable] = {}

    def _tensor(self, name: str):
        try:
            return self.graph.get_tensor_by_name(_tensor_name(name))
        except (KeyError, ValueError) as e:
            raise ModelError(f"the TensorFlow model has no tensor {name!r}: {e}") from None

    def run(self, feeds: Mapping[str, np.ndarray], fetches: Sequence[str]) -> List[np.ndarray]:
        names = tuple(feeds)
        key = (names, tuple(fetches))
        if key not in self.steps:
            self.steps[key] = session_callable(self.session, [self._tensor(f) for f in fetches],
                                               [self._tensor(k) for k in names], self.run_options)
        return self.steps[key](*(feeds[k] for k in names))

    def close(self) -> None:
        self.steps.clear()
        self.session.close()


class MXRunner:
    """An MXNet ``(symbol, arg_params, aux_params)`` model, bound once per set of input shapes."""

    def __init__(self, model: Any) -> None:
        from .mxnet_compat import import_mxnet

        self.mx = import_mxnet()
        if not (isinstance(model, tuple) and len(model) == 3):
            raise ModelError("an MXNet model must be a (symbol, arg_params, aux_params) tuple, "
                             f"got {type(model).__name__}")
        self.symbol, self.arg_params, self.aux_params = model
        self.executors: Dict[Tuple, Any] = {}

    def _fetch_symbol(self, fetches: Sequence[str]):
        internals = self.symbol.get_internals()
        known = set(internals.list_outputs())
        picked = []
        for name in fetches:
            full = name if name in known else f"{name}_output"
            if full not in known:
                raise ModelError(f"the MXNet model has no output {name!r}")
            picked.append(internals[full])
        return self.mx.sym.Group(picked)

    def _executor(self, feeds: Mapping[str, np.ndarray], fetches: Sequence[str]):
        key = (tuple(fetches),) + tuple(sorted((k, v.shape, v.dtype.str) for k, v in feeds.items()))
        if key not in self.executors:
            mx = self.mx
            sym = self._fetch_symbol(fetches)
            args = {k: v for k, v in self.arg_params.items() if k in sym.list_arguments()}
            for k, v in feeds.items():
                args[k] = mx.nd.array(v, dtype=v.dtype)
            missing = [a for a in sym.list_arguments() if a not in args]
            if missing:
                raise ModelError(f"the MXNet model needs values for {missing} (not fed and not in arg_params)")
            aux = {k: self.aux_params[k] for k in sym.list_auxiliary_states()}
            self.executors[key] = sym.bind(mx.cpu(), args=args, aux_states=aux, grad_req="null")
        return self.executors[key]

    def run(self, feeds: Mapping[str, np.ndarray], fetches: Sequence[str]) -> List[np.ndarray]:
        executor = self._executor(feeds, fetches)
        for k, v in feeds.items():
            executor.arg_dict[k][:] = v
        return [o.asnumpy() for o in executor.forward(is_train=False)]

    def close(self) -> None:
        self.executors.clear()


_RUNNER_CLASSES = {"tensorflow": TFRunner, "mxnet": MXRunner}


def register_runner(framework: str, runner_class: Any) -> None:
    """Let :func:`runner_for` run ``framework``'s models with ``runner_class(model)`` (the
    ONNX frontend registers its ONNX Runtime runner when imported)."""
    _RUNNER_CLASSES[framework] = runner_class
_cache: "collections.OrderedDict[int, Tuple[Any, Any]]" = collections.OrderedDict()


def runner_class(framework: str) -> Any:
    """The class whose instances run ``framework``'s models (TFRunner, MXRunner, the ONNX
    frontend's runner once that frontend is imported)."""
    if framework not in _RUNNER_CLASSES:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    return _RUNNER_CLASSES[framework]


def runner_for(framework: str, model: Any):
    """The cached runner of ``model`` (a TFRunner or MXRunner), created on first use."""
    make = runner_class(framework)
    key = id(model)
    entry = _cache.get(key)
    if entry is not None and entry[0] is model:
        _cache.move_to_end(key)
        return entry[1]
    runner = make(model)
    _cache[key] = (model, runner)
    while len(_cache) > CACHE_SIZE:
        _, (_, old) = _cache.popitem(last=False)
        old.close()
    return runner


def clear_cache() -> None:
    """Close every cached session/executor."""
    while _cache:
        _, (_, runner) = _cache.popitem()
        runner.close()


# At interpreter exit the cached sessions are closed while TensorFlow is still whole: left to
# the final clean-up, a prepared step's release finds TensorFlow's C API module already gone
# and prints an ignored AttributeError.
atexit.register(clear_cache)


def run_model(framework: str, model: Any, feeds: Mapping[str, np.ndarray],
              fetches: Sequence[str]) -> List[np.ndarray]:
    """Run ``model`` of ``framework`` ("tensorflow" GraphDef or "mxnet" symbol tuple).

    ``feeds``: input node (or tensor) name -> array; ``fetches``: node/tensor names
    (TensorFlow) or symbol names with or without ``_output`` (MXNet).  Returns one numpy
    array per fetch, in order.  Raises ModelError for an unknown input or output name.
    """
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    return runner_for(framework, model).run(feeds, list(fetches))
