"""ONNX models on the local Ray cluster of 2 workers (tests/distributed/conftest.py): the
digits CNN trained in the test (tests/helpers/onnx_digits.py) calibrated through RayExecutor
gives the statistics of one process (every field, histograms included) and so the same
quantized and compiled ONNX models; its compiled model evaluated on the workers
(``agraph.parallel``) gives the outputs of one process."""
from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")

from helpers.onnx_digits import trained_digits_onnx  # noqa: E402
from ratelnn.frontend.onnx import converter  # noqa: E402
from ratelnn.runners import run_model  # noqa: E402

BATCH, SAMPLES = 16, 200      # 13 batches, the last one partial


def _converter(model, folder):
    return converter(model, {"input_nodes": ["images"], "output_nodes": ["probs"],
                             "input_shapes": [[BATCH, 1, 8, 8]], "output_dir": str(folder)})


@pytest.fixture(scope="module")
def calibrated(executor, tmp_path_factory):
    """(model, one-process converter and statistics, Ray converter and statistics)."""
    model, x, _ = trained_digits_onnx()
    one, many = (_converter(model, tmp_path_factory.mktemp(name)) for name in ("one", "ray"))
    one_stats = one.calibrate(x[:SAMPLES], progress=False)
    many_stats = many.calibrate(x[:SAMPLES], progress=False, executor=executor)
    return model, x, (one, one_stats), (many, many_stats), executor.last_run


def test_onnx_calibration_on_ray_gives_the_statistics_of_one_process(calibrated):
    _, _, (_, one), (_, many), report = calibrated
    assert report.batches == 13 and len(set(report.pids.values())) == 2, "both workers ran shards"
    assert sorted(one) == sorted(many) and one
    for name in one:
        assert one[name] == many[name], name               # min, max, ema_min/max, batches, count
        assert one[name].histogram == many[name].histogram, name


def test_onnx_models_from_ray_statistics_are_byte_identical(calibrated):
    _, _, (one, _), (many, _), _ = calibrated
    ser = lambda m: m.SerializeToString(deterministic=True)  # noqa: E731
    assert ser(one.to_quant()) == ser(many.to_quant())
    npu = many.to_npu()
    assert "RatelEngineOp" in {n.op_type for n in npu.graph.node}
    assert ser(one.to_npu()) == ser(npu)


def test_compiled_onnx_model_evaluated_on_ray_gives_the_local_outputs(calibrated, executor):
    from agraph.parallel import outputs_on

    _, x, (one, _), _, _ = calibrated
    npu = one.to_npu()
    batches = [[x[i:i + BATCH]] for i in range(SAMPLES, SAMPLES + 4 * BATCH, BATCH)]
    remote = outputs_on(executor, "onnx", npu, ["images"], ["probs"], batches, "digits npu", progress=False)
    for (images,), (probs,) in zip(batches, remote):
        np.testing.assert_array_equal(probs, run_model("onnx", npu, {"images": images}, ["probs"])[0])
