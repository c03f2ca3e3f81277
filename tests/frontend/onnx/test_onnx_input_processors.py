"""Input processors compiled into an ONNX model: with ``src_dtype: U8`` the compiled model's
graph input is UINT8 in ``src_format`` / ``src_layout`` (ONNX models default to NCHW), and
fed the raw image (colour patches of scikit-image's photos) it gives the quantized model's
outputs on the normalised float image, bit for bit; the quantized model keeps float input."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

MEAN, STD = [120.0, 110.0, 100.0], [60.0, 55.0, 50.0]


def _conv_model():
    """x [N, 3, 16, 16] -> Conv 3x3 (8) -> Relu -> GlobalAveragePool -> Flatten -> y [N, 8]."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = (rng.normal(size=(8, 3, 3, 3)) * 0.3).astype(np.float32)
    b = (rng.normal(size=8) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "patch_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("src_format, src_layout", [("BGR", "NHWC"), ("RGB", "NCHW")])
def test_onnx_compiled_model_takes_the_raw_u8_image(tmp_path, src_format, src_layout):
    from onnx import TensorProto
    from ratelnn.frontend.onnx import converter, onnx_session
    from ratelnn.testing.photo_patches import photo_patches

    (train, _), (test, _) = photo_patches()
    config = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[8, 3, 16, 16]],
              "output_dir": str(tmp_path),
              "input_processors": [{"tensor_name": "x", "src_dtype": "U8", "src_format": src_format,
                                    "src_layout": src_layout, "tensor_format": "RGB", "mean": MEAN, "std": STD}]}
    conv = converter(_conv_model(), config)
    conv.calibrate(np.ascontiguousarray(train[::8].transpose(0, 3, 1, 2)), progress=False)
    compiled, quantized = conv.to_npu(), conv.to_quant()
    assert [i.type.tensor_type.elem_type for i in compiled.graph.input] == [TensorProto.UINT8]
    assert [i.type.tensor_type.elem_type for i in quantized.graph.input] == [TensorProto.FLOAT]
    rgb = test[:64]
    raw = rgb[..., ::-1] if src_format == "BGR" else rgb
    raw = np.ascontiguousarray(raw.transpose(0, 3, 1, 2) if src_layout == "NCHW" else raw)
    floats = ((rgb - np.array(MEAN)) / np.array(STD)).astype(np.float32).transpose(0, 3, 1, 2)
    got = onnx_session(compiled).run(None, {"x": raw})[0]
    want = onnx_session(quantized).run(None, {"x": np.ascontiguousarray(floats)})[0]
    # the engine computes the input codes from the pixels, the quantized model quantizes the
    # float image: a code may differ by one where the two round a tie differently
    cosine = float(np.sum(got * want) / np.linalg.norm(got) / np.linalg.norm(want))
    assert cosine > 0.99999 and np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
