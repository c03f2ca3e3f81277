"""Pretrained weights for the zoo's ImageNet architectures: a user's file (``--weights``) or
the framework's cache makes ``WEIGHTS`` "imagenet" and the model compute what the saved
network computes; without one it is clearly ``random``; a file that does not fit is refused
naming it; ``eval --imagenet`` on a synthetic archive prints top-1 per stage beside the
published figures (docs/agraph.md, "ImageNet accuracy")."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image
from helpers import imagenet_copies as copies

from agraph import cli, datasets, flow, imagenet, inputs, registry, weights
from agraph.store import Store

SIDE = 64   # mobilenet_v2_keras / resnet18_v1_gluon TEST_INPUT_SHAPES


@pytest.fixture(autouse=True)
def _no_chosen_weights(monkeypatch, tmp_path):
    """Own AGRAPH_HOME and framework caches; no weights file chosen before or after."""
    monkeypatch.setenv("AGRAPH_HOME", str(tmp_path / "agraph-home"))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras-home"))
    monkeypatch.setenv("MXNET_HOME", str(tmp_path / "mxnet-home"))
    weights.forget()
    yield
    weights.forget()


def _keras_net(seed: int = 7):
    """Keras MobileNetV2 at 64x64 with every weight (BatchNorm statistics too) random."""
    import keras

    keras.utils.set_random_seed(seed)
    net = keras.applications.MobileNetV2(weights=None, input_shape=(SIDE, SIDE, 3), classifier_activation=None)
    rng = np.random.default_rng(seed)
    net.set_weights([rng.uniform(0.5, 1.5, w.shape).astype(np.float32) if "variance" in v.path
                     else (w + rng.normal(0, 0.05, w.shape)).astype(np.float32)
                     for v, w in zip(net.weights, net.get_weights())])
    return net


def test_without_a_file_the_model_is_random_and_the_cache_file_makes_it_imagenet(tmp_path):
    e = registry.entry("mobilenet_v2_keras")
    assert (e.weights, e.dataset, e.weights_file) == ("random", "sample_photos", None)
    cached = tmp_path / "keras-home" / "models" / e.model.IMAGENET.cache_file
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"placeholder")
    assert (e.weights, e.dataset, e.weights_file) == ("imagenet", imagenet.KEY, cached)
    gluon = registry.entry("resnet18_v1_gluon")
    assert gluon.weights == "random"
    (tmp_path / "mxnet-home" / "models").mkdir(parents=True)
    (tmp_path / "mxnet-home" / "models" / gluon.model.IMAGENET.cache_file).write_bytes(b"not the published file")
    assert gluon.weights == "imagenet"
    with pytest.raises(weights.WeightsError, match=r"resnet18_v1-a0666292\.params does not match the Gluon model "
                                                   r"zoo's sha1"):
        gluon.model.build(tmp_path / "work")


def test_gluon_cache_names_are_the_model_stores():
    from ratelnn.mxnet_compat import import_mxnet

    import_mxnet()
    from mxnet.gluon.model_zoo import model_store

    for name in ("mobilenet_v2_gluon", "resnet18_v1_gluon", "squeezenet_gluon"):
        spec = registry.entry(name).model.IMAGENET
        architecture = registry.entry(name).model.ARCHITECTURE
        assert spec.cache_file == f"{architecture}-{model_store.short_hash(architecture)}.params"
        assert spec.sha1 == model_store._model_sha1[architecture]


def test_gluon_params_file_loads_and_a_file_of_another_architecture_is_refused(tmp_path):
    from mxnet.gluon.model_zoo import vision

    from ratelnn.mxnet_compat import import_mxnet

    mx = import_mxnet()
    mx.random.seed(3)
    net = vision.get_model("resnet18_v1", pretrained=False)
    net.initialize(mx.init.Normal(0.05))
    x = np.random.default_rng(2).normal(0, 1, (2, 3, SIDE, SIDE)).astype(np.float32)
    expected = net(mx.nd.array(x)).asnumpy()
    path = tmp_path / "resnet18.params"
    net.save_parameters(str(path))
    weights.use("resnet18_v1_gluon", path, "mxnet")
    model = flow.get("resnet18_v1_gluon", "fp32", size="test", store=Store(tmp_path / "store"))
    (got,) = model.runner()([x])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    weights.use("mobilenet_v2_gluon", path, "mxnet")
    with pytest.raises(weights.WeightsError, match=r"resnet18\.params: does not load into mobilenetv2_1\.0"):
        registry.entry("mobilenet_v2_gluon").model.build(tmp_path / "other", [[1, 3, SIDE, SIDE]])
    with pytest.raises(weights.WeightsError, match=r"should end with \.h5"):
        weights.use("mobilenet_v2_keras", path, "tensorflow")


def test_keras_weights_load_and_eval_imagenet_prints_top1_beside_the_published_figures(tmp_path, monkeypatch, capsys):
    net = _keras_net()
    path = tmp_path / "mobilenet_v2.weights.h5"
    net.save_weights(str(path))
    # the photos through the documented preprocessing (shorter side to 64/0.875, central crop, [-1, 1])
    photos = [np.asarray(Image.open(io.BytesIO(copies.jpeg(p))).convert("RGB")) for p in copies.PHOTOS]
    x = inputs.imagenet_input(photos, SIDE, "tensorflow", "tf")
    predicted = np.argmax(np.asarray(net(x, training=False)), 1)
    # images 1-3 labelled with the network's own class, 4-5 with another: FP32 top-1 is 3/5;
    # image 6 (the last by name) is the calibration part
    labels = [int(p) if i < 3 else int(p + 1) % 1000 for i, p in enumerate(predicted)]
    copies.synset_copy(tmp_path / "copy", labels)
    monkeypatch.setenv("AGRAPH_DATA_DIR", str(tmp_path / "data"))
    datasets._loaded.clear()
    assert cli.main(["prepare", "imagenet", "--from", str(tmp_path / "copy")]) == 0
    out = tmp_path / "metrics.json"
    code = cli.main(["eval", "mobilenet_v2_keras", "--imagenet", "--weights", str(path), "--size", "test",
                     "--calibration-samples", "1", "--batch-size", "8", "--quiet", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    results = {m["stage"]: m for m in json.loads(out.read_text())}
    assert sorted(results) == ["fp32", "npu", "quant"]
    assert all(m["dataset"] == "imagenet" and m["samples"] == 5 for m in results.values())
    assert results["fp32"]["metrics"]["top1"] == pytest.approx(0.6)
    row = next(line for line in printed.splitlines() if "mobilenet_v2_keras" in line and "71.3" in line)
    assert "60.00" in row and "imagenet (mobilenet_v2.weights.h5)" in row and "-0.12 (MQBench" in row
    # the stored FP32 model computes what the saved network computes
    assert registry.entry("mobilenet_v2_keras").weights_file == path.resolve()
    model = flow.get("mobilenet_v2_keras", "fp32", size="test", build=False)
    (got,) = model.runner()([x])
    expected = np.asarray(net(x, training=False))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    # without weights: listed, not run, no number beside the published one
    weights.forget()
    assert cli.main(["eval", "mobilenet_v2_keras", "--imagenet", "--quiet", "--no-docs"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "mobilenet_v2_keras" in line)
    assert "random weights: not comparable" in row and "71.3" in row
