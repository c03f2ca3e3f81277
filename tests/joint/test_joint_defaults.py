"""joint_converter with default names and configs (docs/joint.md).

Six Keras models whose outputs are all named ``Identity`` compile jointly under derived,
distinct model names; ``device_info`` describes the target of an ahead-of-time compilation
(two devices compile without ``RATELNN_DEVICES``), ``{}`` means every locally configured
device, and running an engine placed on a device this machine lacks fails with a clear
error in TensorFlow and in the Python executors.  Runs with ``TF_ENABLE_ONEDNN_OPTS=0`` and ``=1``.
"""
import numpy as np
import pytest

import ratelnn
from ratelnn import ratelnn_runtime
from ratelnn.config import ConfigError
from ratelnn.frontend.tensorflow import freeze_keras, joint_converter
from ratelnn.joint.compile import distinct_model_names
from ratelnn.npu.device import ENV_DEVICES, DeviceUnavailableError
from ratelnn.npu.engine import Engine
from ratelnn.runners import run_model

SIZE = 6
BATCH = 2


def _tiny_keras(seed):
    import tensorflow as tf
    tf.keras.utils.set_random_seed(seed)
    inp = tf.keras.Input((SIZE, SIZE, 2))
    x = tf.keras.layers.Conv2D(4 + seed, 3, padding="same", activation="relu")(inp)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inp, tf.keras.layers.Dense(3)(x))


@pytest.fixture(scope="module")
def six_models(tmp_path_factory):
    """Six frozen Keras models, all with the output node ``Identity``, calibrated once."""
    ratelnn.tf_init()
    tmp = tmp_path_factory.mktemp("joint_defaults")
    graphs, configs, data = [], [], []
    for i in range(6):
        g, ins, outs = freeze_keras(_tiny_keras(i), input_shapes=[[BATCH, SIZE, SIZE, 2]])
        graphs.append(g)
        configs.append({"input_nodes": ins, "output_nodes": outs, "input_shapes": [[BATCH, SIZE, SIZE, 2]],
                        "output_dir": str(tmp / f"m{i}")})
        data.append(np.random.default_rng(i).uniform(0, 1, (8, SIZE, SIZE, 2)).astype(np.float32))
    assert {outs[0] for outs in (c["output_nodes"] for c in configs)} == {"Identity"}
    jc = joint_converter(graphs, configs)       # calibrate once, into each model's output_dir
    for conv, x in zip(jc.converters, data):
        conv.calibrate(x, progress=False)
    return graphs, configs, data


@pytest.fixture
def no_devices_env(monkeypatch):
    monkeypatch.delenv(ENV_DEVICES, raising=False)


def _engines(graph_def):
    return [n for n in graph_def.node if n.op == "RatelEngineOp"]


def test_derived_names_are_distinct_and_deterministic():
    out = {"output_nodes": ["Identity"]}
    assert distinct_model_names([out] * 3) == ["identity", "identity_1", "identity_2"]
    # explicit names are kept and win: derived names step around them
    named = [out, {**out, "model_name": "identity"}, out, {**out, "model_name": "identity_1"}]
    assert distinct_model_names(named) == ["identity_2", "identity", "identity_3", "identity_1"]
    mixed = [{"output_nodes": ["det/Softmax:0"]}, {"output_nodes": ["det/Softmax"]}, {"output_nodes": ["Identity"]}]
    assert distinct_model_names(mixed) == ["det_softmax", "det_softmax_1", "identity"]
    assert distinct_model_names(mixed) == distinct_model_names(mixed)
    with pytest.raises(ConfigError, match=r"models 0 and 2 both set model_name 'det'"):
        distinct_model_names([{**out, "model_name": "det"}, out, {**out, "model_name": "det"}])


