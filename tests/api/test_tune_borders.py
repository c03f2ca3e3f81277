"""ConvertImpl.tune's borders stage (docs/quantization.md §11, step 4) on a spectrum model
whose int8 loss comes from its data: signals made of cosines with amplitudes spread over 5
decades -> a cosine transform (MatMul, 2048 samples x 256 bins) -> Square (float, on the
CPU) -> ``+ 1e-10`` (Add, quantized) -> Log (float) -> a dense layer.  The power read by
the Log spans 10 decades: no 8- or 16-bit linear grid keeps its small values, so the Add
must stay fp32, and the transform must be int16 to resolve the small amplitudes; neither
half alone reaches cosine 0.99 and the transform in fp32 is priced over 1.3 x all-int8.
tune without the stage misses the target; with it, the target is met, the front is
monotone and result.config rebuilds the chosen model without calibrating."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import tensorflow as tf

import ratelnn
from ratelnn.frontend.tensorflow import converter
from ratelnn.runners import run_model

SAMPLES, BINS, BATCH, COUNT = 2048, 256, 8, 8
DECADES = 5.0     # amplitudes 10**U(-5, 0)


def _graph():
    """[N, 2048] -> cosine transform [N, 256] -> log(x^2 + 1e-10) -> dense [N, 8]."""
    n = np.arange(SAMPLES)[:, None]
    k = np.arange(1, BINS + 1)[None, :]
    basis = (np.cos(2 * np.pi * n * k / SAMPLES) * 2 / SAMPLES).astype(np.float32)
    dense = np.random.default_rng(0).normal(0, BINS ** -0.5, (BINS, 8)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, SAMPLES], name="audio")
        spectrum = tf.matmul(x, basis, name="transform")
        power = tf.square(spectrum, name="power")
        log_power = tf.math.log(tf.add(power, 1e-10, name="floor"), name="log")
        tf.identity(tf.matmul(log_power, dense), name="scores")
    return g.as_graph_def()


def _signals(seed: int) -> np.ndarray:
    """[COUNT, 2048] sums of the 256 bin cosines, amplitudes 10**U(-5, 0), random phases."""
    rng = np.random.default_rng(seed)
    amplitude = 10 ** rng.uniform(-DECADES, 0, (COUNT, BINS))
    phase = rng.uniform(0, 2 * np.pi, (COUNT, BINS))
    angle = 2 * np.pi * np.arange(1, BINS + 1)[None, :, None] * np.arange(SAMPLES) / SAMPLES
    return np.einsum("sk,skn->sn", amplitude, np.cos(angle + phase[..., None])).astype(np.float32)


def _config(folder):
    return {"input_nodes": ["audio"], "output_nodes": ["scores"], "input_shapes": [[BATCH, SAMPLES]],
            "output_dir": str(folder)}


def _entries(config, dtype):
    return {e["layer_name"] for e in config["layer_configs"] if e["data_type"] == dtype}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(graph_def, data, folder, result with the stage, result without it)."""
    ratelnn.tf_init()
    graph_def, data = _graph(), _signals(1)
    found = {}
    for borders in (True, False):
        folder = tmp_path_factory.mktemp(f"borders-{borders}")
        found[borders] = (folder, converter(graph_def, _config(folder)).tune(
            data, target=0.99, progress=False, passes=(), borders=borders, hold_out=False))
    return graph_def, data, found[True][0], found[True][1], found[False][1]


def test_old_search_misses_and_borders_stage_meets(runs):
    _, _, _, r, old = runs
    assert r.history[0].label == "naive" and r.history[0].metric < 0.95
    # without borders nothing meets the target before the islands move (whole engines in fp32)
    assert old.stopped == "search done"
    island = next((i for i, p in enumerate(old.history) if "island" in p.label), len(old.history))
    assert not any(p.metric is not None and p.metric >= 0.99 for p in old.history[:island])
    assert r.met and r.metric >= 0.99 and r.latency_s <= 1.3 * r.baseline_latency_s
    assert any("sensitive" in p.label or "border" in p.label for p in r.history)
    # the joint move: the Add before the Log in fp32, the transform and its input in int16
    assert _entries(r.config, "fp32") == {"floor"}
    assert {"transform", "audio"} <= _entries(r.config, "int16")
    for p in r.history:   # neither half alone meets the target
        if p.metric is not None and p.metric >= 0.99:
            assert _entries(p.settings, "fp32") and _entries(p.settings, "int16")


def test_front_is_monotone(runs):
    r = runs[3]
    assert len(r.pareto) >= 2
    assert any(f.latency_s == r.chosen.latency_s and f.metric == r.chosen.metric for f in r.pareto)
    assert all(a.latency_s < b.latency_s and a.metric < b.metric for a, b in zip(r.pareto, r.pareto[1:]))


def test_config_reproduces_without_recalibrating(runs):
    graph_def, data, folder, r, _ = runs
    before = {os.path.join(d, f): os.path.getmtime(os.path.join(d, f))
              for d, _, names in os.walk(folder) for f in names}
    graph_npu = converter(graph_def, dict(_config(folder), **r.config)).to_npu()
    digest = hashlib.sha256(b"".join(n.attr["engine"].s for n in graph_npu.node if n.op == "RatelEngineOp"))
    assert digest.hexdigest() == r.chosen.engines_sha256
    assert {os.path.join(d, f): os.path.getmtime(os.path.join(d, f))
            for d, _, names in os.walk(folder) for f in names} == before
    outputs = [run_model("tensorflow", g, {"audio": data}, ["scores"])[0].astype(np.float64).ravel()
               for g in (graph_npu, graph_def)]
    cosine = outputs[0] @ outputs[1] / (np.linalg.norm(outputs[0]) * np.linalg.norm(outputs[1]))
    assert cosine == pytest.approx(r.metric, abs=1e-12)
