"""The lowest output cosine: each output judged on its own, so a small output that loses is not
hidden by a large one; one function for the automatic step, the accuracy passes and tune()."""
from __future__ import annotations

import numpy as np
import pytest

from ratelnn.metrics import lowest_cosine, output_cosines
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
