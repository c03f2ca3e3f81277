"""MXNet frontend end to end: hybridized Gluon nets exported to a checkpoint -> import ->
passes -> (numpy evaluator, export -> MXNet forward), against the Gluon outputs."""
import json

import numpy as np
import pytest

from ratelnn.mxnet_compat import import_mxnet

mx = import_mxnet()
nn = mx.gluon.nn

from ratelnn.errors import ModelError  # noqa: E402
from ratelnn.frontend.mxnet import MXModelHandler, export_json, export_symbol, import_symbol  # noqa: E402
from ratelnn.frontend.mxnet.attrs import decode_custom_attrs, encode_custom_attrs  # noqa: E402
from ratelnn.ir import Graph, Node, TensorInfo  # noqa: E402
from ratelnn.ir.evaluate import evaluate  # noqa: E402
from ratelnn.ir.passes import run_default_passes  # noqa: E402

def _randomize(net, rng):
    """Random weights from ``rng``, and non-trivial BN statistics so that folding is really exercised."""
    for name, p in net.collect_params().items():
        shape = p.shape
        if name.endswith(("running_var", "gamma")):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("alpha"):
            value = rng.uniform(0.05, 0.5, shape)
        else:
            value = rng.normal(0, 0.3, shape)
        p.set_data(mx.nd.array(value))


def checkpoint(net, shape, tmp_path, rng, name="net"):
    """Initialise, hybridize and export ``net`` (weights and input drawn from ``rng``); returns
    (prefix, input, MXNet output)."""
    net.initialize()
    net.hybridize()
    x = mx.nd.array(rng.standard_normal(shape).astype(np.float32))
    net(x)
    _randomize(net, rng)
    want = net(x).asnumpy()
    prefix = str(tmp_path / name)
    net.export(prefix)
    return prefix, x.asnumpy(), want


def run_mxnet(model, feeds):
    """Forward of a (symbol, arg_params, aux_params) tuple through Module.bind."""
    symbol, arg_params, aux_params = model
    mod = mx.mod.Module(symbol, data_names=list(feeds), label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[(k, v.shape) for k, v in feeds.items()], for_training=False)
    mod.set_params(arg_params, aux_params)
    mod.forward(mx.io.DataBatch([mx.nd.array(v) for v in feeds.values()]), is_train=False)
    return [o.asnumpy() for o in mod.get_outputs()]


def roundtrip(net, shape, tmp_path, rng, numpy_evaluator=True):
    prefix, x, want = checkpoint(net, shape, tmp_path, rng)
    symbol, arg_params, aux_params = mx.model.load_checkpoint(prefix, 0)
    out = symbol.list_outputs()[0]
    graph = run_default_passes(import_symbol((symbol, arg_params, aux_params), ["data"], [out], [list(shape)]))
    graph.validate()
    assert graph.inputs == ["data"] and graph.outputs == [out[:-len("_output")]]
    tol = dict(rtol=1e-4, atol=1e-5 * max(1.0, np.abs(want).max()))
    if numpy_evaluator:
        np.testing.assert_allclose(evaluate(graph, {"data": x})[graph.outputs[0]], want, **tol)
    exported = export_symbol(graph)
    assert exported[0].list_outputs() == [out]
    np.testing.assert_allclose(run_mxnet(exported, {"data": x})[0], want, **tol)
    return graph


def ops_of(graph):
    return [n.op for n in graph.nodes]


def seq(*layers):
    net = nn.HybridSequential()
    net.add(*layers)
    return net


