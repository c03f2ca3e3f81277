"""Zoo models with shipped weights ported to MXNet (MTCNN P/R/O-Net, fer's emotion net):
FP32 -> quant -> npu keeps the metric on the real images of lfw_face_nonface."""
from __future__ import annotations

import pytest

from helpers.zoo import measure, zoo_dataset, zoo_modules

FACE_NETS = ["mtcnn_pnet_mx", "mtcnn_rnet_mx", "mtcnn_onet_mx"]

# the first 50 of lfw_face_nonface's 100 faces (the int16 model runs slowly in the emulator;
# bench/agraph_zoo.py scores all 100)
FER_FACES = 50


@pytest.fixture(scope="module")
def faces(tmp_path_factory):
    return zoo_dataset("lfw_face_nonface", tmp_path_factory.mktemp("data"))


@pytest.mark.parametrize("name", FACE_NETS)
def test_mtcnn_mx_npu_within_one_point_of_fp32(name, faces, tmp_path):
    result = measure(name, tmp_path, faces)
    fp32, npu = result["fp32"].metrics["face_accuracy"], result["npu"].metrics["face_accuracy"]
    print(f"\n{name}: " + "  ".join(f"{s} {result[s].metrics}" for s in ("fp32", "quant", "npu")), result["seconds"])
    assert fp32 >= 0.8, fp32   # the shipped weights do tell faces from non-faces
    assert abs(npu - fp32) <= 0.01, (fp32, npu)


def test_fer_mx_npu_agrees_with_fp32(faces, tmp_path):
    result = measure("fer_emotion_mx", tmp_path, faces, limit=FER_FACES)
    print("\nfer_emotion_mx: " + "  ".join(f"{s} {result[s].metrics}" for s in ("fp32", "quant", "npu")),
          result["seconds"])
    assert result["npu"].samples == FER_FACES
    assert result["npu"].metrics["top1_agreement"] >= 0.99, result["npu"].metrics


def test_ported_rebuild_gives_the_same_bytes(tmp_path):
    model, _ = zoo_modules("fer_emotion_mx")
    first, second = model.build(tmp_path / "a"), model.build(tmp_path / "b")
    assert [f.read_bytes() for f in first] == [f.read_bytes() for f in second]
