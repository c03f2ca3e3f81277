"""Bias correction and AdaRound on a hand-built IR graph (BatchNorm -> conv -> relu -> conv,
per-tensor weights): the properties each pass promises, measured with the numpy evaluator."""
import numpy as np
import pytest

from helpers.ir_graphs import add_node, conv_attrs, evaluated_stats
from ratelnn.ir import Graph
from ratelnn.ir.evaluate import evaluate
from ratelnn.ir.passes import BN_STATS, run_default_passes
from ratelnn.quantization import adaround as adaround_module
from ratelnn.quantization.adaround import adaround, code_cache
from ratelnn.quantization.bias_correction import correct_biases, correct_biases_analytic
from ratelnn.errors import TimeLimitExceeded
from ratelnn.quantization.emit import emit_qdq
from ratelnn.quantization.layerwalk import time_limit
from ratelnn.quantization.quantizer import quantize

BN_MEAN = np.array([-1.5, 0.3, 1.0, 2.0], np.float32)
BN_VAR = np.array([0.6, 3.5, 1.2, 2.0], np.float32)
CONFIG = {"output_dir": "/nonexistent", "auto_int16": False, "enable_EMA": False,
          "quant_cfg": {"conv_weights": {"is_per_channel": False}}, "input_shapes": [[32, 6, 6, 4]]}


def _graph():
    rng = np.random.default_rng(12)
    g = Graph()
    g.add_input("x", (None, 6, 6, 4))
    for name, v in (("gamma", rng.uniform(0.5, 2, 4)), ("beta", rng.uniform(-1, 1, 4)),
                    ("mean", BN_MEAN), ("var", BN_VAR)):
        g.add_param(name, np.asarray(v, np.float32))
    add_node(g, "bn", "BatchNorm", ["x", "gamma", "beta", "mean", "var"], (None, 6, 6, 4), eps=1e-3, axis=-1)
    w1 = rng.standard_normal((3, 3, 4, 8)).astype(np.float32) * np.exp(rng.uniform(-2, 0, 8)).astype(np.float32)
    g.add_param("w1", w1); g.add_param("b1", rng.uniform(-0.5, 0.5, 8).astype(np.float32))
    add_node(g, "conv1", "Conv2D", ["bn", "w1", "b1"], (None, 4, 4, 8), **conv_attrs(pads=(0, 0, 0, 0), act="relu"))
    g.add_param("w2", rng.standard_normal((1, 1, 8, 6)).astype(np.float32))
    g.add_param("b2", np.zeros(6, np.float32))
    add_node(g, "conv2", "Conv2D", ["conv1", "w2", "b2"], (None, 4, 4, 6), **conv_attrs(pads=(0, 0, 0, 0)))
    g.outputs = ["conv2"]
    return run_default_passes(g)


def _data(n, seed):
    """Inputs distributed as the BatchNorm was trained for: its output is N(beta, gamma^2)."""
    rng = np.random.default_rng(seed)
    return (BN_MEAN + np.sqrt(BN_VAR) * rng.standard_normal((n, 6, 6, 4))).astype(np.float32)


def _pre_activation_error(g, q, x):
    """Mean error per channel of conv1's pre-activation (QDQ vs float) on ``x``."""
    def pre(graph):   # conv1 without its ReLU; its raw output (before the Quant) is fetched
        graph = graph.copy()
        graph.node("conv1").attrs["act"] = "none"
        return graph
    out = evaluate(emit_qdq(pre(q), CONFIG), {"x": x}, ["conv1"])["conv1"] - evaluate(pre(g), {"x": x}, ["conv1"])["conv1"]
    return out.reshape(-1, out.shape[-1]).mean(axis=0)


