"""ConvertImpl.calibrate (every data form, errors, progress), ratelnn.runners and
ConvertImpl.analyze (per-layer report, JSON, worst layer, suggestions) on small real
TensorFlow graphs run by real sessions."""
from __future__ import annotations

import io
import math
import tarfile
import zipfile

import numpy as np
import pytest

import tensorflow as tf

from ratelnn.calibration.data import DataError  # noqa: E402
from ratelnn.frontend.tensorflow import converter  # noqa: E402
from ratelnn.runners import run_model, runner_for  # noqa: E402

BATCH = 4
SAMPLES = 10          # 3 batches of 4, the last one partial
IMAGE = (6, 6, 1)


def _image_graph():
    """[N,6,6,1] -> conv 3x3 (4 ch) + relu -> mean -> [N,4]."""
    w = np.random.default_rng(1).normal(0, 0.5, (3, 3, 1, 4)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, *IMAGE], name="images")
        h = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
        tf.identity(tf.reduce_mean(h, axis=[1, 2]), name="scores")
    return g.as_graph_def()


def _config(tmp_path, name, **extra):
    return {"input_nodes": ["images"], "output_nodes": ["scores"], "input_shapes": [[BATCH, *IMAGE]],
            "output_dir": str(tmp_path / name), **extra}


@pytest.fixture(scope="module")
def pixels():
    """SAMPLES uint8 grayscale images and the same as float32 in [0, 1]."""
    u8 = np.random.default_rng(0).integers(0, 256, (SAMPLES, *IMAGE), dtype=np.uint8)
    return u8, u8.astype(np.float32) / 255.0


def _png_tar(path, u8, mode="w"):
    from PIL import Image
    with tarfile.open(path, mode) as tar:
        for i, img in enumerate(u8):
            buf = io.BytesIO()
            Image.fromarray(img[..., 0], mode="L").save(buf, format="PNG")
            info = tarfile.TarInfo(f"imgs/{i:03d}.png")
            info.size = buf.tell()
            buf.seek(0)
            tar.addfile(info, buf)
    return path


