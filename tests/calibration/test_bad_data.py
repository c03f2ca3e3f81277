"""Calibration data checks (docs/reliability.md): dtype kinds that are not real numbers are
refused naming the input."""
from __future__ import annotations

import numpy as np
import pytest

from ratelnn.calibration.data import CalibrationData, DataError, InputSpec

# data checks only; 'tensorflow' names the data layout, no TensorFlow runs (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math


def batches(data):
    return list(CalibrationData(data, [InputSpec("x", (2, 3), "float32")], {}, 2, "tensorflow"))


@pytest.mark.parametrize("data, what", [
    (np.array([["a", "b", "c"]] * 2), "strings"),
    (np.ones((2, 3), np.complex64), "complex numbers"),
    (np.array([[object(), 1, 2]] * 2, dtype=object), "Python objects"),
])
def test_non_real_calibration_data_is_refused_naming_the_input(data, what):
    with pytest.raises(DataError, match=f"input 'x' holds {what}"):
        batches(data)


def test_integer_and_bool_data_are_converted():
    assert batches(np.ones((2, 3), np.int64))[0].feeds["x"].dtype == np.float32
