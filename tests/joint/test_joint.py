"""Joint compilation scheme layer (docs/architecture.md §8): placement search, simulator, baselines, JSON,
timeline, manual composition.  Models are cost-model layer lists: synthetic conv nets and, in
one test, Keras architectures through ``layers_from_keras``."""
import json
import os
import time

import numpy as np
import pytest

from ratelnn.joint import (BASELINES, ModelSpec, Scheme, SchemeError, baseline, combine, compare,
                           count_groupings, plan)
from ratelnn.npu.costmodel import LayerCost, LayerTable
from ratelnn.npu.device import ENV_DEVICES, HG800_SRAM_PER_CORE, DeviceConfigError
from ratelnn.testing.joint_scenarios import cnn, video_pipeline

# cost-model layer lists: the Keras models of one test are built, never run (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math


@pytest.fixture(autouse=True)
def one_device(monkeypatch):
    monkeypatch.delenv(ENV_DEVICES, raising=False)


def check_agreement(results):
    """Predicted vs simulated fps within 10 %, predicted never above the compute roofline."""
    for name, r in results.items():
        s = r.scheme
        assert s.predicted_fps <= s.roofline_fps * (1 + 1e-9), name
        assert abs(r.fps / s.predicted_fps - 1) <= 0.10, (name, r.fps, s.predicted_fps)


def test_video_pipeline_chosen_beats_baselines_and_matches_exhaustive():
    models = video_pipeline()
    assert LayerTable(list(models[2].layers)).total_weight_bytes > HG800_SRAM_PER_CORE
    results = compare(models, {0: 4}, frames=200)
    assert set(results) == {"chosen", *BASELINES, "exhaustive"}
    check_agreement(results)
    chosen = results["chosen"]
    for name in BASELINES:
        assert chosen.fps >= results[name].fps, (name, results[name].fps, chosen.fps)
    assert chosen.fps >= 0.97 * results["exhaustive"].fps
    assert chosen.fps > 1.2 * results["serial_all_cores"].fps     # a real gain over the obvious layout
    s = chosen.scheme
    big = s.engines_of(2)[0]
    assert len(big.core_ids) >= 2 and big.mode == "cooperative" and big.resident
    assert big.sram_bytes <= HG800_SRAM_PER_CORE
    assert s.engines_of(1)[0].batch == 8
    # what a user would get without cooperation: the big model streams its weights on one core
    rr = results["round_robin"].scheme.engines_of(2)[0]
    assert not rr.resident and len(rr.core_ids) == 1


def test_heuristic_within_3_percent_of_exhaustive():
    rng = np.random.default_rng(7)
    instances = [video_pipeline()]
    for seed in range(2):      # 7 random conv nets: 1..3 stages of random widths, some run 4x per frame
        models = []
        for i in range(7):
            widths = [int(w) for w in rng.choice([16, 32, 64, 128, 256], size=int(rng.integers(2, 7)))]
            fc = (int(rng.choice([256, 2048, 8192])),) if rng.random() < 0.4 else ()
            models.append(ModelSpec(f"m{seed}_{i}", cnn(f"m{i}", int(rng.choice([32, 64, 128])), widths, fc),
                                    invocations_per_frame=int(rng.choice([1, 1, 4]))))
        instances.append(models)
    for models in instances:
        exhaustive = plan(models, {0: 4}, method="exhaustive")
        heuristic = plan(models, {0: 4}, method="heuristic")
        assert exhaustive.strategy == "exhaustive" and heuristic.strategy == "search"
        assert heuristic.predicted_fps >= 0.97 * exhaustive.predicted_fps
        assert exhaustive.predicted_fps >= heuristic.predicted_fps * (1 - 1e-9)


def test_twelve_models_on_two_devices(monkeypatch):
    monkeypatch.setenv(ENV_DEVICES, "4,4")
    models = video_pipeline() + video_pipeline("_b")
    assert count_groupings(12, {0: 4, 1: 4}) > 10**8
    start = time.perf_counter()
    chosen = plan(models, {0: 4, 1: 4})
    assert time.perf_counter() - start < 10.0
    assert chosen.strategy == "search" and chosen.search_time_s < 10.0
    assert set(chosen.devices) == {0, 1}
    results = compare(models, {0: 4, 1: 4}, chosen=chosen)
    assert "exhaustive" not in results
    check_agreement(results)
    for name in BASELINES:
        assert results["chosen"].fps >= results[name].fps, name


