"""The op registry (ratelnn/ir/registry.py) and the code that reads it agree: framework
spellings, quantization policy, lowering, engine opcodes, cost classes, the evaluator and
docs/npu-supported-ops.md; every op a frontend spells round-trips through that frontend
(IR -> framework model -> IR: same op, same attributes) and the exported model computes what
the IR evaluator computes."""
from __future__ import annotations


import numpy as np
import pytest

from ratelnn.calibration.stats import TensorStats
from ratelnn.compiler import compile_graph
from ratelnn.compiler import lower
from ratelnn.config import QUANT_CFG_ROLES
from ratelnn.ir import Graph, Node, TensorInfo, registry
from ratelnn.ir.evaluate import EvaluationError, evaluate, evaluate_node
from ratelnn.npu.costs import instruction_layer_cost
from ratelnn.proto import engine_pb2
from ratelnn.quantization import policy
from ratelnn.quantization.policy import calibration_tensors, layer_data_types
from ratelnn.quantization.quantizer import quantize

from helpers.paths import REPO

DOC = REPO / "docs" / "npu-supported-ops.md"
BEGIN, END = "<!-- BEGIN generated: python -m ratelnn.ir.registry --markdown -->", "<!-- END generated -->"
COST_KINDS = {"conv", "depthwise", "fc", "eltwise", "pool", "lut", "softmax", "concat", "move"}
F32 = np.float32
# tests marked no_tf_math read the registry or run MXNet, the IR evaluator and the compiler:
# no TensorFlow kernel (tests/conftest.py)


@pytest.mark.no_tf_math
# ---------------------------------------------------------------- the registry itself
def test_names_and_spellings_are_consistent():
    assert len(registry.BY_NAME) == len(registry.OPS)
    for fw in registry.FRAMEWORKS:
        for spelling, ops in registry.SPELLINGS[fw].items():
            assert all(spelling in getattr(op, fw) for op in ops)
            assert all(name in registry.ir_ops(spelling) for name in (op.name for op in ops))
    for op in registry.OPS:   # an IR op name names only that op, whatever the frameworks call
        assert registry.ir_ops(op.name) == {op.name}
    assert registry.ir_ops("Pooling") == {"MaxPool", "AvgPool"}
    assert registry.ir_ops("Conv") == registry.ir_ops("DepthwiseConv2dNative") == {"Conv2D"}
    assert registry.ir_ops("NoSuchOp") == {"NoSuchOp"}


@pytest.mark.no_tf_math
def test_npu_opcodes_cost_classes_and_roles_are_real():
    opcodes = set(engine_pb2.Opcode.keys()) - {"OPCODE_UNSPECIFIED"}
    for op in registry.OPS:
        assert set(op.npu) <= opcodes, op
        assert (op.cost in COST_KINDS) == bool(op.npu), op
        assert not op.quantized or op.npu, f"{op.name}: quantized but no NPU lowering"
        assert op.scale_preserving <= op.quantized, op
        assert op.form in (registry.UNARY, registry.BINARY, registry.VARIADIC, registry.WEIGHTED, registry.OTHER)
        for role in (op.input_role, op.output_role, op.weight_role or "activations"):
            assert role in QUANT_CFG_ROLES, (op.name, role)
        assert (op.weight_role is not None) == (op.form == registry.WEIGHTED), op


@pytest.mark.no_tf_math
def test_unknown_op_error_lists_close_names():
    with pytest.raises(registry.UnknownOpError, match=r"unknown IR op 'Relu7'; close IR ops: Relu, Relu6"):
        registry.get("Relu7")
    with pytest.raises(registry.UnknownOpError, match=r"ONNX spelling of Conv2D"):
        registry.get("Conv")
    with pytest.raises(EvaluationError, match=r"node 'n': unknown IR op 'Sigmod'.*Sigmoid"):
        evaluate_node(Node("n", "Sigmod", ["x"], ["n"]), [np.zeros(2, F32)])
    with pytest.raises(registry.UnknownOpError, match=r"unregistered spellings \['Relu7'\]"):
        registry.frontend_table("tf", {"Relu7": None}, lambda op, s: None)
    with pytest.raises(registry.UnknownOpError, match=r"\['Activation', 'Pooling'\] name several IR ops"):
        registry.frontend_table("mx", {}, lambda op, s: None)


@pytest.mark.no_tf_math
def test_docs_table_is_generated_from_the_registry():
    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC} lost its generated-table markers"
    committed = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert committed == registry.markdown_table(), (
        "docs/npu-supported-ops.md is out of date: paste `python -m ratelnn.ir.registry --markdown` between "
        "its markers")


