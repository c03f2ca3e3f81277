"""Building the zoo model folders' FP32 files (``agraph/models/<name>/model.py``'s
``build``): writing model files, the random-weight architectures, and the input shapes a
folder accepts.

Model files are written whole or not at all (temporary file renamed into place), with
fixed seeds so that a rebuild gives the same bytes. A folder's ``build(workdir)`` reuses the
files already in ``workdir`` when they were built for the same input shapes (a
``<name>.shapes.json`` stamp written last).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import numpy as np

from .registry import NCHW_FRAMEWORKS, model_file_names

SEED = 0


# ---------------------------------------------------------------- files
def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def cached_build(workdir, name: str, framework: str, input_shapes, make: Callable[[Path], None],
                 weights: str = "") -> List[Path]:
    """The model files of ``name`` in ``workdir`` (:func:`agraph.registry.model_file_names`): reused when the stamp says they were
    built for ``input_shapes`` (and ``weights``, a digest of the weights file loaded), else
    written by ``make(workdir)`` and stamped."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    files = [workdir / f for f in model_file_names(name, framework)]
    stamp = workdir / f"{name}.shapes.json"
    wanted = json.dumps([list(s) for s in input_shapes] + ([weights] if weights else []))
    if all(f.is_file() for f in files) and stamp.is_file() and stamp.read_text() == wanted:
        return files
    stamp.unlink(missing_ok=True)
    make(workdir)
    _atomic_write(stamp, wanted.encode())
    return files


def write_frozen_keras(model, input_shape: Sequence[int], path: Path, output_names: Sequence[str]) -> None:
    """Freeze Keras ``model`` with a free batch dimension (``input_shape`` without batch)
    and write the GraphDef to ``path``, its outputs renamed ``output_names`` (Identity
    nodes), the input named as the model's input layer."""
    import tensorflow as tf
    from ratelnn.frontend.tensorflow import freeze_keras
    graph_def, _, outputs = freeze_keras(model, [(None, *input_shape)])
    if len(outputs) != len(output_names):
        raise ValueError(f"{path.name}: the model has {len(outputs)} outputs, names given for {len(output_names)}")
    for source, name in zip(outputs, output_names):
        node = graph_def.node.add()
        node.name, node.op = name, "Identity"
        node.input.append(source)
        node.attr["T"].type = tf.float32.as_datatype_enum
    _atomic_write(path, graph_def.SerializeToString(deterministic=True))


def write_mx_checkpoint(model, prefix: Path, output_name: Optional[str] = None) -> None:
    """Save MXNet ``(symbol, arg_params, aux_params)`` as ``<prefix>-symbol.json`` and
    ``<prefix>-0000.params`` (``arg:``/``aux:`` keys); ``output_name`` renames the last node."""
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    sym, arg, aux = model
    graph = json.loads(sym.tojson())
    if output_name:
        graph["nodes"][graph["heads"][0][0]]["name"] = output_name
    params = {**{f"arg:{k}": v for k, v in arg.items()}, **{f"aux:{k}": v for k, v in aux.items()}}
    with tempfile.TemporaryDirectory(dir=prefix.parent) as tmp:
        mx.nd.save(os.path.join(tmp, "params"), {k: params[k] for k in sorted(params)})
        os.replace(os.path.join(tmp, "params"), f"{prefix}-0000.params")
    _atomic_write(Path(f"{prefix}-symbol.json"), json.dumps(graph, indent=2, sort_keys=True).encode())


# ---------------------------------------------------------------- random-weight architectures
def keras_application(constructor: str, side: int, weights_file: Optional[Path] = None, **kwargs):
    """``keras.applications.<constructor>`` with random weights (seed :data:`SEED`), input
    ``images`` [N, side, side, 3], 1000 logits (no softmax).  ``weights_file`` (a Keras
    ``.h5`` / ``.weights.h5``) is then loaded into it; Keras is never asked for its own
    weights (``weights=None``), so nothing is downloaded."""
    import keras
    keras.backend.clear_session()
    keras.utils.set_random_seed(SEED)
    images = keras.Input((side, side, 3), name="images")
    net = getattr(keras.applications, constructor)(weights=None, input_tensor=images,
                                                   classifier_activation=None, **kwargs)
    if weights_file is not None:
        _load(lambda: net.load_weights(str(weights_file)), weights_file, constructor)
    return net


def _load(load: Callable[[], None], weights_file: Path, architecture: str) -> None:
    from .weights import WeightsError
    try:
        load()
    except Exception as e:  # the frameworks raise many types for a file that does not fit
        raise WeightsError(f"{weights_file}: does not load into {architecture}: {type(e).__name__}: "
                           f"{str(e)[:300]}") from None


def gluon_model_zoo(mx, name: str, side: int, weights_file: Optional[Path] = None):
    """``mxnet.gluon.model_zoo.vision.get_model(name)`` with random weights as
    ``(symbol, arg_params, aux_params)``; input ``data`` [N, 3, side, side]. Weights are
    Xavier-uniform drawn by numpy (seed :data:`SEED`, parameters in name order; MXNet's own
    initialisers do not repeat across builds in one process), biases and BatchNorm shifts and
    means 0, scales and variances 1.  ``weights_file`` (a Gluon ``.params``) is then loaded
    into them (``pretrained=False``: nothing is downloaded)."""
    from mxnet.gluon.model_zoo import vision
    net = vision.get_model(name, pretrained=False, prefix="zoo_")
    net.initialize(mx.init.Zero(), ctx=mx.cpu())
    net(mx.nd.zeros((1, 3, side, side)))         # materialise the deferred shapes
    rng = np.random.default_rng(SEED)
    params = net.collect_params()
    for key in sorted(params.keys()):
        shape = params[key].shape
        if key.endswith("_weight"):
            fan_in, fan_out = int(np.prod(shape[1:])), shape[0] * int(np.prod(shape[2:]))
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            value = rng.uniform(-limit, limit, shape)
        elif key.endswith(("_gamma", "_running_var")):
            value = np.ones(shape)
        else:
            value = np.zeros(shape)
        params[key].set_data(mx.nd.array(value.astype(np.float32)))
    if weights_file is not None:
        _load(lambda: net.load_parameters(str(weights_file), ctx=mx.cpu()), weights_file, name)
    sym = net(mx.sym.var("data"))
    arg = {k: v.data() for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v.data() for k, v in params.items() if k in sym.list_auxiliary_states()}
    return sym, arg, aux


# ---------------------------------------------------------------- input shapes
def side_of(input_shapes, framework: str) -> int:
    """Image side of the first input shape (TF NHWC, MXNet and ONNX NCHW)."""
    shape = input_shapes[0]
    return int(shape[2] if framework in NCHW_FRAMEWORKS else shape[1])


def fixed_shapes(name: str, shapes, input_shapes):
    """``shapes`` for a model whose architecture fixes its input size; another
    ``input_shapes`` is a ValueError naming the model."""
    if input_shapes is not None and [list(s) for s in input_shapes] != [list(s) for s in shapes]:
        raise ValueError(f"{name} takes only input shapes {shapes}, got {input_shapes}")
    return shapes
