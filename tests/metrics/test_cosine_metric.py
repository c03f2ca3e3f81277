"""The lowest output cosine: each output judged on its own, so a small output that loses is not
hidden by a large one; tune() judges by it.  Its scale-aware form (the automatic step and the
accuracy passes): noise alone leaves it at the cosine, a shrunk output reads its norm ratio."""
from __future__ import annotations

import numpy as np
import pytest

from ratelnn.metrics import (cosine_gap_interval, lowest_agreement, lowest_cosine, norm_ratios, output_agreements,
                             output_cosines)
from ratelnn.tune import cosine_metric

pytestmark = pytest.mark.no_tf_math


def test_a_small_output_that_loses_is_not_hidden_by_a_large_one():
    rng = np.random.default_rng(0)
    large, small = rng.normal(0, 100, (8, 10)), rng.normal(0, 1, (8, 1))
    lost = small + rng.normal(0, 1, small.shape)                 # the small output's cosine near 0.7
    cosines = output_cosines([large, lost], [large, small])
    together = np.concatenate([large.ravel(), lost.ravel()]) @ np.concatenate([large.ravel(), small.ravel()])
    together /= np.linalg.norm(np.concatenate([large.ravel(), lost.ravel()])) * np.linalg.norm(
        np.concatenate([large.ravel(), small.ravel()]))
    assert cosines[0] == pytest.approx(1.0) and cosines[1] < 0.9
    assert together > 0.9999 and lowest_cosine([large, lost], [large, small]) == cosines[1]


def test_all_zero_outputs_and_mismatched_counts():
    zeros, ones = np.zeros(4), np.ones(4)
    assert output_cosines([zeros, ones], [zeros, ones]) == [1.0, 1.0]
    assert output_cosines([zeros], [ones]) == [0.0]
    assert lowest_cosine([], []) == 1.0
    with pytest.raises(ValueError):
        output_cosines([ones], [ones, ones])


def test_one_function_judges_everywhere():
    assert cosine_metric is lowest_cosine


def test_agreement_is_the_cosine_unless_the_output_shrinks():
    rng = np.random.default_rng(0)
    scores = rng.uniform(0, 1, (64, 1000))
    noisy = scores + rng.normal(0, 0.2, scores.shape)          # zero-mean noise: the norm grows
    shrunk = 0.4 * scores + rng.normal(0, 0.01, scores.shape)  # the cosine barely moves, the scale does
    cos = output_cosines([noisy, shrunk], [scores, scores])
    agreements = output_agreements([noisy, shrunk], [scores, scores])
    assert cos[0] < 0.96 and agreements[0] == cos[0]
    ratio = norm_ratios([shrunk], [scores])[0]
    assert cos[1] > 0.99 and agreements[1] == pytest.approx(ratio) and ratio < 0.41
    assert output_agreements([2.5 * scores], [scores])[0] == pytest.approx(1.0)   # growth is the cosine's
    assert lowest_agreement([noisy, shrunk], [scores, scores]) == agreements[1]
    assert output_agreements([np.zeros(4)], [np.ones(4)]) == [0.0] and lowest_agreement([], []) == 1.0


def test_the_gap_interval_tells_a_real_gap_from_the_choice_of_inputs():
    """Paired bootstrap of the gap between two models' lowest cosine: two models with the same
    noise level differ by chance (the interval holds 0 and the measured gap); a model with twice
    the noise on a second output is below by an interval that excludes 0; a model against
    itself: exactly 0."""
    rng = np.random.default_rng(0)
    first, second = rng.normal(0, 1, (40, 7)), rng.normal(0, 1, (40, 3, 2))
    noisy = lambda x, s: x + rng.normal(0, s, x.shape)
    a, b = [noisy(first, 0.05), noisy(second, 0.05)], [noisy(first, 0.05), noisy(second, 0.05)]
    reference = [first, second]
    gap = lowest_cosine(a, reference) - lowest_cosine(b, reference)
    low, high = cosine_gap_interval(reference, a, b)
    assert low < min(gap, 0.0) and max(gap, 0.0) < high and high - low < 0.002
    worse = [a[0], noisy(second, 0.1)]
    low, high = cosine_gap_interval(reference, worse, b)
    assert low <= lowest_cosine(worse, reference) - lowest_cosine(b, reference) <= high < 0
    assert cosine_gap_interval(reference, a, a) == (0.0, 0.0)
