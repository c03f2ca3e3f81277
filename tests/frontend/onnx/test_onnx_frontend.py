"""The ONNX frontend: every registry op through IR <-> ONNX, the three forms under ONNX
Runtime at a free batch, the compiled model against the reference executor, bad input."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ratelnn  # noqa: E402
from ratelnn.errors import ModelError  # noqa: E402
from agraph.pretrained import cosine  # noqa: E402
from ratelnn.frontend.onnx import converter, export_model, import_model  # noqa: E402

X_SHAPE = (2, 4, 6, 6)


def _w(rng, *shape, scale=0.3):
    """float32 weights of ``shape``, normal with standard deviation ``scale``."""
    return (rng.normal(size=shape) * scale).astype(np.float32)


def _model(nodes, inits, out_dims=None, in_shape=("N",) + X_SHAPE[1:], opset=17, extra_inputs=()):
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))] + list(extra_inputs),
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _one(op, inputs=("x",), inits=None, **attrs):
    return _model([helper.make_node(op, list(inputs), ["y"], **attrs)], inits or {})


def _run(model, x, options=None):
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]


C = X_SHAPE[1]


def _cases(rng):
    """One small model per op of the registry (name -> ONNX model), weights drawn from ``rng``."""
    return {
        "Conv": _one("Conv", ("x", "w", "b"), {"w": _w(rng, 5, C, 3, 3), "b": _w(rng, 5)}, pads=[1, 0, 1, 2],
                     strides=[2, 1]),
        "Conv_depthwise": _one("Conv", ("x", "w"), {"w": _w(rng, 2 * C, 1, 3, 3)}, group=C, auto_pad="SAME_UPPER"),
        "Gemm": _model([helper.make_node("Flatten", ["x"], ["f"]),
                        helper.make_node("Gemm", ["f", "w", "b"], ["y"], transB=1)],
                       {"w": _w(rng, 7, C * 36), "b": _w(rng, 7)}),
        "MatMul": _model([helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["y"])],
                         {"w": _w(rng, C * 36, 7)}),
        "BatchNormalization": _one("BatchNormalization", ("x", "s", "o", "m", "v"),
                                   {"s": _w(rng, C), "o": _w(rng, C), "m": _w(rng, C), "v": np.abs(_w(rng, C)) + 0.5}),
        **{op: _one(op, ("x", "c"), {"c": _w(rng, 1, C, 1, 1)}) for op in ("Add", "Sub", "Mul", "Max", "Min")},
        "Div": _one("Div", ("x", "c"), {"c": np.abs(_w(rng, 1, C, 1, 1)) + 0.5}),
        **{op: _one(op) for op in ("Relu", "Sigmoid", "Tanh", "Softsign", "Softplus", "Exp", "Neg", "Identity",
                                   "GlobalMaxPool", "GlobalAveragePool")},
        "Sqrt": _model([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Sqrt", ["a"], ["y"])], {}),
        "Clip": _one("Clip", ("x", "lo", "hi"), {"lo": np.float32(0), "hi": np.float32(6)}),
        "LeakyRelu": _one("LeakyRelu", alpha=0.1),
        "PRelu": _one("PRelu", ("x", "s"), {"s": _w(rng, C, 1, 1)}),
        "Softmax": _one("Softmax", axis=1),
        "MaxPool": _one("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
        "AveragePool": _one("AveragePool", kernel_shape=[2, 2], strides=[2, 2], count_include_pad=1, pads=[1, 1, 0, 0]),
        "ReduceMean": _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
                             {"axes": np.asarray([2, 3], np.int64)}, opset=18),
        "ReduceMean_opset13": _model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=1)], {},
                                     opset=13),
        "Concat": _model([helper.make_node("Relu", ["x"], ["r"]),
                          helper.make_node("Concat", ["x", "r"], ["y"], axis=1)], {}),
        "Reshape": _one("Reshape", ("x", "s"), {"s": np.asarray([0, -1], np.int64)}),
        "Squeeze": _model([helper.make_node("ReduceMean", ["x", "a"], ["m"], keepdims=1),
                           helper.make_node("Squeeze", ["m", "a"], ["y"])], {"a": np.asarray([2, 3], np.int64)},
                          opset=18),
        "Flatten": _one("Flatten"),
        "Transpose": _one("Transpose", perm=[0, 2, 3, 1]),
        "Pad": _one("Pad", ("x", "p", "v"),
                    {"p": np.asarray([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "v": np.float32(0.5)}),
        "Dropout": _one("Dropout"),
        "Cos_kept_float": _one("Cos"),
        "HardSwish": _one("HardSwish"),
        "HardSigmoid": _one("HardSigmoid", alpha=1 / 6, beta=0.5),
        "Div_by_tensor": _model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Div", ["x", "s"], ["y"])],
                                {}),
    }


CASES = _cases(np.random.default_rng(0))


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_round_trip(name, rng):
    model = CASES[name]
    graph = import_model(model, ["x"], ["y"], [X_SHAPE])
    if name == "Cos_kept_float":
        assert [n.op for n in graph.nodes] == ["Opaque"]
    back = export_model(graph)
    onnx.checker.check_model(back)
    for batch in (1, 3):
        x = rng.normal(size=(batch,) + X_SHAPE[1:]).astype(np.float32)
        np.testing.assert_allclose(_run(back, x), _run(model, x), rtol=1e-5, atol=1e-5)


def _cnn(rng):
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=8),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
             helper.make_node("Add", ["r1", "r2"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"])]
    inits = {"w1": _w(rng, 8, 3, 3, 3), "b1": _w(rng, 8, scale=0.1), "w2": _w(rng, 8, 1, 3, 3), "lo": np.float32(0),
             "hi": np.float32(6), "wd": _w(rng, 8, 10), "bd": _w(rng, 10, scale=0.1)}
    return _model(nodes, inits, ["N", 10], in_shape=("N", 3, 16, 16))


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx_cal")
    rng = np.random.default_rng(0)
    model = _cnn(rng)
    cfg = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[4, 3, 16, 16]], "output_dir": str(out)}
    conv = converter(model, cfg)
    data = rng.normal(size=(32, 3, 16, 16)).astype(np.float32)
    conv.calibrate(data, batch_size=4, progress=False)
    return model, conv, data


def test_calibration_writes_the_statistics_files(calibrated):
    _, conv, _ = calibrated
    files = os.listdir(os.path.join(conv.config["output_dir"], "ratel_stats"))
    assert "manifest.json" in files and any(f.endswith(".rstats") for f in files)
    cal = conv.to_cal()
    assert {n.op_type for n in cal.graph.node if n.domain == "ratelnn"} == {"RatelMinMax"}


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_quantized_model_is_plain_qdq_at_any_batch(calibrated, batch):
    model, conv, data = calibrated
    quant = conv.to_quant()
    assert {n.domain for n in quant.graph.node} <= {""}
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in quant.graph.node}
    assert quant.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    y_q, y_f = _run(quant, data[:batch]), _run(model, data[:batch])
    assert y_q.shape == (batch, 10)
    cos = np.sum(y_q * y_f) / np.linalg.norm(y_q) / np.linalg.norm(y_f)
    assert cos > 0.99


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_compiled_model_matches_reference_executor(calibrated, batch):
    from ratelnn.compiler import compile_graph
    from ratelnn.compiler.run import run_compiled
    _, conv, data = calibrated
    npu = conv.to_npu()
    assert "RatelEngineOp" in {n.op_type for n in npu.graph.node}
    compiled = compile_graph(conv.quantized_ir(), conv.config, {})
    want = run_compiled(compiled, {"x": data[:batch]}, backend="reference")["y"]
    got = ratelnn.onnx_session(npu).run(["y"], {"x": data[:batch]})[0]
    np.testing.assert_array_equal(got, want)


def test_compiled_model_without_registration_fails_naming_the_call(calibrated):
    from ratelnn.frontend.onnx.runtime import onnx_session as plain
    with pytest.raises(ModelError, match="ratelnn.onnx_session"):
        plain(calibrated[1].to_npu())


# ---------------------------------------------------------------- bad input
def test_control_flow_is_refused_naming_the_node():
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    model = _model([helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
                    helper.make_node("Cast", ["m"], ["cond"], to=TensorProto.BOOL),
                    helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=then)], {})
    with pytest.raises(ModelError, match="'branch'.*If"):
        import_model(model, ["x"], ["y"], [X_SHAPE])


def test_opset_out_of_range_is_refused():
    with pytest.raises(ModelError, match="opset 11"):
        import_model(_model([helper.make_node("Relu", ["x"], ["y"])], {}, opset=11), ["x"], ["y"], [X_SHAPE])


def test_unknown_domain_op_is_refused_naming_it():
    model = _model([helper.make_node("Frobnicate", ["x"], ["y"], name="odd", domain="vendor")], {})
    model.opset_import.append(helper.make_opsetid("vendor", 1))
    with pytest.raises(ModelError, match="Frobnicate node 'odd'"):
        import_model(model, ["x"], ["y"], [X_SHAPE])


def test_external_data(tmp_path, rng):
    from ratelnn.frontend.onnx import save_model
    model = CASES["Conv"]
    path = tmp_path / "conv.onnx"
    save_model(model, path, external_data=True)
    assert (tmp_path / "conv.onnx.data").is_file()
    graph = import_model(str(path), ["x"], ["y"], [X_SHAPE])
    x = rng.normal(size=X_SHAPE).astype(np.float32)
    np.testing.assert_allclose(_run(export_model(graph), x), _run(model, x), rtol=1e-5, atol=1e-5)
    os.remove(tmp_path / "conv.onnx.data")
    with pytest.raises(ModelError, match="conv.onnx.data"):
        import_model(str(path), ["x"], ["y"], [X_SHAPE])


def test_unknown_input_name_is_refused():
    with pytest.raises(ModelError, match="'images'"):
        import_model(CASES["Relu"], ["images"], ["y"], [X_SHAPE])


def test_float_fallback_between_two_engines(tmp_path, rng):
    from ratelnn.compiler import compile_graph
    from ratelnn.compiler.run import run_compiled
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Cos", ["r1"], ["k"]),
             helper.make_node("Conv", ["k", "w2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["y"])]
    model = _model(nodes, {"w1": _w(rng, 4, 3, 3, 3), "w2": _w(rng, 4, 4, 3, 3)}, ["N", 4, 8, 8],
                   in_shape=("N", 3, 8, 8), opset=13)
    conv = converter(model, {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[2, 3, 8, 8]],
                             "output_dir": str(tmp_path)})
    data = rng.normal(size=(6, 3, 8, 8)).astype(np.float32)
    conv.calibrate(data, batch_size=2, progress=False)
    npu = conv.to_npu()
    kinds = [(n.domain, n.op_type) for n in npu.graph.node]
    assert kinds.count(("ratelnn", "RatelEngineOp")) == 2 and ("", "Cos") in kinds
    session = ratelnn.onnx_session(npu, intra_op_threads=2)
    got = session.run(["y"], {"x": data[:5]})[0]
    want = run_compiled(compile_graph(conv.quantized_ir(), conv.config, {}), {"x": data[:5]})["y"]
    np.testing.assert_array_equal(got, want)
    # the ONNX Runtime sessions between the engines block between runs instead of spinning on
    # the cores the engines' threads run on next
    stages = [s.session for plans in session._stages.values() for s in plans if s.session is not None]
    assert stages, "the Cos between the engines runs in an ONNX Runtime stage"
    for stage in stages:
        options = stage.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert options.intra_op_num_threads == 2


def test_quantize_static_qdq_model_compiles_with_its_own_scales(tmp_path, rng):
    """QuantONNX: a QDQ model from ONNX Runtime's quantize_static (symmetric int8) given to
    to_npu(); the compiled model computes what the QDQ model computes."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    model, data = _cnn(rng), rng.normal(size=(32, 3, 16, 16)).astype(np.float32)

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": data[i:i + 4]} for i in range(0, 32, 4)])

        def get_next(self):
            return next(self.batches, None)

    src, dst = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, str(src))
    quantization.quantize_static(str(src), str(dst), Reader(), quant_format=quantization.QuantFormat.QDQ,
                                 per_channel=True, activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8,
                                 extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    qdq = onnx.load(str(dst))
    conv = converter(model, {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[4, 3, 16, 16]],
                             "output_dir": str(tmp_path / "out")})
    npu = conv.to_npu(qdq)
    assert "RatelEngineOp" in {n.op_type for n in npu.graph.node}
    got = ratelnn.onnx_session(npu).run(["y"], {"x": data[:8]})[0]
    want = _run_qdq_semantics(qdq, data[:8])
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 0.02 * scale


