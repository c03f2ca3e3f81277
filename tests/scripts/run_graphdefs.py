"""Run several GraphDefs on one input in this process, loading only TensorFlow and the op
library (uses nothing from ratelnn), so that a TensorFlow abort (e.g. a oneDNN rewrite's
CHECK failure) fails the caller instead of killing it.

Usage: run_graphdefs.py LIBRARY INPUT_TENSOR OUTPUT_TENSOR INPUTS.npy OUT_DIR NAME=GRAPHDEF...

Feeds INPUTS.npy to INPUT_TENSOR of every GRAPHDEF and saves OUTPUT_TENSOR to OUT_DIR/NAME.npy,
and the kernels TensorFlow ran (after Grappler and the oneDNN rewrites), one a line as the op
type followed by its fused ops if any (``_FusedConv2D:BiasAdd,Relu6``), to OUT_DIR/NAME.ops.
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
            metadata = tf.compat.v1.RunMetadata()
            out = session.run(output_tensor, {input_tensor: x}, run_metadata=metadata,
                              options=tf.compat.v1.RunOptions(output_partition_graphs=True))
            np.save(os.path.join(out_dir, name + ".npy"), out)
        with open(os.path.join(out_dir, name + ".ops"), "w") as f:
            for node in (n for g in metadata.partition_graphs for n in g.node):
                fused = [op.decode() for op in node.attr["fused_ops"].list.s] if "fused_ops" in node.attr else []
                f.write(node.op + (":" + ",".join(fused) if fused else "") + "\n")
        print("ran", name, flush=True)


if __name__ == "__main__":
    main()
