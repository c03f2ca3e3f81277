"""The conversion steps pause Python's cyclic garbage collector and give it back as the user
left it; the loop over calibration batches (user data) runs with it as the user set it."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import ratelnn
from ratelnn.frontend.tensorflow import converter, joint_converter
from ratelnn.gc_pause import collector_paused
from helpers.stats import small_graph_def


@pytest.fixture
def collector_enabled():
    """The collector enabled for the test, restored afterwards."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def collector_states_at_export(handler) -> list:
    """A list that gets ``gc.isenabled()`` at each of ``handler``'s exports from now on (the
    real export still runs)."""
    states, export_graph = [], handler.export_graph

    def export_and_record(graph):
        states.append(gc.isenabled())
        return export_graph(graph)
    handler.export_graph = export_and_record
    return states


def test_nested_pauses_resume_once_the_outermost_ends(collector_enabled):
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_user_disabled_stays_disabled(collector_enabled):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_an_error_in_the_step_still_resumes_the_collector(collector_enabled):
    with pytest.raises(RuntimeError):
        with collector_paused():
            raise RuntimeError("step failed")
    assert gc.isenabled()


def test_concurrent_pauses_resume_when_the_last_ends(collector_enabled):
    inside, release = threading.Event(), threading.Event()

    def other_step():
        with collector_paused():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=other_step)
    worker.start()
    assert inside.wait(10)
    with collector_paused():
        pass
    assert not gc.isenabled()          # the other thread's step is still running
    release.set()
    worker.join(10)
    assert gc.isenabled()


def test_conversion_steps_pause_and_calibration_batches_do_not(collector_enabled, tmp_path):
    ratelnn.tf_init()
    seen = []

    def batches():
        for seed in range(3):
            seen.append(gc.isenabled())
            yield np.random.default_rng(seed).uniform(0, 1, (4, 8, 8, 3)).astype(np.float32)

    config = {"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[4, 8, 8, 3]],
              "output_dir": str(tmp_path), "accuracy_auto": False}
    conv = converter(small_graph_def(), config)
    assert gc.isenabled()
    exported = collector_states_at_export(conv.handler)
    conv.calibrate(batches(), batch_size=4, progress=False)
    assert seen == [True, True, True] and gc.isenabled()
    conv.to_quant()
    conv.to_npu()
    assert exported == [False, False, False] and gc.isenabled()   # calibration, quantized, compiled


def test_the_joint_compiler_exports_with_the_collector_paused(collector_enabled, tmp_path):
    ratelnn.tf_init()
    configs = [{"input_nodes": ["x"], "output_nodes": ["prob"], "input_shapes": [[4, 8, 8, 3]],
                "output_dir": str(tmp_path / f"m{seed}"), "model_name": f"net{seed}", "accuracy_auto": False}
               for seed in (1, 2)]
    jc = joint_converter([small_graph_def(seed) for seed in (1, 2)], configs, device_info={0: 2})
    for seed, c in enumerate(jc.converters):
        c.calibrate(np.random.default_rng(seed).uniform(0, 1, (8, 8, 8, 3)).astype(np.float32), progress=False)
    exported = collector_states_at_export(jc.converters[0].handler)
    assert len(jc.to_npu()) == 2
    assert exported == [False, False] and gc.isenabled()
