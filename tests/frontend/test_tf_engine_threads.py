"""RatelEngineOp runs its kernels' helper tasks on TensorFlow's intra-op pool
(docs/architecture.md §7): in a Session with 1 or 2 intra-op threads its outputs equal the
reference executor's, and running it starts no thread of its own.  (Exceptions in chunks on
lent threads: tests/npu/test_parallel_for.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers.engines import mixed_engine
from helpers.paths import SCRIPTS

pytestmark = pytest.mark.no_tf_math   # runs no TensorFlow kernel but RatelEngineOp


def test_engine_op_on_tf_threads_equals_the_reference(tmp_path):
    import ratelnn
    from ratelnn.frontend.tensorflow import export_graphdef
    from ratelnn.ir import Graph, Node, TensorInfo

    engine, x = mixed_engine()
    (tx,), (ty,) = engine.inputs, engine.outputs
    g = Graph("threads")
    g.add_input("x", (None,) + tx.shape[1:], tx.dtype.name)
    g.add_node(Node("eng", "Engine", ["x"], ["y"], {"engine": engine.to_bytes(), "engine_name": "eng",
                                                    "device_id": 0, "core_ids": [0]}),
               [TensorInfo((None,) + ty.shape[1:], ty.dtype.name)])
    g.outputs = ["y"]
    (tmp_path / "graph.pb").write_bytes(export_graphdef(g).SerializeToString())
    rng = np.random.default_rng(1)
    batches = {"b3": x, "b8": rng.integers(-128, 128, (8,) + x.shape[1:]).astype(np.int8)}
    np.savez(tmp_path / "inputs.npz", **batches)
    env = dict(os.environ, TF_OVERRIDE_GLOBAL_THREADPOOL="1", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, str(SCRIPTS / "engine_op_threads.py"), ratelnn.ops_library_path("tensorflow"),
                           str(tmp_path / "graph.pb"), str(tmp_path / "inputs.npz"), "y:0",
                           str(tmp_path / "out.npz"), "1", "2"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"1": 0, "2": 0}, "the op started threads"
    got = np.load(tmp_path / "out.npz")
    for name, batch in batches.items():
        (want,) = engine.run([batch], backend="reference")
        for threads in (1, 2):
            np.testing.assert_array_equal(got[f"{threads}__{name}"], want, err_msg=f"{threads} threads, {name}")
