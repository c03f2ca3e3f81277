"""MXNet engine runs record their predicted device time as the TensorFlow op does, readable
with the same ``ratelnn.npu.device_time``/``device_times``/``reset_device_time`` (one
account in ops/core/device_time.cc), and check their placement against the
local devices (``RATELNN_DEVICES``) like the TensorFlow op."""
from __future__ import annotations

import base64

import numpy as np
import pytest

import ratelnn.npu as npu
from ratelnn.npu.device import ENV_DEVICES, target_device
from ratelnn.npu.engine import EngineBuilder, quantize_multiplier

COMPILED_BATCH = 2
CONV_CYCLES, MEAN_CYCLES = 3000, 700   # per instruction, at the compiled batch


@pytest.fixture
def no_devices_env(monkeypatch):
    monkeypatch.delenv(ENV_DEVICES, raising=False)
    return monkeypatch


def timed_engine(split_mode: str = "SPLIT_BATCH", cores=(0, 1)):
    """x int8 [N,6,6,3] -> CONV2D relu -> uint8 [N,6,6,4] -> MEAN -> int8 [N,4], with cycles."""
    rng = np.random.default_rng(3)
    b = EngineBuilder("mx_timed", COMPILED_BATCH)
    tx = b.tensor("x", (COMPILED_BATCH, 6, 6, 3), "int8", 0.02)
    tc = b.tensor("c", (COMPILED_BATCH, 6, 6, 4), "uint8", 0.05)
    tm = b.tensor("m", (COMPILED_BATCH, 4), "int8", 0.05)
    mult, shift = quantize_multiplier(0.02 * 0.01 / 0.05, 128 * 127 * 27 + 500)
    consts = [b.const("w", rng.integers(-127, 128, (3, 3, 3, 4)).astype(np.int8)),
              b.const("bias", rng.integers(-500, 500, 4).astype(np.int32)),
              b.const("mult", np.full(4, mult, np.int32)), b.const("shift", np.full(4, shift, np.int32))]
    b.add("CONV2D", [tx], [tc], consts, strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), groups=1,
          act_min=0).cycles = CONV_CYCLES
    m, s = quantize_multiplier(1.0, 36 * 255)
    b.add("MEAN", [tc], [tm], axes=(1, 2), multipliers=[m], shifts=[s]).cycles = MEAN_CYCLES
    b.set_io([tx], [tm])
    b.set_placement(device_id=0, core_ids=list(cores), split_mode=split_mode)
    return b.build()


def run_op(mx, engine, batch, name, device_id=0, core_ids=(0, 1)):
    x = np.random.default_rng(batch).integers(-128, 128, (batch, 6, 6, 3)).astype(np.int8)
    out = mx.nd.ratel_engine_op(mx.nd.array(x, dtype="int8"), engine=base64.b64encode(engine.to_bytes()).decode(),
                                engine_name=name, device_id=str(device_id), core_ids=str(list(core_ids)),
                                num_outputs="1")
    return (out[0] if isinstance(out, (list, tuple)) else out).asnumpy()


def test_engine_runs_record_device_time(mx, no_devices_env):
    engine = timed_engine()
    per_sample = (CONV_CYCLES + MEAN_CYCLES) / COMPILED_BATCH
    npu.reset_device_time()
    for batch in (5, 1):
        got = run_op(mx, engine, batch, "mx_timed")
        assert got.shape == (batch, 4)
    run_op(mx, engine, 2, "mx_other")
    timed = npu.device_time("mx_timed")
    assert (timed.runs, timed.samples) == (2, 6)
    # split by batch over 2 cores: the busiest core runs ceil(N / 2) samples
    assert timed.cycles == pytest.approx(per_sample * (3 + 1))
    assert timed.seconds == pytest.approx(timed.cycles / target_device(0).core.clock_hz)
    assert set(npu.device_times()) == {"mx_timed", "mx_other"}
    total = npu.device_time()
    assert total.runs == 3 and total.samples == 8 and total.cycles == pytest.approx(per_sample * 5)
    npu.reset_device_time()
    assert npu.device_times() == {} and npu.device_time("mx_timed").runs == 0