def _weight_error(g, q, x):
    """Mean error per channel of conv1's pre-activation with ``q``'s dequantized weights and
    bias on the float input."""
    from ratelnn.quantization.bias_correction import dequantized
    f = g.copy()
    node, qnode = f.node("conv1"), q.node("conv1")
    node.attrs["act"] = "none"
    want = evaluate(f, {"x": x}, ["conv1"])["conv1"]
    for slot in (1, 2):
        f.params[node.inputs[slot]] = dequantized(q, qnode.inputs[slot])
    out = evaluate(f, {"x": x}, ["conv1"])["conv1"] - want
    return out.reshape(-1, out.shape[-1]).mean(axis=0)


def _stats(g):
    return evaluated_stats(g, CONFIG, [{"x": _data(32, seed)} for seed in range(4)])


def test_empirical_bias_correction_removes_the_mean_error_on_the_sample():
    g = _graph()
    q = quantize(g, _stats(g), CONFIG)
    sample = {"x": _data(40, 10)}    # 32 + a padded chunk of 8
    before = _pre_activation_error(g, q, sample["x"])
    corrected = correct_biases(g, q.copy(), CONFIG, sample)
    after = _pre_activation_error(g, corrected, sample["x"])
    bias_scale = np.asarray(corrected.qparams[corrected.node("conv1").inputs[2]].scale)
    assert np.all(np.abs(after) <= 0.51 * bias_scale + 1e-6), (before, after, bias_scale)
    assert np.abs(before).max() > 20 * bias_scale.max()
    held_out = _data(64, 11)   # and on other data from the same distribution
    assert np.abs(_pre_activation_error(g, corrected, held_out)).mean() < \
        0.5 * np.abs(_pre_activation_error(g, q, held_out)).mean()


def test_analytic_bias_correction_from_batchnorm_statistics():
    g = _graph()
    assert list(g.meta[BN_STATS]) == [g.node("conv1").inputs[0]]   # the standalone BatchNorm's output
    q = quantize(g, _stats(g), CONFIG)
    corrected = correct_biases_analytic(g, q.copy(), CONFIG)
    x = _data(256, 12)
    # it removes the expected error of the weights, (W_q - W) E[x] (not that of the input's
    # own quantization): conv1 with the quantized weights and bias on the float input
    before, after = _weight_error(g, q, x), _weight_error(g, corrected, x)
    assert np.abs(after).mean() < 0.2 * np.abs(before).mean(), (before, after)
    # conv2 reads a ReLU of conv1, which no BatchNorm describes: unchanged
    name = q.node("conv2").inputs[2]
    np.testing.assert_array_equal(corrected.params[name], q.params[name])


def test_adaround_lowers_the_layer_error_and_keeps_codes_in_range():
    g = _graph()
    q = quantize(g, _stats(g), CONFIG)
    sample = {"x": _data(128, 20)}
    tuned = adaround(g, q.copy(), dict(CONFIG, adaround_iterations=300), sample)
    w = tuned.node("conv1").inputs[1]
    assert tuned.qparams[w] == q.qparams[w] and tuned.params[w].dtype == np.int8
    assert np.abs(tuned.params[w]).max() <= 127
    assert np.abs(tuned.params[w].astype(int) - q.params[w]).max() == 1 and np.any(tuned.params[w] != q.params[w])

    def mse(graph, x):   # conv1's pre-activation, the loss AdaRound minimises
        f = g.copy()
        f.node("conv1").attrs["act"] = "none"
        graph = graph.copy()
        graph.node("conv1").attrs["act"] = "none"
        return float(np.mean((evaluate(emit_qdq(graph, CONFIG), {"x": x}, ["conv1"])["conv1"]
                              - evaluate(f, {"x": x}, ["conv1"])["conv1"]) ** 2))
    assert mse(tuned, sample["x"]) < 0.95 * mse(q, sample["x"])
    held_out = _data(64, 21)
    assert mse(tuned, held_out) < mse(q, held_out)


