"""Joint compilation of real compiled models: engines placed by the chosen scheme."""
import numpy as np
import pytest

from ratelnn.compiler import run_compiled
from ratelnn.joint.compile import compile_jointly, engine_placements
from ratelnn.npu.engine import SPLIT_MODES, Engine

from helpers.ir_graphs import build_cnn, compile_config, quantized


@pytest.fixture(scope="module")
def three_models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("joint")
    configs = [compile_config(tmp, model_name=f"cnn{i}", invocations_per_frame=inv)
               for i, inv in enumerate((1, 8, 1))]
    qgraphs = [quantized(build_cnn(layout, seed=i), c)
               for i, (layout, c) in enumerate(zip(("NHWC", "NCHW", "NHWC"), configs))]
    for i, q in enumerate(qgraphs):
        q.name = f"cnn{i}"   # what ConvertImpl names a graph from config model_name
    return qgraphs, configs


def test_engines_carry_the_schemes_placement(three_models):
    qgraphs, configs = three_models
    compiled, specs, scheme = compile_jointly(qgraphs, configs, {0: 4})
    assert [s.invocations_per_frame for s in specs] == [1, 8, 1]
    assert scheme.predicted_fps > 0
    assert scheme.predicted_fps <= scheme.roofline_fps * (1 + 1e-9)
    placed = {(a.model_index, a.engine_name): a for a in scheme.engines}
    for i, graph in enumerate(compiled):
        for name, (device, cores) in engine_placements(graph).items():
            a = placed[(i, name)]
            assert name.startswith(f"cnn{i}_engine_")
            assert (device, cores) == (a.device_id, list(a.core_ids))
            node = next(n for n in graph.nodes if n.attrs.get("engine_name") == name)
            proto = Engine.from_bytes(node.attrs["engine"]).proto
            assert list(proto.core_ids) == list(a.core_ids) and proto.device_id == a.device_id
            assert proto.split_mode in SPLIT_MODES.values()


def test_placement_leaves_results_unchanged(three_models):
    qgraphs, configs = three_models
    compiled, _, _ = compile_jointly(qgraphs, configs, {0: 4})
    from ratelnn.compiler import compile_graph
    rng = np.random.default_rng(0)
    for q, c, g in zip(qgraphs, configs, compiled):
        feeds = {t: rng.normal(0, 1, q.shape(t)).astype(np.float32) for t in q.inputs}
        alone = compile_graph(q, c, {0: 1})
        a = run_compiled(alone, feeds, backend="native")
        b = run_compiled(g, feeds, backend="native")
        for t in q.outputs:
            np.testing.assert_array_equal(a[t], b[t])


def test_pinned_cores_are_respected(three_models):
    qgraphs, configs = three_models
    compiled, _, scheme = compile_jointly(qgraphs[:2], configs[:2], {0: [2, 3]})
    assert {c for a in scheme.engines for c in a.core_ids} <= {2, 3}


def test_duplicate_model_names_rejected(three_models):
    qgraphs, configs = three_models
    twins = [qgraphs[0], qgraphs[0].copy()]
    with pytest.raises(ValueError, match="distinct"):
        compile_jointly(twins, configs[:2], {0: 4})
