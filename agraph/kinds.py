"""The code the zoo's model folders share, one function per kind of model: each folder keeps
its constants (NAME, FRAMEWORK, ..., the architecture it builds) and thin ``build``,
``preprocess`` and ``evaluate`` definitions that call these with them.  Part of the store key
of every model folder (``registry.ModelEntry.source_hash``), like ``builders``, ``inputs``
and ``shipped`` that it calls: a change here rebuilds the zoo.

Kinds:

- ImageNet architectures (``keras_application``, ``gluon_model_zoo``, ``imagenet_input``,
  ``imagenet_evaluate``): with a pretrained weights file (``agraph.weights``: the user's or
  the framework's cache, never downloaded) ``WEIGHTS = "imagenet"`` and the metric is top-1
  on the ImageNet validation archive.  Without one, RANDOM WEIGHTS (fixed seed 0,
  ``agraph.builders.SEED``): accuracy means nothing; the metric is agreement with the FP32
  model on scikit-image's sample photos (``photo_input``, ``photo_agreement``: central square
  crop resized, RGB scaled to [-1, 1]): top-1 agreement and mean cosine of the 1000 logits.
- shipped nets at a fixed size (``shipped_keras``, ``shipped_mx``): the MTCNN stages
  (``mtcnn_face_accuracy``) and fer's emotion net (``fer_agreement``).
- the trained classifiers' accuracy (``classifier_accuracy``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

from ratelnn.ir import registry

from . import builders, imagenet, inputs, weights
from .metrics import ModelMetrics, collect, mean_cosine, top1_accuracy, top1_agreement


# -- random-weight architectures on sample_photos ------------------------------------------

def keras_application(workdir, name: str, outputs, architecture: str, shapes,
                      weights_file: Optional[Path] = None, **kwargs) -> List[Path]:
    """Write ``keras.applications.<architecture>`` (``kwargs`` to its constructor) with random
    weights, or those of ``weights_file``, frozen, as ``<name>.pb`` into ``workdir`` at
    ``shapes`` (reused when already there for those shapes and weights)."""
    side = builders.side_of(shapes, "tensorflow")

    def make(folder: Path) -> None:
        net = builders.keras_application(architecture, side, weights_file, **kwargs)
        builders.write_frozen_keras(net, (side, side, 3), folder / f"{name}.pb", outputs)
    return builders.cached_build(workdir, name, "tensorflow", shapes, make, _stamp(weights_file))


def gluon_model_zoo(workdir, name: str, architecture: str, shapes,
                    weights_file: Optional[Path] = None) -> List[Path]:
    """Write the Gluon model zoo's ``architecture`` with random weights, or those of
    ``weights_file``, as ``<name>-symbol.json / -0000.params`` (output ``logits``) into
    ``workdir`` at ``shapes`` (reused when already there for those shapes and weights)."""
    side = builders.side_of(shapes, "mxnet")

    def make(folder: Path) -> None:
        from ratelnn.mxnet_compat import import_mxnet
        net = builders.gluon_model_zoo(import_mxnet(), architecture, side, weights_file)
        builders.write_mx_checkpoint(net, folder / name, "logits")
    return builders.cached_build(workdir, name, "mxnet", shapes, make, _stamp(weights_file))


def _stamp(weights_file: Optional[Path]) -> str:
    return "" if weights_file is None else weights.digest(weights_file)


# -- ImageNet architectures: pretrained weights when found, random otherwise ---------------

def imagenet_weights_file(name: str, spec: weights.ImageNetWeights) -> Optional[Path]:
    """The pretrained weights file model ``name`` loads (checked), or None (random weights)."""
    found = weights.find(name, spec)
    return None if found is None else weights.checked(name, spec, found)


def imagenet_attribute(name: str, spec: weights.ImageNetWeights, attribute: str):
    """A model.py's names that follow the weights found (its module ``__getattr__``):
    ``WEIGHTS`` ("imagenet" | "random"), ``DATASET`` ("imagenet" | "sample_photos") and
    ``WEIGHTS_FILE`` (Path or None)."""
    found = weights.find(name, spec)
    if attribute == "WEIGHTS_FILE":
        return found
    if attribute == "WEIGHTS":
        return "random" if found is None else "imagenet"
    if attribute == "DATASET":
        return "sample_photos" if found is None else imagenet.KEY
    raise AttributeError(f"model {name!r} has no attribute {attribute!r}")


def imagenet_input(name: str, spec: weights.ImageNetWeights, samples, shapes) -> np.ndarray:
    """Images -> the model input at ``shapes``: with pretrained weights the ImageNet
    preprocessing of ``spec.pixels``, with random ones sample_photos' [-1, 1] crop."""
    side = builders.side_of(shapes, spec.framework)
    if weights.find(name, spec) is None:
        return inputs.photo_input(samples, side, spec.framework)
    return inputs.imagenet_input(samples, side, spec.framework, spec.pixels)


def imagenet_evaluate(model, shapes, run, dataset, stage, *, limit=None, batch_size=32,
                      reference=None) -> ModelMetrics:
    """On the ImageNet archive: ``top1`` against its labels (and ``fp32_agreement`` with
    ``reference``); on sample_photos (random weights): :func:`photo_agreement`."""
    if dataset.key != imagenet.KEY:
        return photo_agreement(model, shapes, run, dataset, stage, limit=limit, batch_size=batch_size,
                               reference=reference)
    logits, labels, ref = collect(run, dataset, lambda s: model.preprocess(s, shapes), limit=limit,
                                  batch_size=batch_size, reference=reference)
    metrics = {"top1": top1_accuracy(logits, labels)}
    if ref is not None:
        metrics["fp32_agreement"] = top1_agreement(logits, ref)
    return ModelMetrics(model.NAME, dataset.key, stage, metrics, samples=len(logits))


