"""The prefix walk tune()'s layer steps and the default build's share (``bisect_prefixes``):
doubling, then bisection to the most layers that fit or the fewest that meet, in about log2
trials; and the int16 budget's prices come from the candidate's own plan (its fp32 and int16
layers), not the converter's."""
from __future__ import annotations

import math

import numpy as np

import ratelnn
from ratelnn.frontend.tensorflow import converter
from ratelnn.quantization.policy import is_scale_preserving
from ratelnn.tune.budget import anchor_tensors, int16_prices
from ratelnn.tune.layers import bisect_prefixes, doubling_sizes
from ratelnn.tune.methods import stage_methods
from ratelnn.tune.tuner import Tuner
from helpers.int8_loss import SHAPE, depthwise_loss_graph


def _walk(n: int, fits, meets):
    tried = []

    def trial(k: int) -> int:
        tried.append(k)
        return k

    return bisect_prefixes(doubling_sizes(n), trial, fits, meets), tried


def test_doubling_sizes_end_at_all_options():
    assert doubling_sizes(1) == [1]
    assert doubling_sizes(12) == [1, 2, 4, 8, 12]
    assert doubling_sizes(16) == [1, 2, 4, 8, 16]
    assert doubling_sizes(0) == []


def test_walk_past_the_limit_bisects_up_to_the_most_that_fit():
    """136 of 256 options fit (the pose network's int16 layers): doubling stops at 256, then
    bisection between 128 and 256 finds 136 instead of stopping at 128."""
    met, tried = _walk(256, fits=lambda k: k <= 136, meets=lambda k: False)
    assert met is None
    assert tried[:9] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert max(k for k in tried if k <= 136) == 136 and 137 in tried
    assert len(tried) <= 2 * math.ceil(math.log2(256)) + 1


def test_walk_that_meets_bisects_down_to_the_fewest():
    met, tried = _walk(100, fits=lambda k: True, meets=lambda k: k >= 37)
    assert met == 37 and 36 in tried
    assert tried[:7] == [1, 2, 4, 8, 16, 32, 64]
    assert len(tried) <= 2 * math.ceil(math.log2(100)) + 1


def test_walk_stops_at_the_first_k_that_meets_when_it_is_the_fewest():
    met, tried = _walk(64, fits=lambda k: True, meets=lambda k: k >= 1)
    assert met == 1 and tried == [1]


def test_int16_prices_follow_the_candidates_plan(tmp_path):
    """A layer the candidate keeps in fp32 has no engine tensor to price, one it already has in
    int16 costs nothing more: both leave the prices; with the converter's own (all-int8)
    plan they would be priced."""
    ratelnn.tf_init()
    data = np.random.default_rng(1).normal(0, 1, (16, *SHAPE)).astype(np.float32)
    conv = converter(depthwise_loss_graph(), {"input_nodes": ["images"], "output_nodes": ["scores"],
                                              "input_shapes": [[4, *SHAPE]], "output_dir": str(tmp_path)})
    search = Tuner(conv, data, progress=False).search
    search.prepare()
    best = stage_methods(search)
    anchors = anchor_tensors(conv.graph)
    all_int8 = int16_prices(search, best)
    # the last priced layer: no quantized layer reads it, so in fp32 it leaves the engines
    layer = [n for n in conv.graph.nodes if anchors.get(n.name) in all_int8 and not is_scale_preserving(n)][-1]
    for dtype in ("fp32", "int16"):
        point = search.evaluate(dtype, search.with_layers(best, [{"layer_name": layer.name, "data_type": dtype}]))
        prices = int16_prices(search, point)
        assert anchors[layer.name] not in prices and prices
