"""A TensorFlow graph with a known int8 loss: a depthwise convolution whose channels differ
1000x in range (per-tensor int8 leaves the small channels a code or two) followed by a
pointwise convolution whose outputs 4-7 read only the small channels (weights x1000, so
every output has the same range)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

SHAPE = (8, 8, 4)
CHANNEL_SCALE = np.array([1.0, 1.0, 1e-3, 1e-3], np.float32)


def depthwise_loss_graph():
    """[N,8,8,4] -> depthwise 3x3 (channel ranges 1 : 1e-3) + relu -> 1x1 conv to 8 channels
    (outputs 0-3 from channels 0-1, outputs 4-7 from channels 2-3 with weights x1000) -> mean
    over space -> [N,8]."""
    rng = np.random.default_rng(0)
    dw = (rng.normal(0, 0.5, (3, 3, 4, 1)) * CHANNEL_SCALE[None, None, :, None]).astype(np.float32)
    pw = rng.normal(0, 0.5, (1, 1, 4, 8)) / CHANNEL_SCALE[None, None, :, None]
    pw[:, :, 2:, :4] = 0.0
    pw[:, :, :2, 4:] = 0.0
    pw = pw.astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, *SHAPE], name="images")
        h = tf.nn.relu(tf.nn.depthwise_conv2d(x, dw, [1, 1, 1, 1], "SAME"))
        y = tf.nn.conv2d(h, pw, 1, "SAME")
        tf.identity(tf.reduce_mean(y, axis=[1, 2]), name="scores")
    return g.as_graph_def()
