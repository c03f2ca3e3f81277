"""One trained Keras model, two paths: the Fashion-MNIST CNN frozen for TensorFlow and the
same weights written as ONNX by tf2onnx (input NCHW, and NHWC as tf2onnx writes it by
default). The ONNX float model gives Keras's outputs within 1e-5; both imports fold
BatchNorm and fuse biases and activations into the same convolutions and dense layer; and,
calibrated through ``calibrate()`` on the same 320 training images with the default config
(so both keep the sample the automatic defaults judge on), the ONNX path's quantized
and compiled models score within 0.2 points of top-1 of the TensorFlow path's on the 10,000 test
images calibration never saw."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")

BATCH = 32
CALIBRATION_BATCHES = 10
TEST_IMAGES = 10000
BOUND = 0.002   # |top-1 ONNX path - top-1 TensorFlow path|, as a fraction
FORMS = ("float", "quant", "npu")


@pytest.fixture(scope="module")
def calibration_images(fashion_mnist):
    (x_train, _), _ = fashion_mnist
    return x_train[np.random.default_rng(0).permutation(len(x_train))[:CALIBRATION_BATCHES * BATCH]]


def _top1(scores: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(scores, axis=1) == labels))


@pytest.fixture(scope="module")
def tensorflow_path(fashion_mnist, fashion_cnn, calibration_images, tmp_path_factory):
    """The TensorFlow converter after calibration and the top-1 of each form."""
    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing import run_graph

    ratelnn.tf_init()
    _, (x_test, y_test) = fashion_mnist
    graph_def, inputs, outputs = freeze_keras(fashion_cnn)
    conv = converter(graph_def, {"input_nodes": inputs, "output_nodes": outputs,
                                 "input_shapes": [[BATCH, 28, 28, 1]],
                                 "output_dir": str(tmp_path_factory.mktemp("tf_path"))})
    conv.calibrate(calibration_images, batch_size=BATCH, progress=False)   # as the ONNX path: samples kept for the check
    models = {"float": graph_def, "quant": conv.to_quant(), "npu": conv.to_npu()}
    scores = {form: run_graph(m, inputs[0] + ":0", outputs[0] + ":0", x_test[:TEST_IMAGES], BATCH)
              for form, m in models.items()}
    return {"conv": conv, "scores": scores,
            "top1": {form: _top1(s, y_test[:TEST_IMAGES]) for form, s in scores.items()}}


@pytest.fixture(scope="module", params=["NCHW", "NHWC"])
def onnx_path(request, fashion_mnist, fashion_cnn, calibration_images, tmp_path_factory):
    """The tf2onnx export in one input layout, its converter after calibration and the top-1
    of each form (the ONNX float model run by ONNX Runtime)."""
    from ratelnn.frontend.onnx import converter
    from ratelnn.testing import keras_to_onnx, run_graph

    nchw = request.param == "NCHW"
    layout = (lambda x: x.transpose(0, 3, 1, 2).copy()) if nchw else (lambda x: x)
    _, (x_test, y_test) = fashion_mnist
    exported = keras_to_onnx(fashion_cnn, nchw=nchw)
    conv = converter(exported.model, {"input_nodes": [exported.input], "output_nodes": [exported.output],
                                      "input_shapes": [list(layout(calibration_images[:BATCH]).shape)],
                                      "output_dir": str(tmp_path_factory.mktemp(f"onnx_path_{request.param}"))})
    conv.calibrate(layout(calibration_images), batch_size=BATCH, progress=False)
    models = {"float": exported.model, "quant": conv.to_quant(), "npu": conv.to_npu()}
    scores = {form: run_graph(m, exported.input, exported.output, layout(x_test[:TEST_IMAGES]), BATCH,
                              framework="onnx") for form, m in models.items()}
    assert any(n.op_type == "RatelEngineOp" for n in models["npu"].graph.node)
    return {"nchw": nchw, "conv": conv, "scores": scores,
            "top1": {form: _top1(s, y_test[:TEST_IMAGES]) for form, s in scores.items()}}


def test_onnx_export_gives_the_keras_outputs(onnx_path, fashion_cnn, fashion_mnist):
    _, (x_test, _) = fashion_mnist
    keras_scores = fashion_cnn.predict(x_test[:TEST_IMAGES], batch_size=256, verbose=0)
    np.testing.assert_allclose(onnx_path["scores"]["float"], keras_scores, atol=1e-5)


def _weighted_layers(graph):
    """(op, kernel size, groups, strides, pads, fused activation, has bias) of every weighted
    node in graph order: what BatchNorm folding and bias / activation fusion leave."""
    from ratelnn.ir import registry

    rows = []
    for node in graph.nodes:
        if node.op not in registry.WEIGHTED_OPS:
            continue
        a = node.attrs
        rows.append((node.op, int(np.prod(graph.shape(node.inputs[1]))), a.get("groups"), a.get("strides"),
                     a.get("pads"), a.get("act"), len(node.inputs) > 2))
    return rows


def test_onnx_import_folds_and_fuses_like_the_tensorflow_import(onnx_path, tensorflow_path):
    onnx_graph, tf_graph = onnx_path["conv"].graph, tensorflow_path["conv"].graph
    assert not [n.name for n in onnx_graph.nodes if n.op == "Opaque"]
    assert _weighted_layers(onnx_graph) == _weighted_layers(tf_graph)
    assert len(_weighted_layers(tf_graph)) == 6
    if onnx_path["nchw"]:   # nothing before the first convolution: the input is already NCHW
        assert [n.op for n in onnx_graph.consumers(onnx_graph.inputs[0])] == ["Conv2D"]


@pytest.mark.parametrize("form", FORMS)
def test_onnx_path_top1_within_0_2_points_of_the_tensorflow_path(onnx_path, tensorflow_path, form):
    ours, theirs = onnx_path["top1"][form], tensorflow_path["top1"][form]
    print(f"\n{form}: top-1 ONNX path {100 * ours:.2f}%, TensorFlow path {100 * theirs:.2f}% "
          f"({TEST_IMAGES} test images)")
    assert tensorflow_path["top1"]["float"] > 0.85
    assert abs(ours - theirs) <= BOUND


@pytest.mark.parametrize("form", FORMS[1:])
def test_onnx_and_tensorflow_paths_predict_the_same_classes(onnx_path, tensorflow_path, form):
    ours, theirs = onnx_path["scores"][form].argmax(1), tensorflow_path["scores"][form].argmax(1)
    assert np.mean(ours == theirs) >= 0.995
