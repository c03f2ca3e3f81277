"""Run a GraphDef whose RatelEngineOp reads placeholder "x" in one Session per intra-op
thread count, as a program that only loaded the op library would (uses nothing from ratelnn).

Usage: engine_op_threads.py LIBRARY GRAPHDEF INPUTS.npz OUTPUT_TENSOR OUT.npz THREADS...

Run with TF_OVERRIDE_GLOBAL_THREADPOOL=1, so each Session gets its own intra-op pool of its
`intra_op_parallelism_threads`.  For each thread count t the Session first runs an empty
batch (TF sets up its executors and threads), then every array of INPUTS.npz; the outputs go
to OUT.npz as "<t>__<array name>".  Prints one JSON line {t: threads the process gained while
the non-empty batches ran}.
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf


def main() -> None:
    library, graphdef_path, inputs_path, output_tensor, out_path, *thread_counts = sys.argv[1:]
    tf.load_op_library(library)
    graph_def = tf.compat.v1.GraphDef()
    with open(graphdef_path, "rb") as f:
        graph_def.ParseFromString(f.read())
    inputs = np.load(inputs_path)
    outputs, gained = {}, {}
    for t in map(int, thread_counts):
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=t, inter_op_parallelism_threads=1)
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            y = graph.get_tensor_by_name(output_tensor)
            first = inputs[inputs.files[0]]
            sess.run(y, {"x:0": first[:0]})
            before = len(os.listdir("/proc/self/task"))
            for name in inputs.files:
                outputs[f"{t}__{name}"] = sess.run(y, {"x:0": inputs[name]})
            gained[t] = len(os.listdir("/proc/self/task")) - before
    np.savez(out_path, **outputs)
    print(json.dumps(gained))


if __name__ == "__main__":
    main()
