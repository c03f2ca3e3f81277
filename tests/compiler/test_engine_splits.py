"""A compiled model says why it has more than one engine: the CPU op between two engines is
named, with the reason the NPU does not run it (``meta["engine_splits"]``)."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

BATCH = 2
SHAPE = (8, 8, 3)


def _graph(middle):
    """conv -> relu -> ``middle`` -> conv -> relu: two NPU parts around one op."""
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None, *SHAPE), name="x")
        w1 = tf.constant(rng.normal(0, 0.3, (3, 3, 3, 4)).astype(np.float32))
        w2 = tf.constant(rng.normal(0, 0.3, (3, 3, 4, 4)).astype(np.float32))
        y = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        z = middle(y)
        tf.identity(tf.nn.relu(tf.nn.conv2d(z, w2, 1, "SAME")), name="out")
    return graph.as_graph_def()


def _compiled_ir(middle, tmp_path):
    import ratelnn
    from ratelnn.compiler import compile_graph
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.runners import run_model

    ratelnn.tf_init()
    conv = converter(_graph(middle), {"input_nodes": ["x"], "output_nodes": ["out"],
                                      "input_shapes": [[BATCH, *SHAPE]], "output_dir": str(tmp_path)})
    graph_cal = conv.to_cal()
    rng = np.random.default_rng(1)
    for _ in range(2):
        run_model("tensorflow", graph_cal, {"x": rng.normal(0, 1, (BATCH, *SHAPE)).astype(np.float32)}, ["out"])
    return compile_graph(conv.quantized_ir(), conv.config, conv.device_info)


def test_the_cpu_op_between_two_engines_is_named_with_its_reason(tmp_path):
    from ratelnn.compiler import SPLITS_META, split_causes

    compiled = _compiled_ir(lambda y: tf.math.floormod(y, 2.5, name="wrap"), tmp_path)
    engines = [n.name for n in compiled.nodes if n.op == "Engine"]
    assert len(engines) == 2
    splits = compiled.meta[SPLITS_META]
    wrap = [s for s in splits if s["node"] == "wrap"]
    assert len(wrap) == 1, splits
    assert wrap[0]["after"] == [engines[0]] and wrap[0]["before"] == [engines[1]]
    assert wrap[0]["op"] == "FloorMod"
    assert wrap[0]["reason"] == "tensorflow op FloorMod has no quantized form (runs in float)"
    assert all(s["node"] is not None for s in splits)          # no engine feeds another directly
    causes = split_causes(splits)
    assert causes[0][2] >= 1 and causes[0][0] == wrap[0]["op"]


def test_one_engine_means_no_splits(tmp_path):
    from ratelnn.compiler import SPLITS_META

    compiled = _compiled_ir(lambda y: tf.nn.relu6(y), tmp_path)
    assert sum(n.op == "Engine" for n in compiled.nodes) == 1
    assert compiled.meta[SPLITS_META] == []


def test_engine_feeding_engine_directly_is_reported_as_kept_apart():
    """a -> u (CPU) -> c and a -> c: a and c are two engines (one would be a cycle through u);
    u is reported between them, and so is the direct edge a -> c."""
    from ratelnn.compiler.partition import find_regions
    from ratelnn.compiler.splits import CYCLE_REASON, engine_splits
    from ratelnn.ir import Graph, Node, TensorInfo

    g = Graph()
    g.add_input("x", (1, 4))
    for name, op, ins in [("a", "Relu", ["x"]), ("u", "Opaque", ["a"]), ("c", "Add", ["a", "u"])]:
        g.add_node(Node(name, op, ins, [name], {"type": "Cumsum"} if op == "Opaque" else {}), [TensorInfo((1, 4))])
    g.outputs = ["c"]
    refusals = {"a": None, "u": "why not", "c": None}
    regions = find_regions(g, lambda graph, n: refusals[n.name] is None)
    splits = engine_splits(g, regions, refusals, ["e0", "e1"])
    assert splits == [{"node": "u", "op": "Cumsum", "reason": "why not", "after": ["e0"], "before": ["e1"]},
                      {"node": None, "op": None, "reason": CYCLE_REASON, "after": ["e0"], "before": ["e1"]}]
