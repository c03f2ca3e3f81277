"""Calibration on a local Ray cluster of 2 workers (ratelnn.distributed).

Exactness: the statistics (every field, histograms included), the thresholds and the
quantized and compiled TensorFlow models (engine bytes included) of a distributed run equal
those of one process over the same data, for every quantize_algorithm (naive with EMA too:
the driver recomputes the moving averages over the ordered per-batch ranges).  Faults: an
actor killed mid-run costs a retry of its shards only and the result is still exact; a run
out of attempts fails with a clear error and writes no statistics.  One Ray instance per
session (tests/distributed/conftest.py)."""
from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray")

ALGORITHMS = ("naive", "kld", "percentile", "mse")


@pytest.fixture(scope="module")
def single(model, make_converter, tmp_path_factory):
    """(output_dir, statistics) of the single-process calibration."""
    out = tmp_path_factory.mktemp("single")
    return out, make_converter(out).calibrate(model[3], progress=False)


@pytest.fixture(scope="module")
def distributed(model, make_converter, executor, tmp_path_factory):
    out = tmp_path_factory.mktemp("ray")
    stats = make_converter(out).calibrate(model[3], progress=False, executor=executor)
    return out, stats, executor.last_run


def _assert_same_statistics(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name                  # min, max, ema_min/max, batches, count
        assert a[name].histogram == b[name].histogram, name


def test_distributed_statistics_equal_single_process(single, distributed):
    _, reference = single
    out, stats, report = distributed
    _assert_same_statistics(stats, reference)
    assert report.shards == 6 and report.batches == 12 and not report.retried_shards
    assert len(set(report.pids.values())) == 2, "both workers ran shards"
    files = list((out / "ratel_stats").glob("*.rstats"))
    assert len(files) == 1, "the driver writes one merged snapshot"
    assert not list((out / "ratel_stats").glob(".*.tmp")), "no temporary files left"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_method_identical_thresholds_and_models(make_converter, single, distributed, algorithm):
    one = make_converter(single[0], algorithm)
    many = make_converter(distributed[0], algorithm)
    q_one, q_many = one.quantized_ir(), many.quantized_ir()
    assert q_one.qparams.keys() == q_many.qparams.keys()
    for name, p in q_one.qparams.items():
        o = q_many.qparams[name]
        assert (p.dtype, p.axis) == (o.dtype, o.axis) and np.array_equal(p.scale, o.scale), name
    ser = lambda g: g.SerializeToString(deterministic=True)  # noqa: E731
    assert ser(one.to_quant()) == ser(many.to_quant())
    npu_one, npu_many = one.to_npu(), many.to_npu()
    assert any(n.op == "RatelEngineOp" for n in npu_one.node)
    assert ser(npu_one) == ser(npu_many)


def test_killed_worker_retries_its_shards_only(model, make_converter, single, executor, tmp_path, monkeypatch):
    killed, pid_of = [], {}

    def note_pid(shard, actor_index):
        pid_of[actor_index] = executor.last_run.pids[shard]

    def kill_while_it_holds_a_shard(shard, actor_index):
        """Once an actor has returned a shard, kill it right after it is sent another: that
        shard is in flight on it, so it must be retried elsewhere (deterministic, unlike
        killing an actor that may already have returned everything)."""
        if actor_index in pid_of and not killed:
            killed.append(pid_of[actor_index])
            ray.kill(executor.actors[actor_index])

    monkeypatch.setattr(executor, "_on_shard_done", note_pid)
    monkeypatch.setattr(executor, "_on_shard_submitted", kill_while_it_holds_a_shard)
    stats = make_converter(tmp_path).calibrate(model[3], progress=False, executor=executor)
    report = executor.last_run
    assert report.workers_lost == 1 and report.retried_shards
    assert report.shards == 6 and report.batches == 12          # every shard counted once
    assert report.attempts == 6 + len(report.retried_shards)
    assert killed[0] not in {report.pids[s] for s in report.retried_shards}
    _assert_same_statistics(stats, single[1])


def test_out_of_attempts_fails_clearly_and_writes_nothing(model, make_converter, executor, tmp_path,
                                                         monkeypatch):
    from ratelnn.errors import CalibrationError

    def kill_it_with_its_shard(shard, actor_index):
        ray.kill(executor.actors[actor_index])   # the shard just sent is lost with it

    monkeypatch.setattr(executor, "_on_shard_submitted", kill_it_with_its_shard)
    monkeypatch.setattr(executor, "max_attempts", 1)
    with pytest.raises(CalibrationError, match=r"lost with its worker.*no statistics were written"):
        make_converter(tmp_path).calibrate(model[3], progress=False, executor=executor)
    assert not list((tmp_path / "ratel_stats").glob("*.rstats"))
