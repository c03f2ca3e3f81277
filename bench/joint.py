"""Joint placement benchmark: scenarios x strategies (DESIGN §8, docs/joint.md).

For each scenario: the chosen scheme (``plan``), the baselines and, where small enough, the
exhaustive optimum; each simulated for 200 frames.  Writes its section of ``docs/benchmarks.md``.

    python bench/joint.py
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from _report import write_section  # noqa: E402
from ratelnn.joint import ModelSpec, compare, plan  # noqa: E402
from ratelnn.npu.costmodel import LayerCost, LayerTable, layers_from_keras  # noqa: E402
from ratelnn.npu.device import ENV_DEVICES  # noqa: E402


def cnn(name, hw, widths, fc=(), gap=False, cin=3):
    """Synthetic conv net: 3x3 convs ('M' = 2x2 pool), optional global pool, dense layers."""
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


def synthetic_video(suffix=""):
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


def keras_video():
    """Keras architectures (random weights): ResNet50 detector backbone, MobileNetV2 attribute net
    (8 per frame), VGG16 convs at 128x128 with a 61 MiB dense head, MobileNetV2 classifier and two
    small CNNs."""
    import tensorflow as tf
    K = tf.keras

    def small_cnn(hw, widths, classes):
        x = inp = K.Input((hw, hw, 3))
        for w in widths:
            x = K.layers.Conv2D(w, 3, padding="same", activation="relu")(x)
            x = K.layers.MaxPooling2D()(x)
        x = K.layers.GlobalAveragePooling2D()(x)
        return K.Model(inp, K.layers.Dense(classes, activation="softmax")(x))

    vgg = K.applications.VGG16(weights=None, include_top=False, input_shape=(128, 128, 3))
    x = K.layers.Flatten()(vgg.output)
    for units in (4096, 4096):
        x = K.layers.Dense(units, activation="relu")(x)
    reid = K.Model(vgg.input, K.layers.Dense(1000, activation="softmax")(x))
    return [
        ModelSpec("detector_resnet50", layers_from_keras(K.applications.ResNet50(weights=None,
                                                                                 input_shape=(224, 224, 3)))),
        ModelSpec("attributes_mnv2", layers_from_keras(K.applications.MobileNetV2(
            weights=None, alpha=0.35, input_shape=(96, 96, 3))), invocations_per_frame=8),
        ModelSpec("reid_vgg16_128", layers_from_keras(reid)),
        ModelSpec("classifier_mnv2", layers_from_keras(K.applications.MobileNetV2(
            weights=None, input_shape=(160, 160, 3)))),
        ModelSpec("ocr_cnn", layers_from_keras(small_cnn(64, (32, 64, 128), 100))),
        ModelSpec("plate_cnn", layers_from_keras(small_cnn(96, (16, 32, 64), 64))),
    ]


def streaming_pair():
    fcs = [LayerCost("fc", 2048 * 4096, 2048 * 4096, 2048, 4096, 8, 2048, 4096, name=f"fc{i}") for i in range(7)]
    return [ModelSpec("fc_a", fcs), ModelSpec("fc_b", list(fcs), depends_on=())]


def describe(models):
    rows = []
    for m in models:
        t = LayerTable(list(m.layers))
        rows.append(f"{m.name} ({t.total_macs / 1e9:.2f} GMAC, {t.total_weight_bytes / 2**20:.1f} MiB"
                    f"{', x%d/frame' % m.invocations_per_frame if m.invocations_per_frame > 1 else ''})")
    return ", ".join(rows)


def run(name, models, device_info, devices_env, lines):
    os.environ[ENV_DEVICES] = devices_env
    start = time.perf_counter()
    chosen = plan(models, device_info)
    search_s = time.perf_counter() - start
    results = compare(models, device_info, frames=200, chosen=chosen)
    lines += [f"### {name}", "", f"Device info `{device_info}`; models: {describe(models)}.", "",
              f"Compute roofline {chosen.roofline_fps:,.0f} frames/s.", "",
              "| strategy | predicted fps | simulated fps | sim / pred | p50 latency (ms) | p99 latency (ms) "
              "| search time (s) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for key, r in results.items():
        s, sim = r.scheme, r.simulation
        t = search_s if key == "chosen" else s.search_time_s
        label = f"chosen ({s.strategy})" if key == "chosen" else key
        lines.append(f"| {label} | {s.predicted_fps:,.1f} | {sim.fps:,.1f} | {sim.fps / s.predicted_fps:.3f} | "
                     f"{sim.latency_p50_s * 1e3:.3f} | {sim.latency_p99_s * 1e3:.3f} | {t:.3f} |")
    lines += ["", "Chosen scheme:", "", "```", chosen.summary(), "```", ""]
    print("\n".join(lines[-len(results) - 12:]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    saved = os.environ.get(ENV_DEVICES)
    lines = ["## Joint placement", "",
             "Generated by `python bench/joint.py`. Simulated: 200 frames, closed loop with the default "
             "frames in flight (max(2 x cores + 2, 4 x models)), fps over the last 80 % of frames. Predicted: the search's "
             "analytic frame rate. `chosen` is `plan(models, device_info)` (exhaustive when the number of "
             "groupings is at most 20,000, else greedy + local search).", ""]
    try:
        run("Video pipeline, Keras architectures, one 4-core device", keras_video(), {0: 4}, "4", lines)
        run("Video pipeline, synthetic conv nets, one 4-core device", synthetic_video(), {0: 4}, "4", lines)
        run("12 models on two 4-core devices", synthetic_video() + synthetic_video("_b"), {0: 4, 1: 4}, "4,4",
            lines)
        run("Two weight-streaming models on a 2-core device (host-link bound)", streaming_pair(), {0: 2}, "4",
            lines)
    finally:
        if saved is None:
            os.environ.pop(ENV_DEVICES, None)
        else:
            os.environ[ENV_DEVICES] = saved
    write_section("joint", "\n".join(lines))
    print("wrote the joint section of docs/benchmarks.md")


if __name__ == "__main__":
    main()
