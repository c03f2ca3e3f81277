"""The graph's index (producers, readers, names, ops, node order) against a full scan after every
kind of edit, and the default passes doing work linear in the node count."""
import copy
import pickle
import random

import numpy as np
import pytest

from ratelnn.ir import Graph, Node, TensorInfo
from ratelnn.ir.graph import GraphError
from ratelnn.ir.passes import run_default_passes
from ratelnn.testing.work import lines_run

pytestmark = pytest.mark.no_tf_math


def _scan_matches(g: Graph, order: list) -> None:
    """Every lookup of ``g`` equals a brute-force recomputation from ``order`` (the node list
    the edits should have produced)."""
    nodes = list(g.nodes)
    assert [id(n) for n in nodes] == [id(n) for n in order]
    assert len(g.nodes) == len(order)
    tensors = set(g.tensors) | {t for n in order for t in n.inputs + n.outputs} | {"never_used"}
    for t in tensors:
        producers = [n for n in order if t in n.outputs]
        assert g.producer(t) is (producers[-1] if producers else None), t
        assert [id(n) for n in g.consumers(t)] == [id(n) for n in order if t in n.inputs], t
    for name in {n.name for n in order} | {"never_used"}:
        named = [n for n in order if n.name == name]
        if named:
            assert g.node(name) is named[0]
        else:
            with pytest.raises(KeyError):
                g.node(name)
    for ops in (("Add",), ("Relu", "Add"), ("Relu",), ("Conv2D",)):
        assert [id(n) for n in g.nodes_of(ops)] == [id(n) for n in order if n.op in ops], ops
    used = set(g.tensors) | {n.name for n in order}
    for base in ("t0", "n1", "fresh"):
        fresh = g.unique_name(base)
        assert fresh not in used and (fresh == base or fresh.startswith(base + "_"))


def _random_graph(rng: random.Random, size: int) -> Graph:
    g = Graph("random")
    g.add_input("x", (1, 4))
    for i in range(size):
        known = list(g.tensors)
        g.add_node(Node(f"n{i}", "Add", [rng.choice(known), rng.choice(known)], [f"t{i}"]),
                   [TensorInfo((1, 4))])
    g.outputs = [f"t{size - 1}"]
    return g


def _edits(g: Graph, order: list, rng: random.Random, step: int):
    """One random edit of ``g``, applied to ``order`` (the expected node list) as well."""
    tensors = list(g.tensors) + [f"extra{step}"]

    def pick():
        return rng.choice(order) if order else None

    def new_node():
        return Node(rng.choice([f"new{step}", "n0"]), "Add", [rng.choice(tensors) for _ in range(2)],
                    [rng.choice([f"out{step}", rng.choice(tensors)])])

    def input_item():
        n = pick()
        if n and n.inputs:
            n.inputs[rng.randrange(len(n.inputs))] = rng.choice(tensors)

    def input_list_methods():
        n = pick()
        if n:
            kind = rng.randrange(7)
            if kind == 6:
                n.inputs.extend([rng.choice(tensors)])
            elif kind == 0:
                n.inputs.insert(0, rng.choice(tensors))
            elif kind == 1 and n.inputs:
                n.inputs.pop()
            elif kind == 2:
                n.inputs += [rng.choice(tensors)]
            elif kind == 3:
                del n.inputs[:1]
            elif kind == 4:
                n.inputs[0:1] = [rng.choice(tensors), rng.choice(tensors)]
            else:
                n.inputs.reverse()
                n.inputs.sort()

    def assign_lists():
        n = pick()
        if n:
            n.inputs = (rng.choice(tensors),)
            n.outputs = [rng.choice(tensors), f"o{step}"]
            n.outputs[0] = f"p{step}"

    def rename():
        n = pick()
        if n:
            n.name = rng.choice([f"renamed{step}", "n1", order[0].name])

    def retype():
        n = pick()
        if n:
            n.op = rng.choice(["Relu", "Add"])

    def add():
        node = new_node()
        g.add_node(node)
        order.append(node)

    def remove():
        gone = rng.sample(order, min(len(order), 2))
        g.remove_nodes(gone + [new_node()])   # a node not in the graph is ignored
        order[:] = [n for n in order if all(n is not x for x in gone)]

    def replace():
        n = pick()
        if n:
            new = new_node()
            g.replace_node(n, new)
            order[[id(x) for x in order].index(id(n))] = new

    def list_edits():
        kind = rng.randrange(7)
        if kind == 0 and order:
            i = rng.randrange(len(order))
            new = new_node()
            g.nodes[i] = new
            order[i] = new
        elif kind == 1:
            new = new_node()
            g.nodes.insert(1, new)
            order.insert(1, new)
        elif kind == 2 and order:
            del g.nodes[0]
            del order[0]
        elif kind == 3:
            news = [new_node()]
            g.nodes[1:3] = news
            order[1:3] = news
        elif kind == 4:
            shuffled = order[:]
            rng.shuffle(shuffled)
            g.nodes = shuffled
            order[:] = shuffled
        elif kind == 5 and order:
            g.nodes.remove(order[-1])
            order.pop()
        else:
            news = [new_node()]
            g.nodes.extend(news)
            order.extend(news)

    def uses():
        n = pick()
        if n and n.inputs:
            old = n.inputs[0]
            g.replace_uses(old, rng.choice(tensors))

    return rng.choice([input_item, input_list_methods, assign_lists, rename, retype, add, remove, replace,
                       list_edits, uses])


