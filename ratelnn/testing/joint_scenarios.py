"""Synthetic multi-model scenarios for the joint compiler's tests and benchmark: conv nets
described as cost-model layer lists (no framework involved)."""
from __future__ import annotations

from ..joint import ModelSpec
from ..npu.costmodel import LayerCost


def cnn(name, hw, widths, fc=(), gap=False, cin=3):
    """A conv net: 3x3 convs of the given widths, 'M' = 2x2 max pool, optional global average
    pool, then dense layers of the given widths (int8)."""
    layers, h, c = [], hw, cin
    for i, w in enumerate(widths):
        if w == "M":
            layers.append(LayerCost("pool", h * h * c, 0, h * h * c, (h // 2) ** 2 * c, name=f"{name}_pool{i}"))
            h //= 2
            continue
        layers.append(LayerCost("conv", h * h * 9 * c * w, 9 * c * w + 4 * w, h * h * c, h * h * w, 8, c, w, 9,
                                h * h, name=f"{name}_conv{i}"))
        c = w
    if gap:
        layers.append(LayerCost("pool", h * h * c, 0, h * h * c, c, name=f"{name}_gap"))
        h = 1
    n = h * h * c
    for j, f in enumerate(fc):
        layers.append(LayerCost("fc", n * f, n * f + 4 * f, n, f, 8, n, f, 1, 1, name=f"{name}_fc{j}"))
        n = f
    return layers


def video_pipeline(suffix=""):
    """Six models of a video pipeline: a detector, an attribute net run on 8 detections per
    frame, a re-identification net with 61 MiB of weights (more than one core's SRAM), and
    three small classifiers."""
    big = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]
    return [
        ModelSpec("detector" + suffix, cnn("det", 160, [32, "M", 64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                                        512, 512, 512])),
        ModelSpec("attributes" + suffix, cnn("attr", 64, [32, "M", 64, "M", 128, "M", 128], (256, 10), True),
                  invocations_per_frame=8),
        ModelSpec("reid_big" + suffix, cnn("big", 128, big, (4096, 4096, 1000))),
        ModelSpec("classifier" + suffix, cnn("cls", 112, [32, "M", 64, "M", 128, 128, "M", 256, 256], (1000,), True)),
        ModelSpec("ocr" + suffix, cnn("ocr", 64, [32, 32, "M", 64, 64, "M", 128], (512, 100), True)),
        ModelSpec("plate" + suffix, cnn("plate", 96, [16, "M", 32, "M", 64], (64,), True)),
    ]
