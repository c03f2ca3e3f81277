"""The ``ratelnn`` command line (docs/architecture.md §10): build / run / inspect / joint driven through
``ratelnn.cli.main`` in this process on tiny Keras models frozen to .pb (real TensorFlow
sessions, engines on the emulated NPU), one MXNet checkpoint, one real ``python -m ratelnn``
subprocess, and the exit codes and messages of bad input."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

import tensorflow as tf

from ratelnn.analysis import Report  # noqa: E402
from ratelnn.cli import main  # noqa: E402
from ratelnn.cli.common import parse_override  # noqa: E402
from ratelnn.fileio import write_atomic  # noqa: E402
from ratelnn.frontend.tensorflow import freeze_keras  # noqa: E402
from ratelnn.runners import run_model  # noqa: E402

from helpers.cli import call
from helpers.paths import REPO

BATCH = 4
SAMPLES = 10          # 3 batches of 4, the last one partial
IMAGE = (8, 8, 3)
# tests marked no_tf_math run no TensorFlow kernel: --help, MXNet, pure helpers (tests/conftest.py)


def _frozen_keras(path: Path, seed: int, image, width: int, classes: int):
    """A conv/pool/dense Keras model frozen to ``path`` (.pb); returns (input, output) node names."""
    tf.keras.utils.set_random_seed(seed)
    inp = tf.keras.Input(image)
    x = tf.keras.layers.Conv2D(width, 3, padding="same", activation="relu")(inp)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    out = tf.keras.layers.Dense(classes, activation="softmax")(x)
    graph_def, ins, outs = freeze_keras(tf.keras.Model(inp, out), input_shapes=[[None, *image]])
    path.write_bytes(graph_def.SerializeToString())
    return ins[0], outs[0]


def _png_tar(path: Path, u8: np.ndarray) -> Path:
    from PIL import Image
    with tarfile.open(path, "w") as tar:
        for i, img in enumerate(u8):
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="PNG")
            info = tarfile.TarInfo(f"images/{i:03d}.png")
            info.size = buf.tell()
            buf.seek(0)
            tar.addfile(info, buf)
    return path


def _graph_def(path: Path):
    g = tf.compat.v1.GraphDef()
    g.ParseFromString(Path(path).read_bytes())
    return g


def _files(directory: Path):
    return sorted(p.name for p in Path(directory).rglob("*") if p.is_file()) if Path(directory).exists() else []


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Files of a tiny model: model .pb, config .json, data .npy (pixels / 255) and the same
    pixels as a tar of PNG images."""
    d = tmp_path_factory.mktemp("cli")
    in_node, out_node = _frozen_keras(d / "tiny.pb", 0, IMAGE, 4, 3)
    u8 = np.random.default_rng(0).integers(0, 256, (SAMPLES, *IMAGE), dtype=np.uint8)
    x = u8.astype(np.float32) / 255.0
    np.save(d / "x.npy", x)
    _png_tar(d / "images.tar", u8)
    config = {"input_nodes": [in_node], "output_nodes": [out_node], "input_shapes": [[BATCH, *IMAGE]],
              "output_dir": str(d / "out"), "model_name": "tiny"}
    (d / "tiny.json").write_text(json.dumps(config))
    return {"dir": d, "x": x, "in": in_node, "out": out_node, "config": d / "tiny.json", "model": d / "tiny.pb",
            "npy": d / "x.npy", "tar": d / "images.tar"}


@pytest.fixture(scope="module")
def built(tiny):
    """``ratelnn build`` of the tiny model on the .npy data with the precision table."""
    code, out, err = call(["build", str(tiny["config"]), "--model", str(tiny["model"]), "--data", str(tiny["npy"]),
                           "--analyze", "--no-progress"])
    return code, out, err, tiny["dir"] / "out"


