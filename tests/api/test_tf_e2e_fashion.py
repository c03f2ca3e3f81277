"""Acceptance (issue 2): a Keras 3 CNN trained on Fashion-MNIST, frozen, calibrated on 10
batches of 32 training images and quantized keeps INT8 top-1 within 1.0 point of FP32 on
the 10,000 test images. Real TensorFlow sessions run every form of the model."""
from __future__ import annotations

import numpy as np

BATCH = 32
CALIBRATION_BATCHES = 10


def test_fashion_cnn_int8_accuracy_within_one_point_of_fp32(fashion_mnist, fashion_cnn, tmp_path):
    import tensorflow as tf

    import ratelnn
    from ratelnn.frontend.tensorflow import converter, freeze_keras
    from ratelnn.testing import graph_accuracy, run_graph

    ratelnn.tf_init()
    (x_train, _), (x_test, y_test) = fashion_mnist
    graph_def, inputs, outputs = freeze_keras(fashion_cnn)
    input_tensor, output_tensor = inputs[0] + ":0", outputs[0] + ":0"
    config = {"input_nodes": inputs, "output_nodes": outputs,
              "input_shapes": [[BATCH, 28, 28, 1]], "output_dir": str(tmp_path)}
    conv = converter(graph_def, config)

    calibration_images = x_train[np.random.default_rng(0).permutation(len(x_train))
                                 [:CALIBRATION_BATCHES * BATCH]]
    run_graph(conv.to_cal(), input_tensor, output_tensor, calibration_images, BATCH)
    graph_quant = conv.to_quant()

    quant_ops = {n.op for n in graph_quant.node} & {"RatelQuant", "RatelDequant"}
    assert quant_ops == {"RatelQuant", "RatelDequant"}, "to_quant() made no Quant/Dequant ops"
    assert isinstance(graph_quant, tf.compat.v1.GraphDef)

    fp32 = graph_accuracy(graph_def, input_tensor, output_tensor, x_test, y_test, BATCH)
    int8 = graph_accuracy(graph_quant, input_tensor, output_tensor, x_test, y_test, BATCH)
    print(f"\nFashion-MNIST top-1 on {len(x_test)} test images: "
          f"FP32 {100 * fp32:.2f}%  INT8 {100 * int8:.2f}%")
    assert fp32 >= 0.85, f"FP32 model under-trained: {100 * fp32:.2f}%"
    assert abs(fp32 - int8) <= 0.010, \
        f"INT8 {100 * int8:.2f}% vs FP32 {100 * fp32:.2f}%: more than 1.0 point apart"
