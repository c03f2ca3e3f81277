"""The calibration statistics store: persistence across threads and processes, crash
safety, merging, and the errors of ratelnn.calibration.stats.load_statistics."""
from __future__ import annotations

import signal
import time
from pathlib import Path

import numpy as np
import pytest

import ratelnn
from ratelnn.calibration.stats import TensorStats, load_statistics, merge_stats, \
    read_statistics_file
from ratelnn.errors import CalibrationError

from helpers.stats import TENSORS, calibration_graph, expected_ranges, finish, \
    random_batches, start_calibration, stats_files, write_stats_file



@pytest.fixture(scope="module")
def ops():
    return ratelnn.tf_init()


def save_graphdef(ops, output_dir: Path, path: Path) -> Path:
    path.write_bytes(calibration_graph(ops, str(output_dir)).as_graph_def().SerializeToString())
    return path


def entry(lo, hi, batches=1, count=10, ema_lo=None, ema_hi=None):
    return {"min": lo, "max": hi, "ema_min": lo if ema_lo is None else ema_lo,
            "ema_max": hi if ema_hi is None else ema_hi, "batches": batches, "count": count}


def test_two_processes_with_three_threads_each_merge_to_the_union(ops, tmp_path):
    out = tmp_path / "out"
    graphdef = save_graphdef(ops, out, tmp_path / "cal.pb")
    data_a = random_batches(seed=3, count=12, offset=-2.0)
    data_b = random_batches(seed=4, count=9, offset=5.0)
    np.save(tmp_path / "a.npy", data_a)
    np.save(tmp_path / "b.npy", data_b)
    library = ratelnn.ops_library_path("tensorflow")
    procs = [start_calibration(library, graphdef, tmp_path / f"{n}.npy", threads=3)
             for n in ("a", "b")]
    for p in procs:
        finish(p)
    files = stats_files(out)
    assert len(files) == 2  # one snapshot per process
    stats = load_statistics(out, required=TENSORS)
    assert sorted(stats) == sorted(TENSORS)
    union = expected_ranges(list(data_a) + list(data_b))
    per_file = [read_statistics_file(f) for f in files]
    for name in TENSORS:
        s = stats[name]
        assert (s.min, s.max) == union[name], name
        assert s.batches == 21 and s.count == 21 * data_a[0].size
        parts = [f[name] for f in per_file]
        assert sorted(p.batches for p in parts) == [9, 12]
        weighted = sum(p.ema_max * p.batches for p in parts) / 21
        assert s.ema_max == pytest.approx(weighted, rel=1e-12)
        assert s.min <= s.ema_min <= s.ema_max <= s.max


def test_killed_process_leaves_its_earlier_statistics_readable(ops, tmp_path):
    out = tmp_path / "out"
    graphdef = save_graphdef(ops, out, tmp_path / "cal.pb")
    data = random_batches(seed=5, count=6)
    data[0, 0, 0, 0, 0], data[0, 1, 1, 1, 1] = -50.0, 60.0  # extremes in the first batch
    np.save(tmp_path / "data.npy", data)
    proc = start_calibration(ratelnn.ops_library_path("tensorflow"), graphdef,
                             tmp_path / "data.npy", threads=3, forever=True)
    try:
        deadline = time.monotonic() + 60
        batches_on_disk = 0
        while batches_on_disk < 40:  # several periodic (0.2 s) snapshots
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no snapshot written while calibrating"
            time.sleep(0.05)
            files = stats_files(out)
            if files:
                batches_on_disk = read_statistics_file(files[0])["x"].batches
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    stats = load_statistics(out, required=TENSORS)
    assert stats["x"].batches >= batches_on_disk
    for name, (lo, hi) in expected_ranges(data).items():
        assert (stats[name].min, stats[name].max) == (lo, hi)


@pytest.fixture
def real_stats_file(ops, tmp_path) -> Path:
    """An .rstats file written by the op library."""
    out = tmp_path / "real"
    ops.ratel_min_max(np.array([1.0, -2.0, 3.5], np.float32), tensor_name='conv "1"\n',
                      output_dir=str(out))
    assert load_statistics(out)['conv "1"\n'] == TensorStats(-2.0, 3.5, -2.0, 3.5, 1, 3)
    (path,) = stats_files(out)
    return path


