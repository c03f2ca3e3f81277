"""ConvertImpl.tune on a model with a known int8 loss: a depthwise convolution whose
channels differ 1000x in range (per-tensor int8 leaves the small channels a code or two)
followed by a pointwise convolution whose outputs 4-7 read only the small channels
(weights x1000, so every output has the same range).  The target is met,
the front is monotone, result.config rebuilds the chosen model without calibrating
(identical engines and both figures), the budget stops the search, the plot is a PNG; the
chosen model is judged again on the held-out quarter of the data, with a warning when that
figure and the tuning one differ."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import ratelnn
from ratelnn.frontend.tensorflow import converter
from ratelnn.runners import run_model
from helpers.int8_loss import SHAPE, depthwise_loss_graph as _graph

BATCH = 4


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
    held = np.arange(len(data)) % 4 == 3          # every 4th sample is held out
    for rows, figure in ((~held, r.metric), (held, r.held_out_metric)):
        q, f = scores[rows].astype(np.float64).ravel(), fp32[rows].astype(np.float64).ravel()
        assert float(q @ f / (np.linalg.norm(q) * np.linalg.norm(f))) == pytest.approx(figure, abs=1e-12)


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

    def top1(outputs, given, rows):
        calls.append((len(given), list(rows)))
        return float(np.mean(np.argmax(outputs[0], 1) == labels[rows]))

    r2 = converter(graph_def, _config(tmp_path)).tune(data, metric=top1, target=1.0, max_evals=6, progress=False)
    held = [i for i in range(len(data)) if i % 4 == 3]
    assert calls and (len(held), held) in calls                       # the held-out judgement
    assert all(n == len(rows) for n, rows in calls)
    assert all(rows == [i for i in range(len(data)) if i % 4 != 3] for n, rows in calls if n != len(held))
    assert r2.fp32_metric == 1.0 and r2.held_out_fp32_metric == 1.0
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


def test_held_out_figure_agrees_on_data_of_one_distribution(tuned):
    """Every 4th of the 16 samples is held out; on samples of one distribution the chosen
    model's held-out figure is within the bound of the tuning figure and nothing is warned."""
    from ratelnn.tune.holdout import HELD_OUT_BOUND
    r = tuned[3]
    assert (r.tuning_samples, r.held_out_samples) == (12, 4)
    assert abs(r.metric - r.held_out_metric) <= HELD_OUT_BOUND
    assert r.held_out_warning is None and "held out" in r.table()


def test_held_out_warning_fires_when_the_held_out_samples_differ(tmp_path):
    """The held-out samples (every 4th) are 50x larger than the ones tuned and calibrated on:
    they saturate the calibrated ranges, the held-out figure falls far below the tuning one,
    and tune warns (HeldOutWarning) and says so in the result."""
    from ratelnn.tune.holdout import HELD_OUT_BOUND, HeldOutWarning
    ratelnn.tf_init()
    data = np.random.default_rng(3).normal(0, 1, (16, *SHAPE)).astype(np.float32)
    data[3::4] *= 50.0
    with pytest.warns(HeldOutWarning, match="held-out"):
        r = converter(_graph(), _config(tmp_path)).tune(data, target=0.99, max_evals=6, progress=False)
    assert r.metric - r.held_out_metric > HELD_OUT_BOUND
    assert r.held_out_warning is not None and "differ" in r.held_out_warning


def test_too_few_samples_hold_nothing_out(tuned, tmp_path):
    """Below 8 samples the search runs on all of them and reports no held-out figure."""
    graph_def, data = tuned[0], tuned[1]
    r = converter(graph_def, _config(tmp_path)).tune(data[:4], target=0.99, max_evals=2, progress=False)
    assert r.held_out_metric is None and r.held_out_samples == 0 and r.tuning_samples == 4