def test_link_contention_is_simulated():
    """Two models that stream 60 MiB of weights each, one per core: the shared host link, not
    the cores, sets the frame rate."""
    fcs = [LayerCost("fc", 2048 * 4096, 2048 * 4096, 2048, 4096, 8, 2048, 4096, name=f"fc{i}") for i in range(7)]
    models = [ModelSpec("a", fcs), ModelSpec("b", list(fcs), depends_on=())]
    scheme = baseline("round_robin", models, {0: 2})
    assert not any(e.resident for e in scheme.engines)
    link_s = scheme.link_load_s[0]
    core_s = max(scheme.core_load_s.values())
    assert link_s > 1.8 * core_s > 0
    sim = scheme.simulate(frames=60)
    assert sim.link_utilisation[0] > 0.9
    assert abs(sim.fps * link_s - 1) < 0.1          # link-bound, not core-bound
    assert max(sim.core_utilisation.values()) > 0.9  # the cores stall waiting for weights


def test_one_frame_in_flight_latency_is_the_dependency_chain():
    models = video_pipeline()
    models[3] = ModelSpec(models[3].name, models[3].layers, depends_on=(0,))   # classifier only after detector
    scheme = plan(models, {0: 4})
    sim = scheme.simulate(frames=20, frames_in_flight=1)
    assert sim.fps == pytest.approx(1 / sim.latency_mean_s, rel=0.05)
    assert sim.latency_p50_s == pytest.approx(scheme.predicted_latency_s, rel=0.10)
    more = scheme.simulate(frames=60)
    assert more.fps > 1.5 * sim.fps                  # pipelining across frames
    assert more.latency_p99_s >= more.latency_p50_s


def test_scheme_fields_json_round_trip_and_timeline(tmp_path):
    scheme = plan(video_pipeline(), {0: 4})
    for e in scheme.engines:
        assert e.mode in ("single_core", "cooperative", "shared")
        assert e.split_mode in ("none", "batch", "pipeline", "tensor")
        assert e.latency_s > 0 and e.sram_bytes > 0 and e.device_id == 0
        assert set(e.core_ids) <= {0, 1, 2, 3}
        assert (len(e.core_ids) > 1) == (e.split_mode != "none")
    text = scheme.to_json(str(tmp_path / "scheme.json"))
    data = json.loads(text)
    assert data["predicted_fps"] == pytest.approx(scheme.predicted_fps)
    assert {"model_index", "engine_name", "device_id", "core_ids", "mode", "resident", "sram_bytes",
            "latency_s"} <= set(data["engines"][0])
    loaded = Scheme.from_json(str(tmp_path / "scheme.json"))
    assert loaded.engines == scheme.engines and loaded.models == scheme.models
    assert loaded.predicted_fps == scheme.predicted_fps
    assert loaded.simulate(frames=50).fps == pytest.approx(scheme.simulate(frames=50).fps)
    png = scheme.save_timeline(str(tmp_path / "timeline.png"))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(png) > 5000
    with pytest.raises(SchemeError, match="PNG"):
        scheme.save_timeline(str(tmp_path / "timeline.jpg"))
    with pytest.raises(SchemeError, match="not a ratelnn execution scheme"):
        Scheme.from_json('{"engines": []}')
    with pytest.raises(SchemeError, match="not valid"):
        Scheme.from_json("{broken")
    first = data["engines"][0]
    broken = dict(data, engines=[dict(first, device_id=5)] + data["engines"][1:])
    with pytest.raises(SchemeError, match="device 5 is not in the scheme"):
        Scheme.from_dict(broken)


