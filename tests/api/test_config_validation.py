"""Validation at the door (docs/reliability.md): config values are type- and range-checked when
the converter is made, with a ConfigError naming key, value and expectation."""
from __future__ import annotations

import pytest

from ratelnn.config import ConfigError, normalize
from ratelnn.frontend.tensorflow import converter

from helpers.stats import small_graph_def

# config checks refuse before any graph runs (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math


def cfg(tmp_path, **extra):
    return {"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[4, 8, 8, 3]],
            "output_dir": str(tmp_path / "out"), **extra}


BAD = {
    "input_shapes as a string": ({"input_shapes": "abc"}, r"input_shapes must be a list of shapes.*'abc'"),
    "negative dim": ({"input_shapes": [[4, -8, 8, 3]]}, r"dimension -8 is not a positive integer"),
    "zero dim": ({"input_shapes": [[0, 8, 8, 3]]}, r"dimension 0 is not a positive integer"),
    "fractional dim": ({"input_shapes": [[4, 8.7, 8, 3]]}, r"dimension 8.7 is not a positive integer"),
    "boolean dim": ({"input_shapes": [[4, True, 8, 3]]}, r"dimension True is not a positive"),
    "output_dir a number": ({"output_dir": 12345}, r"output_dir must be a path.*12345 \(int\)"),
    "layer_configs entry a string": ({"layer_configs": ["conv1"]}, r"layer_configs\[0\] must be a mapping.*'conv1'"),
    "misspelled quant_cfg role": ({"quant_cfg": {"conv_weight": {"num_bits": 16}}},
                                  r"quant_cfg role 'conv_weight' is unknown \(did you mean 'conv_weights'\?\); known roles: conv_activations"),
    "duplicate input_nodes": ({"input_nodes": ["x", "x:0"], "input_shapes": [[4, 8, 8, 3]] * 2},
                              r"'input_nodes' names \['x'\] more than once"),
    "output node that is an input": ({"output_nodes": ["x:0"]}, r"output_nodes \['x'\] are also input_nodes"),
    "ema_decay out of range": ({"ema_decay": 1.5}, r"'ema_decay' must be a number in \[0, 1\], got 1.5"),
    "enable_EMA not a bool": ({"enable_EMA": "yes"}, r"'enable_EMA' must be true or false"),
    "merge_statistics not a bool": ({"merge_statistics": 1}, r"'merge_statistics' must be true or false"),
    "full_range_outputs not a bool": ({"full_range_outputs": "no"}, r"'full_range_outputs' must be true or false"),
    "max_total_bytes zero": ({"max_total_bytes": 0}, r"'max_total_bytes' must be a byte count in \[1, 2\^40\], got 0"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_value_is_a_config_error_naming_key_and_value(tmp_path, case):
    extra, message = BAD[case]
    with pytest.raises(ConfigError, match=message):
        normalize(cfg(tmp_path, **extra), "tensorflow")
    with pytest.raises(ConfigError, match=message):
        converter(small_graph_def(), cfg(tmp_path, **extra))
    assert not (tmp_path / "out").exists()


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("")
    with pytest.raises(ConfigError, match="output_dir .* exists and is not a directory"):
        normalize(cfg(tmp_path), "tensorflow")


def test_good_values_are_normalised(tmp_path):
    from pathlib import Path
    c = normalize(cfg(tmp_path, input_shapes=[[None, 8.0, 8, 3]], output_dir=Path(tmp_path)), "tensorflow")
    assert c["input_shapes"] == [[None, 8, 8, 3]] and c["output_dir"] == str(tmp_path)
