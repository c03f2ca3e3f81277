"""Shared code of the AGraph zoo model folders (``agraph/models/<name>/``): writing model
files, building the random-weight architectures, preprocessing the zoo datasets, and
collecting a model's outputs over a dataset for its ``eval.py``.

Model files are written whole or not at all (temporary file renamed into place), with
fixed seeds so that a rebuild gives the same bytes. A folder's ``build(workdir)`` reuses the
files already in ``workdir`` when they were built for the same input shapes (a
``<name>.shapes.json`` stamp written last).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..ir import registry

SEED = 0
# Activation-producing IR ops (every quantized op that is not scale-preserving), for a
# ``layer_configs`` entry putting a whole model's activations in int16.
INT16_OP_TYPES = tuple(registry.ACTIVATION_OPS)


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


def cached_build(workdir, name: str, framework: str, input_shapes, make: Callable[[Path], None]) -> List[Path]:
    """The model files of ``name`` in ``workdir`` (TF ``<name>.pb``; MXNet
    ``<name>-symbol.json`` + ``<name>-0000.params``): reused when the stamp says they were
    built for ``input_shapes``, else written by ``make(workdir)`` and stamped."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    files = ([workdir / f"{name}.pb"] if framework == "tensorflow"
             else [workdir / f"{name}-symbol.json", workdir / f"{name}-0000.params"])
    stamp = workdir / f"{name}.shapes.json"
    wanted = json.dumps([list(s) for s in input_shapes])
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
def keras_application(constructor: str, side: int, **kwargs):
    """``keras.applications.<constructor>`` with random weights (seed :data:`SEED`), input
    ``images`` [N, side, side, 3], 1000 logits (no softmax)."""
    import keras
    keras.backend.clear_session()
    keras.utils.set_random_seed(SEED)
    images = keras.Input((side, side, 3), name="images")
    return getattr(keras.applications, constructor)(weights=None, input_tensor=images,
                                                    classifier_activation=None, **kwargs)


def gluon_model_zoo(mx, name: str, side: int):
    """``mxnet.gluon.model_zoo.vision.get_model(name)`` with random weights as
    ``(symbol, arg_params, aux_params)``; input ``data`` [N, 3, side, side]. Weights are
    Xavier-uniform drawn by numpy (seed :data:`SEED`, parameters in name order; MXNet's own
    initialisers do not repeat across builds in one process), biases and BatchNorm shifts and
    means 0, scales and variances 1."""
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
    sym = net(mx.sym.var("data"))
    arg = {k: v.data() for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v.data() for k, v in params.items() if k in sym.list_auxiliary_states()}
    return sym, arg, aux


# ---------------------------------------------------------------- preprocessing
def _resize(image: np.ndarray, side: int) -> np.ndarray:
    """uint8 image [H, W] or [H, W, C] -> float32 [side, side(, C)], bilinear (PIL)."""
    from PIL import Image
    return np.asarray(Image.fromarray(image).resize((side, side), Image.BILINEAR), np.float32)


def _uint8(image: np.ndarray) -> np.ndarray:
    """A float image in [0, 1] (as scikit-image gives) or a uint8 one -> uint8."""
    image = np.asarray(image)
    if image.dtype == np.uint8:
        return image
    return np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)


def lfw_pixels(samples: np.ndarray, side: int, channels: int) -> np.ndarray:
    """``lfw_face_nonface`` samples [N, 25, 25] grey (float in [0, 1] or uint8) -> float32
    pixels in [0, 255], [N, side, side, channels] (grey repeated)."""
    resized = np.stack([_resize(_uint8(s), side) for s in samples])[..., None]
    return np.repeat(resized, channels, axis=-1)


def photo_pixels(samples: Iterable[np.ndarray], side: int) -> np.ndarray:
    """``sample_photos`` samples (uint8 HWC RGB of any size; grey or RGBA accepted) ->
    float32 [N, side, side, 3] in [0, 255]: the central square crop, resized."""
    out = []
    for image in samples:
        image = _uint8(image)
        image = np.repeat(image[..., None], 3, axis=-1) if image.ndim == 2 else image[..., :3]
        h, w = image.shape[:2]
        top, left = (h - min(h, w)) // 2, (w - min(h, w)) // 2
        out.append(_resize(np.ascontiguousarray(image[top:top + min(h, w), left:left + min(h, w)]), side))
    return np.stack(out)


