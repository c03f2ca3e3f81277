"""NPU cost model (docs/architecture.md §7): roofline, monotonicity, split modes, fit to Hanguang 800, speed."""
import dataclasses
import os
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ratelnn.npu import costmodel as cm
from ratelnn.npu.device import (ENV_DEVICES, HG800_RESNET50_OFFLINE_IPS, HG800_RESNET50_SINGLESTREAM_S,
                                DeviceSpec)

# the cost model reads layer shapes; the Keras ResNet50 is only built (weights=None), never
# run: no TensorFlow kernel's output reaches an assertion (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math

DEVICE = DeviceSpec()
CORE = DEVICE.core


@pytest.fixture(autouse=True)
def default_devices(monkeypatch):
    monkeypatch.delenv(ENV_DEVICES, raising=False)


def conv(macs_scale=1.0, cin=64, cout=64, k=9, pixels=56 * 56, bits=8, kind="conv", name="conv"):
    macs = pixels * k * (1 if kind == "depthwise" else cin) * cout * macs_scale
    weights = k * (1 if kind == "depthwise" else cin) * cout * bits // 8
    act = pixels * cout * bits // 8
    return cm.LayerCost(kind, macs, weights, act, act, bits, cin, cout, k, pixels, name=name)


def roofline(table, device=DEVICE, cores=None):
    cores = device.num_cores if cores is None else cores
    return cores * device.core.peak_macs_per_s / table.total_macs


layer_strategy = st.builds(
    lambda kind, macs, w, a, bits, cin, cout, k, px: cm.LayerCost(kind, macs, w, a, a / 2, bits, cin, cout, k, px),
    st.sampled_from(cm.TENSOR_KINDS + cm.VECTOR_KINDS + cm.MEMORY_KINDS),
    st.floats(1e3, 5e9), st.floats(0, 4e7), st.floats(0, 4e6), st.sampled_from([8, 16]),
    st.integers(0, 2048), st.integers(0, 2048), st.sampled_from([1, 9, 49]), st.integers(1, 12544))


@settings(max_examples=60, deadline=None)
@given(layers=st.lists(layer_strategy, min_size=1, max_size=30), batch=st.integers(1, 64),
       cores=st.integers(1, 4), mode=st.sampled_from(cm.SPLIT_MODES), resident=st.sampled_from([None, False]))
def test_throughput_never_exceeds_compute_roofline(layers, batch, cores, mode, resident):
    table = cm.LayerTable(layers)
    cost = cm.model_cost(table, DEVICE, cores, batch, mode, resident=resident)
    assert cost.throughput > 0 and cost.latency_s > 0
    if table.total_macs > 0:
        assert cost.throughput <= roofline(table, cores=cores) * (1 + 1e-9)
        # one batch cannot finish faster than its MACs at the peak of the cores it uses
        assert cost.latency_s >= batch * table.total_macs / (cost.cores * CORE.peak_macs_per_s) * (1 - 1e-9)


def test_more_macs_more_cycles_and_bounds():
    small, _ = cm.layer_cycles(conv(1.0))
    large, bound = cm.layer_cycles(conv(20.0))
    assert large > small
    assert bound == "compute"
    assert cm.layer_cycles(cm.LayerCost("eltwise", 10))[1] == "overhead"
    move = cm.LayerCost("move", 0, in_bytes=64e6, out_bytes=64e6)
    cycles, bound = cm.layer_cycles(move)
    assert bound == "bandwidth" and cycles == pytest.approx(1000 + 128e6 / CORE.sram_bytes_per_cycle)


def test_int16_and_depthwise_cost_more_per_mac():
    int8, _ = cm.layer_cycles(conv(20.0), batch=4)
    int16, _ = cm.layer_cycles(conv(20.0, bits=16), batch=4)
    overhead = cm.DEFAULT_PARAMS.layer_overhead_cycles
    assert (int16 - overhead) == pytest.approx(4 * (int8 - overhead), rel=0.05)
    # int16 activations x int8 weights: 2 of the 4 int8 products of a 16 x 16 one
    mixed, _ = cm.layer_cycles(dataclasses.replace(conv(20.0, bits=16), weight_bits=8), batch=4)
    assert (mixed - overhead) == pytest.approx(2 * (int8 - overhead), rel=0.05)
    with pytest.raises(cm.CostModelError, match="weight_bits"):
        cm.LayerCost("conv", 1.0, weight_bits=4)
    dense = cm.LayerCost("conv", 1e9, in_channels=64, out_channels=64, kernel_area=9, out_pixels=3136)
    depthwise = cm.LayerCost("depthwise", 1e9, in_channels=64, out_channels=64, kernel_area=9, out_pixels=3136)
    assert cm.layer_cycles(depthwise)[0] > 5 * cm.layer_cycles(dense)[0]


