"""Integer constants at the border of the float part of a compiled graph.

Real pretrained graphs feed integer constants (an ``ExpandDims`` axis, ``StridedSlice``
begin/end/strides, a ``Reshape`` shape, ``Tile`` multiples, ``GatherV2`` indices and axis,
``Pad`` paddings) to ops that stay on the CPU next to NPU engines.  Such constants are
values, not quantized tensors: they reach their float readers untouched (``to_npu()`` used
to fail with a raw ``KeyError`` from ``float_of``).  Each pattern compiles into at least one
engine, and the compiled model's outputs equal the quantized model's.  Run with
``TF_ENABLE_ONEDNN_OPTS=0`` and ``=1``."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

BATCH = 4
SHAPE = (8, 8, 3)


def _float_op(z):
    """A float op the NPU does not run (stays on the CPU)."""
    return tf.math.floormod(z, 2.5)


def _conv1d(y):
    """Keras' Conv1D as TensorFlow writes it: ExpandDims -> Conv2D -> Squeeze."""
    w = tf.constant(np.random.default_rng(5).normal(0, 0.3, (1, 3, 4, 5)).astype(np.float32))
    seq = tf.reshape(y, [-1, 16, 16])[..., :4]
    return tf.squeeze(tf.nn.conv2d(tf.expand_dims(seq, 1), w, 1, "SAME"), [1])


PATTERNS = {
    "expand_dims": lambda y: _float_op(tf.expand_dims(y, 1)),
    "strided_slice": lambda y: _float_op(y[:, 1:7:2, ::-1, 0:2]),
    "reshape": lambda y: _float_op(tf.reshape(y, [-1, 8 * 8 * 4])),
    "tile": lambda y: tf.tile(y, [1, 1, 2, 1]),
    "gather": lambda y: tf.gather(y, [3, 0, 2], axis=3),
    "mirror_pad": lambda y: tf.pad(y, [[0, 0], [1, 1], [2, 2], [0, 0]], mode="REFLECT"),
    "slice_then_conv": lambda y: tf.nn.relu(tf.nn.conv2d(
        tf.expand_dims(y[:, 0, :, :], 1), tf.constant(np.full((1, 3, 4, 2), 0.1, np.float32)), 1, "SAME")),
    "conv1d": _conv1d,
}


def _graph(pattern):
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None, *SHAPE), name="x")
        w = tf.constant(rng.normal(0, 0.3, (3, 3, SHAPE[-1], 4)).astype(np.float32))
        y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
        tf.identity(PATTERNS[pattern](y), name="out")
    return graph.as_graph_def()


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_integer_constants_cross_the_border(pattern, tmp_path):
    import ratelnn
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.runners import run_model

    ratelnn.tf_init()
    config = {"input_nodes": ["x"], "output_nodes": ["out"], "input_shapes": [[BATCH, *SHAPE]],
              "output_dir": str(tmp_path)}
    conv = converter(_graph(pattern), config)
    rng = np.random.default_rng(1)
    graph_cal = conv.to_cal()
    for _ in range(3):
        run_model("tensorflow", graph_cal, {"x": rng.normal(0, 1, (BATCH, *SHAPE)).astype(np.float32)}, ["out"])
    graph_quant = conv.to_quant()
    graph_npu = conv.to_npu(graph_quant)
    assert any(n.op == "RatelEngineOp" for n in graph_npu.node)
    x = rng.normal(0, 1, (BATCH, *SHAPE)).astype(np.float32)
    want = run_model("tensorflow", graph_quant, {"x": x}, ["out"])[0]
    got = run_model("tensorflow", graph_npu, {"x": x}, ["out"])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