def test_non_batch_split_divides_the_work_over_the_cores(mx, no_devices_env):
    engine = timed_engine("SPLIT_OUTPUT_CHANNELS", cores=(0, 1, 2, 3))
    npu.reset_device_time()
    run_op(mx, engine, 6, "mx_tensor_split", core_ids=(0, 1, 2, 3))
    t = npu.device_time("mx_tensor_split")
    assert t.cycles == pytest.approx((CONV_CYCLES + MEAN_CYCLES) / COMPILED_BATCH * 6 / 4)
    npu.reset_device_time()


def test_compiled_mxnet_model_records_per_engine(mx, no_devices_env, tmp_path):
    """A model from converter().to_npu(): its engines, as profile() lists them, record
    device time when the model runs in MXNet."""
    from ratelnn.frontend.mxnet import converter
    from ratelnn.profile import model_engines
    from ratelnn.runners import run_model

    data = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv"), act_type="relu")
    sym = mx.sym.FullyConnected(h, num_hidden=3, name="fc")
    rng = np.random.default_rng(0)
    args = {"conv_weight": rng.standard_normal((4, 1, 3, 3)), "conv_bias": np.zeros(4),
            "fc_weight": rng.standard_normal((3, 144)), "fc_bias": np.zeros(3)}
    model = (sym, {k: mx.nd.array(v) for k, v in args.items()}, {})
    config = {"input_nodes": ["data"], "output_nodes": ["fc_output"], "input_shapes": [[2, 1, 8, 8]],
              "output_dir": str(tmp_path / "stats"), "model_name": "mxtimed"}
    conv = converter(model, config)
    x = rng.uniform(0, 1, (8, 1, 8, 8)).astype(np.float32)
    conv.calibrate(x, progress=False)
    compiled = conv.to_npu()
    engines = model_engines(compiled)
    assert engines and all(name.startswith("mxtimed_engine_") for name, _ in engines)
    npu.reset_device_time()
    run_model("mxnet", compiled, {"data": x[:3]}, ["fc_output"])
    times = npu.device_times()
    assert set(times) == {name for name, _ in engines}
    for name, engine in engines:
        cycles = sum(ins.cycles for ins in engine.instructions) / engine.batch_size
        cores = len(engine.proto.core_ids)
        busiest = -(-3 // cores) if engine.proto.split_mode == 1 else (3 if cores == 1 else 3 / cores)
        assert times[name].runs == 1 and times[name].samples == 3
        assert times[name].cycles == pytest.approx(cycles * busiest) and times[name].cycles > 0
    npu.reset_device_time()


def test_placement_on_a_missing_device_or_core_is_a_clear_error(mx, no_devices_env):
    engine = timed_engine()
    with pytest.raises(mx.base.MXNetError) as info:
        run_op(mx, engine, 2, "mx_far", device_id=1)
    message = str(info.value)
    assert "engine 'mx_far' was compiled for device 1 cores [0, 1], but device 1 does not exist" in message
    assert "1 device(s) (device 0: 4 cores)" in message and f"{ENV_DEVICES}=4,4" in message
    with pytest.raises(mx.base.MXNetError, match=r"device 0 has no core \[5\].*RATELNN_DEVICES=6"):
        run_op(mx, engine, 2, "mx_far", core_ids=(0, 5))
    no_devices_env.setenv(ENV_DEVICES, "4,2")
    np.testing.assert_array_equal(run_op(mx, engine, 2, "mx_far", device_id=1),
                                  engine.run([np.random.default_rng(2).integers(-128, 128, (2, 6, 6, 3))
                                              .astype(np.int8)], backend="reference")[0])
    no_devices_env.setenv(ENV_DEVICES, "4,x")
    with pytest.raises(mx.base.MXNetError, match=r"RATELNN_DEVICES='4,x': device 1: 'x' is not a whole number"):
        run_op(mx, engine, 2, "mx_far")
