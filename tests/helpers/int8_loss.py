"""TensorFlow graphs with a known int8 loss: a depthwise convolution whose channels differ
1000x in range (per-tensor int8 leaves the small channels a code or two) followed by a
pointwise convolution whose outputs 4-7 read only the small channels (weights x1000, so
every output has the same range); a trained digits MLP whose input has one feature 1e5x
wider than the others (:func:`wide_input_digits`)."""
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


WIDE_PIXEL = 36          # the digits pixel the wide input feature repeats
WIDE_SCALE = 1e5         # ... times this: its range leaves the other pixels no int8 or int16 code


def wide_input_digits():
    """A Keras MLP trained here on scikit-learn's digits (64 pixels in [0, 1] -> 32 ReLU -> 10
    logits), then given a 65th input, pixel :data:`WIDE_PIXEL` x :data:`WIDE_SCALE`, which the
    first layer reads with weights / (2 x :data:`WIDE_SCALE`) while the pixel's own weights
    halve: the float function is unchanged, but the input's one per-tensor scale leaves the
    other pixels no code in int8 or int16; only that first layer in fp32 reads them.
    Returns (frozen GraphDef, input name, output name, ``widen``: [N,64] pixels -> [N,65]
    inputs, (train images, labels), (test images, labels))."""
    import keras
    from keras import layers
    from ratelnn.datasets import load_digits_images
    from ratelnn.frontend.tensorflow import freeze_keras
    (x_train, y_train), (x_test, y_test) = load_digits_images()
    x_train, x_test = x_train.reshape(len(x_train), -1), x_test.reshape(len(x_test), -1)

    def mlp(inputs: int):
        return keras.Sequential([keras.Input((inputs,), name="pixels"), layers.Dense(32, activation="relu"),
                                 layers.Dense(10)])

    keras.utils.set_random_seed(0)
    trained = mlp(64)
    trained.compile(optimizer=keras.optimizers.Adam(1e-2),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    trained.fit(x_train, y_train, epochs=20, batch_size=32, verbose=0)
    (w, b), head = trained.layers[0].get_weights(), trained.layers[1].get_weights()
    w = np.concatenate([w, w[WIDE_PIXEL:WIDE_PIXEL + 1] / (2 * WIDE_SCALE)])
    w[WIDE_PIXEL] /= 2
    wide = mlp(65)
    wide.layers[0].set_weights([w, b])
    wide.layers[1].set_weights(head)
    graph_def, inputs, outputs = freeze_keras(wide)

    def widen(x: np.ndarray) -> np.ndarray:
        return np.concatenate([x, x[:, WIDE_PIXEL:WIDE_PIXEL + 1] * WIDE_SCALE], 1).astype(np.float32)

    return graph_def, inputs[0], outputs[0], widen, (x_train, y_train), (x_test, y_test)


CLASS_SCALE = 100.0      # the class head's logits in this unit: its output dwarfs the parity head's
PARITY_WIDE = 300.0      # one parity hidden unit this much wider than the widest: the others get no int8 code


def two_head_digits():
    """A Keras network trained here on scikit-learn's digits with two heads on one trunk
    (64 pixels -> 32 ReLU): class logits (-> 10, scaled by :data:`CLASS_SCALE` after training)
    and a parity logit (-> 16 ReLU -> 1: odd digit), whose hidden unit the logit reads
    most is then made :data:`PARITY_WIDE` x wider than the widest one on the training digits
    (the parity weight reading it divided by as much: the float function is unchanged).  In int8 the parity hidden layer's one scale leaves its other units
    little precision: the small parity output loses, the large class output does not.
    Returns (frozen GraphDef, input name, [class output, parity output], (train images,
    labels), (test images, labels))."""
    import keras
    from keras import layers
    from ratelnn.datasets import load_digits_images
    from ratelnn.frontend.tensorflow import freeze_keras
    (x_train, y_train), (x_test, y_test) = load_digits_images()
    x_train, x_test = x_train.reshape(len(x_train), -1), x_test.reshape(len(x_test), -1)
    keras.utils.set_random_seed(0)
    pixels = keras.Input((64,), name="pixels")
    trunk = layers.Dense(32, activation="relu")(pixels)
    classes = layers.Dense(10, name="classes")(trunk)
    wide = layers.Dense(16, activation="relu")
    hidden = wide(trunk)
    parity = layers.Dense(1, name="parity")(hidden)
    model = keras.Model(pixels, [classes, parity])
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=[keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        keras.losses.BinaryCrossentropy(from_logits=True)])
    model.fit(x_train, [y_train, (y_train % 2).astype(np.float32)], epochs=40, batch_size=32, verbose=0)
    w, b = model.get_layer("classes").get_weights()
    model.get_layer("classes").set_weights([w * CLASS_SCALE, b * CLASS_SCALE])
    (wh, bh), (wp, bp) = wide.get_weights(), model.get_layer("parity").get_weights()
    reach = keras.Model(pixels, hidden).predict(x_train, verbose=0).max(0)
    unit = int(np.argmax(reach * np.abs(wp[:, 0])))   # the unit the logit reads most
    widen = PARITY_WIDE * reach.max() / reach[unit]
    wh[:, unit], bh[unit], wp[unit] = wh[:, unit] * widen, bh[unit] * widen, wp[unit] / widen
    wide.set_weights([wh, bh])
    model.get_layer("parity").set_weights([wp, bp])
    graph_def, inputs, outputs = freeze_keras(model)
    return graph_def, inputs[0], outputs, (x_train, y_train), (x_test, y_test)