def test_manual_composition_on_chosen_cores():
    models = video_pipeline()
    first = plan(models[:3], {0: [0, 1]})
    second = plan(models[3:], {0: [2, 3]})
    assert {c for e in first.engines for c in e.core_ids} <= {0, 1}
    assert {c for e in second.engines for c in e.core_ids} <= {2, 3}
    both = combine([first, second])
    assert len(both.models) == 6 and both.devices[0].core_ids == (0, 1, 2, 3)
    assert both.models[3].depends_on == () and both.models[4].depends_on == (3,)
    assert both.predicted_fps == pytest.approx(min(first.predicted_fps, second.predicted_fps), rel=0.02)
    sim = both.simulate(frames=100)
    assert abs(sim.fps / both.predicted_fps - 1) <= 0.10
    with pytest.raises(SchemeError, match="both use cores"):
        combine([first, plan(models[3:], {0: [1, 2]})])


def test_multi_engine_model_and_dependencies():
    layers = cnn("two", 64, [32, 64, "M", 128, 128], (256,), True)
    spec = ModelSpec("two_engines", layers, engine_names=["two/e0", "two/e1"], engine_layer_counts=[3, 4])
    scheme = plan([spec, ModelSpec("after", cnn("b", 32, [16, 32]))], {0: 2})
    engines = scheme.engines_of(0)
    assert [e.engine_name for e in engines] == ["two/e0", "two/e1"]
    assert engines[0].core_ids == engines[1].core_ids
    assert scheme.models[1].depends_on == (0,)
    assert abs(scheme.simulate(frames=60).fps / scheme.predicted_fps - 1) <= 0.10


def test_bad_inputs_are_rejected():
    layers = cnn("x", 32, [16])
    with pytest.raises(SchemeError, match="invocations_per_frame"):
        ModelSpec("x", layers, invocations_per_frame=0)
    with pytest.raises(SchemeError, match="engine_layer_counts"):
        ModelSpec("x", layers, engine_names=["a", "b"])
    with pytest.raises(SchemeError, match="engine_layer_counts"):
        ModelSpec("x", layers, engine_names=["a", "b"], engine_layer_counts=[1, 5])
    with pytest.raises(SchemeError, match="layer list is empty"):
        ModelSpec("x", [])
    with pytest.raises(SchemeError, match="depends_on"):
        plan([ModelSpec("x", layers, depends_on=(1,)), ModelSpec("y", layers)], {0: 4})
    with pytest.raises(SchemeError, match="at least one model"):
        plan([], {0: 4})
    with pytest.raises(SchemeError, match="method"):
        plan([ModelSpec("x", layers)], {0: 4}, method="genetic")
    with pytest.raises(DeviceConfigError, match="core 99"):
        plan([ModelSpec("x", layers)], {0: [99]})
    with pytest.raises(DeviceConfigError, match="device id"):
        plan([ModelSpec("x", layers)], {-3: 4})
    with pytest.raises(SchemeError, match="too many for an exhaustive"):
        plan([ModelSpec(f"m{i}", layers) for i in range(14)], {0: 4}, method="exhaustive")
    with pytest.raises(SchemeError, match="frames"):
        plan([ModelSpec("x", layers)], {0: 4}).simulate(frames=1)


def test_keras_architectures():
    """Models from Keras architectures (random weights, architecture only)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from ratelnn.npu.costmodel import layers_from_keras

    def small_cnn(hw, classes):
        x = inp = tf.keras.Input((hw, hw, 3))
        for width in (16, 32, 64):
            x = tf.keras.layers.Conv2D(width, 3, padding="same", activation="relu")(x)
            x = tf.keras.layers.MaxPooling2D()(x)
        x = tf.keras.layers.Flatten()(x)
        x = tf.keras.layers.Dense(classes, activation="softmax")(x)
        return tf.keras.Model(inp, x)

    mobilenet = tf.keras.applications.MobileNetV2(weights=None, alpha=0.35, input_shape=(96, 96, 3))
    big_head = small_cnn(64, 6000)       # 8x8x64 = 4096 x 6000 int8 = 23 MiB of dense weights
    models = [ModelSpec("mobilenet_v2", layers_from_keras(mobilenet)),
              ModelSpec("head", layers_from_keras(big_head), invocations_per_frame=8),
              ModelSpec("small", layers_from_keras(small_cnn(32, 10)), depends_on=(0,))]
    results = compare(models, {0: 4}, frames=120)
    check_agreement(results)
    for name in BASELINES:
        assert results["chosen"].fps >= results[name].fps, name
    assert results["chosen"].fps >= 0.97 * results["exhaustive"].fps