@pytest.mark.no_tf_math
# ---------------------------------------------------------------- readers agree with it
def test_policy_compiler_evaluator_and_frontends_read_the_registry():
    from ratelnn.frontend.mxnet import exporter as mx_exp, importer as mx_imp
    from ratelnn.frontend.mxnet.attrs import CUSTOM_OPS
    from ratelnn.frontend.onnx import exporter as onnx_exp, importer as onnx_imp
    from ratelnn.frontend.tensorflow import exporter as tf_exp, importer as tf_imp
    assert policy.QUANTIZED_OPS == {op.name for op in registry.OPS if op.quantized}
    assert lower.LOWERABLE_OPS == {op.name for op in registry.OPS if op.npu}
    assert set(tf_imp._TRANSLATORS) == set(registry.SPELLINGS["tf"])
    assert set(mx_imp._TRANSLATORS) == set(registry.SPELLINGS["mx"])
    assert set(onnx_imp._TRANSLATORS) == set(registry.SPELLINGS["onnx"])
    assert {op.name for op in registry.OPS if op.tf} <= set(tf_exp._EXPORTERS)
    assert {op.name for op in registry.OPS if op.mx} <= set(mx_exp._EXPORTERS)
    assert {op.name for op in registry.OPS if op.onnx} <= set(onnx_exp._EXPORTERS)
    assert CUSTOM_OPS == {op.name: op.mx[0] for op in registry.OPS if op.custom_op}
    for op in registry.OPS:   # every op has a float definition (Opaque/Engine: a clear refusal)
        try:
            evaluate_node(Node("n", op.name, [], ["n"]), [])
        except EvaluationError as e:
            assert "unknown IR op" not in str(e)
        except (TypeError, KeyError, IndexError, ValueError):
            pass


@pytest.mark.no_tf_math
def test_layer_configs_op_type_takes_framework_spellings():
    g = _graph("x", (2, 4))
    g.add_node(Node("r", "Relu", ["x"], ["r"]), [TensorInfo((2, 4))])
    g.add_node(Node("s", "Sigmoid", ["r"], ["s"]), [TensorInfo((2, 4))])
    g.outputs = ["s"]
    for spelling in ("Relu", "relu", "Activation"):   # IR = TF = ONNX; MXNet; MXNet (several ops)
        found = layer_data_types(g, {"layer_configs": [{"op_type": spelling, "data_type": "fp32"}]})
        assert found == ({"r": "fp32", "s": "fp32"} if spelling == "Activation" else {"r": "fp32"})


# ---------------------------------------------------------------- round trips through the frontends
def _graph(x: str, shape, name="g") -> Graph:
    g = Graph(name=name)
    g.add_input(x, shape)
    return g


def _case(op: str, fw: str):
    """A graph of one ``op`` node (TF: NHWC, MXNet: NCHW) with the attributes the importer of
    ``fw`` gives, and its feeds."""
    rng = np.random.default_rng(0)
    nchw = fw == "mx"
    x4 = (2, 3, 4, 4) if nchw else (2, 4, 4, 3)
    layout, chan = ("NCHW", 1) if nchw else ("NHWC", 3)
    shape, inputs, params, attrs = x4, ["x"], {}, {}
    form = registry.get(op).form
    if form == registry.BINARY and op not in ("BiasAdd", "PRelu"):
        inputs = ["x", "y"]
    elif op == "Conv2D":
        params = {"w": rng.normal(0, 0.3, (3, 3, 3, 5))}
        attrs = dict(strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1, layout=layout, act="none",
                     act_alpha=0.0)
    elif op == "MatMul":
        shape, params = (2, 6), {"w": rng.normal(0, 0.3, (6, 5))}
        attrs = dict(transpose_a=False, transpose_b=False, act="none", act_alpha=0.0)
    elif op == "BiasAdd":
        params, attrs = {"b": rng.normal(0, 1, (3,))}, {"layout": layout}
    elif op == "BatchNorm":
        params = {p: rng.uniform(0.5, 1.5, (3,)) for p in ("gamma", "beta", "mean", "var")}
        attrs = {"eps": 0.0625, "axis": chan}
    elif op in ("MaxPool", "AvgPool"):
        attrs = dict(ksize=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), layout=layout)
        if op == "AvgPool":
            attrs["count_include_pad"] = False
    elif op == "LeakyRelu":
        attrs = {"alpha": 0.25}
    elif op == "Mean":
        attrs = {"axes": (2, 3) if nchw else (1, 2), "keepdims": False}
    elif op == "Concat":
        inputs, attrs = ["x", "y"], {"axis": chan}
    elif op == "Reshape":
        attrs = {"shape": (2, 48)}
    elif op == "Squeeze":
        shape, attrs = (2, 1, 4, 3), {"axes": (1,)}
    elif op == "Transpose":
        attrs = {"perm": (0, 2, 3, 1)}
    elif op == "Pad":
        attrs = {"pads": ((0, 0), (0, 0), (1, 1), (2, 0)) if nchw else ((0, 0), (1, 1), (2, 0), (0, 0)),
                 "value": 0.0}
    elif op == "Softmax":
        shape, attrs = (2, 5), {"axis": 1}
    elif form != registry.UNARY or registry.get(op).custom_op:
        pytest.fail(f"no round-trip case for {op}: add one to _case")
    g = _graph("x", shape)
    if "y" in inputs:
        g.add_input("y", shape)
    for name, value in params.items():
        g.add_param(name, np.asarray(value, F32))
    node = Node("out", op, inputs + list(params), ["out"], attrs)
    g.add_node(node)
    g.tensors["out"] = TensorInfo(tuple(evaluate_node(node, [np.zeros(g.shape(t), F32) if t in g.inputs
                                                           else g.params[t] for t in node.inputs])[0].shape))
    g.outputs = ["out"]
    feeds = {t: (np.abs(rng.normal(0, 1, g.shape(t))) + 0.5).astype(F32) for t in g.inputs}
    return g, feeds