WIDE_CHANNEL_SCALE = 1e4   # the first ReLU's channel 0, this much wider than the others


def island_digits():
    """A small 3-D CNN trained here on scikit-learn's digits as one-slice volumes ([N,1,8,8,1]
    -> Conv3D 8 + ReLU -> Conv3D 8 + ReLU -> Conv3D 4 + ReLU -> dense 10 logits).  ``Conv3D``
    runs on the CPU, so the first two ReLUs are int8 islands between CPU ops (deepbrain's
    layout in small), each an engine that pays the transfer of its input and output.  Then the
    first convolution's channel 0 is scaled x :data:`WIDE_CHANNEL_SCALE` and the second's
    weights reading it / :data:`WIDE_CHANNEL_SCALE`: the float function is unchanged (ReLU is
    positively homogeneous), but the first ReLU's one per-tensor scale leaves its other channels
    no code in int8 or int16.  Returns (frozen GraphDef, input name, output name, names of
    the island ReLUs, (train volumes, labels), (test volumes, labels))."""
    import keras
    from keras import layers
    from ratelnn.datasets import load_digits_images
    from ratelnn.frontend.tensorflow import freeze_keras
    (x_train, y_train), (x_test, y_test) = load_digits_images()
    volumes = lambda x: x.reshape(len(x), 1, 8, 8, 1).astype(np.float32)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((1, 8, 8, 1), name="volume"),
                              layers.Conv3D(8, (1, 3, 3), padding="same", activation="relu", name="c1"),
                              layers.Conv3D(8, (1, 3, 3), padding="same", activation="relu", name="c2"),
                              layers.Conv3D(4, (1, 3, 3), padding="same", activation="relu", name="c3"),
                              layers.Flatten(), layers.Dense(10, name="logits")])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(volumes(x_train), y_train, epochs=15, batch_size=32, verbose=0)
    (w1, b1), (w2, b2) = model.get_layer("c1").get_weights(), model.get_layer("c2").get_weights()
    w1[..., 0] *= WIDE_CHANNEL_SCALE
    b1[0] *= WIDE_CHANNEL_SCALE
    w2[..., 0, :] /= WIDE_CHANNEL_SCALE
    model.get_layer("c1").set_weights([w1, b1])
    model.get_layer("c2").set_weights([w2, b2])
    graph_def, inputs, outputs = freeze_keras(model)
    islands = [n.name for n in graph_def.node if n.op == "Relu" and n.name.split("/")[-2].split("_")[0] in ("c1", "c2")]
    return graph_def, inputs[0], outputs[0], islands, (volumes(x_train), y_train), (volumes(x_test), y_test)


CONFIDENCE = 40.0        # the softmax digits network's logits in this unit: a confident classifier
HIDDEN_WIDE = 55.0       # its widest hidden unit this much wider: the others get few int8 codes


def softmax_digits():
    """A Keras MLP trained here on scikit-learn's digits (64 pixels -> 32 ReLU -> 10 logits ->
    softmax), its logits then scaled by :data:`CONFIDENCE` (probabilities near 0 or 1) and the
    hidden unit the logits read most made :data:`HIDDEN_WIDE` x wider (the logit weights
    reading it divided by as much: the float function is unchanged).  In int8 the hidden
    layer's one scale leaves its other units few codes: the logits lose, the confident
    probabilities barely show it.  Returns (frozen GraphDef, input name, output name,
    (train images, labels), (test images, labels))."""
    import keras
    from keras import layers
    from ratelnn.datasets import load_digits_images
    from ratelnn.frontend.tensorflow import freeze_keras
    (x_train, y_train), (x_test, y_test) = load_digits_images()
    x_train, x_test = x_train.reshape(len(x_train), -1), x_test.reshape(len(x_test), -1)
    keras.utils.set_random_seed(0)
    pixels = keras.Input((64,), name="pixels")
    hidden_layer, logits_layer = layers.Dense(32, activation="relu"), layers.Dense(10, name="logits")
    hidden = hidden_layer(pixels)
    logits = logits_layer(hidden)
    trained = keras.Model(pixels, logits)
    trained.compile(optimizer=keras.optimizers.Adam(3e-3),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    trained.fit(x_train, y_train, epochs=40, batch_size=32, verbose=0)
    (wh, bh), (wl, bl) = hidden_layer.get_weights(), logits_layer.get_weights()
    reach = keras.Model(pixels, hidden).predict(x_train, verbose=0).max(0)
    unit = int(np.argmax(reach * np.abs(wl).max(1)))
    widen = HIDDEN_WIDE * reach.max() / reach[unit]
    wh[:, unit], bh[unit], wl[unit] = wh[:, unit] * widen, bh[unit] * widen, wl[unit] / widen
    hidden_layer.set_weights([wh, bh])
    logits_layer.set_weights([wl * CONFIDENCE, bl * CONFIDENCE])
    model = keras.Model(pixels, layers.Softmax(name="probabilities")(logits))
    graph_def, inputs, outputs = freeze_keras(model)
    return graph_def, inputs[0], outputs[0], (x_train, y_train), (x_test, y_test)
