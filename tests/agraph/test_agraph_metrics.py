"""ModelMetrics and the metric helpers (docs/agraph.md, "ModelMetrics")."""
import json

import numpy as np
import pytest

from agraph.metrics import ModelMetrics, mean_cosine, top1_accuracy, top1_agreement


def test_model_metrics_row_and_json_round_trip(tmp_path):
    m = ModelMetrics("fashion_cnn_tf", "fashion_mnist", "npu", {"top1": 0.9, "fp32_agreement": 0.99},
                     samples=1000, wall_time_s=2.5, npu={"latency_ms": 0.024, "throughput_fps": 185978.2})
    assert m.primary == ("top1", 0.9)
    row = m.row()
    assert row[:3] == ["fashion_cnn_tf", "fashion_mnist", "npu"] and len(row) == len(ModelMetrics.HEADER)
    assert "top1 0.9000" in row[3] and row[6] == "0.024" and row[7] == "185978.2"
    back = ModelMetrics.from_json(m.to_json(tmp_path / "m.json"))
    assert back == m and json.loads((tmp_path / "m.json").read_text())["samples"] == 1000


def test_model_metrics_rejects_unknown_stage_and_empty_metrics():
    with pytest.raises(ValueError, match="stage"):
        ModelMetrics("a_model", "digits", "int8", {"top1": 1.0}, 1)
    with pytest.raises(ValueError, match="no metric"):
        ModelMetrics("a_model", "digits", "fp32", {}, 1)


def test_metric_helpers():
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert top1_accuracy(logits, np.array([1, 0, 0, 0])) == 0.75
    assert top1_agreement(logits, logits[:, ::-1]) == 0.0
    assert mean_cosine(logits, 3 * logits) == pytest.approx(1.0)
    assert mean_cosine(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])) == 0.0
    with pytest.raises(ValueError, match="2 references"):
        top1_agreement(logits, logits[:2])
