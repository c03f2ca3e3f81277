"""Input processors compiled into the model, in TensorFlow: a CNN trained here on colour
patches of scikit-image's photos (``ratelnn.testing.photo_patches``; test patches from photo
regions training never saw), built from a Pulsar2-form YAML config with ``src_dtype: U8``.
The compiled model takes the raw uint8 image in ``src_format`` / ``src_layout`` (BGR NHWC,
RGB NCHW, YUV420SP = NV12) and agrees with the FP32 model fed the normalised float RGB image;
the first engine holds the colour conversion and normalisation and runs bit-identically on
the reference and the native executor.  Without ``src_dtype: U8`` the compiled model still
takes the float image."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

BATCH = 32
# 16-bit activations and weights: the quantized model itself then keeps the FP32 top-1; only
# a test patch whose two best FP32 probabilities lie closer than this may flip
NEAR_TIE = 1e-3
SIXTEEN_BITS = {role: {"num_bits": 16} for role in ("conv_activations", "conv_weights", "conv_output",
                                                    "matmul_activations", "matmul_weights", "matmul_output",
                                                    "activations")}


@pytest.fixture(scope="module")
def patches_model():
    """``(graph_def, input, output, (x_train, y_train), (x_test, y_test))``: the trained CNN."""
    from ratelnn.frontend.tensorflow import freeze_keras
    from ratelnn.testing.photo_patches import photo_patches, trained_patch_cnn

    train, test = photo_patches()
    graph_def, ins, outs = freeze_keras(trained_patch_cnn(*train))
    return graph_def, ins[0], outs[0], train, test


def _build(patches_model, tmp_path, processor, sixteen_bits=True):
    """(compiled GraphDef, quantized GraphDef) from a Pulsar2-form YAML config."""
    import ratelnn
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.testing.photo_patches import MEAN, STD

    graph_def, name, out, (x_train, _), _ = patches_model
    config = {"input_nodes": [name], "output_nodes": [out], "input_shapes": f"{name}:{BATCH}x16x16x3",
              "output_dir": str(tmp_path / "out"),
              "input_processors": [{"tensor_name": name, "tensor_format": "RGB", "tensor_layout": "NHWC",
                                    "mean": list(MEAN), "std": list(STD), **processor}]}
    if sixteen_bits:
        config["quant"] = {"layer_configs": [{"layer_name": "DEFAULT", "data_type": "S16"}]}
        config["quant_cfg"] = SIXTEEN_BITS
    (tmp_path / "pulsar2.yaml").write_text(yaml.safe_dump(config))
    ratelnn.tf_init()
    conv = converter(graph_def, ratelnn.QuantConfig.from_file(tmp_path / "pulsar2.yaml"))
    conv.calibrate(x_train, progress=False)   # uint8 RGB patches, normalised by mean / std
    return conv.to_npu(), conv.to_quant()


def _only_engine_takes(compiled, raw: np.ndarray):
    """The compiled model's one engine, checked to read the raw image; its outputs on ``raw``
    from both executors must be the same bits."""
    from ratelnn.frontend.tensorflow.model_io import engine_nodes
    from ratelnn.npu.engine import Engine

    engines = engine_nodes(compiled)
    assert len(engines) == 1
    engine = Engine.from_bytes(engines[0][1])
    assert [(s.shape[1:], s.dtype) for s in engine.inputs] == [(raw.shape[1:], np.uint8)]
    sample = raw[:2 * BATCH + 3]
    for got, want in zip(engine.run([sample], backend="native"), engine.run([sample], backend="reference")):
        assert np.array_equal(got, want)
    return engine


def _agreement(patches_model, compiled, raw: np.ndarray, rgb: np.ndarray):
    """(top-1 agreement of the compiled model on ``raw`` with FP32 on normalised ``rgb``,
    agreement on the patches whose FP32 top-2 margin is at least NEAR_TIE)."""
    from ratelnn.testing import run_graph
    from ratelnn.testing.photo_patches import normalized

    graph_def, name, out, _, _ = patches_model
    fp32 = run_graph(graph_def, name, out, normalized(rgb), BATCH)
    npu = run_graph(compiled, name, out, raw, BATCH)
    same = npu.argmax(1) == fp32.argmax(1)
    top2 = np.sort(fp32, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] >= NEAR_TIE
    return float(same.mean()), float(same[clear].mean())


def _placeholder_dtype(graph_def, name):
    return next(n.attr["dtype"].type for n in graph_def.node if n.name == name)


def test_bgr_u8_input_agrees_with_fp32_on_normalised_rgb(patches_model, tmp_path):
    import tensorflow as tf

    _, name, _, _, (x_test, _) = patches_model
    compiled, quantized = _build(patches_model, tmp_path, {"src_dtype": "U8", "src_format": "BGR",
                                                          "src_layout": "NHWC"})
    assert _placeholder_dtype(compiled, name) == tf.uint8.as_datatype_enum
    assert _placeholder_dtype(quantized, name) == tf.float32.as_datatype_enum   # the quantized model keeps float
    bgr = np.ascontiguousarray(x_test[..., ::-1])
    engine = _only_engine_takes(compiled, bgr)
    assert engine.instructions[0].name.endswith("input_processor/normalize")
    overall, clear = _agreement(patches_model, compiled, bgr, x_test)
    assert clear == 1.0 and overall >= 0.999, (overall, clear)


@pytest.mark.parametrize("fmt", ["YUV420SP", "YUV420SP_VU"])
def test_yuv420sp_input_agrees_with_fp32_on_the_decoded_rgb(patches_model, tmp_path, fmt):
    from ratelnn.testing.photo_patches import nv12

    _, _, _, _, (x_test, _) = patches_model
    compiled, _ = _build(patches_model, tmp_path, {"src_dtype": "U8", "src_format": fmt,
                                                  "csc_mode": "FullRange_BT601"})
    raw, decoded = nv12(x_test, vu=fmt.endswith("VU"))
    _only_engine_takes(compiled, raw)
    overall, clear = _agreement(patches_model, compiled, raw, decoded)
    assert clear == 1.0 and overall >= 0.999, (overall, clear)


def test_nchw_rgb_u8_input_gives_the_quantized_models_int8_outputs(patches_model, tmp_path):
    """int8 model, raw RGB in NCHW: the layout change and normalisation in the engine give
    the outputs the quantized model gives on the float image."""
    from ratelnn.testing import run_graph
    from ratelnn.testing.photo_patches import normalized

    _, name, out, _, (x_test, _) = patches_model
    compiled, quantized = _build(patches_model, tmp_path, {"src_dtype": "U8", "src_layout": "NCHW"},
                                 sixteen_bits=False)
    nchw = np.ascontiguousarray(x_test[:8 * BATCH].transpose(0, 3, 1, 2))
    _only_engine_takes(compiled, nchw)
    npu = run_graph(compiled, name, out, nchw, BATCH)
    quant = run_graph(quantized, name, out, normalized(x_test[:8 * BATCH]), BATCH)
    assert np.mean(npu.argmax(1) == quant.argmax(1)) >= 0.995
    assert np.abs(npu - quant).max() <= 2 / 255


def test_without_u8_src_dtype_the_compiled_model_takes_the_normalised_float_image(patches_model, tmp_path):
    import tensorflow as tf
    from ratelnn.frontend.tensorflow.model_io import engine_nodes
    from ratelnn.npu.engine import Engine

    _, name, _, _, _ = patches_model
    compiled, _ = _build(patches_model, tmp_path, {"src_format": "BGR"}, sixteen_bits=False)
    assert _placeholder_dtype(compiled, name) == tf.float32.as_datatype_enum
    engine = Engine.from_bytes(engine_nodes(compiled)[0][1])
    assert not any("input_processor" in ins.name for ins in engine.instructions)


@pytest.mark.parametrize("processor, message", [
    ({"src_format": "YUV420SP", "csc_mode": "FullRange_BT601", "csc_mat": [0.0] * 12},
     r"give csc_mode or csc_mat, not both"),
    ({"csc_mode": "BT2020"}, r"csc_mode: 'BT2020' is not one of"),
    ({"src_format": "RGBA"}, r"src_format: 'RGBA' is not one of"),
])
def test_bad_input_processor_settings_are_config_errors_naming_the_key(patches_model, tmp_path, processor, message):
    from ratelnn.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        _build(patches_model, tmp_path, {"src_dtype": "U8", **processor}, sixteen_bits=False)
