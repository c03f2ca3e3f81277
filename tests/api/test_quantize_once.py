"""One quantized IR per converter: ``to_quant`` then ``to_npu`` quantize the model once (the
default build's check, once, with its candidates); more
statistics (recorded by the converter's calibration model and still in memory, or by
``calibrate``), another config or a given ``graph_quant`` give the result they would give
on a fresh converter; edits of a returned IR never reach the next build."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

import ratelnn
from ratelnn.frontend.tensorflow import converter
from ratelnn.quantization import quantizer
from ratelnn.runners import run_model, runner_for
from ratelnn.tune.auto import AUTO_METHODS, with_settings
from helpers.stats import small_graph_def

SHAPE = (4, 8, 8, 3)
MAX_REFINE_BUILDS = len(AUTO_METHODS) + 1   # the bound met: the other methods, the all-int8 model priced


@pytest.fixture
def quantize_calls(monkeypatch):
    """The number of times the quantizer ran since the test started (a one-item list)."""
    calls = [0]
    original = quantizer.quantize

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)
    monkeypatch.setattr(quantizer, "quantize", counted)
    return calls


def _config(output_dir, **extra):
    return dict({"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [list(SHAPE)],
                 "output_dir": str(output_dir)}, **extra)


def _data(seed: int, scale: float = 1.0, count: int = 16) -> np.ndarray:
    return (np.random.default_rng(seed).uniform(0, 1, (count, *SHAPE[1:])) * scale).astype(np.float32)


def _engines(graph_npu) -> str:
    return hashlib.sha256(b"".join(n.attr["engine"].s for n in graph_npu.node if n.op == "RatelEngineOp")).hexdigest()


def _scales(qgraph) -> dict:
    return {t: np.asarray(q.scale).tolist() for t, q in qgraph.qparams.items()}


@pytest.fixture(scope="module")
def graph_def():
    """A small graph whose int8 build meets the automatic step's bound, logits too (one check,
    then the other methods tried and not kept: one quantization each)."""
    ratelnn.tf_init()
    return small_graph_def(seed=11)


@pytest.mark.parametrize("auto", [True, False])
def test_to_quant_then_to_npu_quantize_once(graph_def, tmp_path, quantize_calls, auto):
    conv = converter(graph_def, _config(tmp_path, accuracy_auto=auto))
    conv.calibrate(_data(0), progress=False)
    quantize_calls[0] = 0
    graph_quant = conv.to_quant()
    checked = quantize_calls[0]   # the default build's check quantizes its candidates too
    npu = conv.to_npu()
    assert quantize_calls[0] == checked and (1 < checked <= 1 + MAX_REFINE_BUILDS if auto else checked == 1)
    fresh = converter(graph_def, _config(tmp_path, accuracy_auto=auto))
    assert _engines(fresh.to_npu()) == _engines(npu)
    x = _data(5)[:4]
    np.testing.assert_array_equal(run_model("tensorflow", graph_quant, {"x": x}, ["prob"])[0],
                                  run_model("tensorflow", fresh.to_quant(), {"x": x}, ["prob"])[0])


def test_statistics_recorded_after_to_quant_reach_to_npu(graph_def, tmp_path, quantize_calls):
    """Batches run through the calibration model after ``to_quant`` (their statistics still in
    this process's memory) change what ``to_npu`` builds, as on a fresh converter."""
    conv = converter(graph_def, _config(tmp_path))
    conv.calibrate(_data(0), progress=False)
    conv.to_quant()
    before = _engines(conv.to_npu())
    runner = runner_for("tensorflow", conv.to_cal())
    for batch in _data(1, scale=6.0).reshape(-1, *SHAPE):
        runner.run({"x": batch}, ["prob"])
    calls = quantize_calls[0]
    after = _engines(conv.to_npu())
    assert calls < quantize_calls[0] <= calls + 1 + MAX_REFINE_BUILDS and after != before
    assert after == _engines(converter(graph_def, _config(tmp_path)).to_npu())


def test_recalibration_changes_the_next_build(graph_def, tmp_path):
    conv = converter(graph_def, _config(tmp_path, accuracy_auto=False))
    conv.calibrate(_data(0), progress=False)
    first = _scales(conv.quantized_ir())
    conv.calibrate(_data(2, scale=6.0), progress=False)
    again = conv.quantized_ir()
    assert _scales(again) != first
    assert _scales(again) == _scales(converter(graph_def, _config(tmp_path, accuracy_auto=False)).quantized_ir())


def test_config_change_quantizes_again(graph_def, tmp_path, quantize_calls):
    conv = converter(graph_def, _config(tmp_path, accuracy_auto=False))
    conv.calibrate(_data(0), progress=False)
    ema = _scales(conv.quantized_ir())
    calls = quantize_calls[0]
    conv.config["enable_EMA"] = False
    plain = _scales(conv.quantized_ir())
    assert quantize_calls[0] == calls + 1 and plain != ema
    assert plain == _scales(converter(graph_def, _config(tmp_path, accuracy_auto=False, enable_EMA=False))
                            .quantized_ir())
    conv.config["enable_EMA"] = True
    other = with_settings(conv, {"enable_EMA": False})   # a shallow copy: shares the converter's state
    assert _scales(other.quantized_ir()) == plain and _scales(conv.quantized_ir()) == ema


def test_given_graph_quant_is_compiled_not_the_cached_ir(graph_def, tmp_path, quantize_calls):
    conv = converter(graph_def, _config(tmp_path, accuracy_auto=False))
    conv.calibrate(_data(0), progress=False)
    own = _engines(conv.to_npu())
    other = converter(graph_def, _config(tmp_path, accuracy_auto=False, enable_EMA=False))
    graph_quant = other.to_quant()
    calls = quantize_calls[0]
    compiled = _engines(conv.to_npu(graph_quant))
    assert quantize_calls[0] == calls and compiled != own
    fresh = converter(graph_def, _config(tmp_path, accuracy_auto=False))
    assert compiled == _engines(fresh.to_npu(graph_quant))


def test_edits_of_a_returned_ir_do_not_reach_the_next_build(graph_def, tmp_path):
    conv = converter(graph_def, _config(tmp_path, accuracy_auto=False))
    conv.calibrate(_data(0), progress=False)
    npu = _engines(conv.to_npu())
    edited = conv.quantized_ir()
    want = _scales(edited), {k: v.copy() for k, v in edited.params.items()}
    for value in edited.params.values():
        value[...] = 0
    for q in edited.qparams.values():
        q.scale = np.asarray(q.scale) * 2
    edited.nodes = []
    again = conv.quantized_ir()
    assert _scales(again) == want[0]
    assert all(np.array_equal(again.params[k], v) for k, v in want[1].items())
    assert _engines(conv.to_npu()) == npu
