"""Run several GraphDefs on one input in this process, loading only TensorFlow and the op
library (uses nothing from ratelnn), so that a TensorFlow abort (e.g. a oneDNN rewrite's
CHECK failure) fails the caller instead of killing it.

Usage: run_graphdefs.py LIBRARY INPUT_TENSOR OUTPUT_TENSOR INPUTS.npy OUT_DIR NAME=GRAPHDEF...

Feeds INPUTS.npy to INPUT_TENSOR of every GRAPHDEF and saves OUTPUT_TENSOR to OUT_DIR/NAME.npy.
The environment decides TensorFlow's options (TF_ENABLE_ONEDNN_OPTS=0/1).
"""
import os
import sys

import numpy as np
import tensorflow as tf


def main() -> None:
    library, input_tensor, output_tensor, inputs_path, out_dir = sys.argv[1:6]
    tf.load_op_library(library)
    x = np.load(inputs_path)
    for item in sys.argv[6:]:
        name, _, path = item.partition("=")
        graph_def = tf.compat.v1.GraphDef()
        with open(path, "rb") as f:
            graph_def.ParseFromString(f.read())
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as session:
            np.save(os.path.join(out_dir, name + ".npy"), session.run(output_tensor, {input_tensor: x}))
        print("ran", name, flush=True)


if __name__ == "__main__":
    main()
