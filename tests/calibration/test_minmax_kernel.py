"""RatelMinMax's fused pass on tensors large enough to be split over TF's worker threads and
counted through sub-histograms: a batch binned at the range of the earlier batches (the
hint), a batch that exceeds it (binned again at its own range), NaN in a late block; sizes
around every block boundary of the scan, on one and two threads; NaN/Inf in the tail."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers.stats import subprocess_env

import ratelnn
from ratelnn.calibration.histogram import AbsHistogram
from ratelnn.calibration.stats import load_statistics
from ratelnn.npu import ISA_PATHS, force_isa, supported_isas

tf = pytest.importorskip("tensorflow")

SHAPE = (3, 181, 181, 3)  # 294,849 elements: above the 2^18 threshold for sharding


@pytest.fixture(scope="module")
def ops():
    return ratelnn.tf_init()


def run_batches(ops, output_dir, batches, threads=2):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="x")
        ops.ratel_min_max(x, tensor_name="big", output_dir=str(output_dir), name="out")
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        for batch in batches:
            np.testing.assert_array_equal(sess.run("out:0", {"x:0": batch}), batch)


@pytest.mark.parametrize("path", ISA_PATHS)
@pytest.mark.parametrize("threads", [1, 3])
def test_sharded_batches_inside_and_beyond_the_hint_match_numpy(ops, tmp_path, threads, path):
    """On every kernel path this CPU has (the scans have a portable, an AVX2 and an AVX-512
    path; the VNNI path runs the AVX-512 one)."""
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU lacks the {path} kernel path")
    with force_isa(path):
        check_batches_match_numpy(ops, tmp_path, threads)


def check_batches_match_numpy(ops, tmp_path, threads):
    rng = np.random.default_rng(7)
    relu = np.maximum(rng.normal(0, 2, SHAPE), 0).astype(np.float32)  # half in bin 0
    small = rng.laplace(0, 0.01, SHAPE).astype(np.float32)   # far below the hint
    wide = rng.laplace(0, 40, SHAPE).astype(np.float32)      # beyond it: rebinned
    subnormal = np.full(SHAPE, 1e-40, np.float32)
    subnormal[0, 0, 0, 0] = -3.0
    batches = [relu, small, wide, relu[::-1].copy(), subnormal]
    run_batches(ops, tmp_path, batches, threads)
    s = load_statistics(tmp_path)["big"]
    every = np.concatenate([b.ravel() for b in batches])
    assert s.histogram == AbsHistogram.of_values(every)
    assert (s.min, s.max, s.count) == (every.min(), every.max(), every.size)


def test_nan_in_a_late_block_fails_and_records_nothing(ops, tmp_path):
    batch = np.ones(SHAPE, np.float32)
    batch[-1, -1, -1, -1] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="'big': calibration batch contains NaN or Inf"):
        run_batches(ops, tmp_path, [np.ones(SHAPE, np.float32), batch])
    s = load_statistics(tmp_path)["big"]
    assert s.count == np.prod(SHAPE) and s.histogram.total == s.count


def test_every_path_gives_the_same_signed_zero_range(ops, tmp_path):
    """Ties between -0.0 and +0.0 (and NaN-free subnormals) at the extremes: the 16-lane
    AVX-512 scan folds the same elements per lane as the 8-lane ones, so min and max keep
    the same sign bits on every path this CPU has."""
    rng = np.random.default_rng(8)
    batch = np.where(rng.random(4099) < 0.5, np.float32(0.0), np.float32(-0.0)).astype(np.float32)
    batch[rng.integers(0, batch.size, 50)] = np.float32(1e-41)
    ranges = {}
    for path in supported_isas():
        with force_isa(path):
            ops.ratel_min_max(batch, tensor_name="zeros", output_dir=str(tmp_path / path))
        s = load_statistics(tmp_path / path)["zeros"]
        ranges[path] = (np.signbit(s.min), s.min, np.signbit(s.max), s.max)
    assert len(set(ranges.values())) == 1, ranges


# Sizes around the scan's boundaries: the 16-element vector step (scalar tail), the
# 1024-element counting block, its prefetch of the next one and the counting of its slots
# during the next block (a last block of one step), the 2^15 switch to 32-bit counters, the
# 2^16 shard blocks and the 2^18 threshold for sharding.
BOUNDARY_SIZES = (1, 15, 17, 1023, 1041, 2047, 3 * 1024 + 16, 2 ** 15 - 1, 2 ** 15 + 17,
                  2 ** 18 - 1, 2 ** 18 + 2 ** 16 + 5)


def boundary_batches(size: int, rng) -> list:
    """Four batches of `size` elements: signed values with ReLU zeros and a saturated run in
    one bin (6.0), then the same at 1/4 (binned at the first batch's range), at 64x (beyond
    it: binned again), and values none of which falls in bin 0 (every element counted: more
    counter slots per block than the next block's steps take along)."""
    x = rng.normal(0, 2, size).astype(np.float32)
    x[rng.random(size) < 0.4] = 0.0
    x[rng.random(size) < 0.2] = 6.0
    dense = rng.uniform(100, 300, size).astype(np.float32) * np.sign(rng.normal(size=size))
    return [x, x * np.float32(0.25), x * np.float32(64), dense.astype(np.float32)]


@pytest.mark.parametrize("path", ISA_PATHS)
def test_boundary_sizes_match_numpy_on_one_and_two_threads(ops, tmp_path, path):
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU lacks the {path} kernel path")
    rng = np.random.default_rng(11)
    batches = {size: boundary_batches(size, rng) for size in BOUNDARY_SIZES}
    with force_isa(path):
        for threads in (1, 2):
            output_dir = tmp_path / f"threads{threads}"
            graph = tf.Graph()
            with graph.as_default():
                recorders = [ops.ratel_min_max(
                    tf.compat.v1.placeholder(tf.float32, (size,), name=f"x{size}"),
                    tensor_name=f"n{size}", output_dir=str(output_dir)) for size in BOUNDARY_SIZES]
            config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
            with tf.compat.v1.Session(graph=graph, config=config) as sess:
                for k in range(4):
                    sess.run(recorders,
                             {f"x{size}:0": batches[size][k] for size in BOUNDARY_SIZES})
            stats = load_statistics(output_dir)
            for size in BOUNDARY_SIZES:
                every = np.concatenate(batches[size])
                s = stats[f"n{size}"]
                assert s.histogram == AbsHistogram.of_values(every), (size, threads)
                assert (s.min, s.max, s.count) == (every.min(), every.max(), every.size)


# Records every array of an .npz file (argv[1]) as a tensor of its own into argv[2], in a
# process whose kernel path RATELNN_ISA chose when the library loaded.
RECORD_SCRIPT = """
import sys
import numpy as np
import ratelnn
ops = ratelnn.tf_init()
for name, x in np.load(sys.argv[1]).items():
    ops.ratel_min_max(x, tensor_name=name, output_dir=sys.argv[2])
"""


@pytest.mark.parametrize("path", ["portable", "avx2", "avx512"])
def test_path_chosen_by_the_environment_records_the_reference_statistics(tmp_path, path):
    """RATELNN_ISA picks the scan's path when the library loads (a new process): the
    portable loop, the AVX2 one (run by the AVX-VNNI path too) and the AVX-512 one (run by
    the AVX-512 VNNI path too) record numpy's range and histogram on saturated ReLU6 runs,
    dense blocks (every element counted) and sizes around the 1024-element blocks."""
    if path not in supported_isas():
        pytest.skip(f"not run: this CPU lacks the {path} kernel path")
    rng = np.random.default_rng(5)
    arrays = {f"n{size}": np.clip(rng.normal(1, 3, size), 0, 6).astype(np.float32)
              for size in (1040, 3 * 1024 + 17, 2 ** 15 + 33)}
    arrays["dense"] = rng.uniform(-300, 300, 5000).astype(np.float32)
    np.savez(tmp_path / "x.npz", **arrays)
    proc = subprocess.run([sys.executable, "-c", RECORD_SCRIPT, str(tmp_path / "x.npz"),
                           str(tmp_path / "stats")], env=subprocess_env(RATELNN_ISA=path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stats = load_statistics(tmp_path / "stats")
    for name, x in arrays.items():
        assert stats[name].histogram == AbsHistogram.of_values(x), name
        assert (stats[name].min, stats[name].max) == (x.min(), x.max()), name


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_value_in_the_scalar_tail_fails(ops, tmp_path, bad):
    batch = np.ones(2 ** 15 + 17, np.float32)
    batch[-1] = bad
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="'tail': calibration batch contains NaN or Inf"):
        ops.ratel_min_max(batch, tensor_name="tail", output_dir=str(tmp_path))
