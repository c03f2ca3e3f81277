"""A zoo model through FP32 -> quant -> npu with ratelnn directly (no store): the stages of
the zoo tests and of ``bench/agraph_zoo.py``."""
from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

Run = Callable[[List[np.ndarray]], List[np.ndarray]]


def load_fp32(model, files: List[Path]):
    """The FP32 model ``build()`` wrote: a GraphDef, an MXNet (symbol, arg, aux) or an ONNX
    ModelProto."""
    if model.FRAMEWORK == "tensorflow":
        import tensorflow as tf
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(files[0].read_bytes())
        return graph_def
    if model.FRAMEWORK == "onnx":
        from ratelnn.frontend.onnx.model_io import import_onnx
        return import_onnx().load(str(files[0]))
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
    from .flow import framework_converter
    converter = framework_converter(model.FRAMEWORK)
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