def _archive(path, members):
    """A tar (any suffix tarfile writes) or zip of ``{member name: bytes}``."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
        return path
    with tarfile.open(path, "w:gz" if path.name.endswith("gz") else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _npy_bytes(obj):
    buf = io.BytesIO()
    np.save(buf, obj, allow_pickle=isinstance(obj, dict))
    return buf.getvalue()


def _png_bytes(img):
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(img[..., 0], mode="L").save(buf, format="PNG")
    return buf.getvalue()


def _folder(path, members):
    for name, data in members.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    return path


# Pulsar2's dataset forms: archives or folders of images, .npy arrays (one sample or a batch
# each), raw .bin samples and .npy dicts of per-input arrays (NumpyObject); splits of 3+3+4
CUTS = [(0, 3), (3, 6), (6, SAMPLES)]


def _container_sources(tmp_path, u8, x):
    pngs = {f"imgs/{i:03d}.png": _png_bytes(img) for i, img in enumerate(u8)}
    one_npy = {f"s/{i:03d}.npy": _npy_bytes(x[i]) for i in range(SAMPLES)}
    batch_npy = {f"b{a}.npy": _npy_bytes(x[a:b]) for a, b in CUTS}
    f32_bin = {f"raw/{i:03d}.bin": x[i].astype("<f4").tobytes() for i in range(SAMPLES)}
    objects = {f"o{a}.npy": _npy_bytes({"images:0": x[a:b]}) for a, b in CUTS}
    (tmp_path / "dir_png").mkdir()
    (tmp_path / "dir_bin").mkdir()
    return {
        "zip_png": (_archive(tmp_path / "p.zip", pngs), {}),
        "folder_png": (_folder(tmp_path / "dir_png", pngs), {}),
        "tar_npy_samples": (_archive(tmp_path / "n.tar", one_npy), {}),
        "zip_npy_batches": (_archive(tmp_path / "n.zip", batch_npy), {"calibration_format": "numpy"}),
        "tgz_bin": (_archive(tmp_path / "b.tgz", f32_bin), {}),
        "folder_bin": (_folder(tmp_path / "dir_bin", f32_bin), {}),
        "tar_bin_u8": (_archive(tmp_path / "u.tar", {f"{i}.bin": u8[i].tobytes() for i in range(SAMPLES)}),
                       {"src_dtype": "uint8"}),
        "zip_numpy_object": (_archive(tmp_path / "o.zip", objects), {}),
        "tar_numpy_object_named": (_archive(tmp_path / "o.tar", objects), {"calibration_format": "numpy_object"}),
    }


def test_every_data_form_gives_identical_statistics(tmp_path, pixels):
    u8, x = pixels
    np.save(tmp_path / "x.npy", x)
    x.astype("<f4").tofile(tmp_path / "x.bin")
    np.save(tmp_path / "d.npy", {"images": x})
    sources = {
        "array": x,
        "npy": str(tmp_path / "x.npy"),
        "bin": tmp_path / "x.bin",
        "tar": str(_png_tar(tmp_path / "x.tar", u8)),
        "tgz": str(_png_tar(tmp_path / "x.tgz", u8, "w:gz")),
        "dict_npy": str(tmp_path / "d.npy"),
        "feed_dicts": [{"images:0": x[i:i + 3]} for i in range(0, SAMPLES, 3)],
        "arrays": (x[i:i + 7] for i in range(0, SAMPLES, 7)),
    }
    graph_def = _image_graph()
    stats = {}
    for name, data in sources.items():
        conv = converter(graph_def, _config(tmp_path, name, std=255.0))
        stats[name] = conv.calibrate(data, progress=False)
    for name, (data, extra) in _container_sources(tmp_path, u8, x).items():
        conv = converter(graph_def, _config(tmp_path, name, std=255.0, **extra))
        stats[name] = conv.calibrate(str(data), progress=False)
    for size in (-1, SAMPLES):   # -1 (Pulsar2's "all") and the exact count take every sample
        conv = converter(graph_def, _config(tmp_path, f"size{size}", std=255.0, calibration_size=size))
        stats[f"calibration_size={size}"] = conv.calibrate(x, progress=False)
    reference = stats["array"]
    assert reference and all(s.batches == 3 for s in reference.values())
    for name, got in stats.items():
        assert got == reference, f"statistics from {name} differ from those of the bare array"


@pytest.mark.parametrize("form", ["array", "npy", "bin", "tgz", "iterable", "zip_npy_batches",
                                  "zip_numpy_object", "folder_bin"])
def test_a_slice_of_batches_equals_that_part_of_the_whole_sequence(tmp_path, pixels, form):
    """CalibrationData.batches(start, stop): what a Ray worker reads for its shard of a file
    (archives of several samples a member are cut inside a member)."""
    u8, x = pixels
    np.save(tmp_path / "x.npy", x)
    x.astype("<f4").tofile(tmp_path / "x.bin")
    extra = {}
    if form in ("zip_npy_batches", "zip_numpy_object", "folder_bin"):
        source, extra = _container_sources(tmp_path, u8, x)[form]
        make = lambda: str(source)  # noqa: E731
    else:
        make = {"array": lambda: x, "npy": lambda: str(tmp_path / "x.npy"), "bin": lambda: tmp_path / "x.bin",
                "tgz": lambda: str(_png_tar(tmp_path / "x.tgz", u8, "w:gz")),
                "iterable": lambda: [x[i:i + 3] for i in range(0, SAMPLES, 3)]}[form]
    data = converter(_image_graph(), _config(tmp_path, form, std=255.0, **extra)).calibration_data(make())
    whole = [(b.feeds["images"], b.size) for b in data]
    assert len(whole) == 3
    for start, stop in [(0, 3), (1, 2), (1, None), (2, 3), (2, 2), (3, 5)]:
        part = [(b.feeds["images"], b.size) for b in data.batches(start, stop)]
        expected = whole[start:stop]
        assert [size for _, size in part] == [size for _, size in expected], (start, stop)
        for (got, _), (want, _) in zip(part, expected):
            np.testing.assert_array_equal(got, want)


def test_progress_reports_count_rate_and_eta(tmp_path, pixels, capsys):
    conv = converter(_image_graph(), _config(tmp_path, "p"))
    conv.calibrate(pixels[1], progress=True)
    err = capsys.readouterr().err
    assert "calibrate: 3/3 batches" in err and "batches/s" in err and "ETA" in err
    conv.calibrate(pixels[1], progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("make_data, message", [
    (lambda p, x: p / "missing.npy", "does not exist"),
    (lambda p, x: x[:, :5], "expects samples of shape"),
    (lambda p, x: x[0], "expects rank 4"),
    (lambda p, x: np.where(np.arange(SAMPLES)[:, None, None, None] == 7, np.nan, x), "sample 7 holds NaN"),
    (lambda p, x: _write(p / "b.bin", x.astype("<f4").tobytes()[:-4]), "not a whole number"),
    (lambda p, x: _write(p / "x.txt", b"1 2 3"), "unknown calibration data file type"),
    (lambda p, x: _write(p / "bad.tar", b"not a tar at all" * 40), "not a readable tar"),
    (lambda p, x: [{"pictures": x}], "unknown input 'pictures'"),
    (lambda p, x: x[:0], "no calibration samples"),
    (lambda p, x: 3.5, "calibration data must be"),
    (lambda p, x: _archive(p / "mixed.zip", {"a.npy": _npy_bytes(x[0]), "b.bin": x[1].tobytes()}),
     "mixes binary and numpy files; set calibration_format"),
    (lambda p, x: _archive(p / "empty.zip", {"notes.txt": b"hello"}), "no images .* .npy or .bin"),
    (lambda p, x: _write(p / "bad.zip", b"not a zip at all" * 40), "not a readable zip"),
    (lambda p, x: _archive(p / "odd.tar", {"a.bin": x[0].astype("<f4").tobytes()[:-4]}),
     r"odd.tar:a.bin: 140 bytes is not a whole number"),
    (lambda p, x: _archive(p / "shape.tar", {"a.npy": _npy_bytes(x[0, :5])}), r"shape.tar:a.npy: input 'images' "
     "expects samples of shape"),
    (lambda p, x: _archive(p / "nan.zip", {f"{i}.npy": _npy_bytes(x[i] * (np.nan if i == 4 else 1))
                                           for i in range(6)}), "sample 4 holds NaN"),
])
def test_bad_calibration_data_gives_clear_errors(tmp_path, pixels, make_data, message):
    conv = converter(_image_graph(), _config(tmp_path, "bad"))
    with pytest.raises(DataError, match=message):
        conv.calibrate(make_data(tmp_path, pixels[1]), progress=False)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_batch_size_must_match_a_fixed_model_batch(tmp_path, pixels):
    conv = converter(_image_graph(), _config(tmp_path, "bs"))
    with pytest.raises(DataError, match="specialised for batch 4"):
        conv.calibrate(pixels[1], batch_size=5, progress=False)


def test_tar_with_no_images_is_rejected(tmp_path, pixels):
    path = tmp_path / "empty.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("readme.txt")
        tar.addfile(info, io.BytesIO(b""))
    conv = converter(_image_graph(), _config(tmp_path, "e"))
    with pytest.raises(DataError, match="no images"):
        conv.calibrate(path, progress=False)


def test_run_model_reuses_one_session_and_matches_numpy(pixels):
    graph_def = _image_graph()
    runner = runner_for("tensorflow", graph_def)
    assert runner_for("tensorflow", graph_def) is runner
    x = pixels[1][:BATCH]
    (a,) = run_model("tensorflow", graph_def, {"images": x}, ["scores"])
    (b,) = run_model("tensorflow", graph_def, {"images:0": x}, ["scores:0"])
    assert a.shape == (BATCH, 4) and np.array_equal(a, b)
    with pytest.raises(Exception, match="no tensor 'nope'"):
        run_model("tensorflow", graph_def, {"images": x}, ["nope"])


def test_run_model_mxnet_symbol_tuple():
    from ratelnn.mxnet_compat import import_mxnet
    mx = import_mxnet()
    data = mx.sym.var("data")
    out = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    params = {"fc_weight": mx.nd.array(w), "fc_bias": mx.nd.array(np.ones(3, np.float32))}
    model = (out, params, {})
    x = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    for _ in range(2):
        (y,) = run_model("mxnet", model, {"data": x}, ["fc"])
        np.testing.assert_allclose(y, x @ w.T + 1, rtol=1e-5)


# ------------------------------------------------------------------ analyze
def _outlier_graph():
    """Three convs; ``broken`` has one output channel 300x larger than the others, so its
    8-bit output scale leaves the other channels few codes; ``last`` ignores that channel."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.4, (3, 3, 2, 8)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (3, 3, 8, 8)).astype(np.float32)
    w2[..., 5] *= 300.0
    w3 = rng.normal(0, 0.3, (1, 1, 8, 6)).astype(np.float32)
    w3[:, :, 5, :] = 0.0        # the next layer ignores the outlier channel: only its range hurts
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 2], name="x")
        h = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME", name="first"))
        h = tf.nn.relu(tf.nn.conv2d(h, w2, 1, "SAME", name="broken"))
        h = tf.nn.conv2d(h, w3, 1, "SAME", name="last")
        tf.identity(tf.reduce_mean(h, axis=[1, 2]), name="y")
    return g.as_graph_def()


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    out = tmp_path_factory.mktemp("analyze")
    cfg = {"input_nodes": ["x"], "output_nodes": ["y"], "input_shapes": [[8, 8, 8, 2]],
           "output_dir": str(out),
           "accuracy_auto": False}   # the report on the plain int8 build, with its broken layer
    conv = converter(_outlier_graph(), cfg)
    data = np.random.default_rng(4).normal(size=(64, 8, 8, 2)).astype(np.float32)
    conv.calibrate(data, progress=False)
    return conv, data, conv.analyze(data[:32])


