"""End to end in TensorFlow: the trained Fashion-MNIST CNN, frozen, calibrated on 10
batches of 32 training images and quantized keeps INT8 top-1 within 1.0 point of FP32 on the
10,000 test images; compiled by ``to_npu()`` it runs in TensorFlow with its NPU regions as
RatelEngineOp nodes on the emulated NPU: top-1 within 1.0 point of FP32 and the quantized
model's top-1 on >= 99.5% of the 10,000 test images;
the same outputs in a process that only loaded the op library; ``to_npu(to_quant())`` ==
``to_npu()``; a ``remove_input_quant`` model takes integer images; runs record device time
and ``profile`` predicts it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.engines import engines_without_names
from helpers.paths import SCRIPTS

BATCH = 32
CALIBRATION_BATCHES = 10
BARE_PROCESS_IMAGES = 16 * BATCH


@pytest.fixture(scope="module")
def compiled(fashion_mnist, fashion_cnn, tmp_path_factory):
    """The converter of the CNN after calibration, its quantized and compiled GraphDefs."""
    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing import run_graph

    ratelnn.tf_init()
    (x_train, _), _ = fashion_mnist
    graph_def, inputs, outputs = freeze_keras(fashion_cnn)
    config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[BATCH, 28, 28, 1]],
              "output_dir": str(tmp_path_factory.mktemp("fashion_npu"))}
    conv = converter(graph_def, config)
    images = x_train[np.random.default_rng(0).permutation(len(x_train))[:CALIBRATION_BATCHES * BATCH]]
    run_graph(conv.to_cal(), inputs[0] + ":0", outputs[0] + ":0", images, BATCH)
    return dict(conv=conv, config=config, float=graph_def, quant=conv.to_quant(), npu=conv.to_npu(),
                input=inputs[0] + ":0", output=outputs[0] + ":0")


@pytest.fixture(scope="module")
def npu_scores(compiled, fashion_mnist):
    """Scores of the compiled model on the test images, and the device time the run recorded."""
    import ratelnn.npu
    from ratelnn.testing import run_graph

    _, (x_test, _) = fashion_mnist
    ratelnn.npu.reset_device_time()
    scores = run_graph(compiled["npu"], compiled["input"], compiled["output"], x_test, BATCH)
    return scores, ratelnn.npu.device_times()


@pytest.fixture(scope="module")
def host_top1(compiled, fashion_mnist):
    """Top-1 predictions of the FP32 and the quantized GraphDef on the 10,000 test images."""
    from ratelnn.testing import run_graph

    _, (x_test, _) = fashion_mnist
    return {form: np.argmax(run_graph(compiled[form], compiled["input"], compiled["output"], x_test, BATCH), axis=1)
            for form in ("float", "quant")}


def test_fashion_cnn_int8_accuracy_within_one_point_of_fp32(compiled, fashion_mnist, host_top1):
    import tensorflow as tf

    _, (x_test, y_test) = fashion_mnist
    graph_quant = compiled["quant"]
    quant_ops = {n.op for n in graph_quant.node} & {"RatelQuant", "RatelDequant"}
    assert quant_ops == {"RatelQuant", "RatelDequant"}, "to_quant() made no Quant/Dequant ops"
    assert isinstance(graph_quant, tf.compat.v1.GraphDef)
    fp32, int8 = (float(np.mean(host_top1[form] == y_test)) for form in ("float", "quant"))
    print(f"\nFashion-MNIST top-1 on {len(x_test)} test images: FP32 {100 * fp32:.2f}%  INT8 {100 * int8:.2f}%")
    assert fp32 >= 0.85, f"FP32 model under-trained: {100 * fp32:.2f}%"
    assert abs(fp32 - int8) <= 0.010, f"INT8 {100 * int8:.2f}% vs FP32 {100 * fp32:.2f}%: more than 1.0 point apart"


def test_npu_accuracy_and_agreement_with_the_quantized_model(compiled, fashion_mnist, npu_scores, host_top1):
    _, (x_test, y_test) = fashion_mnist
    graph_npu = compiled["npu"]
    engine_nodes = [n for n in graph_npu.node if n.op == "RatelEngineOp"]
    assert engine_nodes and not [n for n in graph_npu.node if n.op in ("Conv2D", "DepthwiseConv2dNative", "MatMul")]

    top1 = dict(host_top1)
    scores, times = npu_scores
    top1["npu"] = np.argmax(scores, axis=1)
    accuracy = {form: float(np.mean(pred == y_test)) for form, pred in top1.items()}
    agreement = float(np.mean(top1["npu"] == top1["quant"]))
    batches = -(-len(x_test) // BATCH)
    seconds = sum(t.seconds for t in times.values())
    print(f"\nFashion-MNIST top-1 on {len(x_test)} test images: FP32 {100 * accuracy['float']:.2f}%  "
          f"quant {100 * accuracy['quant']:.2f}%  npu {100 * accuracy['npu']:.2f}%; "
          f"npu agrees with quant on {100 * agreement:.2f}%; {len(engine_nodes)} engine(s), "
          f"predicted device time {seconds * 1e3:.3f} ms for {batches} batches of {BATCH}")
    assert abs(accuracy["npu"] - accuracy["float"]) <= 0.010
    assert agreement >= 0.995
    assert set(times) == {n.attr["engine_name"].s.decode() for n in engine_nodes}
    for t in times.values():
        assert (t.runs, t.samples) == (batches, batches * BATCH) and t.seconds > 0


# The compiled CNN runs no TensorFlow op but ratelnn's own (asserted below), so the tests
# that run only it are marked no_tf_math (tests/conftest.py).
NPU_GRAPH_OPS = {"Placeholder", "RatelQuant", "RatelEngineOp", "RatelDequant"}


@pytest.mark.no_tf_math
def test_bare_tf_process_gives_identical_outputs(compiled, fashion_mnist, npu_scores, tmp_path):
    import ratelnn

    # besides the build decision kept as an unconnected string Const (read by nothing)
    assert {n.op for n in compiled["npu"].node if not n.name.startswith("ratelnn/")} == NPU_GRAPH_OPS
    assert all(not n.input for n in compiled["npu"].node if n.name.startswith("ratelnn/"))
    assert not any(i.startswith("ratelnn/") for n in compiled["npu"].node for i in n.input)
    _, (x_test, _) = fashion_mnist
    (tmp_path / "npu.pb").write_bytes(compiled["npu"].SerializeToString())
    np.save(tmp_path / "images.npy", x_test[:BARE_PROCESS_IMAGES])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "run_graphdef.py"), ratelnn.ops_library_path("tensorflow"),
         str(tmp_path / "npu.pb"), compiled["input"], compiled["output"], str(tmp_path / "images.npy"),
         str(tmp_path / "scores.npy"), str(BATCH)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "scores.npy"), npu_scores[0][:BARE_PROCESS_IMAGES])
    recorded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert recorded and all(t["samples"] == BARE_PROCESS_IMAGES and t["cycles"] > 0 for t in recorded.values())


@pytest.mark.no_tf_math
def test_compiling_the_quantized_model_gives_the_same_engines(compiled, fashion_mnist):
    from ratelnn.testing import run_graph

    _, (x_test, _) = fashion_mnist
    via_quant = compiled["conv"].to_npu(compiled["quant"])
    assert engines_without_names(via_quant) == engines_without_names(compiled["npu"])
    images = x_test[:4 * BATCH]
    np.testing.assert_array_equal(run_graph(via_quant, compiled["input"], compiled["output"], images, BATCH),
                                  run_graph(compiled["npu"], compiled["input"], compiled["output"], images, BATCH))


@pytest.mark.no_tf_math
def test_remove_input_quant_takes_integer_images(compiled, fashion_mnist, npu_scores, monkeypatch, tmp_path):
    from ratelnn.compiler import INPUT_SCALE_FILE
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.ir.arith import quantize
    from ratelnn.testing import run_graph

    monkeypatch.chdir(tmp_path)   # input_quant_nodes.txt is also written to the working directory
    _, (x_test, _) = fashion_mnist
    config = dict(compiled["config"], remove_input_quant=True)
    graph_npu = converter(compiled["float"], config).to_npu()
    placeholder = next(n for n in graph_npu.node if n.name == compiled["input"][:-2])
    assert placeholder.op == "Placeholder"
    dtype = {4: "uint8", 6: "int8", 5: "int16"}[placeholder.attr["dtype"].type]   # TF DataType enums
    lines = Path(config["output_dir"], INPUT_SCALE_FILE).read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("in_scale: ")
    in_scale = float(lines[0].split(":")[1])
    images = x_test[:8 * BATCH]
    codes = quantize(images, in_scale, dtype)
    scores = run_graph(graph_npu, compiled["input"], compiled["output"], codes, BATCH)
    np.testing.assert_array_equal(scores, npu_scores[0][:len(images)])


def test_profile_of_the_compiled_model(compiled):
    import ratelnn.npu
    from ratelnn.frontend.tensorflow import import_graphdef
    from ratelnn.npu.device import get_device
    from ratelnn.profile import engine_layers, model_engines

    graph_npu = compiled["npu"]
    engines = model_engines(graph_npu)
    p = ratelnn.profile.profile(graph_npu, batch_size=1)
    assert ratelnn.npu.profile is ratelnn.profile.profile  # the 0.1 name still works
    print("\n" + p.table())
    assert p.latency_s > 0 and p.throughput > 0
    device = get_device(0)
    macs = sum(layer.macs for _, e in engines for layer in engine_layers(e) if layer.kind in ("conv", "depthwise", "fc"))
    assert p.throughput <= device.peak_int8_ops_per_s / 2 / macs      # the compute roofline
    assert [e.name for e in p.engines] == [name for name, _ in engines]
    rows = p.layers
    assert [r.name for r in rows] == [ins.name for _, e in engines for ins in e.instructions]
    assert all(r.cycles > 0 and r.bound in ("compute", "bandwidth", "overhead") and r.weights in ("resident", "streamed")
               for r in rows)
    # the compiled GraphDef read back into the IR profiles the same
    config = compiled["config"]
    ir = import_graphdef(graph_npu, config["input_nodes"], config["output_nodes"], config["input_shapes"])
    assert ratelnn.profile.profile(ir, batch_size=1).latency_s == pytest.approx(p.latency_s)
    with pytest.raises(ValueError, match="no NPU engine"):
        ratelnn.profile.profile(compiled["quant"])
