"""Input processors compiled into an MXNet model: a Gluon CNN trained here on colour patches
of scikit-image's photos (NCHW, normalised RGB), compiled with ``src_dtype: U8``, takes the
raw uint8 image (BGR NHWC, or YUV420SP in an NCHW buffer) through the MXNet custom op; its
first engine runs bit-identically on both executors and the model gives the quantized
model's top-1 (the quantized model fed the normalised float RGB image)."""
from __future__ import annotations

import json

import numpy as np
import pytest


BATCH = 32


@pytest.fixture(scope="module")
def patches(mx):
    """``(model, output name, (x_train, y_train), (x_test, y_test))``."""
    from ratelnn.testing.photo_patches import photo_patches, trained_patch_cnn_mx

    train, test = photo_patches()
    model = trained_patch_cnn_mx(mx, *train)
    return model, model[0].list_outputs()[0][:-len("_output")], train, test


def _nchw(x):
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("src_format, src_layout", [("BGR", "NHWC"), ("YUV420SP", "NCHW")])
def test_mxnet_model_takes_the_raw_u8_image(mx, patches, tmp_path, src_format, src_layout):
    from ratelnn.frontend.mxnet import converter
    from ratelnn.frontend.mxnet.model_io import engine_nodes
    from ratelnn.npu.engine import Engine
    from ratelnn.testing import run_graph
    from ratelnn.testing.photo_patches import MEAN, STD, normalized, nv12

    model, out, (x_train, _), (x_test, _) = patches
    config = {"input_nodes": ["data"], "output_nodes": [out], "input_shapes": "data:32x3x16x16",
              "output_dir": str(tmp_path),
              "input_processors": [{"tensor_name": "data", "src_dtype": "U8", "src_format": src_format,
                                    "src_layout": src_layout, "tensor_format": "RGB", "tensor_layout": "NCHW",
                                    "mean": list(MEAN), "std": list(STD)}]}
    conv = converter(model, config)
    conv.calibrate(_nchw(x_train), progress=False)
    compiled, quantized = conv.to_npu(), conv.to_quant()
    if src_format == "BGR":
        raw, rgb = np.ascontiguousarray(x_test[..., ::-1]), x_test
    else:
        raw, rgb = nv12(x_test)
        raw = raw.reshape(len(raw), 1, *raw.shape[1:3])   # the same bytes as NCHW
    (_, blob), = engine_nodes(json.loads(compiled[0].tojson())["nodes"])
    engine = Engine.from_bytes(blob)
    assert [(s.shape[1:], s.dtype) for s in engine.inputs] == [(raw.shape[1:], np.uint8)]
    for got, want in zip(engine.run([raw[:BATCH + 5]], backend="native"),
                         engine.run([raw[:BATCH + 5]], backend="reference")):
        assert np.array_equal(got, want)
    npu = run_graph(compiled, "data", out, raw, BATCH, framework="mxnet")
    quant = run_graph(quantized, "data", out, _nchw(normalized(rgb)), BATCH, framework="mxnet")
    assert np.mean(npu.argmax(1) == quant.argmax(1)) >= 0.995
