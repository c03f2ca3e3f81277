"""Statistics that serve every threshold method (histograms of |x| with exact
re-binning), the methods kld / percentile / mse / naive_kld_mix, and switching between them
on one set of statistics without recalibrating."""
from __future__ import annotations

import json
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

import ratelnn
from ratelnn.calibration.histogram import BINS, AbsHistogram, decode_bins, encode_bins, \
    range_exp_for
from ratelnn.calibration.stats import TensorStats, load_statistics
from ratelnn.errors import CalibrationError
from ratelnn.quantization import thresholds as th

from helpers.stats import TENSORS, small_graph_def, calibration_graph, finish, graph_tensors, \
    start_calibration, stats_files

import tensorflow as tf

METHODS = ("naive", "kld", "percentile", "mse")


@pytest.fixture(scope="module")
def ops():
    return ratelnn.tf_init()


def stats_of(values: np.ndarray) -> TensorStats:
    values = np.asarray(values, np.float32)
    lo, hi = float(values.min()), float(values.max())
    return TensorStats(lo, hi, lo, hi, 1, values.size, AbsHistogram.of_values(values))


# ------------------------------------------------------------------ histogram arithmetic
def test_range_is_the_smallest_power_of_two_above_max():
    assert range_exp_for(1.0) == 1 and range_exp_for(0.99) == 0 and range_exp_for(3.0) == 2
    assert range_exp_for(0.0) == -64 and range_exp_for(1e-30) == -64
    assert range_exp_for(np.finfo(np.float32).max) == 128


def test_rebinning_is_exact_for_any_batch_split():
    rng = np.random.default_rng(0)
    # scales spanning 2^-20 .. 2^20, values on bin edges included
    values = np.concatenate([rng.laplace(0, s, 500) for s in (1e-6, 0.3, 7.0, 1e6)]
                            + [np.ldexp(1.0, np.arange(-20, 20)), -np.ldexp(3.0, np.arange(-20, 18))])
    values = values.astype(np.float32)
    whole = AbsHistogram.of_values(values)
    assert whole.total == values.size
    for trial in range(5):
        order = rng.permutation(values.size)
        cuts = np.sort(rng.choice(np.arange(1, values.size), size=trial * 7 + 1, replace=False))
        parts = [AbsHistogram.of_values(values[order][a:b])
                 for a, b in zip(np.r_[0, cuts], np.r_[cuts, values.size])]
        merged = parts[0]
        for p in parts[1:]:
            merged = merged.merged(p)
        assert merged == whole


