"""The Pulsar2 build guide's ``layer_configs`` example as written (docs/config-forms.md): a Conv
with ``data_type: U8`` and ``output_data_type: FP32`` builds the trained Fashion-MNIST CNN with
every convolution float and the rest on the NPU; ``output_data_type: S16`` puts the convolutions
on the NPU with int16 outputs. Both agree with the float model on test images calibration never
saw."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.qat import run_graph

BATCH = 8
CALIBRATION = 64
TEST_IMAGES = 1000
GUIDE = [{"op_type": "Conv", "data_type": "U8", "output_data_type": "FP32"}]   # the guide's example
WIDE = [{"op_type": "Conv", "data_type": "U8", "output_data_type": "S16"}]


@pytest.fixture(scope="module")
def builds(fashion_mnist, fashion_cnn, tmp_path_factory):
    """{name: (quantized IR, compiled GraphDef)} of the guide's config and the S16 one, with the
    frozen float graph and its input and output names."""
    from ratelnn.frontend.tensorflow import converter, freeze_keras

    graph_def, ins, outs = freeze_keras(fashion_cnn)
    (x_train, _), _ = fashion_mnist
    out = {}
    for name, layers in (("guide", GUIDE), ("wide", WIDE)):
        config = {"input_nodes": ins, "output_nodes": outs, "input_shapes": f"{ins[0]}:{BATCH}x28x28x1",
                  "output_dir": str(tmp_path_factory.mktemp(name)),
                  "quant": {"calibration_method": "MinMax", "layer_configs": layers}}
        conv = converter(graph_def, config)
        conv.calibrate(x_train[:CALIBRATION], progress=False)
        out[name] = conv.quantized_ir(), conv.to_npu()
    return out, graph_def, ins[0], outs[0]


def _agreement(graph_def, npu, name, output, x):
    want, got = (run_graph(g, {f"{name}:0": x}, f"{output}:0") for g in (graph_def, npu))
    return float(np.mean(want.argmax(1) == got.argmax(1)))


def test_fp32_output_keeps_every_convolution_float_and_the_rest_on_the_npu(builds, fashion_mnist):
    out, graph_def, name, output = builds
    qgraph, npu = out["guide"]
    convs = [n for n in qgraph.nodes if n.op == "Conv2D"]
    assert len(convs) == 5
    assert all(qgraph.params[n.inputs[1]].dtype == np.float32 for n in convs)      # float weights
    matmul = next(n for n in qgraph.nodes if n.op == "MatMul")
    assert qgraph.params[matmul.inputs[1]].dtype == np.int8                          # still quantized
    ops = [n.op for n in npu.node]
    assert "RatelEngineOp" in ops and {"Conv2D", "DepthwiseConv2dNative"} <= set(ops)
    _, (x_test, _) = fashion_mnist
    agreement = _agreement(graph_def, npu, name, output, x_test[:TEST_IMAGES])
    print(f"guide config: top-1 agreement with float {agreement:.4f} on {TEST_IMAGES} test images")
    assert agreement >= 0.98


def test_s16_output_keeps_the_convolutions_on_the_npu_with_int16_outputs(builds, fashion_mnist):
    out, graph_def, name, output = builds
    qgraph, npu = out["wide"]
    convs = [n for n in qgraph.nodes if n.op == "Conv2D"]
    assert all(qgraph.params[n.inputs[1]].dtype == np.int8 for n in convs)
    assert all(qgraph.qparams[n.outputs[0]].dtype == "int16" for n in convs)
    assert not {"Conv2D", "DepthwiseConv2dNative"} & {n.op for n in npu.node}
    _, (x_test, _) = fashion_mnist
    agreement = _agreement(graph_def, npu, name, output, x_test[:TEST_IMAGES])
    print(f"S16 outputs: top-1 agreement with float {agreement:.4f} on {TEST_IMAGES} test images")
    assert agreement >= 0.97