def to_framework(x: np.ndarray, framework: str) -> np.ndarray:
    """NHWC float batch -> float32 in the framework layout (MXNet: NCHW)."""
    x = np.asarray(x, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "mxnet" else x


def side_of(input_shapes, framework: str) -> int:
    """Image side of the first input shape (TF NHWC, MXNet NCHW)."""
    shape = input_shapes[0]
    return int(shape[2] if framework == "mxnet" else shape[1])


def mtcnn_input(samples: np.ndarray, side: int, framework: str) -> np.ndarray:
    """``lfw_face_nonface`` samples -> MTCNN input: RGB ``side`` x ``side``, (p - 127.5) / 128."""
    return to_framework((lfw_pixels(samples, side, 3) - 127.5) / 128.0, framework)


def fer_input(samples: np.ndarray, framework: str, side: int = 64) -> np.ndarray:
    """``lfw_face_nonface`` samples -> fer's emotion net input: grey 64x64 in [-1, 1]."""
    return to_framework(lfw_pixels(samples, side, 1) / 127.5 - 1.0, framework)


def photo_input(samples: Iterable[np.ndarray], side: int, framework: str) -> np.ndarray:
    """``sample_photos`` samples -> [N, side, side, 3] (MXNet NCHW) in [-1, 1]."""
    return to_framework(photo_pixels(samples, side) / 127.5 - 1.0, framework)


def fixed_shapes(name: str, shapes, input_shapes):
    """``shapes`` for a model whose architecture fixes its input size; another
    ``input_shapes`` is a ValueError naming the model."""
    if input_shapes is not None and [list(s) for s in input_shapes] != [list(s) for s in shapes]:
        raise ValueError(f"{name} takes only input shapes {shapes}, got {input_shapes}")
    return shapes


# ---------------------------------------------------------------- evaluation
def collect(run, dataset, preprocess: Callable[[np.ndarray], np.ndarray], output: int, *, limit=None,
            batch_size: int = 32, reference=None) -> Tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]:
    """Output ``output`` of ``run`` (and of ``reference``, when given) over ``dataset``,
    flattened to [N, k]; returns ``(outputs, reference_outputs | None, labels | None)``."""
    outs, refs, labels = [], [], []
    for samples, batch_labels in dataset.batches(batch_size, limit):
        x = preprocess(samples)
        outs.append(np.asarray(run([x])[output]).reshape(len(x), -1))
        if reference is not None:
            refs.append(np.asarray(reference([x])[output]).reshape(len(x), -1))
        if batch_labels is not None:
            labels.append(np.asarray(batch_labels))
    if not outs:
        raise ValueError(f"dataset {getattr(dataset, 'key', dataset)!r} yielded no samples")
    return (np.concatenate(outs), np.concatenate(refs) if refs else None,
            np.concatenate(labels) if labels else None)


# ---------------------------------------------------------------- FP32 -> quant -> npu
Run = Callable[[List[np.ndarray]], List[np.ndarray]]


def load_fp32(model, files: List[Path]):
    """The FP32 model ``build()`` wrote: a GraphDef or an MXNet (symbol, arg, aux)."""
    if model.FRAMEWORK == "tensorflow":
        import tensorflow as tf
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(files[0].read_bytes())
        return graph_def
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    return mx.model.load_checkpoint(str(files[0]).rsplit("-symbol.json", 1)[0], 0)


def runner(model, graph) -> Run:
    """``run(inputs) -> outputs`` of ``graph`` (any stage) with the model's node names."""
    from ratelnn.runners import runner_for

    def run(inputs: List[np.ndarray]) -> List[np.ndarray]:
        feeds = dict(zip(model.INPUTS, inputs))
        return runner_for(model.FRAMEWORK, graph).run(feeds, model.OUTPUTS)
    return run


def stages(model, workdir: Path, calibration: np.ndarray, input_shapes=None,
           model_config: bool = True) -> Dict[str, Run]:
    """Build the model in ``workdir``, calibrate on the preprocessed batch ``calibration``
    (all of it, one batch) with the model's optional ``CONVERTER_CONFIG`` (unless
    ``model_config`` is False: the converter defaults), quantize and compile:
    ``{"fp32", "quant", "npu"}`` -> run; also ``"seconds"`` -> {step: wall seconds}."""
    if model.FRAMEWORK == "tensorflow":
        from ratelnn.frontend.tensorflow import converter
    else:
        from ratelnn.frontend.mxnet import converter
    shapes = input_shapes or model.INPUT_SHAPES
    seconds = {}
    start = time.time()
    fp32 = load_fp32(model, model.build(workdir, input_shapes=input_shapes))
    seconds["build"] = time.time() - start
    cfg = {"input_nodes": list(model.INPUTS), "output_nodes": list(model.OUTPUTS),
           "input_shapes": [[len(calibration), *s[1:]] for s in shapes],
           "output_dir": str(workdir / "stats"), **(getattr(model, "CONVERTER_CONFIG", {}) if model_config else {})}
    conv = converter(fp32, cfg)
    start = time.time()
    conv.calibrate(calibration, progress=False)
    seconds["calibrate"] = time.time() - start
    start = time.time()
    quant = conv.to_quant()
    seconds["to_quant"] = time.time() - start
    start = time.time()
    npu = conv.to_npu()
    seconds["to_npu"] = time.time() - start
    return {"fp32": runner(model, fp32), "quant": runner(model, quant), "npu": runner(model, npu),
            "seconds": seconds}


def mirrored(samples) -> np.ndarray:
    """Dataset samples flipped left-right: the calibration set of the zoo tests (the same
    images the metric is measured on would make calibration look better than it is)."""
    flipped = [np.ascontiguousarray(np.asarray(s)[:, ::-1]) for s in samples]
    if len({f.shape for f in flipped}) == 1:
        return np.stack(flipped)
    out = np.empty(len(flipped), dtype=object)
    out[:] = flipped
    return out


def measure(model, evaluation, workdir: Path, dataset, input_shapes=None, limit=None,
            model_config: bool = True) -> Dict[str, object]:
    """A zoo model (its ``model`` and ``eval`` modules) through FP32 -> quant -> npu,
    calibrated on the mirrored samples of ``dataset``, evaluated by its eval.py at each stage:
    ``{stage: ModelMetrics}`` plus
    ``"seconds"`` (build/calibrate/to_quant/to_npu/evaluate wall seconds). ``model_config``:
    see :func:`stages`."""
    samples = dataset.samples if limit is None else dataset.samples[:limit]
    extra = {} if input_shapes is None else {"input_shapes": input_shapes}
    calibration = model.preprocess(mirrored(samples), **extra)
    runs = stages(model, workdir, calibration, input_shapes=input_shapes, model_config=model_config)
    evaluate = evaluation.evaluate if input_shapes is None else partial(evaluation.evaluate_at, input_shapes)
    start = time.time()
    result = {stage: evaluate(runs[stage], dataset, stage, limit=limit, reference=runs["fp32"])
              for stage in ("fp32", "quant", "npu")}
    runs["seconds"]["evaluate"] = time.time() - start
    result["seconds"] = runs["seconds"]
    return result