def test_small_channel_counts_fill_the_array_worse():
    per_mac = []
    for cout in (8, 64):
        layer = conv(cin=64, cout=cout, k=1)
        compute = cm.model_cost([layer])._runs[0].compute[0]
        per_mac.append(compute / layer.macs)
    assert per_mac[0] == pytest.approx(8 * per_mac[1])


def big_model(n=20, weight_mib=4.0):
    layers = []
    for i in range(n):
        layer = conv(name=f"c{i}", cin=256, cout=256, k=9, pixels=28 * 28)
        layers.append(dataclasses.replace(layer, weight_bytes=weight_mib * 2**20))
    return layers


def test_streamed_weights_are_slower_than_resident():
    layers = big_model(n=8)    # 32 MiB: fits in one core
    resident = cm.model_cost(layers, DEVICE, 1, 4, resident=True)
    streamed = cm.model_cost(layers, DEVICE, 1, 4, resident=False)
    assert resident.weights_resident and not streamed.weights_resident
    assert streamed.latency_s > resident.latency_s
    assert streamed.throughput < resident.throughput
    assert streamed.host_link_bytes_per_batch > resident.host_link_bytes_per_batch + 30 * 2**20
    assert {r.weights for r in streamed.layers} == {"streamed"}
    assert "bandwidth" in {r.bound for r in streamed.layers}


def test_weights_too_big_for_a_core_are_streamed_or_split():
    layers = big_model(n=20)   # 80 MiB of weights
    auto = cm.model_cost(layers, DEVICE, 1, 1)
    assert not auto.weights_resident and auto.fits_sram
    with pytest.raises(cm.CostModelError, match="cannot be resident"):
        cm.model_cost(layers, DEVICE, 1, 1, resident=True)
    # split over 4 cores by layers or channels, 20 MiB per core: resident again
    for mode in ("pipeline", "tensor"):
        cost = cm.model_cost(layers, DEVICE, 4, 1, mode)
        assert cost.weights_resident and cost.sram_bytes_needed < CORE.sram_bytes
        assert cost.throughput > auto.throughput


@pytest.mark.parametrize("resident", [None, False])
@pytest.mark.parametrize("batch", [1, 3, 8, 64])
def test_more_cores_never_lower_batch_split_throughput(resident, batch):
    for layers in (big_model(n=6), big_model(n=20), [conv(name="a"), conv(name="b", k=1)]):
        throughputs = [cm.model_cost(layers, DEVICE, k, batch, "batch", resident=resident).throughput
                       for k in (1, 2, 3, 4)]
        assert all(b >= a * (1 - 1e-9) for a, b in zip(throughputs, throughputs[1:])), throughputs


def test_large_batches_run_in_rounds_that_fit_sram():
    layers = [conv(name="big", cin=64, cout=64, k=9, pixels=224 * 224)]   # 3.1 MiB of activations
    cost = cm.model_cost(layers, DEVICE, 1, 64)
    assert cost.fits_sram and not cost.activations_spilled
    assert cost.sram_bytes_needed <= CORE.sram_bytes
    huge = [cm.LayerCost("conv", 1e9, 0, 40 * 2**20, 40 * 2**20, in_channels=8, out_channels=8, out_pixels=10)]
    spilled = cm.model_cost(huge, DEVICE, 1, 1)
    assert spilled.activations_spilled and not spilled.fits_sram
    assert spilled.host_link_bytes_per_batch > 60 * 2**20


def test_pipeline_stages_are_contiguous_and_cover_all_layers():
    layers = [conv(macs_scale=s, name=f"l{i}") for i, s in enumerate([1, 5, 1, 1, 8, 2, 1, 3])]
    cost = cm.model_cost(layers, DEVICE, 4, 16, "pipeline")
    rows = cost.layers
    assert [r.name for r in rows] == [l.name for l in layers]
    cores = [r.core for r in rows]
    assert cores == sorted(cores) and cost.cores == len(set(cores)) <= 4
    assert cm._partition([1, 1, 1, 1], 2) == [0, 2]
    assert cm._partition([5, 1, 1, 1, 1, 1], 2) == [0, 1]
    assert cm._partition([3.0], 4) == [0]


def test_tensor_split_adds_sync_per_layer():
    layers = [conv(name=f"l{i}") for i in range(4)]
    cost = cm.model_cost(layers, DEVICE, 4, 1, "tensor")
    assert all(r.sync_cycles >= cm.DEFAULT_PARAMS.tensor_sync_cycles for r in cost.layers)
    single = cm.model_cost(layers, DEVICE, 1, 1)
    assert all(r.sync_cycles == 0 for r in single.layers)