def test_analyze_rows_cover_every_quantized_layer_with_finite_metrics(analyzed):
    from ratelnn.quantization.policy import make_plan
    conv, _, report = analyzed
    assert [r.name for r in report.rows] == ["x"] + make_plan(conv.quantized_ir(), conv.config).quantized_nodes
    assert report.rows[0].op == "Input" and report.rows[0].tensor == "x"   # the graph input's own error
    # normal data at its int8 max: ~36 dB, ~13 dB below a full-scale uniform signal's 49.9 dB
    assert 30 < report.rows[0].sqnr_db < 40 and 8 < report.rows[0].sqnr_drop_db < 20, report.table()
    assert report.num_samples == 32
    for r in report.rows:
        for value in (r.cosine, r.sqnr_db, r.sqnr_drop_db, r.max_abs_error, r.saturated_percent):
            assert math.isfinite(value), r
        assert -1 <= r.cosine <= 1 and 0 <= r.saturated_percent <= 100
    sim = report.output_similarity["y"]
    assert 0.5 < sim["cosine"] <= 1 and 0 <= sim["top1_agreement"] <= 1
    text = report.table()
    assert all(r.name in text for r in report.rows) and "SQNR dB" in text


def test_analyze_json_round_trips(analyzed, tmp_path):
    from ratelnn.analysis import Report
    report = analyzed[2]
    text = report.to_json(str(tmp_path / "r.json"))
    assert Report.from_json(text) == report
    assert (tmp_path / "r.json").read_text() == text