def _run_qdq_semantics(model, x):
    """``model`` run by ONNX Runtime with every graph optimization off: each Quantize /
    Dequantize node as written, the ops between them in float."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return _run(model, x, options)


def test_sessions_of_qdq_models_compute_the_qdq_semantics(tmp_path, rng):
    """ratelnn's sessions keep ONNX Runtime from fusing QDQ patterns into its int8 kernels,
    whose u8 x s8 pair sums saturate on CPUs without VNNI; a caller's own setting stands."""
    model, data = _cnn(rng), rng.normal(size=(16, 3, 16, 16)).astype(np.float32)
    conv = converter(model, {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[4, 3, 16, 16]],
                             "output_dir": str(tmp_path / "out")})
    conv.calibrate(data, batch_size=4, progress=False)
    quant = conv.to_quant()
    session = ratelnn.onnx_session(quant)
    assert session.get_session_options().get_session_config_entry("session.disable_quant_qdq") == "1"
    np.testing.assert_array_equal(session.run(["y"], {"x": data[:8]})[0], _run_qdq_semantics(quant, data[:8]))
    own = ort.SessionOptions()
    own.add_session_config_entry("session.disable_quant_qdq", "0")
    from ratelnn.frontend.onnx.runtime import onnx_session as plain_session
    kept = plain_session(quant, own).get_session_options()
    assert kept.get_session_config_entry("session.disable_quant_qdq") == "0"