def test_colocated_models_share_sram():
    small = [conv(name="s1"), conv(name="s2")]
    costs, round_s = cm.colocate([small, small], [1, 1], DEVICE)
    assert all(c.weights_resident for c in costs)
    alone = cm.model_cost(small, DEVICE, 1, 1)
    assert round_s == pytest.approx(2 / alone.throughput)
    assert costs[0].throughput == pytest.approx(alone.throughput / 2)
    # two models of 32 MiB weights cannot both stay resident in 48 MiB
    big = big_model(n=8)
    costs, _ = cm.colocate([big, big], [1, 1], DEVICE)
    assert [c.weights_resident for c in costs].count(True) <= 1
    assert sum(c.sram_bytes_needed for c in costs) <= CORE.sram_bytes


def test_profile_layers_breakdown_and_engines():
    layers = [conv(40.0, name="first"), cm.LayerCost("eltwise", 2e5, in_bytes=4e5, out_bytes=2e5, name="add"),
              conv(40.0, name="last", k=1)]
    profile = cm.profile_layers(layers, batch_size=1)
    assert profile.latency_s == pytest.approx(cm.best_split(layers, DEVICE, 4, 1, "latency").latency_s)
    # throughput: one batch-1 stream per core, unless the host link (inputs + outputs) caps it
    link_cap = DEVICE.host_link_bytes_per_s / (layers[0].in_bytes + layers[-1].out_bytes)
    single = cm.model_cost(layers, DEVICE, 1, 1).throughput
    assert 4 * single < link_cap
    assert 4 * single * (1 - 1e-9) <= profile.throughput <= link_cap
    assert [r.name for r in profile.layers] == ["first", "add", "last"]
    assert {r.unit for r in profile.layers} == {"tensor", "vector"}
    text = profile.table()
    assert "first" in text and "latency" in text and "resident" in text
    two = cm.profile_layers({"a": layers, "b": layers}, batch_size=2)
    assert [e.name for e in two.engines] == ["a", "b"]
    assert two.latency_s == pytest.approx(2 * cm.profile_layers(layers, batch_size=2).latency_s)
    one_core = cm.profile_layers(layers, device_info={0: 1})
    assert one_core.throughput < profile.throughput


def test_bad_inputs_are_named():
    with pytest.raises(cm.CostModelError, match="unknown kind 'gemm'"):
        cm.LayerCost("gemm", 1)
    with pytest.raises(cm.CostModelError, match="macs must be a finite number"):
        cm.LayerCost("conv", -1, name="x")
    with pytest.raises(cm.CostModelError, match="bits must be 8 or 16"):
        cm.LayerCost("conv", 1, bits=4)
    with pytest.raises(cm.CostModelError, match="empty"):
        cm.model_cost([])
    layers = [conv()]
    with pytest.raises(cm.CostModelError, match="split_mode"):
        cm.model_cost(layers, split_mode="data")
    with pytest.raises(cm.CostModelError, match="cores must be"):
        cm.model_cost(layers, DEVICE, cores=5)
    with pytest.raises(cm.CostModelError, match="batch must be"):
        cm.model_cost(layers, batch=0)
    with pytest.raises(cm.CostModelError, match="sram_budget"):
        cm.model_cost(layers, sram_budget=CORE.sram_bytes * 2)


# ------------------------------------------------------------------ ResNet-50 fit


@pytest.fixture(scope="module")
def resnet50():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    return cm.LayerTable(cm.layers_from_keras(tf.keras.applications.ResNet50(weights=None)))


def test_resnet50_layer_list(resnet50):
    assert resnet50.total_macs == pytest.approx(3.858e9, rel=1e-3)   # Keras ResNet50 (v1)
    conv1 = resnet50.layers[0]
    assert (conv1.name, conv1.macs) == ("conv1_conv", 112 * 112 * 7 * 7 * 3 * 64)
    assert conv1.in_bytes == 224 * 224 * 3
    kinds = [l.kind for l in resnet50.layers]
    assert kinds.count("conv") == 53 and kinds.count("eltwise") == 16 and kinds[-2:] == ["fc", "softmax"]
    assert resnet50.total_weight_bytes == pytest.approx(25.6e6, rel=0.01)


def test_resnet50_matches_hanguang800_mlperf(resnet50):
    offline = cm.best_batch(resnet50, DEVICE)
    assert abs(offline.throughput / HG800_RESNET50_OFFLINE_IPS - 1) <= 0.15
    assert offline.throughput <= roofline(resnet50)
    single = cm.best_split(resnet50, DEVICE, 4, 1, "latency")
    assert abs(single.latency_s / HG800_RESNET50_SINGLESTREAM_S - 1) <= 0.30


def test_model_cost_is_fast(resnet50):
    layers = list(resnet50.layers)
    for target in (resnet50, layers):
        for mode in cm.SPLIT_MODES:
            cm.model_cost(target, DEVICE, 4, 32, mode)     # warm the per-table caches
            times = []
            for _ in range(30):
                start = time.perf_counter()
                cm.model_cost(target, DEVICE, 4, 32, mode)
                times.append(time.perf_counter() - start)
            assert np.median(times) < 1e-3, (mode, type(target).__name__, np.median(times))
