"""A detector's boxes from a candidate model (quantized, compiled) against the float model's
boxes on the same images, as the application sees them (docs/quantization.md, "Detection
models").

Both sides are decoded by the detector's own post-processing (anchors, NMS, thresholds) into
:class:`Detections`.  Per image, boxes are matched greedily: every pair (float box, candidate
box) with IoU >= ``match_iou`` (and the same label, when labels are given), highest IoU
first, each box in at most one pair.  Then, with ``t`` = ``score_threshold``:

- *lost*: a float detection scoring >= t with no match, or whose match scores < t (both
  scores of each are kept, ``lost_scores``);
- *spurious*: a candidate detection scoring >= t with no match, or whose match scores < t;
- *mean matched IoU*: over the matched pairs whose float box scores >= t;
- *score error*: ``|score_float - score_candidate|`` over the same pairs (mean and max);
- *score*: the matched IoU of every float detection >= t (0 when lost), averaged over those
  detections plus the spurious ones (1.0 when there are none): one number in [0, 1] to rank
  candidates by.

:func:`compare_detections` pools all images and says whether :class:`DetectionBounds` hold
(defaults: mean matched IoU >= 0.9, no lost detection, spurious ones not bounded).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np


@dataclasses.dataclass
class Detections:
    """One image's detections: ``boxes`` [N, 4] ``(x1, y1, x2, y2)`` (any unit, x2 >= x1),
    ``scores`` [N] in [0, 1], optional ``labels`` [N] (class ids)."""
    boxes: np.ndarray
    scores: np.ndarray
    labels: Optional[np.ndarray] = None

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, np.float64).reshape(-1, 4)
        self.scores = np.asarray(self.scores, np.float64).reshape(-1)
        if len(self.scores) != len(self.boxes):
            raise ValueError(f"Detections: {len(self.boxes)} boxes but {len(self.scores)} scores")
        if self.labels is not None:
            self.labels = np.asarray(self.labels).reshape(-1)
            if len(self.labels) != len(self.boxes):
                raise ValueError(f"Detections: {len(self.boxes)} boxes but {len(self.labels)} labels")


@dataclasses.dataclass(frozen=True)
class DetectionBounds:
    """What a candidate must reach: ``min_mean_iou`` (mean matched IoU), at most ``max_lost``
    lost and (when not None) ``max_spurious`` spurious detections; boxes pair when their IoU
    is >= ``match_iou``; detections count when they score >= ``score_threshold``."""
    min_mean_iou: float = 0.9
    max_lost: int = 0
    max_spurious: Optional[int] = None
    score_threshold: float = 0.5
    match_iou: float = 0.5


@dataclasses.dataclass
class DetectionAgreement:
    """The pooled comparison (module docstring): counts over all images, the matched IoUs and
    score errors of the float detections >= the threshold, and whether the bounds hold."""
    reference: int                 # float detections scoring >= the threshold
    candidate: int                 # candidate detections scoring >= the threshold
    matched: int
    lost: int
    spurious: int
    mean_iou: float                # NaN when nothing matched
    min_iou: float
    mean_score_error: float
    max_score_error: float
    score: float
    passed: bool
    bounds: DetectionBounds
    # (float score, candidate score or None when unmatched) of every lost detection, in image order
    lost_scores: Tuple[Tuple[float, Optional[float]], ...] = ()

    def summary(self) -> str:
        verdict = "pass" if self.passed else "FAIL"
        return (f"{verdict}: mean matched IoU {self.mean_iou:.4f} (min {self.min_iou:.4f}) over {self.matched} of "
                f"{self.reference} detections >= {self.bounds.score_threshold}, lost {self.lost}, spurious "
                f"{self.spurious}, score error mean {self.mean_score_error:.4f} max {self.max_score_error:.4f}")


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` [N, 4] with every box of ``b`` [M, 4]: [N, M] (areas as
    ``(x2 - x1) * (y2 - y1)``; 0 where the union is empty)."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    w = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    h = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = w * h
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def greedy_pairs(reference: Detections, candidate: Detections, match_iou: float):
    """``[(i, j, iou)]``: reference box i paired with candidate box j, highest IoU first,
    each box at most once, IoU >= ``match_iou``, labels equal when both sides have them."""
    iou = box_iou(reference.boxes, candidate.boxes)
    if reference.labels is not None and candidate.labels is not None:
        iou = np.where(reference.labels[:, None] == candidate.labels[None, :], iou, 0.0)
    rows, cols = np.nonzero(iou >= match_iou)
    order = np.lexsort((cols, rows, -iou[rows, cols]))
    used_i, used_j, pairs = set(), set(), []
    for k in order:
        i, j = int(rows[k]), int(cols[k])
        if i not in used_i and j not in used_j:
            used_i.add(i)
            used_j.add(j)
            pairs.append((i, j, float(iou[i, j])))
    return pairs


Images = Union[Detections, Sequence[Detections]]


def compare_detections(reference: Images, candidate: Images,
                       bounds: DetectionBounds = DetectionBounds()) -> DetectionAgreement:
    """The candidate's detections against the float model's (one image or a sequence of
    images in the same order), pooled over images: see the module docstring."""
    reference = [reference] if isinstance(reference, Detections) else list(reference)
    candidate = [candidate] if isinstance(candidate, Detections) else list(candidate)
    if len(reference) != len(candidate):
        raise ValueError(f"compare_detections: {len(reference)} reference images but {len(candidate)} candidate images")
    t = bounds.score_threshold
    ious, errors, kept = [], [], 0.0
    n_ref = n_cand = spurious = 0
    lost = []
    for ref, cand in zip(reference, candidate):
        pairs = greedy_pairs(ref, cand, bounds.match_iou)
        match_of_ref = {i: (j, v) for i, j, v in pairs}
        match_of_cand = {j: i for i, j, _ in pairs}
        strong_ref, strong_cand = np.nonzero(ref.scores >= t)[0], np.nonzero(cand.scores >= t)[0]
        n_ref, n_cand = n_ref + len(strong_ref), n_cand + len(strong_cand)
        for i in strong_ref:
            if i not in match_of_ref:
                lost.append((float(ref.scores[i]), None))
                continue
            j, v = match_of_ref[i]
            ious.append(v)
            errors.append(abs(ref.scores[i] - cand.scores[j]))
            if cand.scores[j] < t:
                lost.append((float(ref.scores[i]), float(cand.scores[j])))
            else:
                kept += v
        spurious += sum(1 for j in strong_cand if j not in match_of_cand or ref.scores[match_of_cand[j]] < t)
    mean_iou = float(np.mean(ious)) if ious else math.nan
    counted = n_ref + spurious
    score = 1.0 if counted == 0 else kept / counted
    passed = (len(lost) <= bounds.max_lost and (bounds.max_spurious is None or spurious <= bounds.max_spurious)
              and (not ious or mean_iou >= bounds.min_mean_iou))
    return DetectionAgreement(n_ref, n_cand, len(ious), len(lost), spurious, mean_iou,
                              float(np.min(ious)) if ious else math.nan,
                              float(np.mean(errors)) if errors else math.nan,
                              float(np.max(errors)) if errors else math.nan, float(score), bool(passed), bounds,
                              tuple(lost))
