"""Islands: int8 engines between ops the NPU does not run, which cost more on the NPU, their
host transfers included, than their layers on the host.  On a 3-D CNN trained on the digits
(``Conv3D`` on the CPU, its first two ReLUs islands, the first holding a channel 1e4x wider
than the others: helpers.int8_loss.island_digits) the default build moves both islands to
fp32 in one candidate (not the least precise layers one at a time), which wins the loss back
and lowers the predicted latency; the decision rebuilds the same engines; tune() makes the
same move."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

import ratelnn
from ratelnn.frontend.tensorflow import converter
from ratelnn.runners import run_model
from helpers.int8_loss import island_digits

BATCH = 64


def _engines(graph_npu) -> str:
    return hashlib.sha256(b"".join(n.attr["engine"].s for n in graph_npu.node if n.op == "RatelEngineOp")).hexdigest()


@pytest.fixture(scope="module")
def model():
    ratelnn.tf_init()
    return island_digits()


def _config(model, out, **extra):
    graph_def, inp, outp = model[:3]
    return dict({"input_nodes": [inp], "output_nodes": [outp], "input_shapes": [[BATCH, 1, 8, 8, 1]],
                 "output_dir": str(out)}, **extra)


def _run(model, graph, x):
    inp, outp = model[1], model[2]
    return np.concatenate([run_model("tensorflow", graph, {inp: x[i:i + BATCH]}, [outp])[0]
                           for i in range(0, len(x) - len(x) % BATCH, BATCH)])


def test_default_build_moves_the_islands_to_fp32(model, tmp_path):
    graph_def, _, _, islands, (x_train, _), (x_test, y_test) = model
    builds = {}
    for auto in (False, True):
        conv = converter(graph_def, _config(model, tmp_path / f"auto-{auto}", accuracy_auto=auto))
        conv.calibrate(x_train[:256], progress=False)
        builds[auto] = (conv, conv.to_npu())
    y = y_test[:len(y_test) - len(y_test) % BATCH]
    top1 = lambda logits: float(np.mean(logits.argmax(1) == y))
    fp32, plain, auto = (top1(_run(model, g, x_test)) for g in (graph_def, builds[False][1], builds[True][1]))
    assert plain < fp32 - 0.05 and fp32 > 0.9                    # the wide channel's int8 loss
    assert abs(auto - fp32) <= 0.01                              # on digits calibration never saw
    conv = builds[True][0]
    decision = conv.accuracy_auto
    fp32_layers = sorted(e["layer_name"] for e in decision.settings["layer_configs"] if e["data_type"] == "fp32")
    assert fp32_layers == sorted(islands)                        # both islands, in one move
    assert decision.cosine_before < 0.99 <= decision.cosine_after
    assert decision.latency_ratio < 1.0                          # their transfers are gone
    again = converter(graph_def, conv.built_config)
    assert _engines(again.to_npu()) == _engines(builds[True][1]) and not hasattr(again, "accuracy_auto")


def test_tune_moves_the_islands_in_one_candidate(model, tmp_path):
    graph_def, _, _, islands, (x_train, _), _ = model
    r = converter(graph_def, _config(model, tmp_path)).tune(x_train[:256], target=0.99, progress=False,
                                                            passes=())
    moved = [p for p in r.history if "island engine(s)" in p.label]
    assert len(moved) == 1 and moved[0].metric >= 0.99 and moved[0].latency_s < r.baseline_latency_s
    assert set(islands) <= {e["layer_name"] for e in moved[0].settings["layer_configs"] if e["data_type"] == "fp32"}
    assert r.met and r.latency_s < r.baseline_latency_s
