"""ratelnn quickstart: FP32 Keras model -> calibration, INT8 quantized and compiled models.

Runs on scikit-learn's bundled 8x8 digits (no download): trains a small Keras CNN for a
few seconds, freezes it to a GraphDef, calibrates on 10 batches of training images, quantizes
and compiles it, prints the top-1 accuracy of every form on the test split, then the NPU
figures: the engines, the cost model's predicted latency and throughput on the emulated
Hanguang-800-like device, and the device time the engine runs recorded.

    python examples/quickstart.py
"""
from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import ratelnn  # noqa: E402
from ratelnn.datasets import load_digits_images  # noqa: E402
from ratelnn.frontend.tensorflow import converter, freeze_keras  # noqa: E402
from ratelnn.testing import graph_accuracy, run_graph  # noqa: E402

BATCH = 32                # the converted graphs take fixed batches of 32 images
CALIBRATION_BATCHES = 10  # batches of training images run through the calibration model


def train_digits_cnn(x_train: np.ndarray, y_train: np.ndarray):
    """A small Keras CNN for [N,8,8,1] images in [0,1] -> [N,10] class probabilities."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    images = keras.Input((8, 8, 1), name="images")
    x = layers.Conv2D(16, 3, padding="same", use_bias=False)(images)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    x = layers.MaxPooling2D(2)(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.Flatten()(x)
    probabilities = layers.Dense(10, activation="softmax")(x)
    model = keras.Model(images, probabilities)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy",
                  jit_compile=False)
    model.fit(x_train, y_train, batch_size=32, epochs=15, verbose=0)
    return model


def main() -> None:
    ratelnn.tf_init()  # builds the custom-op library on first use (cached afterwards)
    (x_train, y_train), (x_test, y_test) = load_digits_images()
    start = time.time()
    model = train_digits_cnn(x_train, y_train)
    print(f"trained a Keras CNN on {len(x_train)} digit images in {time.time() - start:.1f} s")

    graph_def, input_nodes, output_nodes = freeze_keras(model)
    input_tensor, output_tensor = input_nodes[0] + ":0", output_nodes[0] + ":0"
    output_dir = tempfile.mkdtemp(prefix="ratelnn-quickstart-")
    config = {"input_nodes": input_nodes, "output_nodes": output_nodes,
              "input_shapes": [[BATCH, 8, 8, 1]], "output_dir": output_dir, "model_name": "digits_cnn"}
    conv = converter(graph_def, config)

    # 1. Calibration model: run it on calibration data; statistics land in output_dir.
    calibration_images = x_train[:CALIBRATION_BATCHES * BATCH]
    run_graph(conv.to_cal(), input_tensor, output_tensor, calibration_images, BATCH)

    # 2. Quantized model: Quant/Dequant ops and int8 constants, runnable in TensorFlow.
    graph_quant = conv.to_quant()

    # 3. Compiled model: NPU regions become RatelEngineOp nodes run on the emulated NPU.
    graph_npu = conv.to_npu(graph_quant)
    forms = {"FP32": graph_def, "INT8": graph_quant, "NPU": graph_npu}

    print(f"calibration statistics: {output_dir}")
    print(f"top-1 accuracy on {len(x_test)} test images:")
    for name, graph in forms.items():
        accuracy = graph_accuracy(graph, input_tensor, output_tensor, x_test, y_test, BATCH)
        print(f"  {name:5s} {100 * accuracy:6.2f}%")
    print_npu_figures(graph_npu, len(x_test))


def print_npu_figures(graph_npu, images: int) -> None:
    """Engines of the compiled model, the cost model's prediction and the recorded time."""
    from ratelnn.npu import device_times
    from ratelnn.profile import profile

    engines = [n for n in graph_npu.node if n.op == "RatelEngineOp"]
    floats = [n for n in graph_npu.node if n.op not in ("RatelEngineOp", "RatelQuant",
                                                        "RatelDequant", "Placeholder", "Const")]
    print(f"NPU: {len(engines)} engine(s), {len(floats)} op(s) left in float")
    for batch in (1, BATCH):
        p = profile(graph_npu, batch_size=batch)
        print(f"  predicted, batch {batch:2d}: latency {p.latency_s * 1e6:8.2f} us, "
              f"throughput {p.throughput:12,.0f} inferences/s (4 cores)")
    for name, t in device_times().items():
        print(f"  recorded device time of {name}: {t.seconds * 1e3:.3f} ms for {t.samples} "
              f"inferences ({t.runs} runs) while evaluating {images} test images")


if __name__ == "__main__":
    main()