def _canonical(value):
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    return value.item() if isinstance(value, np.generic) else value


# only the TensorFlow round trips run TensorFlow kernels (tests/conftest.py)
ROUND_TRIPS = [pytest.param(fw, op.name, id=f"{fw}-{op.name}", marks=() if fw == "tf" else pytest.mark.no_tf_math)
               for fw in ("tf", "mx") for op in registry.OPS if getattr(op, fw) and not op.custom_op]


@pytest.mark.parametrize("fw,op", ROUND_TRIPS)
def test_op_round_trips_through_its_frontend(fw, op):
    g, feeds = _case(op, fw)
    expected = evaluate(g, feeds)["out"]
    if fw == "tf":
        import tensorflow as tf
        from ratelnn.frontend.tensorflow import export_graphdef, import_graphdef
        graph_def = export_graphdef(g)
        back = import_graphdef(graph_def, list(g.inputs), ["out"], [g.shape(t) for t in g.inputs])
        with tf.Graph().as_default() as tf_graph:
            tf.compat.v1.import_graph_def(graph_def, name="")
            with tf.compat.v1.Session(graph=tf_graph) as sess:
                ran = sess.run("out:0", {f"{t}:0": v for t, v in feeds.items()})
    else:
        from ratelnn.frontend.mxnet import export_symbol, import_symbol
        from ratelnn.mxnet_compat import import_mxnet
        mx = import_mxnet()
        sym, args, aux = export_symbol(g)
        back = import_symbol((sym, args, aux), list(g.inputs), ["out"], [g.shape(t) for t in g.inputs])
        run = sym.bind(mx.cpu(), {**args, **{t: mx.nd.array(v) for t, v in feeds.items()}}, aux_states=aux)
        ran = run.forward(is_train=False)[0].asnumpy()
    nodes = [n for n in back.nodes if n.op == op]
    assert len(nodes) == 1, f"{op} via {fw} came back as {[n.op for n in back.nodes]}"
    assert _canonical(nodes[0].attrs) == _canonical(g.nodes[0].attrs)
    np.testing.assert_allclose(ran, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(evaluate(back, feeds)["out"], expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- the compiler lowers as registered
NPU_CASES = [op.name for op in registry.OPS if op.quantized]


@pytest.mark.no_tf_math
@pytest.mark.parametrize("op", NPU_CASES)
def test_quantized_op_lowers_to_its_registered_instructions(op, tmp_path):
    g, feeds = _case(op, "tf")
    config = {"output_dir": str(tmp_path)}
    values = evaluate(g, feeds, calibration_tensors(g, config))
    stats = {t: TensorStats(float(v.min()), float(v.max()), float(v.min()), float(v.max()), 1, 1)
             for t, v in values.items()}
    compiled = compile_graph(quantize(g, stats, config), config)
    engines = [n for n in compiled.nodes if n.op == "Engine"]
    assert len(engines) == 1, f"{op} did not compile to one engine: {[n.op for n in compiled.nodes]}"
    from ratelnn.npu.engine import Engine
    engine = Engine.from_bytes(engines[0].attrs["engine"])
    entry = registry.get(op)
    for ins in engine.proto.instructions:
        assert engine_pb2.Opcode.Name(ins.opcode) in entry.npu
        assert instruction_layer_cost(engine, ins).kind == entry.cost