class Residual(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2D(4, 3, padding=1)
        self.b = nn.Conv2D(4, 1)

    def hybrid_forward(self, F, x):
        return F.relu(self.a(x) + self.b(x))


class TwoBranchConcat(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2D(3, 1)
        self.b = nn.MaxPool2D(3, 1, 1)

    def hybrid_forward(self, F, x):
        return F.concat(self.a(x), self.b(x), dim=1)


def test_conv_bn_relu_folds_into_one_conv(tmp_path, rng):
    g = roundtrip(seq(nn.Conv2D(8, 3, strides=2, padding=1, use_bias=False), nn.BatchNorm(),
                      nn.Activation("relu")), (2, 3, 9, 9), tmp_path, rng)
    assert ops_of(g) == ["Conv2D"]
    conv = g.nodes[0]
    assert conv.attrs["act"] == "relu" and conv.attrs["pads"] == (1, 1, 1, 1) and len(conv.inputs) == 3
    assert g.shape(conv.inputs[1]) == (3, 3, 3, 8)  # HWIO


def test_grouped_and_depthwise_dilated_conv(tmp_path, rng):
    g = roundtrip(seq(nn.Conv2D(8, 3, padding=2, dilation=2, groups=2, in_channels=4), nn.BatchNorm(),
                      nn.Conv2D(8, 3, padding=1, groups=8, use_bias=False)), (1, 4, 10, 10), tmp_path, rng)
    assert [n.attrs["groups"] for n in g.nodes] == [2, 8]
    assert g.nodes[0].attrs["dilations"] == (2, 2) and ops_of(g) == ["Conv2D", "Conv2D"]


def test_residual_add_and_concat(tmp_path, rng):
    g = roundtrip(Residual(), (2, 3, 6, 6), tmp_path, rng)
    assert sorted(ops_of(g)) == ["Add", "Conv2D", "Conv2D", "Relu"]
    g = roundtrip(TwoBranchConcat(), (2, 3, 6, 6), tmp_path, rng)
    assert sorted(ops_of(g)) == ["Concat", "Conv2D", "MaxPool"]


@pytest.mark.parametrize("pool", [
    nn.MaxPool2D(3, 2, 1), nn.AvgPool2D(3, 2, 1), nn.AvgPool2D(3, 2, 1, count_include_pad=False),
    nn.MaxPool2D(2, 2, ceil_mode=True), nn.AvgPool2D(3, 2, 1, ceil_mode=True),
    nn.AvgPool2D(3, 2, 1, ceil_mode=True, count_include_pad=False), nn.GlobalAvgPool2D(), nn.GlobalMaxPool2D(),
], ids=["max", "avg", "avg_exclude_pad", "max_full", "avg_full", "avg_full_exclude_pad", "global_avg", "global_max"])
def test_pooling(pool, tmp_path, rng):
    g = roundtrip(seq(nn.Conv2D(4, 1), pool), (1, 3, 8, 8), tmp_path, rng)
    assert ops_of(g)[-1] in ("MaxPool", "AvgPool", "Mean")


def test_full_convention_pads_the_end(tmp_path, rng):
    g = roundtrip(seq(nn.MaxPool2D(2, 2, ceil_mode=True)), (1, 2, 7, 7), tmp_path, rng)
    assert g.nodes[0].attrs["pads"] == (0, 1, 0, 1)


@pytest.mark.parametrize("flatten", [True, False])
def test_fully_connected(flatten, tmp_path, rng):
    g = roundtrip(seq(nn.Conv2D(4, 3), nn.Dense(6, flatten=flatten), nn.Activation("relu")), (2, 3, 5, 5),
                  tmp_path, rng)
    matmul = next(n for n in g.nodes if n.op == "MatMul")
    assert g.shape(matmul.inputs[1]) == ((4 * 3 * 3, 6) if flatten else (3, 6))
    assert ("Flatten" in ops_of(g)) == flatten and matmul.attrs["act"] == ("relu" if flatten else "none")


def test_activations_softmax_and_dropout(tmp_path, rng):
    g = roundtrip(seq(nn.Dense(8), nn.Activation("softrelu"), nn.Dropout(0.5), nn.Dense(8),
                      nn.Activation("sigmoid"), nn.Dense(8), nn.Activation("tanh"), nn.Dense(5)),
                  (3, 6), tmp_path, rng)
    assert ops_of(g) == ["MatMul", "Softplus", "MatMul", "Sigmoid", "MatMul", "Tanh", "MatMul"]
    prefix, x, _ = checkpoint(seq(nn.Dense(5)), (3, 6), tmp_path, rng, "sm")
    sym, arg, aux = mx.model.load_checkpoint(prefix, 0)
    for head in (mx.sym.softmax(sym, axis=-1, name="prob"), mx.sym.SoftmaxOutput(sym, name="prob")):
        graph = run_default_passes(import_symbol((head, arg, aux), ["data"], ["prob"], [[3, 6]]))
        assert ops_of(graph) == ["MatMul", "Softmax"] and graph.inputs == ["data"]
        want = head.bind(mx.cpu(), {"data": mx.nd.array(x), **arg, **({"prob_label": mx.nd.zeros(3)}
                                                                        if "prob_label" in head.list_arguments() else {})}
                         ).forward()[0].asnumpy()
        np.testing.assert_allclose(evaluate(graph, {"data": x})["prob"], want, rtol=1e-5)
        np.testing.assert_allclose(run_mxnet(export_symbol(graph), {"data": x})[0], want, rtol=1e-5)


def test_leaky_and_prelu(tmp_path, rng):
    g = roundtrip(seq(nn.Conv2D(4, 3), nn.LeakyReLU(0.1), nn.Conv2D(4, 1), nn.PReLU()), (1, 3, 6, 6),
                  tmp_path, rng)
    assert ops_of(g) == ["Conv2D", "Conv2D"]  # leaky and one-slope prelu fuse as leaky_relu
    assert [n.attrs["act"] for n in g.nodes] == ["leaky_relu"] * 2 and g.nodes[0].attrs["act_alpha"] == 0.1
    alpha_init = mx.init.Constant(mx.nd.array(rng.uniform(0.1, 0.4, 4)))
    g = roundtrip(seq(nn.Conv2D(4, 1), nn.PReLU(alpha_initializer=alpha_init, in_channels=4)),
                  (1, 3, 5, 5), tmp_path, rng)
    assert ops_of(g) == ["Conv2D"] and g.nodes[0].attrs["act"] == "prelu"  # per-channel prelu fuses


def test_checkpoint_prefix_and_names_with_or_without_output_suffix(tmp_path, rng):
    prefix, x, want = checkpoint(seq(nn.Conv2D(4, 3, use_bias=False), nn.BatchNorm()), (1, 3, 6, 6),
                                 tmp_path, rng)
    out = mx.model.load_checkpoint(prefix, 0)[0].list_outputs()[0]
    config = {"input_nodes": ["data"], "output_nodes": [out[:-len("_output")]], "input_shapes": [[1, 3, 6, 6]],
              "output_dir": str(tmp_path / "stats")}
    from ratelnn.convert import ConvertImpl
    graph = ConvertImpl(MXModelHandler(), prefix, config).graph
    assert ops_of(graph) == ["Conv2D"] and graph.outputs == [out[:-len("_output")]]
    np.testing.assert_allclose(evaluate(graph, {"data": x})[graph.outputs[0]], want, rtol=1e-4, atol=1e-5)


def test_unknown_op_stays_opaque_and_round_trips(tmp_path, rng):
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, kernel=(1, 1), num_filter=2, name="conv")
    body = mx.sym.LRN(conv, nsize=3, name="lrn")
    head = mx.sym.Activation(body, act_type="relu", name="out")
    params = {"conv_weight": mx.nd.array(rng.normal(size=(2, 3, 1, 1))), "conv_bias": mx.nd.array([0.1, -0.2])}
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    want = head.bind(mx.cpu(), {"data": mx.nd.array(x), **params}).forward()[0].asnumpy()
    graph = run_default_passes(import_symbol((head, params, {}), ["data"], ["out_output"], [[1, 3, 4, 4]]))
    assert ops_of(graph) == ["Conv2D", "Opaque", "Relu"] and graph.nodes[1].attrs["type"] == "LRN"
    exported = export_symbol(graph)
    lrn = [n for n in json.loads(exported[0].tojson())["nodes"] if n["op"] == "LRN"]
    assert lrn and lrn[0]["attrs"]["nsize"] == "3"
    np.testing.assert_allclose(run_mxnet(exported, {"data": x})[0], want, rtol=1e-5, atol=1e-6)


def test_asymmetric_conv_pads_export_an_explicit_pad(rng):
    graph = Graph()
    graph.add_input("x", (1, 2, 5, 5))
    graph.add_param("w", rng.normal(size=(3, 3, 2, 4)).astype(np.float32))
    graph.add_node(Node("y", "Conv2D", ["x", "w"], ["y"], {"strides": (2, 2), "pads": (0, 1, 0, 1),
                                                            "layout": "NCHW", "act": "relu6"}))
    graph.outputs = ["y"]
    graph.tensors["y"] = TensorInfo((1, 4, 3, 3))
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32) * 4
    exported = export_symbol(graph)
    assert [n["op"] for n in json.loads(exported[0].tojson())["nodes"] if n["op"] != "null"] == \
        ["Pad", "Convolution", "clip"]
    np.testing.assert_allclose(run_mxnet(exported, {"x": x})[0], evaluate(graph, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    reimported = import_symbol(exported, ["x"], ["y"], [[1, 2, 5, 5]])
    assert ops_of(reimported) == ["Pad", "Conv2D", "Relu6"]


def test_quantization_ops_encode_to_custom_op_string_attrs():
    cases = {"MinMax": {"tensor_name": "conv0_fwd", "output_dir": "/tmp/stats", "ema_decay": 0.9},
             "Quant": {"dtype": "int8", "scale": float(np.float32(0.0123)), "round_mode": "half_to_even"},
             "Dequant": {"scales": [float(np.float32(0.1)), 0.25], "axis": 3},
             "Engine": {"engine": b"\x00\xffbytes", "engine_name": "engine_0", "device_id": 0, "core_ids": [0, 1],
                        "num_outputs": 2}}
    for op, attrs in cases.items():
        encoded = encode_custom_attrs(op, attrs)
        assert all(isinstance(v, str) for v in encoded.values())
        assert decode_custom_attrs(op, encoded) == ({**attrs, "round_mode": "half_to_even"} if op == "Quant" else attrs)
    assert encode_custom_attrs("Quant", cases["Quant"])["scale"] == repr(float(np.float32(0.0123)))
    graph = Graph()
    graph.add_input("x", (2, 4))
    graph.add_node(Node("q", "Quant", ["x"], ["q"], {"dtype": "int16", "scale": 0.5}), [TensorInfo((2, 4), "int16")])
    graph.add_node(Node("y", "Dequant", ["q"], ["y"], {"scale": 0.5}), [TensorInfo((2, 4))])
    graph.outputs = ["y"]
    nodes = json.loads(export_json(graph)[0])["nodes"]
    assert [(n["op"], n["attrs"]) for n in nodes[1:]] == [
        ("ratel_quant", {"dtype": "int16", "round_mode": "half_away_from_zero", "scale": "0.5"}),
        ("ratel_dequant", {"scale": "0.5"})]


# ---------------------------------------------------------------- errors
@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    prefix, _, _ = checkpoint(seq(nn.Conv2D(4, 3), nn.Dense(3)), (1, 3, 6, 6), tmp_path_factory.mktemp("m"),
                              np.random.default_rng(0))
    return prefix, mx.model.load_checkpoint(prefix, 0)


def _names(model):
    sym = model[0]
    conv = [a for a in sym.list_arguments() if a.endswith("weight")][0]
    return sym.list_outputs()[0], conv


@pytest.mark.parametrize("case, message", [
    ("unknown_input", "input node 'date' is not a variable of the symbol; close matches: ['data']"),
    ("unknown_output", "is not a node of the symbol; close matches"),
    ("wrong_rank", "has rank 3"),
    ("missing_param", "params missing for ["),
    ("wrong_shape", "params of the wrong shape: "),
    ("not_a_symbol", "malformed symbol JSON"),
    ("not_a_model", "(symbol, arg_params, aux_params) tuple or a checkpoint prefix"),
])
def test_bad_input_raises_model_error(case, message, small_model):
    prefix, (sym, arg, aux) = small_model
    out, conv = _names((sym, arg, aux))
    args = {"graph_def": (sym, arg, aux), "inputs": ["data"], "outputs": [out], "shapes": [[1, 3, 6, 6]]}
    if case == "unknown_input":
        args["inputs"] = ["date"]
    elif case == "unknown_output":
        args["outputs"] = [out.replace("dense", "denze")]
    elif case == "wrong_rank":
        args["shapes"] = [[1, 3, 6]]
    elif case == "missing_param":
        args["graph_def"] = (sym, {k: v for k, v in arg.items() if k != conv}, aux)
        message += repr(conv)
    elif case == "wrong_shape":
        args["graph_def"] = (sym, {**arg, conv: mx.nd.zeros((4, 3, 5, 5))}, aux)
        message += f"'{conv}': expected (4, 3, 3, 3), got (4, 3, 5, 5)"
    elif case == "not_a_symbol":
        args["graph_def"] = ('{"nodes": 3}', arg, aux)
    elif case == "not_a_model":
        args["graph_def"] = 42
    with pytest.raises(ModelError) as info:
        import_symbol(args["graph_def"], args["inputs"], args["outputs"], args["shapes"])
    assert message in str(info.value)


def test_bad_checkpoint_files(small_model, tmp_path):
    with pytest.raises(ModelError, match="missing file"):
        import_symbol(str(tmp_path / "nothing"), ["data"], ["x"], [[1, 3, 6, 6]])
    (tmp_path / "bad-symbol.json").write_text("{not json")
    (tmp_path / "bad-0000.params").write_bytes(b"")
    with pytest.raises(ModelError, match="malformed symbol JSON"):
        import_symbol(str(tmp_path / "bad"), ["data"], ["x"], [[1, 3, 6, 6]])


def test_calibration_and_quantized_graphs_export_custom_op_nodes(tmp_path, rng):
    from ratelnn.calibration.stats import TensorStats
    from ratelnn.config import normalize
    from ratelnn.quantization.emit import emit_calibration, emit_qdq
    from ratelnn.quantization.policy import calibration_tensors
    from ratelnn.quantization.quantizer import quantize
    prefix, x, _ = checkpoint(seq(nn.Conv2D(4, 3, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
                                  nn.Dense(3)), (2, 3, 6, 6), tmp_path, rng)
    out = mx.model.load_checkpoint(prefix, 0)[0].list_outputs()[0][:-len("_output")]
    config = normalize({"input_nodes": ["data"], "output_nodes": [out], "input_shapes": [[2, 3, 6, 6]],
                        "output_dir": str(tmp_path / "stats")}, "mxnet")
    graph = MXModelHandler().import_graph(prefix, config)

    cal_nodes = json.loads(export_json(emit_calibration(graph, config))[0])["nodes"]
    minmax = {n["attrs"]["tensor_name"]: n["attrs"] for n in cal_nodes if n["op"] == "ratel_minmax"}
    tensors = calibration_tensors(graph, config)
    assert sorted(minmax) == sorted(tensors)
    assert all(a["output_dir"] == str(tmp_path / "stats") and float(a["ema_decay"]) == 0.9 for a in minmax.values())

    values = evaluate(graph, {"data": x}, tensors)
    stats = {t: TensorStats(float(v.min()), float(v.max()), float(v.min()), float(v.max()), 1, v.size)
             for t, v in values.items()}
    text, params = export_json(emit_qdq(quantize(graph, stats, config), config))
    sym = json.loads(text)
    nodes = sym["nodes"]
    assert nodes[sym["heads"][0][0]]["name"] == out
    conv = next(n for n in nodes if n["op"] == "Convolution")
    transpose = nodes[conv["inputs"][1][0]]
    dequant = nodes[transpose["inputs"][0][0]]
    weight = nodes[dequant["inputs"][0][0]]
    assert (transpose["op"], transpose["attrs"]["axes"]) == ("transpose", "(3, 2, 0, 1)")
    assert dequant["op"] == "ratel_dequant" and dequant["attrs"]["axis"] == "3" and len(json.loads(dequant["attrs"]["scales"])) == 4
    assert weight["attrs"]["__dtype__"] == "5" and params[weight["name"]].dtype == np.int8
    assert params[weight["name"]].shape == (3, 3, 3, 4)  # integer weights stay HWIO
    quants = [n["attrs"] for n in nodes if n["op"] == "ratel_quant"]
    assert quants and all(a["dtype"] in ("int8", "uint8") and float(a["scale"]) > 0 for a in quants)


def test_symbol_api_batchnorm_fix_gamma_and_scalar_ops(rng):
    """mx.sym BatchNorm defaults to fix_gamma=True: gamma is ignored (treated as 1)."""
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, kernel=(3, 3), num_filter=3, pad=(1, 1), name="conv")
    bn = mx.sym.BatchNorm(conv, name="bn")
    head = mx.sym.Flatten(mx.sym.relu(bn * 0.5 + 1.0, name="act"), name="out")
    params = {"conv_weight": rng.normal(size=(3, 2, 3, 3)), "conv_bias": rng.normal(size=3),
              "bn_gamma": rng.uniform(2, 3, 3), "bn_beta": rng.normal(size=3)}
    aux = {"bn_moving_mean": rng.normal(size=3), "bn_moving_var": rng.uniform(0.5, 2, 3)}
    params, aux = ({k: mx.nd.array(v) for k, v in d.items()} for d in (params, aux))
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    want = head.bind(mx.cpu(), {"data": mx.nd.array(x), **params}, aux_states=aux).forward()[0].asnumpy()
    graph = run_default_passes(import_symbol((head, params, aux), ["data"], ["out"], [[2, 2, 5, 5]]))
    assert ops_of(graph) == ["Conv2D", "Flatten"] and graph.nodes[0].attrs["act"] == "relu"
    np.testing.assert_allclose(evaluate(graph, {"data": x})["out"], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run_mxnet(export_symbol(graph), {"data": x})[0], want, rtol=1e-4, atol=1e-5)
