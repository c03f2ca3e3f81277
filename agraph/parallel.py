"""Evaluation on an executor (docs/agraph.md, "Evaluation on Ray"): the model's outputs for
every dataset batch are computed on the workers of a ``ratelnn.distributed.RayExecutor``
(``map_blocks``, blocks in order), then the model's own ``evaluate()`` runs on the driver with
a ``run`` that answers those batches from the results (and runs locally any input it was not
given), so the metrics equal a one-process evaluation."""
from __future__ import annotations

import collections
import hashlib
import pickle
from typing import Any, Callable, Dict, Iterable, List, Sequence

import numpy as np

_models: Dict[str, Any] = {}  # per worker process: model bytes hash -> framework model


def serialize(framework: str, model: Any) -> bytes:
    """A TF GraphDef's or an ONNX ModelProto's bytes, or a pickled ``(symbol JSON, arg,
    aux)`` of numpy arrays."""
    if framework in ("tensorflow", "onnx"):
        return model.SerializeToString()
    symbol, args, aux = model
    return pickle.dumps((symbol.tojson(), {k: v.asnumpy() for k, v in args.items()},
                         {k: v.asnumpy() for k, v in aux.items()}), protocol=4)


def deserialize(framework: str, data: bytes) -> Any:
    """The model of :func:`serialize`, with ratelnn's ops loaded (quantized and compiled
    models hold them)."""
    import ratelnn
    if framework == "tensorflow":
        import tensorflow as tf
        ratelnn.tf_init()
        return tf.compat.v1.GraphDef.FromString(data)
    if framework == "onnx":   # ratelnn.onnx_session loads the ONNX Runtime op library itself
        from ratelnn.frontend.onnx.model_io import import_onnx
        return import_onnx().ModelProto.FromString(data)
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    ratelnn.mx_init()
    symbol_json, args, aux = pickle.loads(data)
    return (mx.sym.load_json(symbol_json), {k: mx.nd.array(v, dtype=v.dtype) for k, v in args.items()},
            {k: mx.nd.array(v, dtype=v.dtype) for k, v in aux.items()})


class BlockRunner:
    """Picklable ``fn(block)`` for ``map_blocks``: a block is a list of batches (each a list
    of input arrays); returns the model's outputs per batch."""

    def __init__(self, framework: str, model: Any, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        self.framework, self.inputs, self.outputs = framework, list(inputs), list(outputs)
        self.data = serialize(framework, model)
        self.key = hashlib.sha256(self.data).hexdigest()

    def __call__(self, block: List[List[np.ndarray]]) -> List[List[np.ndarray]]:
        from ratelnn.runners import run_model
        if self.key not in _models:
            _models[self.key] = deserialize(self.framework, self.data)
        model = _models[self.key]
        return [run_model(self.framework, model, dict(zip(self.inputs, arrays)), self.outputs)
                for arrays in block]


class Replay:
    """``run(inputs)``: the precomputed outputs of the next expected inputs, in order; any
    other inputs run on ``fallback``."""

    def __init__(self, pairs: Iterable, fallback: Callable) -> None:
        self.pairs, self.fallback, self.replayed = collections.deque(pairs), fallback, 0

    def __call__(self, inputs):
        inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
        if self.pairs:
            expected, outputs = self.pairs[0]
            if len(expected) == len(inputs) and all(
                    np.array_equal(a, np.asarray(b, dtype=np.float32)) for a, b in zip(expected, inputs)):
                self.pairs.popleft()
                self.replayed += 1
                return outputs
        return self.fallback(inputs)


def outputs_on(executor: Any, framework: str, model: Any, inputs: Sequence[str], outputs: Sequence[str],
               batches: List[List[np.ndarray]], label: str, progress: bool) -> List[List[np.ndarray]]:
    """The model's outputs for each batch of ``batches``, computed with ``executor.map_blocks``."""
    fn = BlockRunner(framework, model, inputs, outputs)
    blocks = executor.map_blocks(fn, batches, total=len(batches), label=label, progress=progress)
    return [out for block in blocks for out in block]  # one list of per-batch outputs per block
