"""ConvertImpl.tune on a model with a known int8 loss: a depthwise convolution whose
channels differ 1000x in range (per-tensor int8 leaves the small channels a code or two)
followed by a pointwise convolution whose outputs 4-7 read only the small channels
(weights x1000, so every output has the same range).  The target is met,
the front is monotone, result.config rebuilds the chosen model without calibrating
(identical engines and metric), the budget stops the search, the plot is a PNG."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import tensorflow as tf

import ratelnn
from ratelnn.frontend.tensorflow import converter
from ratelnn.runners import run_model

BATCH = 4
SHAPE = (8, 8, 4)
CHANNEL_SCALE = np.array([1.0, 1.0, 1e-3, 1e-3], np.float32)


def _graph():
    """[N,8,8,4] -> depthwise 3x3 (channel ranges 1 : 1e-3) + relu -> 1x1 conv to 8 channels
    (outputs 0-3 from channels 0-1, outputs 4-7 from channels 2-3 with weights x1000) -> mean
    over space -> [N,8]."""
    rng = np.random.default_rng(0)
    dw = (rng.normal(0, 0.5, (3, 3, 4, 1)) * CHANNEL_SCALE[None, None, :, None]).astype(np.float32)
    pw = rng.normal(0, 0.5, (1, 1, 4, 8)) / CHANNEL_SCALE[None, None, :, None]
    pw[:, :, 2:, :4] = 0.0
    pw[:, :, :2, 4:] = 0.0
    pw = pw.astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, *SHAPE], name="images")
        h = tf.nn.relu(tf.nn.depthwise_conv2d(x, dw, [1, 1, 1, 1], "SAME"))
        y = tf.nn.conv2d(h, pw, 1, "SAME")
        tf.identity(tf.reduce_mean(y, axis=[1, 2]), name="scores")
    return g.as_graph_def()


def _config(tmp_path):
    return {"input_nodes": ["images"], "output_nodes": ["scores"], "input_shapes": [[BATCH, *SHAPE]],
            "output_dir": str(tmp_path / "stats")}


def _files(folder):
    """path -> SHA-256 of every file under ``folder``."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[path] = hashlib.sha256(f.read()).hexdigest()
    return found


def _engine_digest(graph_npu):
    return hashlib.sha256(b"".join(n.attr["engine"].s for n in graph_npu.node
                                   if n.op == "RatelEngineOp")).hexdigest()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    ratelnn.tf_init()
    tmp = tmp_path_factory.mktemp("tune")
    data = np.random.default_rng(1).normal(0, 1, (16, *SHAPE)).astype(np.float32)
    graph_def = _graph()
    result = converter(graph_def, _config(tmp)).tune(data, target=0.99, progress=False)
    return graph_def, data, tmp, result


@pytest.fixture(scope="module")
def tuned_without_passes(tuned, tmp_path_factory):
    """The same search without the accuracy passes: int8 -> auto_int16 / int16 layers."""
    graph_def, data = tuned[0], tuned[1]
    tmp = tmp_path_factory.mktemp("tune-no-passes")
    result = converter(graph_def, _config(tmp)).tune(data, target=0.99, progress=False, passes=())
    return graph_def, data, tmp, result


@pytest.mark.parametrize("run", ["tuned", "tuned_without_passes"])
def test_target_met_within_latency(run, request):
    _, _, _, r = request.getfixturevalue(run)
    naive = r.history[0]
    assert naive.label == "naive" and naive.metric < 0.99       # the known int8 loss
    assert r.met and r.metric >= 0.99
    assert r.latency_s <= 1.3 * r.baseline_latency_s
    assert r.chosen in r.pareto
    assert r.chosen is not naive


def test_pareto_front_is_monotone_and_non_dominated(tuned_without_passes):
    r = tuned_without_passes[3]
    front = r.pareto
    assert len(front) >= 2
    assert all(a.latency_s < b.latency_s and a.metric < b.metric for a, b in zip(front, front[1:]))
    for p in r.history:
        if p.metric is not None and p not in front:
            assert any(f.latency_s <= p.latency_s and f.metric >= p.metric for f in front)


