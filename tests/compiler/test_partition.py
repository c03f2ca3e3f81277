"""Partitioner: maximal regions, never a cycle through an unsupported node."""
from ratelnn.ir import Graph, Node, TensorInfo
from ratelnn.compiler.partition import find_regions

SUPPORTED = lambda g, n: n.op != "Opaque"


def chain(spec):
    """Graph from ``[(name, op, [inputs])]``; input tensor 'x', output = last node."""
    g = Graph()
    g.add_input("x", (1, 4))
    for name, op, ins in spec:
        g.add_node(Node(name, op, ins, [name]), [TensorInfo((1, 4))])
    g.outputs = [spec[-1][0]]
    return g


def names(regions):
    return [[n.name for n in r.nodes] for r in regions]


def test_linear_chain_is_one_region():
    g = chain([("a", "Relu", ["x"]), ("b", "Sigmoid", ["a"]), ("c", "Tanh", ["b"])])
    regions = find_regions(g, SUPPORTED)
    assert names(regions) == [["a", "b", "c"]]
    assert regions[0].inputs == ["x"] and regions[0].outputs == ["c"]


def test_unsupported_node_splits_and_prevents_cycle():
    # a -> u(opaque) -> c, and a -> c directly: a and c must not share a region
    g = chain([("a", "Relu", ["x"]), ("u", "Opaque", ["a"]), ("c", "Add", ["a", "u"])])
    regions = find_regions(g, SUPPORTED)
    assert names(regions) == [["a"], ["c"]]
    assert regions[0].outputs == ["a"]
    assert regions[1].inputs == ["a", "u"]


def test_siblings_after_unsupported_merge():
    g = chain([("u", "Opaque", ["x"]), ("a", "Relu", ["u"]), ("b", "Tanh", ["u"]),
               ("c", "Opaque", ["a"]), ("d", "Add", ["c", "b"])])
    regions = find_regions(g, SUPPORTED)
    # a and b are siblings; b->d is an edge; a->c(opaque)->d forbids {a, d} together
    flat = names(regions)
    assert ["a"] in flat or ["a", "b"] in flat
    for r in regions:
        ids = {n.name for n in r.nodes}
        assert not {"a", "d"} <= ids
