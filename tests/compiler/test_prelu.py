"""PReLU as a fused activation (docs/ir.md `fuse_prelu`, docs/npu-arithmetic.md signed `M_neg`).

Keras PReLU (frozen to Relu/Neg/Relu/Mul/AddV2) and MXNet per-channel prelu are imported, fused
into their Conv2D/MatMul as ``act="prelu"`` with float outputs equal to the framework's, quantized,
compiled into one engine that agrees with the quantized (QDQ) model, and exported back to TF and
MXNet.  The pretrained MTCNN R-Net (negative slopes included) compiles to a single engine.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from ratelnn.compiler import compile_graph
from ratelnn.ir import Graph, Node, TensorInfo
from ratelnn.ir.evaluate import evaluate, evaluate_node
from ratelnn.npu.engine import EngineBuilder, EngineError, qabs, qrange, quantize_multiplier
from ratelnn.ir.passes import fuse_prelu
from ratelnn.quantization.emit import emit_qdq
from ratelnn.quantization.recover import strip_qdq

from helpers.ir_graphs import compare, engine_nodes, quantized

F32 = np.float32
BATCH = 4
# tests marked no_tf_math build IR graphs or only freeze Keras models (no TensorFlow kernel
# runs): the numpy reference and native engines compute them (tests/conftest.py)


def _slopes(shape, seed):
    """Slopes of both signs and magnitudes up to 1.3, as in the MTCNN weights."""
    return np.random.default_rng(seed).uniform(-1.3, 1.3, shape).astype(F32)


def _keras_model(head: str):
    """Conv2D -> PReLU(shared_axes=[1, 2]) -> Flatten -> Dense -> PReLU (``head="dense"``),
    or the conv part alone (``head="conv"``)."""
    import keras
    keras.utils.set_random_seed(0)
    images = keras.Input((9, 9, 3), name="images")
    y = keras.layers.Conv2D(6, 3, strides=2, name="conv")(images)
    y = keras.layers.PReLU(shared_axes=[1, 2], name="conv_prelu")(y)
    if head == "dense":
        y = keras.layers.Flatten()(y)
        y = keras.layers.Dense(5, name="dense")(y)
        y = keras.layers.PReLU(name="dense_prelu")(y)
    model = keras.Model(images, y)
    for layer in model.layers:
        if isinstance(layer, keras.layers.PReLU):
            layer.set_weights([_slopes(layer.get_weights()[0].shape, seed=len(layer.name))])
    return model


def _tf_import(model, batch=BATCH) -> Graph:
    from ratelnn.frontend.tensorflow import freeze_keras
    from ratelnn.frontend.tensorflow.handler import TFModelHandler
    graph_def, inputs, outputs = freeze_keras(model, [(None, *model.inputs[0].shape[1:])])
    config = {"input_nodes": inputs, "output_nodes": outputs,
              "input_shapes": [[batch, *model.inputs[0].shape[1:]]], "output_dir": "unused"}
    return TFModelHandler().import_graph(graph_def, config)


def _fused_prelu_nodes(g: Graph):
    return [n for n in g.nodes if n.attrs.get("act") == "prelu"]


def _images(g: Graph, seed=0):
    return {t: np.random.default_rng(seed).normal(0, 1, g.shape(t)).astype(F32) for t in g.inputs}


@pytest.fixture(scope="module")
def keras_graphs():
    """head -> (Keras model, its imported IR graph)."""
    models = {head: _keras_model(head) for head in ("conv", "dense")}
    return {head: (model, _tf_import(model)) for head, model in models.items()}


# ---------------------------------------------------------------- import and float semantics
@pytest.mark.parametrize("head", ["conv", "dense"])
def test_keras_prelu_fuses_into_its_layer_with_the_same_outputs(head, keras_graphs):
    model, g = keras_graphs[head]
    ops = [n.op for n in g.nodes]
    assert not {"Neg", "Relu", "Mul", "Add", "Sub", "PRelu"} & set(ops), ops
    fused = _fused_prelu_nodes(g)
    assert [n.op for n in fused] == (["Conv2D", "MatMul"] if head == "dense" else ["Conv2D"])
    keras_slopes = [layer.get_weights()[0].reshape(-1) for layer in model.layers if "prelu" in layer.name]
    for node, want in zip(fused, keras_slopes):
        assert node.attrs["act_alpha"].dtype == F32
        np.testing.assert_array_equal(node.attrs["act_alpha"], want)
        assert (want < 0).any() and (want > 0).any()
    feeds = _images(g)
    got = evaluate(g, feeds)[g.outputs[0]]
    want = model(feeds[g.inputs[0]]).numpy()
    assert (want < 0).mean() > 0.1   # the negative side is exercised
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_prelu_not_per_channel_becomes_a_standalone_op():
    """Keras PReLU without shared_axes (one slope per position and channel) cannot fold into
    the conv: it becomes PRelu(x, alpha), evaluated exactly, exported to TF and back."""
    import keras
    from ratelnn.frontend.tensorflow.exporter import export_graphdef
    from ratelnn.runners import TFRunner
    images = keras.Input((6, 6, 2), name="images")
    y = keras.layers.Conv2D(3, 3, name="conv")(images)
    prelu = keras.layers.PReLU(name="free_prelu")
    model = keras.Model(images, prelu(y))
    prelu.set_weights([_slopes((4, 4, 3), seed=3)])
    g = _tf_import(model)
    assert [n.op for n in g.nodes] == ["Conv2D", "PRelu"]
    assert g.nodes[0].attrs["act"] == "none"
    feeds = _images(g)
    want = model(feeds[g.inputs[0]]).numpy()
    np.testing.assert_allclose(evaluate(g, feeds)[g.outputs[0]], want, rtol=1e-5, atol=1e-5)
    runner = TFRunner(export_graphdef(g))
    try:
        got = runner.run({g.inputs[0]: feeds[g.inputs[0]]}, g.outputs)[0]
    finally:
        runner.close()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.no_tf_math
def test_fuse_prelu_keeps_the_decomposition_when_the_conv_output_has_another_reader():
    rng = np.random.default_rng(0)
    g = Graph("shared")
    g.add_input("x", (2, 4, 4, 3))
    g.add_param("w", rng.normal(0, 1, (1, 1, 3, 3)).astype(F32))
    g.add_param("c", _slopes((3,), seed=1))
    g.add_param("zero", np.zeros((1,), F32))
    info = TensorInfo((2, 4, 4, 3))
    conv = dict(strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1, layout="NHWC", act="none")
    for node in [Node("conv", "Conv2D", ["x", "w"], ["y"], conv), Node("pos", "Relu", ["y"], ["pos"]),
                 Node("min", "Minimum", ["zero", "y"], ["min"]), Node("mul", "Mul", ["min", "c"], ["mul"]),
                 Node("prelu", "Add", ["mul", "pos"], ["out"]), Node("other", "Sigmoid", ["y"], ["sig"])]:
        g.add_node(node, [info])
    g.outputs = ["out", "sig"]
    feeds = _images(g)
    want = evaluate(g, feeds)
    fuse_prelu(g)
    assert [n.op for n in g.nodes] == ["Conv2D", "PRelu", "Sigmoid"]
    assert g.nodes[0].attrs["act"] == "none"
    got = evaluate(g, feeds)
    for t in g.outputs:
        np.testing.assert_array_equal(got[t], want[t])


# ---------------------------------------------------------------- quantize, compile, export
@pytest.mark.no_tf_math
@pytest.mark.parametrize("head", ["conv", "dense"])
def test_prelu_layers_compile_into_one_engine_that_matches_the_quantized_model(head, keras_graphs, tmp_path):
    g = keras_graphs[head][1]
    config = {"output_dir": str(tmp_path)}
    q = quantized(g, config)
    out_qp = q.qparams[g.outputs[0]]
    assert out_qp.dtype == "int8" and not out_qp.per_channel
    compiled = compile_graph(q, config)
    assert len(engine_nodes(compiled)) == 1
    assert [n.op for n in compiled.nodes if n.op not in ("Quant", "Dequant")] == ["Engine"]
    for t, (equal, worst) in compare(q, compiled, config).items():
        assert equal >= 0.99 and worst <= 1, (t, equal, worst)


def test_quantized_tf_export_runs_and_round_trips_the_fused_prelu(keras_graphs, tmp_path):
    """to_quant's GraphDef writes prelu as Relu(x) - alpha*Relu(-x): it runs in TF like the
    numpy QDQ model, and strip_qdq of its import gives back act="prelu"."""
    from ratelnn.frontend.tensorflow.exporter import export_graphdef
    from ratelnn.frontend.tensorflow.handler import TFModelHandler
    from ratelnn.runners import TFRunner
    import ratelnn
    ratelnn.tf_init()
    _, g = keras_graphs["dense"]
    config = {"output_dir": str(tmp_path), "input_nodes": g.inputs, "output_nodes": g.outputs,
              "input_shapes": [list(g.shape(g.inputs[0]))]}
    q = quantized(g, config)
    qdq = emit_qdq(q, config)
    graph_def = export_graphdef(qdq)
    assert {"Neg", "Sub"} <= {nd.op for nd in graph_def.node}
    feeds = _images(g, seed=5)
    runner = TFRunner(graph_def)
    try:
        got = runner.run(feeds, g.outputs)[0]
    finally:
        runner.close()
    want = evaluate(qdq, feeds)[g.outputs[0]]
    scale = float(q.qparams[g.outputs[0]].scale)
    assert np.abs(got - want).max() <= scale * 1.001
    assert np.mean(np.abs(got - want) < scale / 2) >= 0.99
    recovered = strip_qdq(TFModelHandler().import_quantized(graph_def, config))
    fused = _fused_prelu_nodes(recovered)
    assert [n.op for n in fused] == ["Conv2D", "MatMul"]
    for node, original in zip(fused, _fused_prelu_nodes(q)):
        np.testing.assert_array_equal(node.attrs["act_alpha"], original.attrs["act_alpha"])
    assert len(engine_nodes(compile_graph(recovered, config))) == 1


@pytest.mark.no_tf_math
def test_mxnet_per_channel_prelu_fuses_and_exports_as_leaky_relu_prelu(tmp_path):
    from ratelnn.frontend.mxnet.exporter import export_symbol
    from ratelnn.frontend.mxnet.handler import MXModelHandler
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    rng = np.random.default_rng(2)
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, num_filter=5, kernel=(3, 3), pad=(1, 1), name="conv")
    act = mx.sym.LeakyReLU(conv, act_type="prelu", name="prelu")
    fc = mx.sym.FullyConnected(mx.sym.flatten(act), num_hidden=4, name="fc")
    out = mx.sym.LeakyReLU(fc, act_type="prelu", name="fc_prelu")
    params = {"conv_weight": rng.normal(0, 0.5, (5, 3, 3, 3)), "conv_bias": rng.normal(0, 0.1, (5,)),
              "prelu_gamma": _slopes((5,), seed=4), "fc_weight": rng.normal(0, 0.2, (4, 5 * 36)),
              "fc_bias": rng.normal(0, 0.1, (4,)), "fc_prelu_gamma": _slopes((4,), seed=5)}
    arg_params = {k: mx.nd.array(np.asarray(v, F32)) for k, v in params.items()}
    model = (out, arg_params, {})
    config = {"input_nodes": ["data"], "output_nodes": ["fc_prelu"], "input_shapes": [[BATCH, 3, 6, 6]],
              "output_dir": str(tmp_path)}
    g = MXModelHandler().import_graph(model, config)
    assert [(n.op, n.attrs.get("act")) for n in g.nodes] == [("Conv2D", "prelu"), ("Flatten", None),
                                                               ("MatMul", "prelu")]
    x = rng.normal(0, 1, (BATCH, 3, 6, 6)).astype(F32)

    def run_mx(symbol, args, auxs):
        exe = symbol.bind(mx.cpu(), {"data": mx.nd.array(x), **args}, aux_states=auxs)
        return exe.forward(is_train=False)[0].asnumpy()

    want = run_mx(*model)
    np.testing.assert_allclose(evaluate(g, {"data": x})["fc_prelu"], want, rtol=1e-5, atol=1e-5)
    symbol, args, auxs = export_symbol(g)
    layers = [(n["op"], n.get("attrs", {}).get("act_type")) for n in json.loads(symbol.tojson())["nodes"]]
    assert layers.count(("LeakyReLU", "prelu")) == 2 and sum("gamma" in a for a in args) == 2
    np.testing.assert_allclose(run_mx(symbol, args, auxs), want, rtol=1e-5, atol=1e-5)
    q = quantized(g, config)
    compiled = compile_graph(q, config)
    assert len(engine_nodes(compiled)) == 1
    for t, (equal, worst) in compare(q, compiled, config).items():   # NCHW: channels on axis 1
        assert equal >= 0.99 and worst <= 1, (t, equal, worst)
    recovered = strip_qdq(MXModelHandler().import_quantized(export_symbol(emit_qdq(q, config)), config))
    assert [n.op for n in _fused_prelu_nodes(recovered)] == ["Conv2D", "MatMul"]


# ---------------------------------------------------------------- signed M_neg in the executors
@pytest.mark.no_tf_math
@pytest.mark.parametrize("x_dtype,cin,cout,groups,hw", [
    ("int8", 8, 40, 1, 9),      # GEMM path, several 16-channel blocks, int32 accumulators
    ("uint8", 6, 6, 6, 7),      # depthwise
    ("int16", 5, 20, 1, 6),     # int64 (wide) accumulators
])
def test_conv2d_with_negative_slopes_is_bit_exact_and_correct(x_dtype, cin, cout, groups, hw):
    rng = np.random.default_rng(cout)
    lo, hi = qrange(x_dtype)
    x = rng.integers(lo, hi + 1, (2, hw, hw, cin)).astype(x_dtype)
    wq = rng.integers(-127, 128, (3, 3, cin // groups, cout)).astype(np.int8)
    bias = rng.integers(-3000, 3000, cout).astype(np.int32)
    sx, sw, sy = 2.0 ** -6, rng.uniform(0.5, 1.0, cout) * 2.0 ** -8, 2.0 ** -1 * (256 if x_dtype == "int16" else 1)
    slopes = _slopes((cout,), seed=cout).astype(np.float64)
    slopes[0] = 0.0
    real = sx * sw / sy
    bound = 9 * (cin // groups) * qabs(x_dtype) * 128 + int(np.abs(bias).max())
    pos = [quantize_multiplier(r, bound) for r in real]
    neg = [quantize_multiplier(abs(r * a), bound) for r, a in zip(real, slopes)]
    b = EngineBuilder("prelu_conv", 2)
    out = hw - 2
    tx, ty = b.tensor("x", x.shape, x_dtype, sx), b.tensor("y", (2, out, out, cout), "int8", sy)
    consts = [b.const("w", wq), b.const("bias", bias), b.const("m", np.array([m for m, _ in pos], np.int32)),
              b.const("s", np.array([s for _, s in pos], np.int32)),
              b.const("mn", np.array([-m if a < 0 else m for (m, _), a in zip(neg, slopes)], np.int32)),
              b.const("sn", np.array([s for _, s in neg], np.int32))]
    b.add("CONV2D", [tx], [ty], consts, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=groups)
    b.set_io([tx], [ty])
    engine = b.build()
    (ref,) = engine.run([x], backend="reference")
    (nat,) = engine.run([x], backend="native")
    np.testing.assert_array_equal(ref, nat)
    y = evaluate_conv(x * sx, wq * sw, groups) + bias * sx * sw
    y = np.where(y >= 0, y, y * slopes)
    want = np.clip(np.sign(y / sy) * np.floor(np.abs(y / sy) + 0.5), -128, 127)
    assert np.abs(ref.astype(np.int64) - want).max() <= 1
    assert (ref[..., slopes < 0] > 0).any()   # negative accumulators became positive codes


@pytest.mark.no_tf_math
@pytest.mark.parametrize("shift", [1, 32])   # 32: every shift >= 32, the int32-clamp path
def test_negative_multiplier_rounds_ties_half_away_from_zero(shift):
    """M = 2^shift / d, M_neg = -M (d = 2, or 4 for shift 32): y = round_half_away(acc / d) for
    acc >= 0 and of -acc / d below; ties are frequent, where a sign mix-up would show."""
    rng = np.random.default_rng(shift)
    x = rng.integers(-128, 128, (2, 8, 8, 8)).astype(np.int8)
    wq = rng.integers(-127, 128, (1, 1, 8, 32)).astype(np.int8)
    bias = rng.integers(-50, 50, 32).astype(np.int32)
    m = 2 ** min(shift - 1, 30)
    d = 2 ** shift // m
    b = EngineBuilder("ties", 2)
    tx, ty = b.tensor("x", x.shape, "int8", 1.0), b.tensor("y", (2, 8, 8, 32), "int16", 1.0)
    full = np.full(32, 1, np.int32)
    consts = [b.const("w", wq), b.const("bias", bias), b.const("m", m * full), b.const("s", shift * full),
              b.const("mn", -m * full), b.const("sn", shift * full)]
    b.add("CONV2D", [tx], [ty], consts, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1)
    b.set_io([tx], [ty])
    engine = b.build()
    (ref,) = engine.run([x], backend="reference")
    (nat,) = engine.run([x], backend="native")
    acc = np.einsum("nhwc,co->nhwo", x.astype(np.int64), wq[0, 0].astype(np.int64)) + bias
    want = (np.abs(acc) + d // 2) // d     # |acc| / d rounded half away from zero, for both signs
    assert (acc % d == d // 2).mean() > 0.2
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(nat, want)


def evaluate_conv(x: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    """Float NHWC VALID convolution (float64) through the IR evaluator's einsum."""
    node = Node("conv", "Conv2D", ["x", "w"], ["y"], dict(strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0),
                                                          groups=groups, layout="NHWC", act="none"))
    return evaluate_node(node, [x, w])[0].astype(np.float64)


