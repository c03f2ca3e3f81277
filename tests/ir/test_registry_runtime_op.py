"""Adding an op is one registry entry (docs/adding-an-op.md): an op registered at run time
with ``registry.temporary_op`` goes through the TensorFlow importer (by its TF spelling),
calibration, quantization (the quantized model runs in TensorFlow), compilation (the op
lands inside an engine) and both engine executors (native == reference bit for bit, close to
the float model), with no other change; the registration is gone after the test."""
from __future__ import annotations

import numpy as np
import pytest

from ratelnn.ir import registry
from ratelnn.npu.engine import Engine

import tensorflow as tf

BATCH = 4


@pytest.fixture(scope="module")
def ops():
    import ratelnn
    return ratelnn.tf_init()


def _conv_then(unary: str):
    """x [N,6,6,3] -> conv 3x3 (+ bias) -> tf.raw_ops.<unary> -> out."""
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        y = tf.nn.conv2d(x, tf.constant(rng.normal(0, 0.4, (3, 3, 3, 4)).astype(np.float32)), 1, "SAME")
        y = tf.nn.bias_add(y, tf.constant(rng.normal(0, 0.1, 4).astype(np.float32)))
        getattr(tf.raw_ops, unary)(x=y, name="out")
    return graph.as_graph_def(), rng.uniform(-1, 1, (16, 6, 6, 3)).astype(np.float32)


def _dense_then_sigmoid():
    """x [N,8] -> BatchMatMulV2(x, W [8,5]) -> Sigmoid -> out."""
    rng = np.random.default_rng(1)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8], name="x")
        y = tf.raw_ops.BatchMatMulV2(x=x, y=tf.constant(rng.normal(0, 0.5, (8, 5)).astype(np.float32)))
        tf.math.sigmoid(y, name="out")
    return graph.as_graph_def(), rng.uniform(-1, 1, (16, 8)).astype(np.float32)


def _run(graph_def, x):
    from ratelnn.testing import run_graph
    return run_graph(graph_def, "x:0", "out:0", x, BATCH)


def _through_every_form(graph_def, x, tmp_path, tf_type: str, opcode: str):
    """Calibrate, quantize, compile; check the op is in an engine that both executors run
    alike; return (float, quantized, compiled) outputs."""
    from ratelnn.frontend.tensorflow import converter

    config = {"input_nodes": ["x"], "output_nodes": ["out"], "input_shapes": [[BATCH] + list(x.shape[1:])],
              "output_dir": str(tmp_path)}
    c = converter(graph_def, config)
    _run(c.to_cal(), x)
    quant = c.to_quant()
    npu = c.to_npu(quant)
    assert not [n.name for n in npu.node if n.op == tf_type], "the op stayed a TensorFlow op"
    engines = [Engine.from_bytes(n.attr["engine"].s) for n in npu.node if n.op == "RatelEngineOp"]
    assert len(engines) == 1
    engine = engines[0]
    assert _has_opcode(engine, opcode), "the op is not in the engine"
    rng = np.random.default_rng(3)
    codes = [rng.integers(np.iinfo(t.dtype).min, np.iinfo(t.dtype).max + 1, (BATCH,) + t.shape[1:]).astype(t.dtype)
             for t in engine.inputs]
    for native, reference in zip(engine.run(codes, backend="native"), engine.run(codes, backend="reference")):
        np.testing.assert_array_equal(native, reference)
    return _run(graph_def, x), _run(quant, x), _run(npu, x)


def _has_opcode(engine: Engine, opcode: str) -> bool:
    from ratelnn.proto import engine_pb2
    return opcode in [engine_pb2.Opcode.Name(i.opcode) for i in engine.proto.instructions]


def _assert_close(want, got, tol):
    """Mean error within ``tol`` of the output's range, no element beyond 5 times that."""
    err, span = np.abs(want - got), float(np.max(np.abs(want)))
    assert err.mean() <= tol * span and err.max() <= 5 * tol * span, (err.mean(), err.max(), span)


def test_a_lut_op_registered_at_run_time_runs_on_the_npu(ops, tmp_path):
    assert "Atan" not in registry.BY_NAME and "Atan" not in registry.SPELLINGS["tf"]
    graph_def, x = _conv_then("Atan")
    atan = registry.make_lut_op("Atan", "Atan", fn=np.arctan, quantized=True)
    with registry.temporary_op(atan):
        float_out, quant_out, npu_out = _through_every_form(graph_def, x, tmp_path, "Atan", "LUT")
    _assert_close(float_out, quant_out, 0.02)
    _assert_close(float_out, npu_out, 0.02)
    _assert_close(quant_out, npu_out, 0.01)
    # the registration is gone: Atan is a framework op again
    assert "Atan" not in registry.BY_NAME and "Atan" not in registry.QUANTIZED_OPS
    from ratelnn.frontend.tensorflow.importer import import_graphdef
    g = import_graphdef(graph_def, ["x"], ["out"], [[BATCH, 6, 6, 3]])
    assert [n.op for n in g.nodes if n.name == "out"] == ["Opaque"]


def test_a_weighted_op_registered_at_run_time_reuses_fully_connected(ops, tmp_path):
    assert "BatchMatMulV2" not in registry.SPELLINGS["tf"]
    graph_def, x = _dense_then_sigmoid()
    dense = registry.make_op(
        "BatchMatMul", "BatchMatMulV2", form=registry.WEIGHTED, quantized=True,
        input_role="matmul_activations", output_role="matmul_output", weight_role="matmul_weights",
        npu=("FULLY_CONNECTED",), cost="fc", lowering="matmul", fn=lambda x, w: np.matmul(x, w))
    with registry.temporary_op(dense):
        assert registry.is_weighted("BatchMatMul")
        float_out, quant_out, npu_out = _through_every_form(graph_def, x, tmp_path, "BatchMatMulV2",
                                                            "FULLY_CONNECTED")
    _assert_close(float_out, quant_out, 0.02)
    _assert_close(float_out, npu_out, 0.02)
    _assert_close(quant_out, npu_out, 0.01)
    assert "BatchMatMul" not in registry.BY_NAME and not registry.is_weighted("BatchMatMul")
