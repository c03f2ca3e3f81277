"""The exported GraphDefs are in forms TensorFlow's oneDNN rewrites accept.

TensorFlow turns its oneDNN graph rewrites on by default on CPUs with AVX-512 VNNI/BF16/AMX,
and its fused depthwise-conv + bias rewrite aborts the process (``F tensor_format.h:428]
Check failed ... Invalid index from the dimension: 1, 0, H``) on a ``DepthwiseConv2dNative``
with ``padding=EXPLICIT``.  The exporter writes ``SAME``/``VALID`` or a ``Pad`` + ``VALID``
conv instead, and the importer folds the ``Pad`` back, so the IR is unchanged.  Every form of
the model runs in a subprocess with ``TF_ENABLE_ONEDNN_OPTS=1`` and ``=0`` (an abort fails the
test, it does not kill pytest).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from helpers.paths import SCRIPTS

SHAPE = (1, 16, 16, 8)


def _model():
    import tensorflow as tf
    from tensorflow.keras import layers
    tf.keras.utils.set_random_seed(3)
    bias = tf.keras.initializers.RandomNormal(stddev=0.5)   # a zero bias is optimised away
    x = inp = tf.keras.Input(SHAPE[1:])
    x = layers.DepthwiseConv2D(3, padding="same", activation="relu6", bias_initializer=bias)(x)   # SAME
    x = layers.DepthwiseConv2D(3, strides=2, padding="same", bias_initializer=bias)(x)            # SAME, odd pad
    x = layers.ZeroPadding2D(((1, 0), (2, 1)))(x)
    x = layers.DepthwiseConv2D(3, depth_multiplier=2, bias_initializer=bias, activation="relu")(x)  # Pad + VALID
    x = layers.ZeroPadding2D(((0, 2), (1, 1)))(x)
    x = layers.Conv2D(6, 3, bias_initializer=bias, activation="relu")(x)                           # Pad + VALID
    x = layers.ZeroPadding2D(1)(x)
    x = layers.Conv2D(4, 3, bias_initializer=bias)(x)                                              # = SAME
    return tf.keras.Model(inp, layers.GlobalAveragePooling2D()(x))


def _conv_nodes(graph_def):
    return [n for n in graph_def.node if n.op in ("Conv2D", "DepthwiseConv2dNative")]


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    """The Keras model, its frozen GraphDef and every form ratelnn makes of it, on disk."""
    import ratelnn
    from ratelnn.frontend.tensorflow import converter, export_graphdef, freeze_keras
    from ratelnn.runners import run_model

    ratelnn.tf_init()
    model = _model()
    graph_def, ins, outs = freeze_keras(model)
    tmp = tmp_path_factory.mktemp("onednn")
    config = {"input_nodes": ins, "output_nodes": outs, "input_shapes": [list(SHAPE)],
              "output_dir": str(tmp / "stats")}
    c = converter(graph_def, config)
    x = np.random.default_rng(0).random((4,) + SHAPE[1:], dtype=np.float32)
    cal = c.to_cal()
    for row in x:
        run_model("tensorflow", cal, {ins[0]: row[None]}, [outs[0]])
    graphs = {"float": export_graphdef(c.graph), "cal": cal, "quant": c.to_quant(), "npu": c.to_npu()}
    paths = {}
    for name, g in graphs.items():
        paths[name] = tmp / f"{name}.pb"
        paths[name].write_bytes(g.SerializeToString())
    want = model(x[:1]).numpy()
    return {"converter": c, "graphs": graphs, "paths": paths, "x": x[:1], "want": want,
            "input": ins[0] + ":0", "output": outs[0] + ":0", "tmp": tmp}


def test_no_explicit_padding_and_the_ir_round_trips(forms):
    from ratelnn.frontend.tensorflow import import_graphdef

    c = forms["converter"]
    ir_convs = [n for n in c.graph.nodes if n.op == "Conv2D"]
    assert [n.attrs["pads"] for n in ir_convs] == [(1, 1, 1, 1), (0, 1, 0, 1), (1, 0, 2, 1), (0, 2, 1, 1),
                                                   (1, 1, 1, 1)]
    assert not any(n.op == "Pad" for n in c.graph.nodes), "Keras ZeroPadding2D is folded into the conv"
    for name in ("float", "cal", "quant"):
        g = forms["graphs"][name]
        paddings = [n.attr["padding"].s.decode() for n in _conv_nodes(g)]
        assert paddings == ["SAME", "SAME", "VALID", "VALID", "SAME"], (name, paddings)
        assert sum(n.op == "Pad" for n in g.node) == 2, name
    again = import_graphdef(forms["graphs"]["float"], c.config["input_nodes"], c.config["output_nodes"],
                            c.config["input_shapes"])
    assert [n.attrs["pads"] for n in again.nodes if n.op == "Conv2D"] == [n.attrs["pads"] for n in ir_convs]
    assert not any(n.op == "Pad" for n in again.nodes)
    # the quantized graph reads back to the same integer model: compiling it gives engines with
    # the same constants (only node names differ) and bit-identical outputs
    from ratelnn.proto import engine_pb2
    from ratelnn.runners import run_model
    recompiled = c.to_npu(graph_quant=forms["graphs"]["quant"])

    def constants(g):
        return [[bytes(k.data) for k in engine_pb2.Engine.FromString(n.attr["engine"].s).constants]
                for n in g.node if n.op == "RatelEngineOp"]
    assert constants(recompiled) == constants(forms["graphs"]["npu"]) != []
    feeds = {c.config["input_nodes"][0]: forms["x"]}
    fetch = [c.config["output_nodes"][0]]
    np.testing.assert_array_equal(run_model("tensorflow", recompiled, feeds, fetch)[0],
                                  run_model("tensorflow", forms["graphs"]["npu"], feeds, fetch)[0])


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_every_form_runs_with_onednn_rewrites(forms, onednn):
    import ratelnn

    tmp = forms["tmp"] / f"onednn{onednn}"
    tmp.mkdir()
    np.save(tmp / "x.npy", forms["x"])
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "run_graphdefs.py"), ratelnn.ops_library_path("tensorflow"),
         forms["input"], forms["output"], str(tmp / "x.npy"), str(tmp)]
        + [f"{name}={path}" for name, path in forms["paths"].items()],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"TF_ENABLE_ONEDNN_OPTS={onednn}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    out = {name: np.load(tmp / f"{name}.npy") for name in forms["paths"]}
    np.testing.assert_allclose(out["float"], forms["want"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["cal"], forms["want"], rtol=1e-4, atol=1e-4)
    for name in ("quant", "npu"):
        cos = float(np.dot(out[name].ravel(), out["float"].ravel())
                    / (np.linalg.norm(out[name]) * np.linalg.norm(out["float"])))
        assert cos > 0.99, (name, cos)