@pytest.mark.no_tf_math
def test_validator_rejects_a_negative_multiplier_out_of_range():
    b = EngineBuilder("bad_slope", 1)
    tx, ty = b.tensor("x", (1, 4), "int8", 0.1), b.tensor("y", (1, 2), "int8", 0.1)
    ones = np.ones(2, np.int32)
    consts = [b.const("w", np.ones((4, 2), np.int8)), b.const("bias", 0 * ones), b.const("m", ones),
              b.const("s", ones), b.const("mn", np.array([-1, -2 ** 31], np.int32)), b.const("sn", ones)]
    b.add("FULLY_CONNECTED", [tx], [ty], consts)
    b.set_io([tx], [ty])
    with pytest.raises(EngineError, match="bad_slope.*multiplier 2147483648"):
        b.build()


# ---------------------------------------------------------------- MTCNN
@pytest.mark.no_tf_math
def test_mtcnn_rnet_compiles_to_one_engine(tmp_path):
    """The pretrained R-Net (PReLU after every conv and its dense layer, slopes of both signs)."""
    pytest.importorskip("mtcnn")
    from agraph import face
    entry = next(e for e in face.model_entries() if e.name == "rnet")
    g = _tf_import(face.keras_model(entry), batch=8)
    fused = _fused_prelu_nodes(g)
    assert len(fused) == 4 and any((n.attrs["act_alpha"] < 0).any() for n in fused)
    assert not [n for n in g.nodes if n.op in ("Neg", "PRelu", "Opaque")]
    config = {"output_dir": str(tmp_path)}
    q = quantized(g, config)
    compiled = compile_graph(q, config)
    assert len(engine_nodes(compiled)) == 1
    for t, (equal, worst) in compare(q, compiled, config, batches=1).items():
        assert equal >= 0.95 and worst <= 2, (t, equal, worst)
