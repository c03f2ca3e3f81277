"""joint_converter on TensorFlow models: compiled GraphDefs that run in TF with their
engines placed by the scheme; scheme queries, JSON, simulation and baselines."""
import json

import numpy as np
import pytest

import ratelnn
from ratelnn.frontend.tensorflow import freeze_keras, joint_converter
from ratelnn.runners import run_model


def _keras_model(seed, width, size):
    import tensorflow as tf
    tf.keras.utils.set_random_seed(seed)
    inp = tf.keras.Input((size, size, 3))
    x = tf.keras.layers.Conv2D(width, 3, padding="same", activation="relu")(inp)
    x = tf.keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    out = tf.keras.layers.Dense(4, activation="softmax")(x)
    return tf.keras.Model(inp, out)


@pytest.fixture(scope="module")
def joint(tmp_path_factory):
    ratelnn.tf_init()
    tmp = tmp_path_factory.mktemp("joint_tf")
    graphs, configs, data = [], [], []
    for i, (width, size, inv) in enumerate([(8, 16, 1), (16, 12, 8)]):
        g, ins, outs = freeze_keras(_keras_model(i, width, size), input_shapes=[[4, size, size, 3]])
        graphs.append(g)
        configs.append({"input_nodes": ins, "output_nodes": outs, "input_shapes": [[4, size, size, 3]],
                        "output_dir": str(tmp / f"m{i}"), "model_name": f"net{i}",
                        "invocations_per_frame": inv})
        data.append(np.random.default_rng(i).uniform(0, 1, (16, size, size, 3)).astype(np.float32))
    jc = joint_converter(graphs, configs, device_info={0: 4})
    for c, x in zip(jc.converters, data):
        c.calibrate(x, progress=False)
    return jc, jc.to_npu(), configs, data


def test_compiled_graphs_run_in_tf_and_match_single_compilation(joint):
    jc, npu_graphs, configs, data = joint
    for c, g, cfg, x in zip(jc.converters, npu_graphs, configs, data):
        engines = [n for n in g.node if n.op == "RatelEngineOp"]
        assert engines and all(n.name.startswith(cfg["model_name"] + "_engine_") for n in engines)
        feeds = {cfg["input_nodes"][0] + ":0": x[:4]}
        fetch = [cfg["output_nodes"][0] + ":0"]
        joint_out = run_model("tensorflow", g, feeds, fetch)[0]
        alone_out = run_model("tensorflow", c.to_npu(), feeds, fetch)[0]
        np.testing.assert_array_equal(joint_out, alone_out)


def test_scheme_places_every_engine_and_round_trips(joint, tmp_path):
    jc, npu_graphs, _, _ = joint
    s = jc.scheme
    names = {a.engine_name for a in s.engines}
    for g in npu_graphs:
        for n in g.node:
            if n.op == "RatelEngineOp":
                assert n.name in names
                a = next(a for a in s.engines if a.engine_name == n.name)
                assert list(n.attr["core_ids"].list.i) == list(a.core_ids)
    assert 0 < s.predicted_fps <= s.roofline_fps
    sim = s.simulate(frames=100)
    assert abs(sim.fps - s.predicted_fps) / s.predicted_fps < 0.10
    again = type(s).from_json(s.to_json())
    assert json.loads(again.to_json()) == json.loads(s.to_json())
    s.save_timeline(tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 1000


def test_chosen_scheme_is_at_least_every_baseline(joint):
    jc = joint[0]
    results = jc.compare(frames=100)
    chosen = results["chosen"].fps
    for name, r in results.items():
        assert chosen >= r.fps * 0.99, f"{name}: {r.fps} > chosen {chosen}"