def test_analyze_names_the_broken_layer_and_int16_fixes_it(analyzed, tmp_path):
    conv, data, report = analyzed
    worst = report.worst(1)[0]
    assert worst.name == "broken", report.table()
    assert worst.sqnr_drop_db > 10
    assert report.suggestions and report.suggestions[0].layer == "broken"
    assert report.suggestions[0].data_type == "int16"
    for suggestion in report.suggestions:   # none makes the model's output worse
        assert suggestion.output_sqnr_db_after >= suggestion.output_sqnr_db - 0.1, suggestion
    cfg = dict(conv.config, layer_configs=report.layer_configs())
    fixed = converter(_outlier_graph(), cfg).analyze(data[:32])
    before, after = report.output_similarity["y"]["sqnr_db"], fixed.output_similarity["y"]["sqnr_db"]
    assert after > before + 6, (before, after)


def test_analyze_against_npu_captures_engine_tensors(analyzed):
    conv, data, quant = analyzed
    npu = conv.analyze(data[:8], against="npu")
    assert [r.name for r in npu.rows] == [r.name for r in quant.rows]
    assert all(math.isfinite(r.sqnr_db) and r.cosine > 0.5 for r in npu.rows), npu.table()
    assert npu.rows[1].sqnr_db > 25, npu.table()   # the healthy first layer is precise on the NPU too
    assert npu.worst(1)[0].name == "broken"
    with pytest.raises(ValueError, match="against must be"):
        conv.analyze(data[:8], against="gpu")


def test_analyze_drops_suggestions_that_lower_the_output(analyzed, monkeypatch):
    """Suggestions are checked on all the analyzed data (a suggestion can make a
    network's output worse): a harmful one (uint8 clips the signed output of ``last``) after a good one
    is dropped, the good one kept, and the check reports both metrics."""
    from ratelnn import analysis
    conv, data, report = analyzed
    check = report.suggestion_check
    assert check and check["dropped"] == 0
    assert check["with"]["cosine"] >= check["without"]["cosine"], check
    assert check["with"]["sqnr_db"] >= check["without"]["sqnr_db"], check
    assert check["without"]["sqnr_db"] == pytest.approx(report.output_similarity["y"]["sqnr_db"], abs=1e-9)
    good = report.suggestions[0]
    bad = analysis.Suggestion("last", "uint8", 0.0, 0.0, 0.0, 0.0, "harmful on purpose")
    monkeypatch.setattr(analysis, "_suggest", lambda *args: [good, bad])
    again = conv.analyze(data[:32])
    assert again.suggestions == [good] and again.suggestion_check["dropped"] == 1, again.table()
    assert again.suggestion_check["with"]["sqnr_db"] > again.suggestion_check["without"]["sqnr_db"] + 6
    monkeypatch.setattr(analysis, "_suggest", lambda *args: [bad])
    assert conv.analyze(data[:32]).suggestions == []
