"""Issue 5 acceptance, the recovery case (bench/accuracy.py, wine case): a Keras MLP trained
here on scikit-learn's wine data, normalizing its raw features (ranges 0.1 to 1680) inside
the model.  Naive INT8 loses many points; ``analyze()`` names the graph input and the
``x - mean`` Sub as the worst layers and suggests int16 for both; with its suggestions in
``layer_configs`` the quantized and the compiled model are back at FP32 accuracy."""
from __future__ import annotations

import tempfile
import warnings

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")

BATCH = 20


@pytest.fixture(scope="module")
def wine_naive():
    """(converter with naive statistics, frozen graph, test images, labels, FP32 top-1 %)."""
    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing.tabular import load_wine_split, train_wine_mlp
    ratelnn.tf_init()
    (x_train, y_train), (x_test, y_test) = load_wine_split()
    graph_def, inputs, outputs = freeze_keras(train_wine_mlp(x_train, y_train), [[BATCH, x_train.shape[1]]])
    config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[BATCH, x_train.shape[1]]],
              "output_dir": tempfile.mkdtemp(prefix="wine-"), "auto_int16": False}
    conv = converter(graph_def, config)
    conv.calibrate(x_train[:80], progress=False)
    return conv, graph_def, x_test[:80], y_test[:80], _top1(graph_def, conv, x_test[:80], y_test[:80])


def _top1(graph_def, conv, x, y) -> float:
    from ratelnn.runners import run_model
    inp, out = conv.config["input_nodes"][0], conv.config["output_nodes"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = np.concatenate([run_model("tensorflow", graph_def, {inp: x[i:i + BATCH]}, [out])[0]
                                 for i in range(0, len(x), BATCH)])
    return 100.0 * float(np.mean(np.argmax(scores, 1) == y))


def test_naive_int8_loses_and_analyze_int16_suggestions_win_it_back(wine_naive):
    from ratelnn.frontend.tensorflow import converter
    conv, graph_def, x, y, fp32 = wine_naive
    assert fp32 >= 90.0, fp32
    naive = _top1(conv.to_quant(), conv, x, y)
    assert naive <= fp32 - 3.0, (fp32, naive)                  # 97.5 -> 85.0 here

    report = conv.analyze(x[:4 * BATCH])
    inp = conv.config["input_nodes"][0]
    worst = report.worst(2)
    assert worst[0].name == inp and worst[0].op == "Input", report.table()
    assert worst[1].op == "Sub" and min(r.sqnr_drop_db for r in worst) > 10.0, report.table()
    assert report.layer_configs() == [{"layer_name": r.name, "data_type": "int16"} for r in worst], report.table()

    fixed = converter(graph_def, dict(conv.config, layer_configs=report.layer_configs()))
    quant = _top1(fixed.to_quant(), conv, x, y)
    npu = _top1(fixed.to_npu(), conv, x, y)
    assert quant >= fp32 - 1.25 and npu == quant, (fp32, naive, quant, npu)   # one sample of 80


def test_worst_layer_alone_in_int16_raises_accuracy(wine_naive):
    from ratelnn.frontend.tensorflow import converter
    conv, graph_def, x, y, _ = wine_naive
    naive = _top1(conv.to_quant(), conv, x, y)
    inp = conv.config["input_nodes"][0]
    one = converter(graph_def, dict(conv.config, layer_configs=[{"layer_name": inp, "data_type": "int16"}]))
    assert _top1(one.to_quant(), conv, x, y) > naive             # 85.0 -> 90.0 here
