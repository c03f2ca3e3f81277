"""Run a calibration GraphDef the way a program that only loaded the op library would.

Usage: calibrate_graphdef.py LIBRARY GRAPHDEF BATCHES.npy THREADS [--forever]
                             [--input=TENSOR] [--output=TENSOR]

Loads LIBRARY with tf.load_op_library, imports GRAPHDEF (input placeholder "x", output
"out", unless --input/--output name other tensors), and feeds the batches of BATCHES.npy (shape [n, ...]) through one Session from
THREADS threads (thread t runs batches t, t+THREADS, ...). With --forever the threads cycle
through the batches until the process is killed. Uses nothing from ratelnn.
"""
import sys
import threading

import numpy as np
import tensorflow as tf


def main() -> None:
    library, graphdef_path, batches_path, threads = sys.argv[1:5]
    forever = "--forever" in sys.argv[5:]
    names = dict(a[2:].split("=", 1) for a in sys.argv[5:] if a.startswith(("--input=", "--output=")))
    input_tensor, output_tensor = names.get("input", "x:0"), names.get("output", "out:0")
    tf.load_op_library(library)
    graph_def = tf.compat.v1.GraphDef()
    with open(graphdef_path, "rb") as f:
        graph_def.ParseFromString(f.read())
    batches = np.load(batches_path)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    session = tf.compat.v1.Session(graph=graph)
    num_threads = int(threads)

    def run(first: int) -> None:
        while True:
            for i in range(first, len(batches), num_threads):
                session.run(output_tensor, feed_dict={input_tensor: batches[i]})
            if not forever:
                return

    workers = [threading.Thread(target=run, args=(t,)) for t in range(num_threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    session.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
