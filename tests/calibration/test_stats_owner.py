"""Statistics belong to one model (docs/statistics.md "Owner"): the
manifest names the model whose calibration writes into an output_dir, another model's
statistics are refused naming both, and the in-memory store is per output_dir and recovers
from a failed write."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ratelnn.calibration.stats import load_statistics
from ratelnn.errors import CalibrationError
from ratelnn.frontend.tensorflow import converter

from helpers.stats import small_graph_def, write_stats_file


def config(out, **extra):
    return {"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[4, 8, 8, 3]],
            "output_dir": str(out), **extra}


def data(seed=0):
    return np.random.default_rng(seed).normal(0, 1, (8, 8, 8, 3)).astype(np.float32)


def test_second_model_in_one_output_dir_is_refused_naming_both(tmp_path):
    out = tmp_path / "out"
    a = converter(small_graph_def(9), config(out, model_name="model_a"))
    b = converter(small_graph_def(10), config(out, model_name="model_b"))
    assert a.fingerprint != b.fingerprint
    a.calibrate(data(), progress=False)
    for call in (b.to_cal, b.to_quant, lambda: b.calibrate(data(), progress=False)):
        with pytest.raises(CalibrationError, match="model 'model_a'.*not of model 'model_b'"
                                                   ".*merge_statistics"):
            call()
    manifest = json.loads((out / "ratel_stats" / "manifest.json").read_text())
    assert [m["model"] for m in manifest["models"]] == ["model_a"]
    a.to_quant()  # the owner still quantizes


def test_merge_statistics_lets_two_models_share_a_directory(tmp_path):
    out = tmp_path / "out"
    converter(small_graph_def(9), config(out)).calibrate(data(), progress=False)
    b = converter(small_graph_def(10), config(out, merge_statistics=True))
    b.calibrate(data(1), progress=False)
    b.to_quant()
    manifest = json.loads((out / "ratel_stats" / "manifest.json").read_text())
    assert len(manifest["models"]) == 2


def test_same_model_recalibrating_accumulates(tmp_path):
    out = tmp_path / "out"
    first = converter(small_graph_def(9), config(out)).calibrate(data(0), progress=False)
    again = converter(small_graph_def(9), config(out)).calibrate(data(1), progress=False)
    assert all(again[t].batches == 2 * first[t].batches for t in first)


def test_file_of_another_calibration_is_refused_naming_it(tmp_path):
    out = tmp_path / "out"
    converter(small_graph_def(9), config(out)).calibrate(data(), progress=False)
    stray = out / "ratel_stats" / "otherhost-1-0.rstats"
    write_stats_file(stray, {"not_in_this_model": {"min": 0.0, "max": 1.0, "ema_min": 0.0,
                                                   "ema_max": 1.0, "batches": 1, "count": 4}})
    with pytest.raises(CalibrationError, match=f"{stray}.*another calibration"):
        load_statistics(out)


def test_old_statistics_without_manifest_stay_readable_with_a_warning(tmp_path):
    out = tmp_path / "out"
    conv = converter(small_graph_def(9), config(out))
    conv.calibrate(data(), progress=False)
    (out / "ratel_stats" / "manifest.json").unlink()
    fresh = converter(small_graph_def(9), config(out))
    with pytest.warns(UserWarning, match="no manifest.*older ratelnn"):
        fresh.to_quant()


def test_deleted_statistics_start_fresh_in_the_same_process(tmp_path):
    out = tmp_path / "out"
    converter(small_graph_def(9), config(out)).calibrate(data(), progress=False)
    shutil.rmtree(out / "ratel_stats")
    # another model now, same process: model 9's in-memory statistics must not come back
    stats = converter(small_graph_def(10), config(out)).calibrate(data(), progress=False)
    assert all(s.batches == 2 for s in stats.values())  # 8 samples at batch 4


def test_failed_write_does_not_poison_other_directories(tmp_path):
    import tensorflow as tf
    from ratelnn.runners import runner_for

    bad = tmp_path / "bad"
    conv = converter(small_graph_def(9), config(bad))
    cal = conv.to_cal()
    shutil.rmtree(bad / "ratel_stats", ignore_errors=True)
    bad.mkdir(exist_ok=True)
    (bad / "ratel_stats").write_text("a file where the statistics directory should be")
    with pytest.raises((tf.errors.FailedPreconditionError, CalibrationError)):
        runner = runner_for("tensorflow", cal)
        runner.run({"x:0": data()[:4]}, ["prob"])
        load_statistics(bad)
    # another directory in the same process works
    good = converter(small_graph_def(9), config(tmp_path / "good"))
    good.calibrate(data(), progress=False)
    good.to_quant()
    # and the failed one recovers once it is writable
    (bad / "ratel_stats").unlink()
    assert load_statistics(bad)