# ---------------------------------------------------------------- models as exporters write them
def test_division_by_a_constant_becomes_a_multiplication():
    """x / c is x * (1 / c), an op the NPU runs; a division by a tensor stays a Div."""
    assert [n.op for n in import_model(CASES["Div"], ["x"], ["y"], [X_SHAPE]).nodes] == ["Mul"]
    assert [n.op for n in import_model(CASES["Div_by_tensor"], ["x"], ["y"], [X_SHAPE]).nodes] == ["Sigmoid", "Div"]


def _calibrated_at_batch_2(model, tmp_path, rng, **config):
    conv = converter(model, {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[2, 4, 6, 6]],
                             "output_dir": str(tmp_path), **config})
    data = rng.normal(size=(8, 4, 6, 6)).astype(np.float32)
    conv.calibrate(data, batch_size=2, progress=False)
    return conv, data


def test_open_dimensions_written_as_minus_one_are_unknown(tmp_path, rng):
    """Some exporters (Paddle's) write -1 for an open dimension in inputs, value_info and
    outputs: the batch stays free and shape inference does not contradict it."""
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])], {},
                   [-1, 4, 6, 6], in_shape=(-1, 4, 6, 6))
    model.graph.value_info.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [-1, 4, 6, 6]))
    conv, data = _calibrated_at_batch_2(model, tmp_path, rng)
    np.testing.assert_allclose(_run(conv.to_quant(), data[:3]), _run(model, data[:3]), atol=0.02)