@pytest.mark.no_tf_math
def test_python_dash_m_help_runs_in_a_real_subprocess():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "ratelnn", "--help"], capture_output=True, text=True,
                          env=env, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    for command in ("build", "run", "inspect", "joint"):
        assert command in done.stdout


def test_build_writes_every_form_atomically_and_prints_profile_and_precision(built):
    code, out, err, out_dir = built
    assert code == 0, err
    cal, quant, npu = (_graph_def(out_dir / f"tiny_{form}.pb") for form in ("cal", "quant", "npu"))
    assert any(n.op == "RatelMinMax" for n in cal.node)
    assert any(n.op == "RatelQuant" for n in quant.node) and not any(n.op == "RatelEngineOp" for n in quant.node)
    assert [n.name for n in npu.node if n.op == "RatelEngineOp"] == ["tiny_engine_0"]
    assert not [f for f in _files(out_dir) if f.startswith(".")], "temporary files left behind"
    assert "NPU profile (batch 4): latency" in out and "engine tiny_engine_0" in out
    assert "float vs npu on 8 samples" in out          # --analyze-batches default 2 x batch 4
    report = Report.from_json((out_dir / "tiny_analysis_npu.json").read_text())
    assert report.against == "npu" and [r.op for r in report.rows][:2] == ["Input", "Conv2D"]
    assert all(r.name in out for r in report.rows)
    assert next(iter(report.output_similarity.values()))["cosine"] > 0.999


