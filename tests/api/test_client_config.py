"""The published MLPerf Inference v0.5 client of the original SDK runs unchanged.

Its ``update_config()`` dictionary is reproduced below with only paths and node names of this
model (the keys, the quant_cfg roles and their values, ``input_shapes``/``image_shape``
[1, 224, 224, 3] are the client's).  The model is the trained Fashion-MNIST CNN behind a fixed
224x224x3 front end (8x8 average pooling and a channel mean: the 28x28x1 image repeated 8x8
and over 3 channels comes back exactly), with its input renamed ``input_tensor`` and an
``ArgMax`` node appended, as the client's ResNet graph has.  The flow is the script's:
``converter`` -> ``to_cal`` -> calibration in a separate process that loads only TensorFlow
and the op library -> ``to_quant`` -> delete ``input_quant_nodes.txt`` in the current
directory -> ``to_npu`` -> rename ``input_quant_nodes.txt`` from the current directory ->
run the compiled model on quantized input ``round(x / in_scale)`` as the C++ client feeds it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

from helpers.paths import SCRIPTS

CAL_IMAGES = 32
TEST_IMAGES = 1000
BATCH = 50

ROLES = ["avgpool_input", "avgpool_output", "matmul_activations", "matmul_weights", "matmul_output",
         "mean_input", "mean_output", "maxpool_input", "maxpool_output", "conv_activations",
         "conv_weights", "conv_output", "reshape_input", "reshape_output"]
CLIENT_KEYS = ["image_shape", "model_dir", "data_dir", "cal_list_dir", "fp32_model_path", "qfp32_quant_path",
               "qfp32_cal_path", "npu_model_path", "output_type", "cal_cmd", "test_cmd", "use_prequant"]


def update_config(work: Path, output_type: str) -> dict:
    """The client's configuration dictionary (paths and node names of this test)."""
    config = {"input_shapes": [[1, 224, 224, 3]], "image_shape": [1, 224, 224, 3], "output_dir": "output",
              "model_dir": str(work / "model"), "data_dir": str(work / "data"),
              "cal_list_dir": str(work / "data" / "cal_list.txt"), "quant_cfg": {}}
    for role in ROLES:
        config["quant_cfg"][role] = {"is_per_channel": False, "num_bits": 8, "data_format": "NHWC"}
    for role in ("conv_weights", "conv_output", "matmul_weights", "matmul_output"):
        config["quant_cfg"][role]["is_per_channel"] = True
    config["quant_cfg"]["conv_weights"]["data_format"] = "HWIO"
    config["quant_cfg"]["matmul_activations"]["data_format"] = "NC"
    config["quant_cfg"]["matmul_weights"]["data_format"] = "IO"
    config["quant_cfg"]["matmul_output"]["data_format"] = "NC"
    config["quant_cfg"]["reshape_output"]["data_format"] = "NC"
    config["input_nodes"] = ["input_tensor"]
    config["output_nodes"] = ["ArgMax"]
    config["fp32_model_path"] = str(work / "model" / "fp32.pb")
    config["qfp32_quant_path"] = str(work / "model" / "quant.pb")
    config["qfp32_cal_path"] = str(work / "model" / "cal.pb")
    config["npu_model_path"] = str(work / "model" / "npu.pb")
    config["output_type"] = output_type
    config["cal_cmd"] = f"./calibrate --model {config['qfp32_cal_path']} --list {config['cal_list_dir']}"
    config["test_cmd"] = f"./classify --model {config['npu_model_path']} --data {config['data_dir']}"
    config["use_prequant"] = True
    config["enable_EMA"] = False
    config["remove_input_quant"] = True
    return config


def _client_graph(fashion_cnn):
    """Frozen GraphDef: input ``input_tensor`` [?, 224, 224, 3] -> CNN -> ``ArgMax``."""
    import tensorflow as tf
    from tensorflow.core.framework import node_def_pb2
    from tensorflow.keras import layers

    from ratelnn.frontend.tensorflow import freeze_keras

    inp = tf.keras.Input((224, 224, 3))
    x = layers.AveragePooling2D(8)(inp)
    gray = layers.Conv2D(1, 1, use_bias=False, kernel_initializer=tf.keras.initializers.Constant(1 / 3))
    logits = fashion_cnn(gray(x))
    graph_def, ins, outs = freeze_keras(tf.keras.Model(inp, logits))
    old = ins[0]
    for nd in graph_def.node:
        if nd.name == old:
            nd.name = "input_tensor"
        for k, ref in enumerate(nd.input):
            if ref.lstrip("^").split(":")[0] == old:
                nd.input[k] = ref.replace(old, "input_tensor", 1)
    axis = graph_def.node.add()
    axis.CopyFrom(node_def_pb2.NodeDef(name="ArgMax/dimension", op="Const"))
    axis.attr["dtype"].type = tf.int32.as_datatype_enum
    axis.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.int32(1)))
    argmax = graph_def.node.add()
    argmax.CopyFrom(node_def_pb2.NodeDef(name="ArgMax", op="ArgMax", input=[outs[0], "ArgMax/dimension"]))
    argmax.attr["T"].type = tf.float32.as_datatype_enum
    argmax.attr["Tidx"].type = tf.int32.as_datatype_enum
    argmax.attr["output_type"].type = tf.int64.as_datatype_enum
    return graph_def


