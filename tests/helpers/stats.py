"""Calibration helpers: a small calibration graph with RatelMinMax ops, its expected
statistics, a small frozen CNN, and launching calibration in subprocesses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .paths import REPO, SCRIPTS

INPUT_SHAPE = (4, 5, 3)  # per-example shape of the calibration graph's input "x"
TENSORS = ("x", "affine", "relu")  # RatelMinMax tensor names in the graph


def calibration_graph(ops, output_dir: str):
    """A tf.Graph: x -> MinMax('x') -> 2x-1 -> MinMax('affine') -> relu -> MinMax('relu')
    -> "out". ``ops`` is the module returned by ``ratelnn.tf_init()``."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None,) + INPUT_SHAPE, name="x")
        h = ops.ratel_min_max(x, tensor_name="x", output_dir=output_dir)
        h = ops.ratel_min_max(h * 2.0 - 1.0, tensor_name="affine", output_dir=output_dir)
        h = ops.ratel_min_max(tf.nn.relu(h), tensor_name="relu", output_dir=output_dir)
        tf.identity(h, name="out")
    return graph


def graph_tensors(batch: np.ndarray) -> Dict[str, np.ndarray]:
    """The values the graph's MinMax ops see for one input batch (float32)."""
    x = batch.astype(np.float32)
    affine = x * np.float32(2) - np.float32(1)
    return {"x": x, "affine": affine, "relu": np.maximum(affine, np.float32(0))}


def expected_ranges(batches: Sequence[np.ndarray]) -> Dict[str, Tuple[float, float]]:
    """(min, max) per tensor over all ``batches``."""
    seen = [graph_tensors(b) for b in batches]
    return {name: (float(min(s[name].min() for s in seen)), float(max(s[name].max() for s in seen)))
            for name in TENSORS}


def random_batches(seed: int, count: int, batch: int = 8, offset: float = 0.0) -> np.ndarray:
    """``count`` batches of shape [batch, *INPUT_SHAPE], float32."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((count, batch) + INPUT_SHAPE) * 3 + offset).astype(np.float32)


def subprocess_env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.update(extra)
    return env


def start_calibration(library: str, graphdef: Path, batches: Path, threads: int,
                      forever: bool = False) -> subprocess.Popen:
    """Starts tests/scripts/calibrate_graphdef.py in a new process."""
    cmd = [sys.executable, str(SCRIPTS / "calibrate_graphdef.py"), library, str(graphdef),
           str(batches), str(threads)] + (["--forever"] if forever else [])
    return subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 60) -> str:
    """Waits for ``proc``; returns its stdout, fails with its stderr on a non-zero exit."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{err[-3000:]}"
    return out


def write_stats_file(path: Path, tensors: Dict[str, Dict[str, float]]) -> None:
    """Writes an .rstats file in format version 1 (as ops/core/stats_format.cc does)."""
    payload = (json.dumps({"tensors": tensors}) + "\n").encode()
    header = f"RATELSTATS 1 {zlib.crc32(payload):08x} {len(payload)}\n".encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + payload)


def stats_files(output_dir: Path) -> List[Path]:
    return sorted((Path(output_dir) / "ratel_stats").glob("*.rstats"))


# ------------------------------------------------------------------ switching methods, e2e
def small_graph_def(seed: int = 9):
    """Frozen GraphDef x[4,8,8,3] -> conv3x3+bias+relu -> maxpool -> conv1x1 -> reshape ->
    matmul -> softmax "prob"; ``seed`` draws the weights (another seed: another model)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (4, 8, 8, 3), name="x")
        h = tf.nn.conv2d(x, rng.normal(0, 0.4, (3, 3, 3, 8)).astype(np.float32), 1, "SAME")
        h = tf.nn.relu(tf.nn.bias_add(h, rng.normal(0, 0.1, 8).astype(np.float32)))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.nn.conv2d(h, rng.normal(0, 0.3, (1, 1, 8, 8)).astype(np.float32), 1, "SAME")
        h = tf.reshape(h, (4, 128))
        h = tf.matmul(h, rng.normal(0, 0.2, (128, 5)).astype(np.float32))
        tf.nn.softmax(h, name="prob")
    return graph.as_graph_def()