@pytest.mark.parametrize("run", ["tuned", "tuned_without_passes"])
def test_config_reproduces_without_recalibrating(run, request):
    graph_def, data, tmp, r = request.getfixturevalue(run)
    before = _files(tmp)
    conv = converter(graph_def, dict(_config(tmp), **r.config))
    graph_npu = conv.to_npu()
    assert _engine_digest(graph_npu) == r.chosen.engines_sha256
    assert _files(tmp) == before                                  # no statistics written
    scores = np.concatenate([run_model("tensorflow", graph_npu, {"images": data[i:i + BATCH]}, ["scores"])[0]
                             for i in range(0, len(data), BATCH)])
    fp32 = np.concatenate([run_model("tensorflow", graph_def, {"images": data[i:i + BATCH]}, ["scores"])[0]
                           for i in range(0, len(data), BATCH)])
    q, f = scores.astype(np.float64).ravel(), fp32.astype(np.float64).ravel()
    assert float(q @ f / (np.linalg.norm(q) * np.linalg.norm(f))) == pytest.approx(r.metric, abs=1e-12)


def test_int16_budget_stage_meets_the_target_right_after_the_methods(tuned_without_passes, tmp_path):
    """Without passes, the first move after the four methods is int16 on the layers losing most
    SQNR per predicted microsecond, as many as the latency estimate allows; here it meets the
    target, so auto_int16 is never tried.  int16_budget=False takes the auto_int16 path."""
    graph_def, data, _, r = tuned_without_passes
    budget = [p for p in r.history if p.label.endswith("per predicted us")]
    assert budget and r.history.index(budget[0]) == 4
    assert any(p.metric >= 0.99 and p.latency_s <= 1.3 * r.baseline_latency_s for p in budget)
    assert not any("auto_int16" in p.label for p in r.history)
    off = converter(graph_def, _config(tmp_path)).tune(data, target=0.99, progress=False, passes=(), int16_budget=False)
    assert off.met and not any(p.label.endswith("per predicted us") for p in off.history)
    assert any("auto_int16" in p.label for p in off.history)


def test_budget_stops_with_best_found(tuned, tmp_path):
    graph_def, data = tuned[0], tuned[1]
    r = converter(graph_def, _config(tmp_path)).tune(data, target=0.99, max_evals=2, progress=False)
    assert sum(p.metric is not None for p in r.history) == 2
    assert "max_evals" in r.stopped and not r.met
    assert r.metric == max(p.metric for p in r.history if p.metric is not None)


def test_time_budget_reaches_inside_a_pass(tuned, tmp_path, monkeypatch):
    """A data-driven pass that outruns time_budget_s stops the search (with the best found)
    instead of finishing first: the between-candidates check is switched off here, so only
    the limit inside the pass's layer walk can stop it."""
    from ratelnn.tune.search import Search
    graph_def, data = tuned[0], tuned[1]
    monkeypatch.setattr(Search, "check_budget", lambda self: None)
    r = converter(graph_def, _config(tmp_path)).tune(data, target=0.99, time_budget_s=0.0, progress=False,
                                                     passes=("bias_correction",))
    assert "time_budget_s" in r.stopped and "layer walk" in r.stopped, r.stopped
    assert not any("bias_correction" in p.label for p in r.history)
    assert r.metric == max(p.metric for p in r.history if p.metric is not None)


def test_user_metric_and_plot(tuned, tmp_path):
    graph_def, data, _, r = tuned
    labels = np.argmax(np.concatenate([run_model("tensorflow", graph_def, {"images": data[i:i + BATCH]},
                                                 ["scores"])[0] for i in range(0, len(data), BATCH)]), 1)
    calls = []

    def top1(outputs, given):
        calls.append(given is data)
        return float(np.mean(np.argmax(outputs[0], 1) == labels))

    r2 = converter(graph_def, _config(tmp_path)).tune(data, metric=top1, target=1.0, max_evals=6, progress=False)
    assert calls and all(calls) and r2.fp32_metric == 1.0
    assert r2.met == (r2.metric >= 1.0)
    if not r2.met:
        assert r2.metric == max(p.metric for p in r2.history if p.metric is not None)
    path = r.plot(str(tmp_path / "front.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("kwargs, named", [({"max_latency_ratio": 0.9}, "max_latency_ratio"),
                                           ({"max_evals": 0}, "max_evals"),
                                           ({"target": float("nan")}, "target"),
                                           ({"passes": ("equalisation",)}, "equalisation"),
                                           ({"metric": "top1"}, "metric"),
                                           ({"metric": lambda outputs, data: "good"}, "metric")])
def test_bad_arguments_are_config_errors(tuned, tmp_path, kwargs, named):
    graph_def, data = tuned[0], tuned[1]
    with pytest.raises(ratelnn.config.ConfigError, match=named):
        converter(graph_def, _config(tmp_path)).tune(data, progress=False, **kwargs)
