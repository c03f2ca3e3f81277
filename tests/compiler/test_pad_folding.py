"""PAD folded into the following convolution (ratelnn.compiler.lower.fold_pads): a
zero Pad that only a Conv2D reads becomes that conv's padding, its PAD instruction is gone,
and the engine computes the same codes as the unfolded one (and as the quantized model);
pads the conv cannot take, a non-zero value or a second reader keep the PAD instruction."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.ir_graphs import add_node, compare, compile_config, conv_attrs, engine_nodes, quantized, random_feeds
from ratelnn.compiler import compile_graph, lower, run_compiled
from ratelnn.ir import Graph
from ratelnn.npu.engine import Engine

F32 = np.float32


def _padded_convs(layout: str, pad: int, value: float = 0.0, second_reader: bool = False) -> Graph:
    """x -> Pad -> depthwise 3x3 stride 2 'valid' (MobileNetV2's stride-2 blocks) -> relu6
    -> Pad -> 3x3 conv 'valid'; batch 2."""
    rng = np.random.default_rng(3)
    nchw = layout == "NCHW"

    def shape(h, c):
        return (2, c, h, h) if nchw else (2, h, h, c)

    def widths(p):
        spatial = [(0, 0), (0, 0), (p, p), (p, p)] if nchw else [(0, 0), (p, p), (p, p), (0, 0)]
        return np.asarray(spatial, np.int64)

    g = Graph(f"pads_{layout.lower()}")
    g.add_input("x", shape(9, 6))
    g.add_param("wd", rng.normal(0, 0.5, (3, 3, 1, 6)).astype(F32))
    g.add_param("bd", rng.normal(0, 0.1, (6,)).astype(F32))
    g.add_param("wc", rng.normal(0, 0.3, (3, 3, 6, 5)).astype(F32))
    add_node(g, "pad1", "Pad", ["x"], shape(9 + 2 * pad, 6), pads=widths(pad), value=value)
    h = (9 + 2 * pad - 3) // 2 + 1
    add_node(g, "dw", "Conv2D", ["pad1", "wd", "bd"], shape(h, 6),
             **conv_attrs(layout, pads=(0, 0, 0, 0), groups=6, act="relu6", strides=(2, 2)))
    add_node(g, "pad2", "Pad", ["dw"], shape(h + 2, 6), pads=widths(1), value=0.0)
    add_node(g, "conv", "Conv2D", ["pad2", "wc"], shape(h, 5), **conv_attrs(layout, pads=(0, 0, 0, 0)))
    g.outputs = ["conv"]
    if second_reader:
        add_node(g, "other", "Relu", ["pad1"], shape(9 + 2 * pad, 6))
        g.outputs = ["conv", "other"]
    return g



def _pad_instructions(compiled) -> int:
    from ratelnn.npu.engine import OPCODES
    return sum(ins.opcode == OPCODES["PAD"] for node in engine_nodes(compiled)
               for ins in Engine.from_bytes(node.attrs["engine"]).instructions)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_zero_pads_fold_into_the_convs_and_change_no_code(layout, tmp_path, monkeypatch):
    cfg = compile_config(tmp_path)
    q = quantized(_padded_convs(layout, pad=1), cfg)
    folded = compile_graph(q, cfg)
    assert _pad_instructions(folded) == 0
    monkeypatch.setattr(lower, "fold_pads", lambda graph, region: list(region.nodes))
    unfolded = compile_graph(q, cfg)
    assert _pad_instructions(unfolded) == 2
    feeds = random_feeds(q, np.random.default_rng(5))
    for backend in ("reference", "native"):
        got, want = run_compiled(folded, feeds, backend=backend), run_compiled(unfolded, feeds, backend=backend)
        np.testing.assert_array_equal(got["conv"], want["conv"])
    monkeypatch.undo()
    assert compare(q, folded, cfg)["conv"][0] == 1.0   # every code equals the quantized model's


@pytest.mark.parametrize("case", ["pads_too_wide", "nonzero_value", "second_reader"])
def test_pads_that_cannot_fold_keep_their_instruction(case, tmp_path):
    cfg = compile_config(tmp_path)
    g = _padded_convs("NHWC", pad=3 if case == "pads_too_wide" else 1,
                      value=0.5 if case == "nonzero_value" else 0.0, second_reader=case == "second_reader")
    q = quantized(g, cfg)
    compiled = compile_graph(q, cfg)
    assert _pad_instructions(compiled) == 1   # pad1 stays; pad2 (zero, 1 < 3) folds
    compare(q, compiled, cfg)                  # native == reference on the kept PAD
