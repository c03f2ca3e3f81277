"""Zoo models with random weights, MXNet (Gluon model zoo MobileNetV2, ResNet18-v1,
SqueezeNet 1.1): at their reduced TEST_INPUT_SHAPES, FP32 -> quant -> npu runs and the
compiled model's logits stay close to FP32 on scikit-image's sample photos (issue 13).
Random weights mean no accuracy: the threshold is on the mean cosine to FP32."""
from __future__ import annotations

import pytest

from helpers.zoo import SkimageDataset, measure, zoo_modules

MIN_COSINE = 0.9   # measured: MobileNetV2 0.954 (its top-1 agreement ~0.3: near-uniform random
                   # logits), ResNet18 0.998, SqueezeNet 0.9999 (2 cores, Dec 2026)


@pytest.mark.parametrize("name", ["mobilenet_v2_gluon", "resnet18_v1_gluon", "squeezenet_gluon"])
def test_gluon_random_npu_close_to_fp32(name, tmp_path):
    model, _ = zoo_modules(name)
    assert model.WEIGHTS == "random"
    result = measure(name, tmp_path, SkimageDataset("sample_photos"), input_shapes=model.TEST_INPUT_SHAPES)
    print(f"\n{name}: " + "  ".join(f"{s} {result[s].metrics}" for s in ("fp32", "quant", "npu")), result["seconds"])
    assert result["npu"].samples == 15
    assert result["npu"].metrics["mean_cosine"] >= MIN_COSINE, result["npu"].metrics
    assert abs(result["npu"].metrics["mean_cosine"] - result["quant"].metrics["mean_cosine"]) <= 0.01
