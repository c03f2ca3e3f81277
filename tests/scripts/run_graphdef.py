"""Run a compiled GraphDef the way a program that only loaded the op library would (uses
nothing from ratelnn).

Usage: run_graphdef.py LIBRARY GRAPHDEF INPUT_TENSOR OUTPUT_TENSOR INPUTS.npy OUTPUTS.npy BATCH

Loads LIBRARY with tf.load_op_library, imports GRAPHDEF, feeds INPUTS.npy to INPUT_TENSOR
BATCH rows at a time (a graph with a fixed batch needs a multiple of it), saves the concatenated
OUTPUT_TENSOR values to OUTPUTS.npy, and prints one JSON line with the device time the
engine ops recorded, read through the library's C entry points:
{"<engine name>": {"runs": ..., "samples": ..., "cycles": ...}, ...}.
"""
import ctypes
import json
import os
import sys

import numpy as np
import tensorflow as tf


def recorded_engine_time(library: str) -> dict:
    lib = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    lib.ratelnn_engine_time_count.restype = ctypes.c_int64
    lib.ratelnn_engine_time_entry.restype = ctypes.c_int64
    lib.ratelnn_engine_time_entry.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64] + \
        [ctypes.POINTER(ctypes.c_int64)] * 3 + [ctypes.POINTER(ctypes.c_double)]
    name = ctypes.create_string_buffer(4096)
    device_id, runs, samples, cycles = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64(), ctypes.c_double()
    times = {}
    for i in range(lib.ratelnn_engine_time_count()):
        lib.ratelnn_engine_time_entry(i, name, len(name), ctypes.byref(device_id), ctypes.byref(runs),
                                      ctypes.byref(samples), ctypes.byref(cycles))
        times[name.value.decode()] = {"runs": runs.value, "samples": samples.value, "cycles": cycles.value}
    return times


def main() -> None:
    library, graphdef_path, input_tensor, output_tensor, inputs_path, outputs_path, batch = sys.argv[1:8]
    tf.load_op_library(library)
    graph_def = tf.compat.v1.GraphDef()
    with open(graphdef_path, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    x = np.load(inputs_path)
    batch = int(batch)
    with tf.compat.v1.Session(graph=graph) as session:
        outputs = [session.run(output_tensor, {input_tensor: x[i:i + batch]}) for i in range(0, len(x), batch)]
    np.save(outputs_path, np.concatenate(outputs))
    print(json.dumps(recorded_engine_time(library)), flush=True)


if __name__ == "__main__":
    main()