def test_adaround_code_cache_gives_the_codes_without_caching(monkeypatch):
    """Within code_cache, a layer whose inputs are unchanged reuses its codes (no new
    optimisation), and the result equals an uncached run; a changed upstream layer (conv1's
    output in int16 here) changes conv2's input, so conv2 is optimised again."""
    g = _graph()
    stats = _stats(g)
    q = quantize(g, stats, CONFIG)
    sample = {"x": _data(64, 22)}
    config = dict(CONFIG, adaround_iterations=100)
    plain = adaround(g, q.copy(), config, sample)
    calls = []
    real = adaround_module.adaround_codes
    monkeypatch.setattr(adaround_module, "adaround_codes", lambda *a: calls.append(1) or real(*a))
    with code_cache(None) as store:
        first = adaround(g, q.copy(), config, sample)
        assert len(calls) == len(store) == 2
        again = adaround(g, q.copy(), config, sample)
        assert len(calls) == 2   # both layers from the cache
        wide = dict(config, layer_configs=[{"layer_name": "conv1", "data_type": "int16"}])
        q16 = quantize(g, stats, wide)
        mixed = adaround(g, q16.copy(), wide, sample)
        assert len(calls) == 3   # conv1's input is the same, conv2's is not
    uncached = adaround(g, q16.copy(), wide, sample)
    for k in q.params:
        np.testing.assert_array_equal(first.params[k], plain.params[k])
        np.testing.assert_array_equal(again.params[k], plain.params[k])
    for k in q16.params:
        np.testing.assert_array_equal(mixed.params[k], uncached.params[k])


def _held_out_as(fit: np.ndarray, held: np.ndarray) -> np.ndarray:
    """A kept sample whose fit rows are ``fit`` and held-out rows (``split_rows``) ``held``."""
    from ratelnn.tune.holdout import split_rows
    sample = np.empty((len(fit) + len(held), *fit.shape[1:]), fit.dtype)
    fit_rows, held_rows = split_rows(len(sample))
    sample[fit_rows], sample[held_rows] = fit, held
    return sample


def test_passes_lowering_the_held_out_agreement_are_not_applied():
    """Every 4th sample of the kept sample is held out: a correction fitted on samples unlike
    them (here shifted by +3) lowers their output cosine, so it is not applied (with a warning);
    fitted on samples like them, it is."""
    from ratelnn.quantization.accuracy import apply_passes
    g = _graph()
    q = quantize(g, _stats(g), CONFIG)
    config = dict(CONFIG, bias_correction="empirical")
    with pytest.warns(UserWarning, match="lowered the lowest output agreement on the 16 held-out"):
        out = apply_passes(g, q, config, {"x": _held_out_as(_data(48, 30) + 3.0, _data(16, 31))})
    check = out.meta["accuracy_passes"]
    assert check["applied"] == "none" and check["held_out_agreement"]["bias_correction"] < check["held_out_agreement"]["none"]
    assert all(np.array_equal(out.params[k], q.params[k]) for k in q.params)
    out = apply_passes(g, q, config, {"x": _held_out_as(_data(48, 32), _data(16, 33))})
    check = out.meta["accuracy_passes"]
    assert check["applied"] == "bias_correction", check
    assert check["held_out_agreement"]["bias_correction"] >= check["held_out_agreement"]["none"]


def test_a_walk_past_its_time_limit_stops_naming_the_layer_and_leaves_the_graph_alone():
    """tune's time_budget_s reaches inside a pass: the walk stops at the next layer."""
    import time
    g = _graph()
    q = quantize(g, _stats(g), CONFIG)
    before = {k: v.copy() for k, v in q.params.items()}
    with time_limit(time.monotonic() - 1.0), pytest.raises(TimeLimitExceeded, match="conv1"):
        correct_biases(g, q, CONFIG, {"x": _data(8, 10)})
    assert all(np.array_equal(q.params[k], v) for k, v in before.items())
    with time_limit(time.monotonic() + 3600.0):   # a limit not reached changes nothing
        corrected = correct_biases(g, q.copy(), CONFIG, {"x": _data(8, 10)})
    assert not np.array_equal(corrected.params[q.node("conv1").inputs[2]], q.params[q.node("conv1").inputs[2]])