def test_build_from_a_tar_of_pngs_with_overrides_gives_the_same_engine(tiny, built, tmp_path, capsys):
    out_dir = tmp_path / "from_tar"
    code = main(["build", str(tiny["config"]), "--model", str(tiny["model"]), "--data", str(tiny["tar"]),
                 "--set", f"output_dir={out_dir}", "--set", "std=255", "--forms", "npu", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert [f for f in _files(out_dir) if f.endswith(".pb")] == ["tiny_npu.pb"]
    engine_of = lambda g: next(n.attr["engine"].s for n in g.node if n.op == "RatelEngineOp")  # noqa: E731
    # the PNG pixels / 255 are the .npy samples: same statistics, same engine bytes
    assert engine_of(_graph_def(out_dir / "tiny_npu.pb")) == engine_of(_graph_def(built[3] / "tiny_npu.pb"))


def test_run_executes_the_compiled_model_in_batches_and_reports_device_time(tiny, built, tmp_path, capsys):
    npu_path = built[3] / "tiny_npu.pb"
    code = main(["run", str(npu_path), "--input", str(tiny["npy"]), "--output", str(tmp_path / "y.npy")])
    out = capsys.readouterr().out
    assert code == 0
    got = np.load(tmp_path / "y.npy")
    assert got.shape == (SAMPLES, 3)
    npu = _graph_def(npu_path)
    x = tiny["x"]
    feeds = lambda rows: {tiny["in"]: x[rows]}  # noqa: E731
    want = np.concatenate([run_model("tensorflow", npu, feeds(slice(0, 4)), [tiny["out"]])[0],
                           run_model("tensorflow", npu, feeds(slice(4, 8)), [tiny["out"]])[0],
                           run_model("tensorflow", npu, feeds([8, 9, 8, 9]), [tiny["out"]])[0][:2]])
    np.testing.assert_array_equal(got, want)
    float_out = run_model("tensorflow", _graph_def(tiny["model"]), {tiny["in"]: x}, [tiny["out"]])[0]
    assert np.abs(got - float_out).max() < 0.02
    # the compiled model keeps the free batch of the Keras model: one run
    assert "device time (recorded)" in out and "for 1 engine runs, 10 samples" in out
    assert "device time (cost model)" in out


def test_inspect_lists_engines_ops_and_io(built, capsys):
    out_dir = built[3]
    assert main(["inspect", str(out_dir / "tiny_npu.pb"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "compiled" and info["framework"] == "tensorflow"
    assert info["inputs"][0]["dtype"] == "float32" and info["inputs"][0]["shape"] == [None, *IMAGE]
    (engine,) = info["engines"]
    assert engine["name"] == "tiny_engine_0" and engine["split_mode"].startswith("SPLIT_")
    assert engine["instructions"] >= 3 and engine["constants_bytes"] > 4 * 3 * 3 * 3
    assert engine["sram_bytes"] > 0 and engine["cycles"] > 0 and engine["core_ids"]
    assert engine["inputs"][0]["dtype"] in ("int8", "uint8", "int16") and engine["inputs"][0]["scale"] > 0
    assert {op["role"] for op in info["ops"]} == {"quantize", "dequantize"}
    assert main(["inspect", str(out_dir / "tiny_quant.pb")]) == 0
    text = capsys.readouterr().out
    assert "tensorflow quantized model" in text and "engines (0)" in text and "float       Conv2D" in text


def test_joint_builds_two_models_and_writes_scheme_and_timeline(tiny, tmp_path, capsys):
    in2, out2 = _frozen_keras(tmp_path / "second.pb", 1, (6, 6, 2), 8, 2)
    np.save(tmp_path / "x2.npy", {in2: np.random.default_rng(2).normal(size=(6, 6, 6, 2)).astype(np.float32)})
    (tmp_path / "second.toml").write_text(
        f'input_nodes = ["{in2}"]\noutput_nodes = ["{out2}"]\ninput_shapes = [[2, 6, 6, 2]]\n'
        f'output_dir = "{tmp_path / "second_out"}"\nmodel_name = "second"\n')
    first = {**json.loads(tiny["config"].read_text()), "output_dir": str(tmp_path / "first_out")}
    (tmp_path / "joint.json").write_text(json.dumps({
        "models": [{"model": str(tiny["model"]), "config": first, "data": str(tiny["npy"])},
                   {"model": "second.pb", "config": "second.toml", "data": "x2.npy", "framework": "tensorflow"}],
        "device_info": {"0": 4}, "output_dir": "joint_out"}))
    assert main(["joint", str(tmp_path / "joint.json"), "--no-progress", "--frames", "50"]) == 0
    out = capsys.readouterr().out
    npu = _graph_def(tmp_path / "second_out" / "second_npu.pb")
    assert [n.name for n in npu.node if n.op == "RatelEngineOp"] == ["second_engine_0"]
    assert (tmp_path / "first_out" / "tiny_npu.pb").exists()
    assert (tmp_path / "joint_out" / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for strategy in ("chosen", "serial_all_cores", "round_robin", "first_fit_sram"):
        assert strategy in out
    assert "tiny_engine_0" in out and "second_engine_0" in out
    assert main(["inspect", str(tmp_path / "joint_out" / "scheme.json"), "--json"]) == 0
    scheme = json.loads(capsys.readouterr().out)
    assert scheme["format"] == "ratelnn.scheme"
    assert sorted(e["engine_name"] for e in scheme["engines"]) == ["second_engine_0", "tiny_engine_0"]


@pytest.mark.no_tf_math
def test_mxnet_checkpoint_build_inspect_and_run(tmp_path, capsys):
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    nn = mx.gluon.nn
    mx.random.seed(0)
    net = nn.HybridSequential(prefix="cli_")   # fixed names, whatever Gluon built before
    with net.name_scope():
        net.add(nn.Conv2D(4, 3, padding=1, activation="relu"), nn.GlobalAvgPool2D(), nn.Flatten(),
                nn.Dense(3))
    net.initialize()
    net.hybridize()
    x = np.random.default_rng(3).uniform(0, 1, (SAMPLES, 3, 8, 8)).astype(np.float32)
    net(mx.nd.array(x[:2]))
    net.export(str(tmp_path / "mxnet"))
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "cfg.yaml").write_text(
        f"input_nodes: [data]\noutput_nodes: [cli_dense0_fwd]\ninput_shapes: [[{BATCH}, 3, 8, 8]]\n"
        f"output_dir: {tmp_path / 'out'}\nmodel_name: mxtiny\n")
    assert main(["build", str(tmp_path / "cfg.yaml"), "--model", str(tmp_path / "mxnet"), "--data",
                 str(tmp_path / "x.npy"), "--forms", "quant,npu", "--no-progress"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_file()) == [
        "mxtiny_build.json", "mxtiny_effective_config.json", "mxtiny_npu-0000.params", "mxtiny_npu-symbol.json",
        "mxtiny_quant-0000.params", "mxtiny_quant-symbol.json", "mxtiny_quant_table.json"]
    prefix = str(tmp_path / "out" / "mxtiny_npu")
    capsys.readouterr()
    assert main(["inspect", prefix, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["framework"] == "mxnet" and [e["name"] for e in info["engines"]] == ["mxtiny_engine_0"]
    assert main(["run", prefix + "-symbol.json", "--input", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path / "y.npy")]) == 0
    got = np.load(tmp_path / "y.npy")
    want = net(mx.nd.array(x)).asnumpy()
    assert got.shape == want.shape
    cosine = float(got.ravel() @ want.ravel() / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.995, cosine


# ------------------------------------------------------------------ bad input
def _bad_config_cases(tiny, d: Path):
    good = json.loads(tiny["config"].read_text())
    good["output_dir"] = str(d / "out")
    (d / "good.json").write_text(json.dumps(good))
    (d / "broken.json").write_text(json.dumps(good)[:-5])
    (d / "no_output_dir.json").write_text(json.dumps({k: v for k, v in good.items() if k != "output_dir"}))
    model, data = str(tiny["model"]), str(tiny["npy"])
    build = lambda cfg, *more: ["build", str(d / cfg), "--model", model, "--data", data, *more]  # noqa: E731
    return {
        "malformed config": (build("broken.json"), "cannot parse"),
        "missing config key": (build("no_output_dir.json"), "'output_dir' is required"),
        "missing config file": (build("absent.json"), "config file"),
        "override without =": (build("good.json", "--set", "quantize_algorithm"), "key.sub=value"),
        "invalid override value": (build("good.json", "--set", "quantize_algorithm=best"), "quantize_algorithm"),
        "override into a list": (build("good.json", "--set", "input_shapes.batch=2"), "input_shapes"),
        "missing model": (["build", str(d / "good.json"), "--model", str(d / "absent.pb"), "--data", data],
                          "absent.pb does not exist"),
        "missing data": (["build", str(d / "good.json"), "--model", model, "--data", str(d / "absent.npy")],
                         "absent.npy does not exist"),
        "unknown form": (build("good.json", "--forms", "quant,fast"), "--forms"),
        "bad device_info": (build("good.json", "--device-info", "{\"0\": 99}"), "99"),
        "missing --model": (["build", str(d / "good.json")], "--model"),
    }


CASES = ["malformed config", "missing config key", "missing config file", "override without =",
         "invalid override value", "override into a list", "missing model", "missing data", "unknown form",
         "bad device_info", "missing --model"]


@pytest.mark.parametrize("case", CASES)
def test_usage_and_config_errors_exit_2_with_one_line_and_no_output(tiny, tmp_path, capsys, case):
    argv, expected = _bad_config_cases(tiny, tmp_path)[case]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert _files(tmp_path / "out") == []


def test_model_errors_exit_1_naming_the_node_and_debug_prints_the_traceback(tiny, tmp_path, capsys):
    argv = ["build", str(tiny["config"]), "--model", str(tiny["model"]), "--data", str(tiny["npy"]),
            "--set", f"output_dir={tmp_path / 'out'}", "--set", 'output_nodes=["no_such_node"]']
    assert main(argv) == 1
    err = capsys.readouterr().err
    (line,) = [l for l in err.splitlines() if "error" in l]
    assert line.startswith("ratelnn build: error: ") and "no_such_node" in line
    assert _files(tmp_path / "out") == []
    assert main(argv + ["--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_joint_list_errors_exit_2(tiny, tmp_path, capsys):
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "mixed.json").write_text(json.dumps([
        {"model": str(tiny["model"]), "config": str(tiny["config"]), "data": str(tiny["npy"])},
        {"model": str(tiny["model"]), "config": str(tiny["config"]), "data": str(tiny["npy"]), "framework": "mxnet"}]))
    assert main(["joint", str(tmp_path / "empty.json")]) == 2
    assert "non-empty list" in capsys.readouterr().err
    assert main(["joint", str(tmp_path / "mixed.json")]) == 2
    assert "MXNet symbol file" in capsys.readouterr().err


def test_run_and_inspect_errors(tiny, tmp_path, capsys):
    assert main(["run", str(tiny["model"]), "--input", str(tmp_path / "absent.npy")]) == 2
    assert "absent.npy does not exist" in capsys.readouterr().err
    np.save(tmp_path / "wrong.npy", {"not_an_input": tiny["x"]})
    assert main(["run", str(tiny["model"]), "--input", str(tmp_path / "wrong.npy")]) == 2
    assert "not_an_input" in capsys.readouterr().err
    (tmp_path / "junk.pb").write_bytes(b"\xff\xff\xff not a graph")
    assert main(["inspect", str(tmp_path / "junk.pb")]) == 1
    assert "not a binary TensorFlow GraphDef" in capsys.readouterr().err


# ------------------------------------------------------------------ helpers
@pytest.mark.no_tf_math
def test_parse_override_values_are_json_when_possible():
    assert parse_override("quant_cfg.conv_weights.num_bits=16") == ("quant_cfg.conv_weights.num_bits", 16)
    assert parse_override("input_shapes=[[1, 8, 8, 3]]") == ("input_shapes", [[1, 8, 8, 3]])
    assert parse_override("enable_EMA=false") == ("enable_EMA", False)
    assert parse_override("output_dir=/tmp/a=b") == ("output_dir", "/tmp/a=b")
    for bad in ("novalue", "=3", "a..b=1", ".a=1"):
        with pytest.raises(ValueError, match="key.sub=value"):
            parse_override(bad)


@pytest.mark.no_tf_math
def test_write_atomic_leaves_nothing_when_the_writer_fails(tmp_path):
    def half_then_fail(tmp):
        Path(tmp).write_bytes(b"partial")
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        write_atomic(tmp_path / "model.pb", half_then_fail)
    assert _files(tmp_path) == []
    write_atomic(tmp_path / "model.pb", lambda tmp: Path(tmp).write_bytes(b"whole"))
    assert _files(tmp_path) == ["model.pb"] and (tmp_path / "model.pb").read_bytes() == b"whole"


def test_build_and_run_a_multi_batch_model_with_the_compiler_check(tiny, tmp_path, capsys):
    """docs/multi-batch.md: build prints the profile per compiled batch size and the check's
    report; run predicts the device time of the split batch."""
    out_dir = tmp_path / "multi"
    code = main(["build", str(tiny["config"]), "--model", str(tiny["model"]), "--data", str(tiny["npy"]),
                 "--set", f"output_dir={out_dir}", "--set", "static_batch_sizes=[1, 4]", "--set", "compiler_check=1",
                 "--forms", "npu", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "compiled batch 1: latency" in out and "compiled batch 4: latency" in out
    assert "compiler_check 1 (all close: |compiled - quantized| <= 0 + 1e-05 |quantized|), CheckOutput: sample 4 rows " \
        "of the calibration sample" in out and "cosine" in out
    assert main(["run", str(out_dir / "tiny_npu.pb"), "--input", str(tiny["npy"])]) == 0
    assert "split over the compiled batch sizes [1, 4]" in capsys.readouterr().out
