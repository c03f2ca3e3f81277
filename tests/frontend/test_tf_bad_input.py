"""Bad input through the public converter: each a clear exception
naming the problem, and nothing lost."""
import glob
import os

import numpy as np
import pytest

import ratelnn
from ratelnn.errors import CalibrationError, ModelError
from ratelnn.frontend.tensorflow import converter, freeze_keras


@pytest.fixture(scope="module")
def model():
    import tensorflow as tf
    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input((8, 8, 1))
    x = tf.keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    x = tf.keras.layers.Flatten()(x)
    out = tf.keras.layers.Dense(3)(x)
    graph_def, ins, outs = freeze_keras(tf.keras.Model(inp, out))
    return graph_def, ins, outs


def _config(model, tmp_path, **extra):
    _, ins, outs = model
    return {"input_nodes": ins, "output_nodes": outs, "input_shapes": [[2, 8, 8, 1]],
            "output_dir": str(tmp_path / "out"), **extra}


def _data(n=4):
    return np.random.default_rng(0).uniform(0, 1, (n, 8, 8, 1)).astype(np.float32)


def test_unknown_input_and_output_nodes(model, tmp_path):
    with pytest.raises(ModelError, match="nosuch_input"):
        converter(model[0], _config(model, tmp_path, input_nodes=["nosuch_input"]))
    with pytest.raises(ModelError, match="nosuch_output"):
        converter(model[0], _config(model, tmp_path, output_nodes=["nosuch_output"]))


def test_input_shapes_of_wrong_rank(model, tmp_path):
    with pytest.raises(ModelError, match="rank"):
        converter(model[0], _config(model, tmp_path, input_shapes=[[2, 8, 8]]))


def test_to_quant_before_calibration_names_the_missing_statistics(model, tmp_path):
    c = converter(model[0], _config(model, tmp_path))
    with pytest.raises(CalibrationError, match="no calibration statistics"):
        c.to_quant()
    with pytest.raises(CalibrationError, match="no calibration statistics"):
        c.to_npu()


def test_nan_or_inf_in_calibration_data(model, tmp_path):
    c = converter(model[0], _config(model, tmp_path))
    for bad in (np.nan, np.inf):
        x = _data()
        x[1, 3, 3, 0] = bad
        with pytest.raises(Exception, match="NaN|Inf") as info:
            c.calibrate(x, progress=False)
        assert not isinstance(info.value, (SystemError, MemoryError))


def test_corrupt_statistics_file_is_named(model, tmp_path):
    ratelnn.tf_init()
    c = converter(model[0], _config(model, tmp_path))
    c.calibrate(_data(), progress=False)
    c.to_quant()  # fine before the damage
    files = glob.glob(os.path.join(str(tmp_path / "out"), "**", "*.rstats"), recursive=True)
    assert files
    with open(files[0], "r+b") as f:
        f.seek(os.path.getsize(files[0]) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x5A]))
    c2 = converter(model[0], _config(model, tmp_path))
    with pytest.raises(CalibrationError, match=os.path.basename(files[0])):
        c2.to_quant()


def test_graph_that_is_not_frozen(model, tmp_path):
    import tensorflow as tf
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        v = tf.compat.v1.Variable(tf.ones([3, 2]), name="w")
        tf.identity(tf.matmul(x, v), name="y")
    cfg = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[1, 3]],
           "output_dir": str(tmp_path / "nf")}
    with pytest.raises(ModelError, match="not frozen"):
        converter(g.as_graph_def(), cfg)


def test_unknown_config_keys_kept_with_one_warning(model, tmp_path):
    cfg = _config(model, tmp_path, my_script_path="/opt/run.sh")
    with pytest.warns(UserWarning, match="my_script_path"):
        c = converter(model[0], cfg)
    assert c.config["my_script_path"] == "/opt/run.sh"