def test_batch_folded_into_rows_keeps_any_batch(tmp_path, rng):
    """x [N, 4, 6, 6] reshaped to [N * 4, 36] and back (a softmax over rows between): the
    exported reshapes take any batch, not the calibration batch folded in."""
    model = _model([helper.make_node("Reshape", ["x", "rows"], ["flat"]),
                    helper.make_node("Softmax", ["flat"], ["soft"], axis=1),
                    helper.make_node("Reshape", ["soft", "back"], ["y"])],
                   {"rows": np.asarray([-1, 36], np.int64), "back": np.asarray([-1, 4, 6, 6], np.int64)})
    conv, data = _calibrated_at_batch_2(model, tmp_path, rng)
    for form in (conv.to_quant(), conv.to_npu()):
        got = ratelnn.onnx_session(form).run(["y"], {"x": data[:3]})[0]
        assert got.shape == (3, 4, 6, 6) and cosine(got, _run(model, data[:3])) > 0.99


def test_int16_qdq_model_with_a_reshape_before_a_float_reader_loads_in_onnx_runtime(tmp_path, rng):
    """int16 raises the QDQ model to opset 21, where ONNX Runtime's QDQ propagation would
    reject an int8 DequantizeLinear -> Reshape -> (float op): the exporter quantizes the
    reshape's result again at the same scale, so plain ONNX Runtime loads and runs it."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c2", "s"], ["f"]), helper.make_node("Cos", ["f"], ["y"])]
    model = _model(nodes, {"w1": _w(rng, 4, 4, 3, 3), "w2": _w(rng, 4, 4, 3, 3), "s": np.asarray([0, -1], np.int64)})
    conv, data = _calibrated_at_batch_2(model, tmp_path, rng,
                                        layer_configs=[{"layer_name": "c1", "data_type": "int16"}])
    quant = conv.to_quant()
    assert quant.opset_import[0].version >= 21
    assert cosine(_run(quant, data[:3]), _run(model, data[:3])) > 0.99


@pytest.mark.parametrize("dtype,round_mode,per_channel", [
    ("int8", "half_away_from_zero", False), ("uint8", "half_to_even", False), ("int16", "floor", True),
    ("int8", "half_away_from_zero", True)])
def test_ratel_quant_node_matches_the_ir_quant(dtype, round_mode, per_channel, rng):
    """A RatelQuant node in ratelnn.onnx_session gives the IR evaluator's Quant codes, ties,
    saturation and NaN included; a bad dtype is a ModelError naming the node."""
    from ratelnn.ir import Node
    from ratelnn.ir.evaluate import evaluate_node
    x = (rng.normal(size=(3, C, 5, 7)) * 40).astype(np.float32)
    x[0, 0, 0, :4] = [0.5, -1.5, 2.5, np.nan]   # ties at scale 1 and a NaN
    x[1, 1, 1, :2] = [1e9, -1e9]
    attrs = {"dtype": dtype, "round_mode": round_mode}
    attrs.update({"scales": [1.0, 0.5, 2.0, 0.25][:C], "axis": 1} if per_channel else {"scale": 1.0})
    want = evaluate_node(Node("q", "Quant", ["x"], ["y"], attrs), [x])[0]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("RatelQuant", ["x"], ["y"], name="q", domain="ratelnn", **attrs)
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", elem, list(x.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ratelnn", 1)])
    got = ratelnn.onnx_session(model).run(["y"], {"x": x})[0]
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)
    bad = helper.make_node("RatelQuant", ["x"], ["y"], name="bad_quant", domain="ratelnn", **{**attrs, "dtype": "int4"})
    model.graph.node[0].CopyFrom(bad)
    with pytest.raises(ModelError, match="bad_quant.*int4"):
        ratelnn.onnx_session(model).run(["y"], {"x": x})


def test_static_batch_sizes_run_as_batch_plans_in_onnx_session(tmp_path, rng):
    """static_batch_sizes in an ONNX compiled model: one engine holding a plan per size; batches
    of every compiled size (and a split one) give the quantized model's result."""
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["c"], ["y"])], {"w": _w(rng, 4, 4, 3, 3)})
    conv, data = _calibrated_at_batch_2(model, tmp_path, rng, static_batch_sizes=[1, 2, 4])
    npu = conv.to_npu()
    engines = [n for n in npu.graph.node if n.op_type == "RatelEngineOp"]
    assert len(engines) == 1
    quant = ratelnn.onnx_session(conv.to_quant())
    session = ratelnn.onnx_session(npu)
    for rows in (1, 2, 3, 4):
        got = session.run(["y"], {"x": data[:rows]})[0]
        want = quant.run(["y"], {"x": data[:rows]})[0]
        assert got.shape == want.shape and cosine(got, want) > 0.999
