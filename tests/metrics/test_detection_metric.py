"""Detections of a candidate model compared with the float model's: greedy matching by IoU,
lost and spurious detections around the score threshold, pooled over images, bounds."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ratelnn.metrics import DetectionBounds, Detections, box_iou, compare_detections

pytestmark = pytest.mark.no_tf_math


def test_box_iou_of_hand_computed_overlaps():
    a = np.array([[0, 0, 10, 10], [0, 0, 2, 2]])
    b = np.array([[5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 10, 10]])
    expected = np.array([[50 / 150, 0.0, 1.0], [0.0, 0.0, 4 / 100]])
    np.testing.assert_allclose(box_iou(a, b), expected)
    assert box_iou(np.zeros((0, 4)), b).shape == (0, 3)


def test_identical_detections_pass_with_iou_one():
    boxes = np.array([[10, 10, 50, 60], [100, 100, 140, 150]])
    ref = Detections(boxes, [0.9, 0.7])
    result = compare_detections(ref, Detections(boxes.copy(), [0.9, 0.7]))
    assert (result.matched, result.lost, result.spurious) == (2, 0, 0)
    assert result.mean_iou == 1.0 and result.score == 1.0 and result.max_score_error == 0.0
    assert result.passed


def test_each_candidate_box_matches_one_float_box_best_overlap_first():
    """Two float boxes overlap the one candidate box (IoU 0.82 and 1.0): it pairs with the
    second, and the first is lost (a per-box argmax would pair both with it)."""
    ref = Detections([[0, 0, 10, 10], [1, 0, 11, 10]], [0.9, 0.9])
    cand = Detections([[1, 0, 11, 10]], [0.9])
    result = compare_detections(ref, cand)
    assert result.matched == 1 and result.lost == 1
    assert result.mean_iou == 1.0 and result.score == pytest.approx(0.5)


def test_shifted_box_lowers_mean_iou_below_the_bound():
    ref = Detections([[0, 0, 100, 100]], [0.95])
    cand = Detections([[20, 0, 120, 100]], [0.93])   # IoU 80 / 120
    result = compare_detections(ref, cand)
    assert result.mean_iou == pytest.approx(8000 / 12000)
    assert result.lost == 0 and not result.passed
    assert result.mean_score_error == pytest.approx(0.02)
    assert compare_detections(ref, cand, DetectionBounds(min_mean_iou=0.6)).passed


def test_missing_box_is_lost_and_extra_box_is_spurious():
    ref = Detections([[0, 0, 10, 10], [50, 50, 60, 60]], [0.9, 0.8])
    cand = Detections([[0, 0, 10, 10], [200, 200, 220, 220]], [0.9, 0.6])
    result = compare_detections(ref, cand)
    assert (result.reference, result.candidate, result.matched, result.lost, result.spurious) == (2, 2, 1, 1, 1)
    assert result.lost_scores == ((0.8, None),)
    assert not result.passed
    assert result.score == pytest.approx(1.0 / 3)    # one kept IoU 1 over 2 float + 1 spurious
    assert compare_detections(ref, cand, DetectionBounds(max_lost=1)).passed
    assert not compare_detections(ref, cand, DetectionBounds(max_lost=1, max_spurious=0)).passed


def test_score_falling_under_the_threshold_counts_as_lost():
    ref = Detections([[0, 0, 10, 10]], [0.55])
    cand = Detections([[0, 0, 10, 10]], [0.45])
    result = compare_detections(ref, cand)
    assert result.matched == 1 and result.lost == 1 and result.spurious == 0
    assert result.lost_scores == ((0.55, 0.45),)
    assert result.mean_iou == 1.0 and result.score == 0.0 and not result.passed


def test_weak_float_detections_do_not_count():
    """A float box under the threshold is neither lost when missing nor, matched by a strong
    candidate box, a correct detection: that candidate box is spurious."""
    ref = Detections([[0, 0, 10, 10], [30, 30, 40, 40]], [0.3, 0.2])
    cand = Detections([[0, 0, 10, 10]], [0.7])
    result = compare_detections(ref, cand)
    assert (result.reference, result.lost, result.spurious) == (0, 0, 1)
    assert math.isnan(result.mean_iou)


def test_labels_must_agree_to_match():
    ref = Detections([[0, 0, 10, 10]], [0.9], labels=[1])
    assert compare_detections(ref, Detections([[0, 0, 10, 10]], [0.9], labels=[2])).lost == 1
    assert compare_detections(ref, Detections([[0, 0, 10, 10]], [0.9], labels=[1])).lost == 0


def test_pooled_over_images():
    one = Detections([[0, 0, 10, 10]], [0.9])
    other = Detections([[0, 0, 10, 10]], [0.9])
    shifted = Detections([[0, 0, 10, 8]], [0.9])
    result = compare_detections([one, other], [Detections(one.boxes, one.scores), shifted])
    assert result.matched == 2 and result.mean_iou == pytest.approx(0.9)


def test_bad_inputs_name_what_is_wrong():
    with pytest.raises(ValueError, match="2 boxes but 1 scores"):
        Detections(np.zeros((2, 4)), [0.5])
    with pytest.raises(ValueError, match="1 reference images but 2 candidate"):
        compare_detections([Detections([], [])], [Detections([], []), Detections([], [])])
