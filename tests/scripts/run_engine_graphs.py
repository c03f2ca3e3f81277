"""Run a GraphDef holding a RatelEngineOp with many engine payloads, as a program that only
loaded the op library would (uses nothing from ratelnn).

Usage: run_engine_graphs.py LIBRARY GRAPHDEF ENGINES.pkl INPUTS.npz OUTPUT_TENSOR

ENGINES.pkl is a pickled list of engine byte strings. For each, the `engine` attribute of
every RatelEngineOp node of GRAPHDEF is replaced by it, the graph is imported into a fresh
tf.Graph and OUTPUT_TENSOR is fetched once per batch of INPUTS.npz (arrays named
"<placeholder>__<k>": the feed of placeholder <placeholder> in batch k).  Prints
"case <i>" before each engine (so a crash shows which one) and at the end one JSON line
{"error": <runs ending in a TF error status>, "ran": <runs giving a result>,
"messages": [the first 20 error messages, on one line each]}.
"""
import json
import pickle
import sys

import numpy as np
import tensorflow as tf


def feeds_per_batch(inputs) -> list:
    batches: dict = {}
    for key in inputs.files:
        placeholder, k = key.rsplit("__", 1)
        batches.setdefault(int(k), {})[placeholder + ":0"] = inputs[key]
    return [batches[k] for k in sorted(batches)]


def main() -> None:
    library, graphdef_path, engines_path, inputs_path, output_tensor = sys.argv[1:6]
    tf.load_op_library(library)
    template = tf.compat.v1.GraphDef()
    with open(graphdef_path, "rb") as f:
        template.ParseFromString(f.read())
    with open(engines_path, "rb") as f:
        engines = pickle.load(f)
    feeds = feeds_per_batch(np.load(inputs_path))
    counts = {"error": 0, "ran": 0, "messages": []}
    for i, data in enumerate(engines):
        print(f"case {i}", flush=True)
        graph_def = tf.compat.v1.GraphDef()
        graph_def.CopyFrom(template)
        for node in graph_def.node:
            if node.op == "RatelEngineOp":
                node.attr["engine"].s = data
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as session:
            for feed in feeds:
                try:
                    session.run(output_tensor, feed)
                    counts["ran"] += 1
                except tf.errors.OpError as e:
                    counts["error"] += 1
                    if len(counts["messages"]) < 20:
                        counts["messages"].append(" ".join(e.message.split())[:400])
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
