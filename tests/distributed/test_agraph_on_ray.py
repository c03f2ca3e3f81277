"""agraph.evaluate(executor=RayExecutor): the zoo model's batches run on the Ray workers
(map_blocks) and its evaluate() on the driver.  The metrics equal a one-process evaluation
(docs/agraph.md, "Evaluation on Ray")."""
import pytest

pytest.importorskip("ray")


def test_zoo_evaluation_on_the_executor_equals_one_process(executor, request, tmp_path, monkeypatch):
    import agraph
    from agraph import datasets, parallel

    datasets.prepare("digits", tmp_path / "data")
    monkeypatch.setenv("AGRAPH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("AGRAPH_WEIGHTS_DIR", str(request.config.cache.mkdir("ratelnn-models")))
    monkeypatch.setenv("AGRAPH_HOME", str(tmp_path / "home"))
    local = {s: agraph.evaluate("digits_cnn_mx", s, progress=False) for s in ("fp32", "npu")}
    replays = []

    class Recorded(parallel.Replay):
        def __init__(self, *args):
            super().__init__(*args)
            replays.append(self)
    monkeypatch.setattr(parallel, "Replay", Recorded)
    on_ray = {s: agraph.evaluate("digits_cnn_mx", s, executor=executor, progress=False) for s in ("fp32", "npu")}
    for stage in ("fp32", "npu"):
        assert on_ray[stage].metrics == local[stage].metrics and on_ray[stage].samples == 449
    # fp32: the model; npu: the model and its fp32 reference; every batch (15 of 32) from Ray
    assert [r.replayed for r in replays] == [15, 15, 15] and not any(r.pairs for r in replays)