def test_widening_sums_adjacent_pairs():
    h = AbsHistogram(3, np.arange(BINS))
    w = h.widened(4)
    assert w.range_exp == 4 and w.total == h.total
    assert w.bins[0] == 0 + 1 and w.bins[1] == 2 + 3 and not w.bins[BINS // 2:].any()
    assert h.widened(3 + 40).bins[0] == h.total
    with pytest.raises(ValueError, match="narrow"):
        h.widened(2)


def test_run_length_encoding_round_trips_and_rejects_bad_lengths():
    bins = np.zeros(BINS, np.int64)
    bins[[0, 5, 6, 2047]] = [3, 1, 9, 2]
    encoded = encode_bins(bins)
    assert encoded == [3, -4, 1, 9, -2040, 2]
    assert np.array_equal(decode_bins(encoded), bins)
    with pytest.raises(ValueError, match="bins"):
        decode_bins([1, -2046])
    with pytest.raises(ValueError, match="more than"):
        decode_bins([-2049])


def test_op_library_histogram_equals_numpy_reference(ops, tmp_path):
    rng = np.random.default_rng(1)
    batches = [rng.laplace(0, s, (64, 37)).astype(np.float32) for s in (1.0, 0.01, 50.0, 3.0)]
    batches.append(np.zeros(10, np.float32))
    for b in batches:
        ops.ratel_min_max(b, tensor_name="t", output_dir=str(tmp_path))
    stats = load_statistics(tmp_path)["t"]
    expected = AbsHistogram.of_values(np.concatenate([b.ravel() for b in batches]))
    assert stats.histogram == expected and stats.histogram.total == stats.count
    ops.ratel_min_max(np.zeros(7, np.float32), tensor_name="zeros", output_dir=str(tmp_path))
    zeros = load_statistics(tmp_path)["zeros"].histogram
    assert zeros.range_exp == -64 and zeros.bins[0] == 7 and zeros.total == 7


# ------------------------------------------------------------------ batch independence
def calibrate(ops, output_dir: Path, images: np.ndarray, batch_size: int) -> dict:
    graph = calibration_graph(ops, str(output_dir))
    with tf.compat.v1.Session(graph=graph) as sess:
        for start in range(0, len(images), batch_size):
            sess.run("out:0", {"x:0": images[start:start + batch_size]})
    return load_statistics(output_dir, required=TENSORS)


def thresholds_of(stats: dict, ema: bool) -> dict:
    config = {"enable_EMA": ema, "percentile": 99.9}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", th.KLDDegenerateWarning)
        return {(name, m): th.threshold_for(name, s, dict(config, quantize_algorithm=m),
                                            dtype="uint8" if s.min >= 0 else "int8")
                for name, s in stats.items() for m in METHODS}


def test_batch_size_and_order_do_not_change_histograms_or_thresholds(ops, tmp_path):
    rng = np.random.default_rng(2)
    images = (rng.laplace(0, 1.5, (256, 4, 5, 3)) + 0.3).astype(np.float32)
    one = calibrate(ops, tmp_path / "b1", images, 1)
    thirty_two = calibrate(ops, tmp_path / "b32", images, 32)
    shuffled = calibrate(ops, tmp_path / "shuffled", images[rng.permutation(256)], 32)
    for name in TENSORS:
        expected = AbsHistogram.of_values(np.concatenate([graph_tensors(images)[name].ravel()]))
        for stats in (one, thirty_two, shuffled):
            assert stats[name].histogram == expected, name
            assert stats[name].count == images.size
    reference = thresholds_of(one, ema=False)
    assert thresholds_of(thirty_two, ema=False) == reference
    assert thresholds_of(shuffled, ema=False) == reference
    assert len(set(reference.values())) > len(TENSORS)  # the methods do differ
    # EMA (naive only) depends on the split, as documented
    assert thresholds_of(one, ema=True)[("x", "naive")] != thresholds_of(thirty_two, ema=True)[("x", "naive")]


def test_two_processes_merge_to_the_histogram_of_one(ops, tmp_path):
    """A subprocess and this process calibrate halves of the data into one output_dir."""
    graphdef = tmp_path / "cal.pb"
    out = tmp_path / "two"
    graphdef.write_bytes(calibration_graph(ops, str(out)).as_graph_def().SerializeToString())
    rng = np.random.default_rng(3)
    data_a = (rng.standard_normal((5, 8, 4, 5, 3)) * 3).astype(np.float32)
    data_b = (rng.standard_normal((7, 8, 4, 5, 3)) * 40).astype(np.float32)  # wider range
    np.save(tmp_path / "a.npy", data_a)
    proc = start_calibration(ratelnn.ops_library_path("tensorflow"), graphdef,
                             tmp_path / "a.npy", threads=2)
    calibrate(ops, out, data_b.reshape(-1, 4, 5, 3), 8)
    finish(proc)
    assert len(stats_files(out)) == 2
    merged = load_statistics(out, required=TENSORS)
    single = calibrate(ops, tmp_path / "one", np.concatenate([data_a, data_b]).reshape(-1, 4, 5, 3), 8)
    for name in TENSORS:
        assert merged[name].histogram == single[name].histogram, name
        assert merged[name].histogram.total == merged[name].count
    assert thresholds_of(merged, ema=False) == thresholds_of(single, ema=False)


def test_histogram_short_of_count_or_corrupt(tmp_path):
    def write(entry):
        payload = (json.dumps({"tensors": {"t": entry}}) + "\n").encode()
        path = tmp_path / "ratel_stats" / "h-1-0.rstats"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(f"RATELSTATS 1 {zlib.crc32(payload):08x} {len(payload)}\n".encode() + payload)
        return path

    base = {"min": -1.0, "max": 1.0, "ema_min": -1.0, "ema_max": 1.0, "batches": 2, "count": 10}
    write(dict(base, hist={"range_exp": 1, "bins": [4, -2047]}))  # 4 of 10 values: partial
    stats = load_statistics(tmp_path)["t"]
    assert stats.histogram is None
    with pytest.raises(CalibrationError, match="'kld' needs the histogram of tensor 't'"):
        th.threshold_for("t", stats, {"quantize_algorithm": "kld"})
    path = write(dict(base, hist={"range_exp": 1, "bins": [4, -2040]}))
    with pytest.raises(CalibrationError, match=f"{path}.*histogram bins"):
        load_statistics(tmp_path)
    write(dict(base, hist={"range_exp": 1, "bins": [11, -2047]}))
    with pytest.raises(CalibrationError, match="more than count"):
        load_statistics(tmp_path)


# ------------------------------------------------------------------ the methods
def reference_kl(bins: np.ndarray, i: int, levels: int, eps: float = 1e-4) -> float:
    """KL(P||Q) of one candidate, straight from the definition in thresholds.py."""
    p = bins[:i].astype(np.float64)
    p[i - 1] += bins[i:].sum()
    q = np.zeros(i)
    group = (np.arange(i) * levels) // i
    for g in range(levels):
        in_group = group == g
        nonzero = (p[in_group] > 0).sum()
        if nonzero:
            q[in_group] = np.where(p[in_group] > 0, bins[:i][in_group].sum() / nonzero, 0)
    p /= p.sum()
    q = q / q.sum()
    q = np.where((p > 0) & (q == 0), eps, q)
    used = p > 0
    return float(np.sum(p[used] * np.log(p[used] / q[used])))


def test_kl_divergences_match_the_definition():
    rng = np.random.default_rng(4)
    bins = rng.poisson(rng.uniform(0, 6, 700)) * (rng.uniform(size=700) > 0.3)
    bins[600:690] = 0
    bins[695] = 4  # outliers after a gap
    candidates = np.arange(128, 700)
    fast = th._kl_divergences(bins.astype(np.float64), candidates, 128)
    slow = [reference_kl(bins, i, 128) for i in candidates]
    np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-12)