def test_six_identity_models_on_a_two_device_target_without_the_env(six_models, no_devices_env):
    graphs, configs, data = six_models
    assert ratelnn_runtime.ratelnn_get_device_count() == 1
    jc = joint_converter(graphs, configs, device_info={0: 4, 1: 4})
    names = [c.graph.name for c in jc.converters]
    assert names == ["identity"] + [f"identity_{k}" for k in range(1, 6)]
    compiled = jc.to_npu()
    scheme = jc.scheme
    assert [m.name for m in scheme.models] == names
    assert {a.device_id for a in scheme.engines} == {0, 1}            # the target's both devices
    assert set(scheme.devices) <= {0, 1}
    placed = {a.engine_name: a for a in scheme.engines}
    on_device = {0: [], 1: []}
    for i, g in enumerate(compiled):
        for node in _engines(g):
            assert node.name.startswith(f"{names[i]}_engine_")
            a = placed[node.attr["engine_name"].s.decode()]
            assert node.attr["device_id"].i == a.device_id
            on_device[a.device_id].append(i)

    # device 0 exists locally: its models run; device 1 does not: a clear error, no crash
    i0, i1 = on_device[0][0], on_device[1][0]
    feeds = lambda i: {configs[i]["input_nodes"][0] + ":0": data[i][:BATCH]}
    fetch = lambda i: [configs[i]["output_nodes"][0] + ":0"]
    out = run_model("tensorflow", compiled[i0], feeds(i0), fetch(i0))[0]
    assert out.shape == (BATCH, 3) and np.isfinite(out).all()
    import tensorflow as tf
    with pytest.raises(tf.errors.FailedPreconditionError) as info:
        run_model("tensorflow", compiled[i1], feeds(i1), fetch(i1))
    message = str(info.value)
    assert f"engine '{names[i1]}_engine_0' was compiled for device 1" in message
    assert "device 1 does not exist" in message and "1 device(s) (device 0: 4 cores)" in message
    assert f"{ENV_DEVICES}=4,4" in message

    # the Python executors say the same
    node = _engines(compiled[i1])[0]
    engine = Engine.from_bytes(node.attr["engine"].s)
    x = np.zeros((1,) + engine.inputs[0].shape[1:], engine.inputs[0].dtype)
    for backend in ("reference", "native"):
        with pytest.raises(DeviceUnavailableError, match=rf"device 1 does not exist.*{ENV_DEVICES}=4,4"):
            engine.run([x], backend=backend)


def test_the_target_runs_once_configured(six_models, monkeypatch):
    graphs, configs, data = six_models
    monkeypatch.delenv(ENV_DEVICES, raising=False)
    jc = joint_converter(graphs[:2], configs[:2], device_info={1: [2, 3]})   # device 1 only, pinned cores
    compiled = jc.to_npu()
    assert {(a.device_id, c) for a in jc.scheme.engines for c in a.core_ids} <= {(1, 2), (1, 3)}
    feeds = {configs[0]["input_nodes"][0] + ":0": data[0][:BATCH]}
    fetch = [configs[0]["output_nodes"][0] + ":0"]
    monkeypatch.setenv(ENV_DEVICES, "4,2")    # device 1 exists but has cores 0..1 only
    import tensorflow as tf
    with pytest.raises(tf.errors.FailedPreconditionError, match=rf"device 1 has no core.*{ENV_DEVICES}=4,[34]\b"):
        run_model("tensorflow", compiled[0], feeds, fetch)
    monkeypatch.setenv(ENV_DEVICES, "4,4")
    out = run_model("tensorflow", compiled[0], feeds, fetch)[0]
    assert out.shape == (BATCH, 3) and np.isfinite(out).all()


@pytest.mark.parametrize("env", [None, "2,4"])
def test_empty_device_info_means_every_configured_device(six_models, monkeypatch, env):
    graphs, configs, _ = six_models
    if env is None:
        monkeypatch.delenv(ENV_DEVICES, raising=False)
    else:
        monkeypatch.setenv(ENV_DEVICES, env)
    jc = joint_converter(graphs[:3], configs[:3], device_info={})
    assert jc.device_info == ({0: 4} if env is None else {0: 2, 1: 4})
    jc.to_npu()
    allowed = {(d, c) for d, n in jc.device_info.items() for c in range(n)}
    assert {(a.device_id, c) for a in jc.scheme.engines for c in a.core_ids} <= allowed