def photo_input(samples, shapes, framework: str) -> np.ndarray:
    """sample_photos samples (uint8 RGB, any size) -> the model input at ``shapes``, float32
    in [-1, 1]."""
    return inputs.photo_input(samples, builders.side_of(shapes, framework), framework)


def photo_agreement(model, shapes, run, dataset, stage, *, limit=None, batch_size=32,
                    reference=None) -> ModelMetrics:
    """``top1_agreement`` and ``mean_cosine`` of the logits of ``model`` (its model.py module)
    built at ``shapes`` against ``reference`` (the FP32 model; ``run`` itself when None)."""
    side = builders.side_of(shapes, model.FRAMEWORK)
    logits, _, ref = collect(run, dataset, lambda s: inputs.photo_input(s, side, model.FRAMEWORK),
                             limit=limit, batch_size=batch_size, reference=reference)
    ref = logits if ref is None else ref
    metrics = {"top1_agreement": top1_agreement(logits, ref), "mean_cosine": mean_cosine(logits, ref)}
    return ModelMetrics(model.NAME, model.DATASET, stage, metrics, samples=len(logits))


# -- shipped nets at a fixed size ------------------------------------------------------------

def shipped_keras(workdir, name: str, outputs, fixed_shapes, input_shapes, net: Callable[[], object]) -> List[Path]:
    """Write the Keras model ``net()`` frozen as ``<name>.pb`` into ``workdir`` at its
    ``fixed_shapes`` (``input_shapes``, if given, must equal them; reused when already there)."""
    shapes = builders.fixed_shapes(name, fixed_shapes, input_shapes)

    def make(folder: Path) -> None:
        builders.write_frozen_keras(net(), fixed_shapes[0][1:], folder / f"{name}.pb", outputs)
    return builders.cached_build(workdir, name, "tensorflow", shapes, make)


def shipped_mx(workdir, name: str, fixed_shapes, input_shapes, net: Callable[[object], object]) -> List[Path]:
    """Write the MXNet symbol and params ``net(mx)`` as ``<name>-symbol.json / -0000.params``
    into ``workdir`` at its ``fixed_shapes`` (``input_shapes``, if given, must equal them;
    reused when already there)."""
    shapes = builders.fixed_shapes(name, fixed_shapes, input_shapes)

    def make(folder: Path) -> None:
        from ratelnn.mxnet_compat import import_mxnet
        builders.write_mx_checkpoint(net(import_mxnet()), folder / name)
    return builders.cached_build(workdir, name, "mxnet", shapes, make)


# Activation-producing IR ops (every quantized op that is not scale-preserving), for a
# ``layer_configs`` entry putting a whole model's activations in int16.
INT16_OP_TYPES = tuple(sorted(registry.ACTIVATION_OPS))


def fer_converter_config(input_name: str) -> dict:
    """fer's CONVERTER_CONFIG: the whole model in 16 bits (the input ``input_name`` too)."""
    return {
        "auto_int16": False,
        "layer_configs": [{"op_type": list(INT16_OP_TYPES), "data_type": "int16"},
                          {"layer_name": input_name, "data_type": "int16"}],
        "quant_cfg": {"conv_weights": {"num_bits": 16}, "matmul_weights": {"num_bits": 16}},
    }


def mtcnn_face_accuracy(model, side: int, run, dataset, stage, *, limit=None, batch_size=32,
                        reference=None) -> ModelMetrics:
    """``face_accuracy``: argmax of the face probabilities (output ``prob`` of ``model``, its
    model.py module, at ``side``) against the labels (1 face, 0 non-face); ``fp32_agreement``
    of that argmax when ``reference`` is given."""
    prob, labels, ref = collect(run, dataset, lambda s: inputs.mtcnn_input(s, side, model.FRAMEWORK),
                                limit=limit, batch_size=batch_size, reference=reference,
                                output=list(model.OUTPUTS).index("prob"))
    metrics = {"face_accuracy": top1_accuracy(prob, labels)}
    if ref is not None:
        metrics["fp32_agreement"] = top1_agreement(prob, ref)
    return ModelMetrics(model.NAME, model.DATASET, stage, metrics, samples=len(prob))


def fer_agreement(model, run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """``top1_agreement`` and ``mean_cosine`` of the emotion probabilities of ``model`` (its
    model.py module) against ``reference`` (the FP32 model; ``run`` itself when None, i.e. at
    the fp32 stage) over the face samples (label 1) of the first ``limit`` samples."""
    prob, labels, ref = collect(run, dataset, lambda s: inputs.fer_input(s, model.FRAMEWORK),
                                limit=limit, batch_size=batch_size, reference=reference)
    faces = labels == 1
    ref = prob if ref is None else ref
    metrics = {"top1_agreement": top1_agreement(prob[faces], ref[faces]),
               "mean_cosine": mean_cosine(prob[faces], ref[faces])}
    return ModelMetrics(model.NAME, model.DATASET, stage, metrics, samples=int(faces.sum()))


# -- trained classifiers ---------------------------------------------------------------------

def classifier_accuracy(model, run, dataset, stage, *, limit=None, batch_size=32, reference=None) -> ModelMetrics:
    """``top1`` accuracy of ``model`` (its model.py module) against the dataset's labels;
    ``fp32_agreement`` of the argmax when ``reference`` is given."""
    outputs, labels, ref = collect(run, dataset, model.preprocess, limit=limit, batch_size=batch_size,
                                   reference=reference)
    metrics = {"top1": top1_accuracy(outputs, labels)}
    if ref is not None:
        metrics["fp32_agreement"] = top1_agreement(outputs, ref)
    return ModelMetrics(model.NAME, dataset.key, stage, metrics, samples=len(outputs))
