"""Shared code of the zoo model tests (tests/agraph/test_zoo_*.py): load a zoo folder's
model.py / eval.py, build its FP32 files, take them through calibrate -> to_quant ->
to_npu with ratelnn directly, and give ``run`` callables of the three stages."""
from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

from ratelnn.runners import runner_for

Run = Callable[[List[np.ndarray]], List[np.ndarray]]


def zoo_modules(name: str):
    """``(model, eval)`` modules of ``agraph/models/<name>/``."""
    return (importlib.import_module(f"agraph.models.{name}.model"),
            importlib.import_module(f"agraph.models.{name}.eval"))


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
    def run(inputs: List[np.ndarray]) -> List[np.ndarray]:
        feeds = dict(zip(model.INPUTS, inputs))
        return runner_for(model.FRAMEWORK, graph).run(feeds, model.OUTPUTS)
    return run


def stages(model, workdir: Path, calibration: np.ndarray, input_shapes=None,
           config: Optional[dict] = None) -> Dict[str, Run]:
    """Build the model in ``workdir``, calibrate on the preprocessed batch ``calibration``
    (all of it, one batch) with the model's optional ``CONVERTER_CONFIG`` and ``config``, quantize
    and compile: ``{"fp32", "quant", "npu"}`` -> run;
    also ``"seconds"`` -> {step: wall seconds}."""
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
           "output_dir": str(workdir / "stats"), **getattr(model, "CONVERTER_CONFIG", {}), **(config or {})}
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


class LocalDataset:
    """Stand-in for ``agraph.datasets.Dataset`` until the framework lands: the same samples
    and labels (built from scikit-image directly, no archive) and ``batches()``."""

    def __init__(self, key: str) -> None:
        from skimage import data
        self.key = key
        if key == "lfw_face_nonface":
            self.samples = data.lfw_subset().astype(np.float32)
            self.labels = np.array([1] * 100 + [0] * 100, dtype=np.int64)
        elif key == "sample_photos":
            images = []
            for name in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry",
                         "colorwheel", "camera", "moon", "brick", "grass", "gravel", "clock", "text", "page"):
                image = np.asarray(getattr(data, name)())
                images.append(np.repeat(image[..., None], 3, axis=2) if image.ndim == 2 else image[..., :3])
            self.samples = np.empty(len(images), dtype=object)
            self.samples[:] = images
            self.labels = None
        else:
            raise KeyError(key)

    def __len__(self) -> int:
        return len(self.samples)

    def batches(self, batch_size: int = 32, limit: Optional[int] = None):
        count = len(self.samples) if limit is None else min(limit, len(self.samples))
        for start in range(0, count, batch_size):
            end = min(start + batch_size, count)
            yield self.samples[start:end], None if self.labels is None else self.labels[start:end]


def mirrored(samples) -> np.ndarray:
    """Dataset samples flipped left-right: the calibration set of the zoo tests (the same
    images the metric is measured on would make calibration look better than it is)."""
    flipped = [np.ascontiguousarray(np.asarray(s)[:, ::-1]) for s in samples]
    if len({f.shape for f in flipped}) == 1:
        return np.stack(flipped)
    out = np.empty(len(flipped), dtype=object)
    out[:] = flipped
    return out


def measure(name: str, workdir: Path, dataset, input_shapes=None, limit=None) -> Dict[str, object]:
    """Zoo model ``name`` through FP32 -> quant -> npu (calibrated on the mirrored samples of
    ``dataset``), evaluated by its eval.py at each stage: ``{stage: ModelMetrics}`` plus
    ``"seconds"`` (build/calibrate/to_quant/to_npu/evaluate wall seconds)."""
    model, evaluation = zoo_modules(name)
    samples = dataset.samples if limit is None else dataset.samples[:limit]
    extra = {} if input_shapes is None else {"input_shapes": input_shapes}
    calibration = model.preprocess(mirrored(samples), **extra)
    runs = stages(model, workdir, calibration, input_shapes=input_shapes)
    start = time.time()
    result = {stage: evaluation.evaluate(runs[stage], dataset, stage, limit=limit, reference=runs["fp32"], **extra)
              for stage in ("fp32", "quant", "npu")}
    runs["seconds"]["evaluate"] = time.time() - start
    result["seconds"] = runs["seconds"]
    return result