def test_laplace_thresholds_clip_the_tail():
    x = np.random.default_rng(5).laplace(0, 1, 200_000).astype(np.float32)
    s = stats_of(x)
    top = th.max_abs(s)
    w = s.histogram.bin_width
    pct = th.percentile_threshold("t", s, {"percentile": 99.9})
    assert abs(pct - np.percentile(np.abs(x), 99.9)) <= w
    assert abs(th.percentile_threshold("t", s, {}) - np.percentile(np.abs(x), 99.99)) <= w
    mse = th.mse_threshold("t", s, {})
    kld = th.kld_threshold("t", s, {})
    assert 5.0 < mse < top and 5.0 < kld < top
    # the mse choice really has the smallest expected error among a grid of thresholds
    grid = np.linspace(1.0, top, 200)
    errors = th.expected_squared_errors(s.histogram, grid, 127)
    assert th.expected_squared_errors(s.histogram, np.array([mse]), 127)[0] <= errors.min() + 1e-12
    # measured MSE of real int8 quantization agrees: mse beats max |x|
    def measured(t):
        scale = t / 127
        return np.mean((np.clip(np.round(x / scale), -127, 127) * scale - x) ** 2)
    assert measured(mse) < measured(top)
    with pytest.raises(ratelnn.config.ConfigError, match="percentile"):
        th.percentile_threshold("t", s, {"percentile": 0})


def test_kld_warns_naming_the_tensor_when_it_degenerates_to_max():
    uniform = stats_of(np.random.default_rng(6).uniform(-1, 1, 50_000))
    with pytest.warns(th.KLDDegenerateWarning, match="'flat_tensor'.*degenerates to min/max"):
        assert th.kld_threshold("flat_tensor", uniform, {}) == th.max_abs(uniform)
    laplace = stats_of(np.random.default_rng(7).laplace(0, 1, 50_000))
    with warnings.catch_warnings():
        warnings.simplefilter("error", th.KLDDegenerateWarning)
        assert th.kld_threshold("t", laplace, {}) < th.max_abs(laplace)


def test_naive_kld_mix_uses_kld_only_for_kld_nodes():
    s = stats_of(np.random.default_rng(8).laplace(0, 1, 50_000))
    cfg = {"quantize_algorithm": "naive_kld_mix", "kld_nodes": ["conv1"], "enable_EMA": False}
    assert th.threshold_for("conv1:0", s, cfg, node_name="conv1") == th.kld_threshold("t", s, {})
    assert th.threshold_for("other", s, cfg, node_name="other") == th.max_abs(s)



def test_switching_methods_reuses_one_calibration(ops, tmp_path):
    from ratelnn.frontend.tensorflow import converter
    from ratelnn.testing import run_graph

    graph_def = small_graph_def()
    config = {"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[4, 8, 8, 3]],
              "output_dir": str(tmp_path), "auto_int16": False}
    images = np.random.default_rng(10).normal(0, 1, (64, 8, 8, 3)).astype(np.float32)
    run_graph(converter(graph_def, config).to_cal(), "x:0", "prob:0", images, 4)
    ratelnn.oplib.flush_statistics()
    files = {p: p.read_bytes() for p in stats_files(tmp_path)}
    reference = run_graph(graph_def, "x:0", "prob:0", images[:16], 4)
    scales = {}
    for method in METHODS:
        conv = converter(graph_def, dict(config, quantize_algorithm=method))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", th.KLDDegenerateWarning)
            quant = run_graph(conv.to_quant(), "x:0", "prob:0", images[:16], 4)
            npu = run_graph(conv.to_npu(), "x:0", "prob:0", images[:16], 4)
            scales[method] = {t: qp.scale for t, qp in conv.quantized_ir().qparams.items()
                              if not np.ndim(qp.scale)}
        assert np.abs(quant - reference).max() < 0.1, method
        assert np.abs(npu - quant).max() < 0.05, method
    assert {p: p.read_bytes() for p in stats_files(tmp_path)} == files  # no recalibration
    assert len({tuple(sorted(s.items())) for s in scales.values()}) == len(METHODS)