def _images_224(x: np.ndarray) -> np.ndarray:
    """[n, 28, 28, 1] -> [n, 224, 224, 3], each pixel an 8x8 block in all three channels."""
    return np.repeat(np.repeat(np.repeat(x, 8, axis=1), 8, axis=2), 3, axis=3)


def _predict(graph_def, x: np.ndarray, feed) -> np.ndarray:
    from ratelnn.runners import run_model
    return np.concatenate([run_model("tensorflow", graph_def, {"input_tensor": feed(_images_224(x[i:i + BATCH]))},
                                     ["ArgMax"])[0] for i in range(0, len(x), BATCH)])


def test_published_client_config_runs_unchanged(fashion_mnist, fashion_cnn, tmp_path, monkeypatch):
    import tensorflow as tf

    import ratelnn
    import ratelnn.config
    from ratelnn.frontend.tensorflow import converter

    (x_train, _), (x_test, y_test) = fashion_mnist
    x_test, y_test = x_test[:TEST_IMAGES], y_test[:TEST_IMAGES]
    monkeypatch.chdir(tmp_path)                          # the script works in its own directory
    monkeypatch.setattr(ratelnn.config, "_warned_unknown", set())
    graph_def = _client_graph(fashion_cnn)
    config = update_config(tmp_path, "npu")
    for folder in ("model", "data"):
        (tmp_path / folder).mkdir()
    Path(config["fp32_model_path"]).write_bytes(graph_def.SerializeToString())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = converter(graph_def, config)
        cal_model = c.to_cal()
        Path(config["qfp32_cal_path"]).write_bytes(cal_model.SerializeToString())

        # calibration in another process: only TensorFlow and the op library
        cal = x_train[np.random.default_rng(0).permutation(len(x_train))[:CAL_IMAGES]]
        np.save(tmp_path / "data" / "cal.npy", _images_224(cal)[:, None])
        proc = subprocess.run([sys.executable, str(SCRIPTS / "calibrate_graphdef.py"),
                               ratelnn.ops_library_path("tensorflow"), config["qfp32_cal_path"],
                               str(tmp_path / "data" / "cal.npy"), "1",
                               "--input=input_tensor:0", "--output=ArgMax:0"],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]

        quant_model = c.to_quant()
        Path(config["qfp32_quant_path"]).write_bytes(quant_model.SerializeToString())
        if os.path.exists("input_quant_nodes.txt"):
            os.remove("input_quant_nodes.txt")
        npu_model = c.to_npu()
        Path(config["npu_model_path"]).write_bytes(npu_model.SerializeToString())
        os.rename("input_quant_nodes.txt", os.path.join(config["model_dir"], "input_quant_nodes.txt"))

    unknown = [w for w in caught if "unknown config keys" in str(w.message)]
    assert len(unknown) == 1, [str(w.message) for w in unknown]
    message = str(unknown[0].message)
    assert all(key in message for key in CLIENT_KEYS), message
    assert "quant_cfg" not in message, "every quant_cfg role and setting of the client is read"

    assert any(n.op == "RatelEngineOp" for n in npu_model.node)
    lines = (Path(config["model_dir"]) / "input_quant_nodes.txt").read_text().splitlines()
    in_scale = float(lines[0].split(":")[1])
    placeholder = next(n for n in npu_model.node if n.name == "input_tensor")
    in_dtype = tf.as_dtype(placeholder.attr["dtype"].type).as_numpy_dtype
    info = np.iinfo(in_dtype)

    def quantize_input(x):   # what the C++ client does with in_scale
        return np.clip(np.round(x / in_scale), info.min, info.max).astype(in_dtype)

    fp32 = float(np.mean(_predict(graph_def, x_test, lambda x: x) == y_test))
    npu = float(np.mean(_predict(npu_model, x_test, quantize_input) == y_test))
    print(f"\nclient config, {len(x_test)} Fashion-MNIST test images at 224x224x3: "
          f"FP32 {100 * fp32:.1f}%  NPU {100 * npu:.1f}% (in_scale {in_scale:.6g}, {in_dtype.__name__} input)")
    assert fp32 >= 0.85, fp32
    assert abs(fp32 - npu) <= 0.01, (fp32, npu)
