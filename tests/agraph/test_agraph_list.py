"""``python -m agraph list``: every registered model with its framework and weight source;
the zoo has 11 TensorFlow, 9 MXNet and 1 ONNX models (docs/agraph.md)."""
import json

import pytest

from agraph import cli, registry

# the registry, the docs table and numpy preprocessing only (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math

TRAINED = {"fashion_cnn_tf": "tensorflow", "digits_cnn_tf": "tensorflow",
           "fashion_cnn_mx": "mxnet", "digits_cnn_mx": "mxnet", "digits_cnn_onnx": "onnx"}


def _agraph(capsys, *args):
    assert cli.main(list(args)) == 0
    return capsys.readouterr().out


def test_list_shows_every_model_with_its_weight_source(capsys, monkeypatch):
    monkeypatch.delenv("AGRAPH_MODELS_PATH", raising=False)
    rows = json.loads(_agraph(capsys, "list", "--json"))
    by_name = {r["name"]: r for r in rows}
    for name, framework in TRAINED.items():
        assert by_name[name]["framework"] == framework and by_name[name]["weights"] == "trained"
    assert all(r["weights"] in registry.WEIGHT_SOURCES for r in rows)
    assert all(r["zoo"] for r in rows)
    text = _agraph(capsys, "list")
    counts = registry.counts(registry.list_models())
    assert (f"tensorflow: {counts['tensorflow']}, mxnet: {counts['mxnet']}, onnx: {counts['onnx']}, "
            f"total: {len(rows)}") in text


def test_the_zoo_has_11_tensorflow_9_mxnet_and_1_onnx_models():
    zoo = [e for e in registry.list_models() if e.builtin]
    assert registry.counts(zoo) == {"tensorflow": 11, "mxnet": 9, "onnx": 1}


def test_eval_all_rewrites_only_the_table_between_the_markers(tmp_path):
    from argparse import Namespace

    from agraph.metrics import ModelMetrics

    docs = tmp_path / "agraph.md"
    docs.write_text(f"intro\n{cli.TABLE_BEGIN}\nold table\n{cli.TABLE_END}\nafter\n")
    results = [ModelMetrics("digits_cnn_mx", "digits", s, {"top1": v}, 449)
               for s, v in (("fp32", 0.98), ("quant", 0.977), ("npu", 0.977))]
    results[-1].npu = {"latency_ms": 0.011, "throughput_fps": 465615.7}
    args = Namespace(limit=None, size="full", calibration_samples=256)
    cli.write_docs_table(docs, ["digits_cnn_mx", "fashion_cnn_mx"], results,
                         {"fashion_cnn_mx": "DatasetError: fashion_mnist.tar is missing"}, args)
    text = docs.read_text()
    assert text.startswith(f"intro\n{cli.TABLE_BEGIN}\n| model |") and text.endswith(f"{cli.TABLE_END}\nafter\n")
    assert "old table" not in text
    assert ("| digits_cnn_mx | mxnet | trained | digits | defaults (int8) | top1 | 0.9800 | 0.9770 | 0.9770 | 0.011 | 465616 | 449 |"
            in text)
    assert ("| fashion_cnn_mx | mxnet | trained | fashion_mnist | defaults (int8) | failed: DatasetError: fashion_mnist.tar is missing"
            in text)


def test_reduced_size_reaches_preprocess_of_models_that_take_it():
    import numpy as np

    from agraph import flow

    photo = np.zeros(1, dtype=object)
    photo[0] = np.zeros((90, 120, 3), np.uint8)
    gluon = registry.entry("resnet18_v1_gluon")  # TEST_INPUT_SHAPES [[1, 3, 64, 64]]
    assert flow.preprocess_for(gluon, "test")(photo).shape == (1, 3, 64, 64)
    assert flow.preprocess_for(gluon, "full")(photo).shape == (1, 3, 224, 224)
    digits = registry.entry("digits_cnn_tf")  # no reduced size: its own preprocess at both
    assert flow.preprocess_for(digits, "test") is digits.model.preprocess
