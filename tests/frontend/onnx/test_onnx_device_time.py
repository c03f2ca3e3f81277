"""Runs of a compiled ONNX model in ``ratelnn.onnx_session`` record each engine's predicted
device time as the TensorFlow and MXNet engine ops do, readable with the same
``ratelnn.npu.device_time``/``device_times``/``reset_device_time``."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ratelnn  # noqa: E402
import ratelnn.npu as npu  # noqa: E402
from ratelnn.frontend.onnx import converter  # noqa: E402
from ratelnn.npu.batching import batch_slots, plan_batches  # noqa: E402
from ratelnn.npu.device import ENV_DEVICES, target_device  # noqa: E402
from ratelnn.profile import model_engine_sets  # noqa: E402

def _conv_model(rng):
    """x [N,3,12,12] -> Conv 3x3 (8) -> Relu -> GlobalAveragePool -> Flatten -> Gemm (4): y [N,4];
    weights drawn from ``rng``."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"])]
    inits = {"w": rng.normal(size=(8, 3, 3, 3)) * 0.3, "b": rng.normal(size=8) * 0.1,
             "wd": rng.normal(size=(8, 4)) * 0.3, "bd": np.zeros(4)}
    graph = helper.make_graph(nodes, "timed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _compiled(tmp_path, rng, **config):
    cfg = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[2, 3, 12, 12]],
           "output_dir": str(tmp_path / "stats"), "model_name": "onnxtimed", **config}
    conv = converter(_conv_model(rng), cfg)
    conv.calibrate(rng.uniform(size=(8, 3, 12, 12)).astype(np.float32), batch_size=2, progress=False)
    return conv.to_npu()


def _run_cycles(engines, n):
    """Predicted cycles of one run of ``n`` samples on an engine set: each chunk of the batch
    split at its compiled size on the busiest core (docs/multi-batch.md)."""
    slots = batch_slots(engines)
    if len(slots) == 1:
        e = engines[0]
        cores = len(e.proto.core_ids)
        busiest = -(-n // cores) if e.proto.split_mode == 1 else (n if cores == 1 else n / cores)
        return sum(i.cycles for i in e.instructions) / e.batch_size * busiest
    cost = {size: cycles for size, _, cycles in slots}
    return sum(cost[size] for size, _, _ in plan_batches(sorted(cost), n, [cost[s] for s in sorted(cost)]))


@pytest.fixture
def no_devices_env(monkeypatch):
    monkeypatch.delenv(ENV_DEVICES, raising=False)


@pytest.mark.parametrize("static_batch_sizes", [[], [1, 2, 4]])
def test_onnx_engine_runs_record_the_predicted_device_time(tmp_path, rng, no_devices_env, static_batch_sizes):
    compiled = _compiled(tmp_path, rng, static_batch_sizes=static_batch_sizes)
    sets = dict(model_engine_sets(compiled))
    assert sets and all(name.startswith("onnxtimed_engine_") for name in sets)
    session = ratelnn.onnx_session(compiled)
    x = rng.uniform(size=(5, 3, 12, 12)).astype(np.float32)
    npu.reset_device_time()
    session.run(["y"], {"x": x[:3]})
    first = npu.device_times()
    assert set(first) == set(sets)
    for name, engines in sets.items():
        t = first[name]
        assert (t.runs, t.samples) == (1, 3)
        assert t.cycles > 0 and t.cycles == pytest.approx(_run_cycles(engines, 3), rel=1e-9)
        assert t.seconds == pytest.approx(t.cycles / target_device(0).core.clock_hz)
    session.run(["y"], {"x": x})
    for name, engines in sets.items():
        t = npu.device_time(name)
        assert (t.runs, t.samples) == (2, 8)
        assert t.cycles > first[name].cycles
        assert t.cycles == pytest.approx(_run_cycles(engines, 3) + _run_cycles(engines, 5), rel=1e-9)
    npu.reset_device_time()
    assert npu.device_times() == {}