@pytest.mark.parametrize("seed", range(6))
def test_index_agrees_with_a_full_scan_after_random_edits(seed):
    rng = random.Random(seed)
    g = _random_graph(rng, 12)
    order = list(g.nodes)
    _scan_matches(g, order)
    for step in range(150):
        _edits(g, order, rng, step)()
        _scan_matches(g, order)


def test_copies_and_pickles_carry_their_own_index():
    rng = random.Random(7)
    g = _random_graph(rng, 10)
    for twin in (g.copy(), copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        _scan_matches(twin, list(twin.nodes))
        twin.node("n3").inputs[0] = "t9"
        twin.remove_nodes([twin.node("n4")])
        _scan_matches(twin, list(twin.nodes))
        assert twin.consumers("t9")[-1] is twin.node("n3") and g.node("n3") not in g.consumers("t9")
        _scan_matches(g, list(g.nodes))
        assert [n.name for n in g.nodes] == [f"n{i}" for i in range(10)]
    assert isinstance(pickle.loads(pickle.dumps(g.node("n1").inputs)), list)


def test_a_node_in_two_graphs_updates_both_and_a_removed_node_neither():
    a, b = Graph("a"), Graph("b")
    n = Node("n", "Relu", ["x"], ["y"])
    a.add_node(n)
    b.add_node(n)
    n.inputs[0] = "z"
    assert a.consumers("z") == [n] and b.consumers("z") == [n] and not a.consumers("x")
    a.remove_nodes([n])
    n.outputs = ["w"]
    assert a.producer("w") is None and b.producer("w") is n and b.producer("y") is None


def test_adding_a_node_twice_is_refused_with_its_name():
    g = Graph("g")
    n = g.add_node(Node("twice", "Relu", ["x"], ["y"]))
    with pytest.raises(GraphError, match="twice"):
        g.add_node(n)
    with pytest.raises(GraphError, match="twice"):
        g.nodes = [n, n]


def _chain(blocks: int) -> Graph:
    """``blocks`` x (Conv2D -> BatchNorm -> BiasAdd -> Relu -> Identity)."""
    rng = np.random.default_rng(0)
    g = Graph("chain")
    x = g.add_input("x", (1, 4, 4, 2))
    info = [TensorInfo((1, 4, 4, 2))]
    for k in range(blocks):
        p = f"b{k}"
        g.add_param(f"{p}/w", rng.normal(size=(1, 1, 2, 2)).astype(np.float32))
        for name in ("gamma", "beta", "mean", "var", "bias"):
            g.add_param(f"{p}/{name}", np.abs(rng.normal(1, 0.1, 2)).astype(np.float32))
        g.add_node(Node(f"{p}/conv", "Conv2D", [x, f"{p}/w"], [f"{p}/conv"],
                        dict(strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups=1, layout="NHWC")), info)
        g.add_node(Node(f"{p}/bn", "BatchNorm", [f"{p}/conv"] + [f"{p}/{n}" for n in ("gamma", "beta", "mean", "var")],
                        [f"{p}/bn"], {"eps": 1e-3, "axis": -1}), info)
        g.add_node(Node(f"{p}/bias", "BiasAdd", [f"{p}/bn", f"{p}/bias"], [f"{p}/biased"]), info)
        g.add_node(Node(f"{p}/relu", "Relu", [f"{p}/biased"], [f"{p}/relu"]), info)
        g.add_node(Node(f"{p}/id", "Identity", [f"{p}/relu"], [f"{p}/out"]), info)
        x = f"{p}/out"
    g.outputs = [x]
    return g


def test_a_copy_shares_no_mutable_value_and_keeps_what_was_shared():
    """Graph.copy: attributes, params and per-channel scales are copies (editing them leaves
    the original as it was); one array reached from two places stays one array in the copy;
    other objects go through deepcopy."""
    from ratelnn.ir.graph import QParams
    shared = np.arange(4, dtype=np.float32)
    g = Graph("g")
    g.inputs, g.outputs = ["x"], ["y"]
    g.params = {"w": shared}
    g.tensors = {"x": TensorInfo((1, 4)), "y": TensorInfo((1, 4))}
    g.nodes = [Node("n", "Mul", ["x", "w"], ["y"], {"table": shared, "pads": [1, [2, 3]], "spec": {"k": (4, [5])},
                                                     "flags": {1, 2}})]
    g.qparams = {"w": QParams("int8", np.ones(4, np.float32), 0)}
    twin = g.copy()
    attrs = twin.node("n").attrs
    assert attrs["table"] is twin.params["w"] and attrs["table"] is not shared
    attrs["table"][0] = 9
    attrs["pads"][1][0] = 7
    attrs["spec"]["k"][1].append(6)
    attrs["flags"].add(3)
    twin.qparams["w"].scale[0] = 5
    assert shared[0] == 0 and g.node("n").attrs["pads"] == [1, [2, 3]] and g.node("n").attrs["spec"] == {"k": (4, [5])}
    assert g.node("n").attrs["flags"] == {1, 2} and g.qparams["w"].scale[0] == 1


def test_default_passes_do_linear_work_in_the_node_count():
    def work(blocks):
        g = _chain(blocks)
        return lines_run(lambda: (run_default_passes(g), g.copy().validate()))
    small, large = work(60), work(240)
    g = run_default_passes(_chain(3))
    assert [n.op for n in g.nodes] == ["Conv2D"] * 3   # everything folded into the convolutions
    # 4x the nodes: linear work is ~4x, a scan per node would be ~16x
    assert large / small < 5.5, (small, large)


def test_prune_keeps_what_an_output_depends_on_and_the_inputs():
    """prune drops the nodes, params, tensor infos and qparams no output depends on; the
    graph inputs keep their infos even when unread; names are shared objects (interned)."""
    from ratelnn.ir import QParams
    g = Graph()
    g.add_input("x", (2,))
    g.add_input("unused", (2,))
    for name in ("w", "dead_w", "folded"):
        g.add_param(name, np.ones(2, np.float32))
    written, read = "".join(["m", "ul"]), "".join(["mu", "l"])   # equal names, two objects
    g.add_node(Node("mul", "Mul", ["x", "w"], [written]), [TensorInfo((2,))])
    g.add_node(Node("side", "Mul", ["x", "dead_w"], ["side"]), [TensorInfo((2,))])
    g.add_node(Node("after_side", "Relu", ["side"], ["after_side"]), [TensorInfo((2,))])
    g.add_node(Node("out", "Relu", [read], ["out"]), [TensorInfo((2,))])
    g.tensors["stale_info"] = TensorInfo((3,))
    g.qparams.update({t: QParams("int8", 0.1) for t in ("mul", "side", "stale_info")})
    g.outputs = ["out"]
    g.prune()
    assert [n.name for n in g.nodes] == ["mul", "out"]
    assert sorted(g.params) == ["w"]
    assert sorted(g.tensors) == ["mul", "out", "unused", "w", "x"]
    assert sorted(g.qparams) == ["mul"]
    assert written is not read and g.nodes[0].outputs[0] is g.nodes[1].inputs[0]
