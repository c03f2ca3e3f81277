"""joint_converter on MXNet models: compiled symbols that run in MXNet with their engines
placed by the scheme (docs/architecture.md §8; the TF counterpart is tests/joint/test_tf_joint.py)."""
import json
import os

import numpy as np
import pytest

import ratelnn
from ratelnn.frontend.mxnet import joint_converter
from ratelnn.testing.mx_fashion import build_net, predict

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def joint(tmp_path_factory):
    ratelnn.mx_init()
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    tmp = tmp_path_factory.mktemp("joint_mx")
    models, configs = [], []
    for i, (width, inv) in enumerate([(4, 1), (8, 8)]):
        mx.random.seed(i)
        net = build_net(mx, width)
        net.initialize(mx.init.Xavier())
        net.hybridize()
        net(mx.nd.zeros((1, 1, 28, 28)))
        prefix = str(tmp / f"net{i}")
        net.export(prefix)
        models.append(prefix)
        configs.append({"input_nodes": ["data"], "output_nodes": ["fcnn_dense0_fwd"],
                        "input_shapes": [[4, 1, 28, 28]], "output_dir": str(tmp / f"out{i}"),
                        "model_name": f"gluon{i}", "invocations_per_frame": inv})
    jc = joint_converter(models, configs, device_info={0: 4})
    x = np.random.default_rng(0).uniform(0, 1, (16, 1, 28, 28)).astype(np.float32)
    for c in jc.converters:
        c.calibrate(x, progress=False)
    return mx, jc, jc.to_npu(), x


def test_joint_mxnet_models_run_and_match_single_compilation(joint):
    mx, jc, npu_models, x = joint
    for i, (c, model) in enumerate(zip(jc.converters, npu_models)):
        nodes = json.loads(model[0].tojson())["nodes"]
        engines = [n for n in nodes if n["op"] == "ratel_engine_op"]
        assert engines and all(n["attrs"]["engine_name"].startswith(f"gluon{i}_engine_") for n in engines)
        np.testing.assert_array_equal(predict(mx, model, x[:4], batch=4),
                                      predict(mx, c.to_npu(), x[:4], batch=4))
    s = jc.scheme
    assert {a.engine_name for a in s.engines} >= {
        n["attrs"]["engine_name"] for m in npu_models for n in json.loads(m[0].tojson())["nodes"]
        if n["op"] == "ratel_engine_op"}
    assert 0 < s.predicted_fps <= s.roofline_fps
    assert abs(s.simulate(frames=100).fps - s.predicted_fps) / s.predicted_fps < 0.10
