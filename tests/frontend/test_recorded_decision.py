"""The default build's decision travels with the exported ONNX and MXNet models (ONNX
``metadata_props``, a hidden attribute of the MXNet symbol) and the models still run; a build
with ``accuracy_auto`` off records nothing."""
from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.ir_graphs import build_cnn

DATA = np.random.default_rng(0).normal(0, 1, (32, 3, 8, 8)).astype(np.float32)
CONFIG = {"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[8, 3, 8, 8]]}


def _built(frontend, model, tmp_path, auto: bool):
    """(converter, compiled model) calibrated on DATA."""
    conv = frontend.converter(model, dict(CONFIG, output_dir=str(tmp_path / f"auto-{auto}"), accuracy_auto=auto))
    conv.calibrate(DATA, progress=False)
    return conv, conv.to_npu()


def test_onnx_compiled_model_records_the_decision(tmp_path):
    import onnx
    import ratelnn
    from ratelnn.frontend import onnx as rx
    graph = build_cnn("NCHW")
    graph.meta["onnx_opset"] = 17
    model = rx.export_model(graph)
    conv, npu = _built(rx, model, tmp_path, True)
    assert rx.recorded_meta(npu) == {"accuracy_auto": conv.accuracy_auto.record(conv.config["output_dir"])}
    saved = tmp_path / "npu.onnx"
    onnx.save(npu, str(saved))
    assert rx.recorded_meta(onnx.load(str(saved)))["accuracy_auto"]["cosine_before"] == conv.accuracy_auto.cosine_before
    assert ratelnn.onnx_session(npu).run(None, {"x": DATA[:8]})[0].shape == (8, 10)
    assert rx.recorded_meta(_built(rx, model, tmp_path, False)[1]) == {}


def test_mxnet_compiled_model_records_the_decision(tmp_path):
    from ratelnn.frontend import mxnet as mf
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    model = mf.export_symbol(build_cnn("NCHW"))
    conv, npu = _built(mf, model, tmp_path, True)
    assert mf.recorded_meta(npu) == {"accuracy_auto": conv.accuracy_auto.record(conv.config["output_dir"])}
    symbol = mx.sym.load_json(npu[0].tojson())   # as saved in <prefix>-symbol.json
    assert mf.recorded_meta(symbol) == mf.recorded_meta(npu)
    out = symbol.bind(mx.cpu(), {"x": mx.nd.array(DATA[:8]), **npu[1]}, aux_states=npu[2]).forward()[0]
    assert out.shape == (8, 10)
    assert mf.recorded_meta(_built(mf, model, tmp_path, False)[1]) == {}


@pytest.mark.parametrize("text", ["{not json", json.dumps([1, 2])])
def test_foreign_metadata_is_ignored(text):
    """Keys outside ``ratelnn.<recorded key>`` are not read; a recorded key is JSON."""
    from ratelnn.ir.recorded import decoded
    assert decoded([("other.accuracy_auto", text), ("ratelnn.unknown", text)]) == {}
