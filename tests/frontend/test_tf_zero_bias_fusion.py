"""A convolution or dense layer whose bias is all zeros keeps TensorFlow's Conv2D/MatMul +
BiasAdd + ReLU6 fusion in every exported form: Grappler drops a BiasAdd of constant zeros
(and the activation then runs as an op of its own), so the exporter passes a zero bias
through a ``PlaceholderWithDefault``; the importer reads that as an identity, so the
quantized graph still compiles to the same engines.  The forms run in a subprocess with
``TF_ENABLE_ONEDNN_OPTS=1`` and ``=0``."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from helpers.paths import SCRIPTS

SHAPE = (2, 8, 8, 4)


def _graph_def():
    """x -> 1x1 conv (bias 0) -> ReLU6 -> 3x3 conv (bias 0) -> ReLU6 -> reshape -> dense
    (bias 0) -> ReLU6 "y"."""
    import tensorflow as tf
    rng = np.random.default_rng(4)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="x")
        h = tf.nn.relu6(tf.nn.bias_add(tf.nn.conv2d(x, rng.normal(0, 0.5, (1, 1, 4, 16)).astype(np.float32), 1,
                                                    "SAME"), np.zeros(16, np.float32)))
        h = tf.nn.relu6(tf.nn.bias_add(tf.nn.conv2d(h, rng.normal(0, 0.3, (3, 3, 16, 8)).astype(np.float32), 1,
                                                    "SAME"), np.zeros(8, np.float32)))
        h = tf.matmul(tf.reshape(h, (SHAPE[0], 512)), rng.normal(0, 0.1, (512, 6)).astype(np.float32))
        tf.nn.relu6(tf.nn.bias_add(h, np.zeros(6, np.float32)), name="y")
    return g.as_graph_def()


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    import ratelnn
    from ratelnn.frontend.tensorflow import converter, export_graphdef

    ratelnn.tf_init()
    tmp = tmp_path_factory.mktemp("zero-bias")
    config = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [list(SHAPE)],
              "output_dir": str(tmp / "stats"), "accuracy_auto": False}
    c = converter(_graph_def(), config)
    x = np.random.default_rng(0).uniform(0, 1, (8, *SHAPE[1:])).astype(np.float32)
    c.calibrate(x, progress=False)
    graphs = {"float": export_graphdef(c.graph), "cal": c.to_cal(), "quant": c.to_quant()}
    npu = c.to_npu()   # now: running the calibration graph below records more statistics
    paths = {}
    for name, g in graphs.items():
        paths[name] = tmp / f"{name}.pb"
        paths[name].write_bytes(g.SerializeToString())
    return c, graphs, paths, x[:SHAPE[0]], tmp, npu


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_zero_bias_keeps_the_fusion(forms, onednn):
    import ratelnn
    _, _, paths, x, tmp, _ = forms
    out_dir = tmp / f"onednn{onednn}"
    out_dir.mkdir()
    np.save(out_dir / "x.npy", x)
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "run_graphdefs.py"), ratelnn.ops_library_path("tensorflow"), "x:0", "y:0",
         str(out_dir / "x.npy"), str(out_dir)] + [f"{name}={path}" for name, path in paths.items()],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in paths:
        ops = (out_dir / f"{name}.ops").read_text().split()
        fused = [op for op in ops if op.endswith(":BiasAdd,Relu6")]
        assert len(fused) == 3 and "Relu6" not in ops and "BiasAdd" not in ops, (name, onednn, ops)


def test_quantized_graph_with_zero_biases_reads_back(forms):
    """The PlaceholderWithDefault of a zero bias is an identity to the importer: compiling the
    exported quantized graph gives engines with the constants (only names differ) and the
    outputs of compiling the converter's own IR."""
    c, graphs, _, x, _, own = forms
    from ratelnn.proto import engine_pb2
    from ratelnn.runners import run_model
    assert sum(n.op == "PlaceholderWithDefault" for n in graphs["quant"].node) == 3

    def constants(g):
        return [[bytes(k.data) for k in engine_pb2.Engine.FromString(n.attr["engine"].s).constants]
                for n in g.node if n.op == "RatelEngineOp"]
    recompiled = c.to_npu(graph_quant=graphs["quant"])
    assert constants(recompiled) == constants(own) != []
    np.testing.assert_array_equal(run_model("tensorflow", recompiled, {"x": x}, ["y"])[0],
                                  run_model("tensorflow", own, {"x": x}, ["y"])[0])
