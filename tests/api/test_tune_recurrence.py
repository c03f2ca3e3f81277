"""ConvertImpl.tune's recurrence move (docs/quantization.md §11, step 3) on an unrolled
LSTM-like cell, ``c_t = f_t * c_{t-1} + i_t * g_t`` over 32 steps, whose cell state holds a
counter channel (f = i = g = 1: it reaches 32) beside channels that carry the signal (|c| of a
few units, f ~ 0.95).  One int8 scale per tensor leaves those channels a few codes, and each
step's rounding error is carried on by the next (f ~ 0.95): naive int8 loses; int16 on the
recurrence (every step's f * c, i * g and sum, found from the graph) recovers it."""
from __future__ import annotations

import numpy as np

import tensorflow as tf

import ratelnn
from ratelnn.frontend.tensorflow import converter
from ratelnn.quantization.policy import make_plan
from ratelnn.tune import MIN_CHAIN, recurrence_layers

STEPS, FEATURES, UNITS, BATCH = 32, 4, 8, 8


def _graph():
    """[N, 32, 4] -> the cell unrolled (gates from the step's input only) -> tanh(c_32) of the
    signal channels -> dense [N, 4]."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.7, (3, FEATURES, UNITS)).astype(np.float32)
    w[:, :, 0] = 0.0                                    # channel 0: a counter
    bias = np.zeros((3, UNITS), np.float32)
    bias[:, 0] = 8.0                                    # f = i = g = 1 on the counter
    bias[0, 1:] = 3.0                                   # f ~ 0.95 on the signal channels
    dense = rng.normal(0, 0.5, (UNITS - 1, 4)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="sequence")
        c = None
        for t, x_t in enumerate(tf.unstack(x, axis=1)):
            f, i, cand = (tf.nn.bias_add(tf.matmul(x_t, w[k]), bias[k]) for k in range(3))
            update = tf.multiply(tf.sigmoid(i), tf.tanh(cand), name=f"ig_{t}")
            c = update if c is None else tf.add(tf.multiply(tf.sigmoid(f), c, name=f"fc_{t}"), update, name=f"c_{t}")
        tf.identity(tf.matmul(tf.tanh(c)[:, 1:], dense), name="scores")
    return g.as_graph_def()


def _config(folder):
    return {"input_nodes": ["sequence"], "output_nodes": ["scores"], "input_shapes": [[BATCH, STEPS, FEATURES]],
            "output_dir": str(folder)}


def _plan(folder):
    """(IR graph, its quantized node names) of the all-int8 model."""
    conv = converter(_graph(), _config(folder))
    return conv.graph, make_plan(conv.graph, conv.config).quantized_nodes


def test_recurrence_layers_are_the_cell_state_path(tmp_path):
    found = recurrence_layers(*_plan(tmp_path))
    expected = {f"ig_{t}" for t in range(STEPS)} | {f"{k}_{t}" for t in range(1, STEPS) for k in ("fc", "c")}
    assert set(found) == expected
    assert MIN_CHAIN > 2     # an Add or Mul between two weighted layers is no recurrence


def test_tune_meets_the_target_with_the_recurrence_in_int16(tmp_path):
    ratelnn.tf_init()
    data = np.random.default_rng(1).normal(0, 1, (2 * BATCH, STEPS, FEATURES)).astype(np.float32)
    # the int16 budget step (which runs first and may promote the same layers) is off: this
    # test is about the recurrence move
    r = converter(_graph(), _config(tmp_path)).tune(data, target=0.99, progress=False, passes=(), borders=False,
                                                    int16_budget=False, max_evals=7, hold_out=False)
    assert r.history[0].label == "naive" and r.history[0].metric < 0.99
    assert not any(p.metric is not None and p.metric >= 0.99 for p in r.history if "recurrence" not in p.label
                   and not p.settings["layer_configs"])
    move = next(p for p in r.history if "recurrence" in p.label)
    assert move.metric >= 0.99 and r.met and r.latency_s <= 1.3 * r.baseline_latency_s
    assert {e["layer_name"] for e in move.settings["layer_configs"] if e["data_type"] == "int16"} == \
        set(recurrence_layers(*_plan(tmp_path)))


def test_default_build_puts_the_recurrence_in_int16(tmp_path):
    """The default build's automatic step makes the same move within its latency budget,
    judged on sequences calibration never saw (quantized model: the same decision as the
    compiled one, without compiling 94 layers here)."""
    ratelnn.tf_init()
    rng = np.random.default_rng(1)
    data, unseen = (rng.normal(0, 1, (n, STEPS, FEATURES)).astype(np.float32) for n in (32, 16))
    conv = converter(_graph(), _config(tmp_path))
    conv.calibrate(data, progress=False)
    quant = conv.to_quant()
    decision = conv.accuracy_auto
    assert decision.cosine_before < 0.99 <= decision.cosine_after and decision.latency_ratio <= 1.3
    int16 = {e["layer_name"] for e in decision.settings["layer_configs"] if e["data_type"] == "int16"}
    assert set(recurrence_layers(*_plan(tmp_path))) <= int16
    from ratelnn.runners import run_model
    run = lambda g: np.concatenate([run_model("tensorflow", g, {"sequence": unseen[k:k + BATCH]}, ["scores"])[0]
                                    for k in range(0, len(unseen), BATCH)]).ravel()
    f, q = run(_graph()), run(quant)
    assert f @ q / (np.linalg.norm(f) * np.linalg.norm(q)) >= 0.99
