"""Precision analysis and joint builds on the same Ray executor as
calibration, and MXNet calibration on it (ratelnn.distributed.RayExecutor.map_blocks).

analyze(executor=) adds the shards' sums in batch order: its report equals the one-process
report up to float64 summation order.  A joint build compiles its models on the workers and
yields byte-identical compiled models.  An error inside a task reaches the caller with its
own type.  MXNet calibration on Ray gives statistics equal to one process."""
from __future__ import annotations

import json

import numpy as np
import pytest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def calibrated(model, make_converter, tmp_path_factory):
    out = tmp_path_factory.mktemp("analysis")
    conv = make_converter(out)
    conv.calibrate(model[3], progress=False)
    return out


def _assert_reports_equal(one, many):
    assert (one.against, one.num_samples) == (many.against, many.num_samples)
    assert [r.name for r in one.rows] == [r.name for r in many.rows]
    for a, b in zip(one.rows, many.rows):
        assert (a.dtype, a.shape, a.max_abs_error) == (b.dtype, b.shape, b.max_abs_error), a.name
        for field in ("cosine", "sqnr_db", "channel_sqnr_db", "sqnr_drop_db", "saturated_percent"):
            assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-9, abs=1e-12), (a.name, field)
    assert one.output_similarity.keys() == many.output_similarity.keys()
    for name, sim in one.output_similarity.items():
        for key, value in sim.items():
            assert many.output_similarity[name][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, key)
    assert [(s.layer, s.data_type) for s in one.suggestions] == [(s.layer, s.data_type) for s in many.suggestions]


@pytest.mark.parametrize("against", ["quant", "npu"])
def test_analyze_on_ray_equals_one_process(model, make_converter, calibrated, executor, against):
    conv = make_converter(calibrated)
    one = conv.analyze(model[3], against=against, max_batches=6)
    many = conv.analyze(model[3], against=against, max_batches=6, executor=executor)
    assert one.num_samples == 6 * 16
    _assert_reports_equal(one, many)


@pytest.mark.no_tf_math
def test_task_error_keeps_its_type(executor):
    from ratelnn.errors import ModelError

    def refuse(block):   # a local function: shipped to the workers by value
        raise ModelError(f"refused a block of {len(block)}")

    with pytest.raises(ModelError, match="block of 3"):
        executor.map_blocks(refuse, range(3), total=3, block_size=3, progress=False)


def test_joint_build_on_ray_is_byte_identical(model, calibrated, executor):
    from ratelnn.frontend.tensorflow import joint_converter

    graph_def, inputs, outputs, _ = model
    configs = [{"input_nodes": inputs, "output_nodes": outputs, "input_shapes": [[16, 28, 28, 1]],
                "output_dir": str(calibrated), "model_name": name, "invocations_per_frame": inv}
               for name, inv in (("fashion_a", 1), ("fashion_b", 4))]
    serial = joint_converter([graph_def, graph_def], configs, device_info={0: 4})
    parallel = joint_converter([graph_def, graph_def], configs, device_info={0: 4})
    ser = lambda g: g.SerializeToString(deterministic=True)  # noqa: E731
    one = [ser(g) for g in serial.to_npu()]
    many = [ser(g) for g in parallel.to_npu(executor=executor)]
    assert one == many and one[0] != one[1]
    placement = lambda s: json.dumps(dict(s.to_dict(), search_time_s=None), sort_keys=True)  # noqa: E731
    assert placement(serial.scheme) == placement(parallel.scheme)


@pytest.mark.no_tf_math
def test_mxnet_calibration_on_ray_equals_one_process(executor, tmp_path):
    import ratelnn
    from ratelnn.frontend.mxnet import converter
    from ratelnn.mxnet_compat import import_mxnet
    from ratelnn.testing.mx_fashion import build_net

    ratelnn.mx_init()
    mx = import_mxnet()
    mx.random.seed(3)
    net = build_net(mx, 4)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 1, 28, 28)))
    prefix = str(tmp_path / "gluon")
    net.export(prefix)
    images = np.random.default_rng(5).uniform(0, 1, (70, 1, 28, 28)).astype(np.float32)

    def calibrate(out, **kwargs):
        return converter(prefix, {"input_nodes": ["data"], "output_nodes": ["fcnn_dense0_fwd"],
                                  "input_shapes": [[8, 1, 28, 28]], "output_dir": str(tmp_path / out)}
                         ).calibrate(images, progress=False, **kwargs)

    one, many = calibrate("one"), calibrate("ray", executor=executor)
    assert executor.last_run.shards == 5 and executor.last_run.batches == 9
    assert sorted(one) == sorted(many) and one
    for name in one:
        assert one[name] == many[name], name
        assert one[name].histogram == many[name].histogram, name
