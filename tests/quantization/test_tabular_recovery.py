"""Accuracy recovery (bench/accuracy.py, tabular cases): Keras MLPs
trained here on scikit-learn's wine and breast_cancer data, normalizing their raw features
(ranges 0.1 to 1680, and 0.001 to 4254) inside the model.  Naive INT8 loses many points;
``analyze()`` names the graph input and the ``x - mean`` Sub as the worst layers.  Wine: it
suggests int16 for both, and with its suggestions in ``layer_configs`` the quantized and the
compiled model are back at FP32 accuracy.  breast_cancer: int16 is not enough for the Sub; it
suggests fp32 for it, which wins the loss back too."""
from __future__ import annotations

import tempfile
import warnings

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")

BATCH = 20


def _naive(dataset: str, cache_dir):
    """(converter with naive statistics, frozen graph, test samples, labels, FP32 top-1 %); the
    trained MLP is cached in ``cache_dir`` (the second test pass and reruns load it)."""
    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing.tabular import cached_tabular_mlp, load_tabular_split
    ratelnn.tf_init()
    (x_train, y_train), (x_test, y_test) = load_tabular_split(dataset)
    n_cal, n_test = len(x_train) // BATCH * BATCH, len(x_test) // BATCH * BATCH
    model = cached_tabular_mlp(cache_dir, dataset, x_train, y_train)
    graph_def, inputs, outputs = freeze_keras(model, [[BATCH, x_train.shape[1]]])
    config = {"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[BATCH, x_train.shape[1]]],
              "output_dir": tempfile.mkdtemp(prefix=f"{dataset}-"), "auto_int16": False,
              "accuracy_auto": False}   # the plain int8 loss that analyze() suggestions recover
    conv = converter(graph_def, config)
    conv.calibrate(x_train[:n_cal], progress=False)
    x, y = x_test[:n_test], y_test[:n_test]
    return conv, graph_def, x, y, _top1(graph_def, conv, x, y)


@pytest.fixture(scope="module")
def wine_naive(request):
    return _naive("wine", request.config.cache.mkdir("ratelnn-models"))


@pytest.fixture(scope="module")
def breast_cancer_naive(request):
    return _naive("breast_cancer", request.config.cache.mkdir("ratelnn-models"))


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


def test_breast_cancer_analyze_suggests_fp32_normalization_and_wins_it_back(breast_cancer_naive):
    from ratelnn.frontend.tensorflow import converter
    conv, graph_def, x, y, fp32 = breast_cancer_naive
    naive = _top1(conv.to_quant(), conv, x, y)
    assert fp32 >= 90.0 and naive <= fp32 - 2.0, (fp32, naive)          # 97.1 -> 92.1 here
    report = conv.analyze(x[:4 * BATCH])
    sub = next(r for r in report.rows if r.op == "Sub")
    assert {"layer_name": sub.name, "data_type": "fp32"} in report.layer_configs(), report.table()
    fixed = converter(graph_def, dict(conv.config, layer_configs=report.layer_configs()))
    quant = _top1(fixed.to_quant(), conv, x, y)
    npu = _top1(fixed.to_npu(), conv, x, y)
    assert quant >= fp32 - 0.5 and npu == quant, (fp32, naive, quant, npu)