@pytest.mark.parametrize("damage", ["flip_payload", "flip_header", "truncate", "extend",
                                    "empty", "future_version"])
def test_corrupt_file_raises_naming_the_file(real_stats_file, damage):
    data = bytearray(real_stats_file.read_bytes())
    header_end = data.index(b"\n")
    if damage == "flip_payload":
        data[header_end + 10] ^= 0x04
    elif damage == "flip_header":
        data[header_end - 3] = ord("x")
    elif damage == "truncate":
        data = data[:-7]
    elif damage == "extend":
        data += b" "
    elif damage == "empty":
        data = bytearray()
    else:
        data = data.replace(b"RATELSTATS 1 ", b"RATELSTATS 2 ", 1)
    real_stats_file.write_bytes(bytes(data))
    with pytest.raises(CalibrationError, match=str(real_stats_file)):
        load_statistics(real_stats_file.parent.parent)


def test_non_finite_value_in_file_is_rejected(tmp_path):
    path = tmp_path / "ratel_stats" / "h-1-0.rstats"
    write_stats_file(path, {"a": entry(float("nan"), 1.0)})
    with pytest.raises(CalibrationError, match=f"non-finite.*{path}"):
        load_statistics(tmp_path)


def test_no_statistics_says_to_run_the_calibration_model(tmp_path):
    with pytest.raises(CalibrationError, match="no calibration statistics found in .*run the "
                                               "calibration model"):
        load_statistics(tmp_path)
    (tmp_path / "ratel_stats").mkdir()
    (tmp_path / "ratel_stats" / ".h-1-0.rstats.tmp").write_text("partial garbage")
    with pytest.raises(CalibrationError, match="no calibration statistics found"):
        load_statistics(tmp_path)


def test_missing_required_tensors_are_named(tmp_path):
    write_stats_file(tmp_path / "ratel_stats" / "h-1-0.rstats", {"a": entry(0.0, 1.0)})
    with pytest.raises(CalibrationError, match="lack 2 required tensor\\(s\\): 'b', 'c'"):
        load_statistics(tmp_path, required=["a", "b", "c"])


def test_merge_of_files_from_several_processes(tmp_path):
    d = tmp_path / "ratel_stats"
    write_stats_file(d / "h-1-0.rstats", {"a": entry(-1.0, 2.0, 3, 30, -0.5, 1.5),
                                          "only1": entry(0.0, 1.0)})
    write_stats_file(d / "h-2-0.rstats", {"a": entry(-3.0, 1.0, 1, 10, -3.0, 1.0)})
    (d / ".h-3-0.rstats.tmp").write_text("left by a killed writer")
    stats = load_statistics(tmp_path, required=["a", "only1"])
    assert stats["a"] == TensorStats(min=-3.0, max=2.0, ema_min=(-0.5 * 3 - 3.0) / 4,
                                     ema_max=(1.5 * 3 + 1.0) / 4, batches=4, count=40)
    assert stats["only1"] == TensorStats(0.0, 1.0, 0.0, 1.0, 1, 10)
    assert merge_stats([stats["a"]]) == stats["a"]


def test_directory_named_rstats_is_a_clear_error(tmp_path):
    (tmp_path / "ratel_stats" / "h-1-0.rstats").mkdir(parents=True)
    with pytest.raises(CalibrationError, match="h-1-0.rstats is a directory, not a calibration "
                                               "statistics file"):
        load_statistics(tmp_path)


def test_histogram_count_beyond_int64_is_a_corrupt_file(tmp_path):
    """A bin count beyond int64 (10^30) is a corrupt file, not a raw OverflowError."""
    path = tmp_path / "ratel_stats" / "h-1-0.rstats"
    write_stats_file(path, {"a": {"min": -1.0, "max": 1.0, "ema_min": -1.0, "ema_max": 1.0, "batches": 1,
                                  "count": 10 ** 30, "hist": {"range_exp": 0, "bins": [10 ** 30, -2047]}}})
    with pytest.raises(CalibrationError, match=f"corrupt .*{path}.*histogram entry 10+ is larger than 2\\^51"):
        load_statistics(tmp_path)
