"""The command line on bad input and interrupted builds (docs/reliability.md): statistics
reuse is announced and --fresh starts over; the forms of a build are a set with a manifest
written last; --set values keep the promises of docs/cli.md; run refuses NaN input (exit 1)
and files that are not numpy files (exit 2)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ratelnn.cli import main
from ratelnn.cli.build import check_build

from helpers.stats import small_graph_def


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("clirel")
    (d / "m.pb").write_bytes(small_graph_def().SerializeToString())
    (d / "m.json").write_text(json.dumps({"input_nodes": ["x"], "output_nodes": ["prob"],
                                          "input_shapes": [[4, 8, 8, 3]], "model_name": "m",
                                          "output_dir": str(d / "out")}))
    np.save(d / "x.npy", np.random.default_rng(0).normal(0, 1, (8, 8, 8, 3)).astype(np.float32))
    return d


def build(files, *more):
    return main(["build", str(files / "m.json"), "--model", str(files / "m.pb"), "--data",
                 str(files / "x.npy"), "--no-progress", *more])


def test_build_announces_reused_statistics_and_fresh_starts_over(files, tmp_path, capsys):
    out = tmp_path / "o"
    assert build(files, "--set", f"output_dir={out}", "--forms", "quant") == 0
    assert "reusing" not in capsys.readouterr().err
    assert build(files, "--set", f"output_dir={out}", "--forms", "quant") == 0
    assert "reusing the calibration statistics" in capsys.readouterr().err
    assert build(files, "--set", f"output_dir={out}", "--forms", "quant", "--fresh") == 0
    assert "--fresh: deleting" in capsys.readouterr().err
    from ratelnn.calibration.stats import load_statistics
    assert all(s.batches == 2 for s in load_statistics(out).values())  # one run of 2 batches


def test_build_writes_its_forms_as_a_set_with_a_manifest_last(files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    assert build(files, "--set", f"output_dir={out}") == 0
    assert check_build(out, "m") == []
    assert sorted(json.loads((out / "m_build.json").read_text())["files"]) == \
        ["m_cal.pb", "m_effective_config.json", "m_npu.pb", "m_quant.pb", "m_quant_table.json"]
    # a second build killed between its renames: no manifest claims the mixed set
    real_replace, calls = os.replace, []

    def dies_on_second(src, dst):
        if Path(dst).parent == out and Path(dst).suffix == ".pb":  # renames into place
            calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_replace(src, dst)
    monkeypatch.setattr(os, "replace", dies_on_second)
    assert build(files, "--set", f"output_dir={out}", "--set", "quantize_algorithm=kld") == 130
    monkeypatch.undo()
    assert check_build(out, "m") == [f"{out / 'm_build.json'} is missing: the build did not complete"]
    assert not [p for p in out.iterdir() if p.name.startswith(".m-build-")]


def test_set_values_follow_the_documented_promises(files, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert build(files, "--set", 'input_shapes="abc"') == 2
    err = capsys.readouterr().err
    assert "input_shapes must be a list of shapes" in err and "Traceback" not in err
    assert build(files, "--set", "output_dir=12345", "--forms", "cal") == 0
    assert (tmp_path / "12345" / "m_cal.pb").is_file()


def test_run_refuses_nan_input_with_exit_1_and_non_numpy_files_with_exit_2(files, tmp_path, capsys):
    np.save(tmp_path / "nan.npy", np.full((4, 8, 8, 3), np.nan, np.float32))
    assert main(["run", str(files / "m.pb"), "--input", str(tmp_path / "nan.npy")]) == 1
    assert "input 'x' holds 768 NaN or Inf value(s)" in capsys.readouterr().err
    (tmp_path / "x.json").write_text("[[1, 2, 3]]")
    assert main(["run", str(files / "m.pb"), "--input", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "not a .npy or .npz file" in err and "Unpickling" not in err
