"""Configuration forms (docs/architecture.md §14): graph patches before anything else runs: an
``input_shapes`` string that changes the placeholder's fixed image size, an ``op_processors``
attribute and ``const_processors`` values, each visible in the compiled model (engine shapes)
and in its outputs, which follow a Keras twin holding the patched model; and their errors."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from ratelnn.config import ConfigError
from ratelnn.errors import ModelError
from ratelnn.frontend.tensorflow import converter, freeze_keras
from ratelnn.frontend.tensorflow.model_io import engine_nodes
from ratelnn.npu.engine import Engine
from ratelnn.runners import run_model

BATCH = 2


def _keras(strides=1, flatten=False):
    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input((None, None, 3) if not flatten else (8, 8, 3))
    x = tf.keras.layers.Conv2D(4, 3, strides=strides, padding="valid", activation="relu")(inp)
    x = tf.keras.layers.Flatten()(x) if flatten else tf.keras.layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inp, tf.keras.layers.Dense(3)(x))


@pytest.fixture(scope="module")
def model():
    """The float model frozen with a fixed [2, 8, 8, 3] placeholder, its names and Keras model."""
    keras = _keras()
    graph_def, ins, outs = freeze_keras(keras, input_shapes=[[BATCH, 8, 8, 3]])
    nodes = {nd.name: nd for nd in graph_def.node}

    def const(ref):   # the Const node behind ref (through Identity nodes)
        nd = nodes[ref.split(":")[0]]
        return nd.name if nd.op == "Const" else const(nd.input[0])

    kernel = const(next(nd.input[1] for nd in graph_def.node if nd.op == "Conv2D"))
    dense_bias = const([nd for nd in graph_def.node if nd.op == "BiasAdd"][-1].input[1])
    return dict(graph_def=graph_def, inp=ins[0], out=outs[0], keras=keras, kernel=kernel, dense_bias=dense_bias)


def _compiled(model, tmp_path, size, **patches):
    config = {"input_nodes": [model["inp"]], "output_nodes": [model["out"]],
              "input_shapes": [[BATCH, 8, 8, 3]], "output_dir": str(tmp_path), "enable_EMA": False, **patches}
    c = converter(model["graph_def"], config)
    x = np.random.default_rng(1).uniform(0, 1, (8, size, size, 3)).astype(np.float32)
    c.calibrate(x, progress=False)
    npu = c.to_npu()
    y = np.concatenate([run_model("tensorflow", npu, {model["inp"]: x[i:i + BATCH]}, [model["out"]])[0]
                        for i in range(0, len(x), BATCH)])
    engine = Engine.from_bytes(engine_nodes(npu)[0][1])
    return x, y, engine


def _follows(y, ref, other=None):
    """``y`` (int8 model) is within quantization error of ``ref`` (10% of its range) and, when
    ``other`` is given, at least twice as far from ``other``."""
    err = float(np.max(np.abs(y - ref)))
    print(f"max error {err:.4f} of range {float(np.max(np.abs(ref))):.4f}"
          + ("" if other is None else f"; from the unpatched model {float(np.max(np.abs(y - other))):.4f}"))
    return err <= 0.1 * float(np.max(np.abs(ref))) and (other is None or float(np.max(np.abs(y - other))) > 2 * err)


def test_input_shapes_string_changes_the_fixed_image_size(model, tmp_path):
    x, y, engine = _compiled(model, tmp_path, 12, input_shapes=f"{model['inp']}:{BATCH}x12x12x3")
    assert list(engine.inputs[0].shape) == [BATCH, 12, 12, 3]
    assert _follows(y, model["keras"](x).numpy())


def test_input_shape_the_graph_cannot_take_names_the_node(tmp_path):
    graph_def, ins, outs = freeze_keras(_keras(flatten=True), input_shapes=[[BATCH, 8, 8, 3]])
    config = {"input_nodes": ins, "output_nodes": outs, "input_shapes": f"{ins[0]}:{BATCH}x12x12x3",
              "output_dir": str(tmp_path)}
    with pytest.raises(ModelError, match=r"node '[^']*(MatMul|Reshape)[^']*' \((MatMul|Reshape)\) cannot take them"):
        converter(graph_def, config)


def test_op_processors_set_an_attribute(model, tmp_path):
    twin = _keras(strides=2)
    twin.set_weights(model["keras"].get_weights())
    x, y, engine = _compiled(model, tmp_path, 8, op_processors=[{"op_type": "Conv", "attrs": {"strides": [2, 2]}}])
    assert engine.outputs and _follows(y, twin(x).numpy(), model["keras"](x).numpy())


def test_const_processors_replace_values_from_a_list_and_a_npy_file(model, tmp_path):
    kernel, bias, dense_w, dense_b = model["keras"].get_weights()
    new_kernel = -kernel[::-1]
    np.save(tmp_path / "kernel.npy", new_kernel)
    new_bias = [2.0, 0.0, -2.0]
    twin = _keras()
    twin.set_weights([new_kernel, bias, dense_w, np.asarray(new_bias, np.float32)])
    x, y, engine = _compiled(model, tmp_path / "out", 8, const_processors=[
        {"name": model["kernel"], "data_path": str(tmp_path / "kernel.npy")},
        {"name": model["dense_bias"], "data": new_bias}])
    assert _follows(y, twin(x).numpy(), model["keras"](x).numpy())


@pytest.mark.parametrize("patch, error, message", [
    ({"op_processors": [{"op_name": "nope", "attrs": {"strides": [2, 2]}}]}, ModelError, r"no node named \['nope'\]"),
    ({"op_processors": [{"op_type": "Conv", "attrs": {"stride": [2, 2]}}]}, ModelError,
     r"has no attribute 'stride'; its attributes: \[.*'strides'"),
    ({"op_processors": [{"op_type": "Conv", "attrs": {"strides": 2}}]}, ConfigError,
     r"op_processors\[0\].attrs.strides .* must be a list of 2 values"),
    ({"op_processors": [{"op_type": "Conv", "attrs": {"dilations": [5, 5]}}]}, ModelError,
     r"node .* cannot take its inputs"),
    ({"op_processors": [{"op_type": "Convolution3D", "attrs": {"x": 1}}]}, ConfigError, r"not a known op type"),
    ({"const_processors": [{"name": "nope", "data": [1]}]}, ModelError, r"'nope' is not a constant"),
    ({"const_processors": [{"name": "BIAS", "data": [1.0, 2.0]}]}, ConfigError, r"has shape \[3\], the new value \[2\]"),
    ({"const_processors": [{"name": "BIAS", "data": ["a", "b", "c"]}]}, ConfigError, r"not numbers"),
    ({"const_processors": [{"name": "BIAS", "data_path": "missing.npy"}]}, ConfigError, r"not an existing .npy"),
])
def test_bad_patches_are_clear_errors(model, tmp_path, patch, error, message):
    for entry in patch.get("const_processors", []):
        if entry["name"] == "BIAS":
            entry["name"] = model["dense_bias"]
    config = {"input_nodes": [model["inp"]], "output_nodes": [model["out"]],
              "input_shapes": [[BATCH, 8, 8, 3]], "output_dir": str(tmp_path), **patch}
    with pytest.raises(error, match=message):
        converter(model["graph_def"], config)
