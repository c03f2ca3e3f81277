"""The trained MXNet zoo models go FP32 -> quant -> npu with the npu top-1 within 1 point of
FP32; eval_model runs a calibration model; the store exports and imports byte-identical
compiled models (docs/agraph.md).  MXNet only: this module runs once, not per oneDNN mode."""
import io
import tarfile

import pytest

import agraph
from agraph import flow
from agraph.errors import RegistryError, StoreError
from agraph.store import Store

# (model, evaluated samples, FP32 top-1 floor): 1 point of 1,000 is 10 images
CASES = [("fashion_cnn_mx", 1000, 0.80), ("digits_cnn_mx", None, 0.93)]


@pytest.mark.parametrize("name,limit,floor", CASES)
def test_trained_mx_model_npu_within_one_point_of_fp32(agraph_session, name, limit, floor):
    result = {s: agraph.evaluate(name, s, limit=limit, progress=False) for s in ("fp32", "quant", "npu")}
    fp32, npu = result["fp32"].metrics["top1"], result["npu"].metrics["top1"]
    print(f"\n{name}: " + ", ".join(f"{s} {r.metrics['top1']:.4f}" for s, r in result.items()))
    assert fp32 >= floor, f"{name} under-trained: FP32 top-1 {fp32:.4f}"
    assert abs(npu - fp32) <= 0.01, f"{name}: npu {npu:.4f} vs fp32 {fp32:.4f}"
    assert result["npu"].samples == result["fp32"].samples == (limit or 449)
    assert result["npu"].npu["latency_ms"] > 0 and result["npu"].npu["throughput_fps"] > 0
    assert result["npu"].npu["engines"] >= 1 and result["fp32"].npu is None
    assert flow.stage_of("mxnet", agraph.get(name, "npu").graph) == "npu"


def test_eval_model_runs_the_calibration_model_over_the_dataset(agraph_session):
    model = agraph.load("digits_cnn_mx")
    graph_cal = flow.converter(model).to_cal()
    on_cal = agraph.eval_model(graph_cal, "digits_cnn_mx", limit=64, progress=False)
    on_fp32 = agraph.eval_model(model.graph, "digits_cnn_mx", limit=64, progress=False)
    assert on_cal.stage == "fp32" and on_cal.samples == 64
    assert on_cal.metrics == on_fp32.metrics  # MinMax ops record, they do not change outputs


def _rewrite(archive, out, change):
    """Copy the tar ``archive`` to ``out`` with ``change(name, data) -> data | None`` applied."""
    with tarfile.open(archive) as src, tarfile.open(out, "w") as dst:
        for info in src:
            data = change(info.name, src.extractfile(info).read())
            if data is not None:
                info.size = len(data)
                dst.addfile(info, io.BytesIO(data))
    return out


def test_store_export_import_gives_byte_identical_compiled_models(agraph_session, tmp_path, monkeypatch):
    name = "digits_cnn_mx"
    built = agraph.get(name, "npu", progress=False)  # the session store
    archive = Store().export(tmp_path / "zoo.tar", [name])
    assert Store().export(tmp_path / "again.tar", [name]).read_bytes() == archive.read_bytes()

    monkeypatch.setenv("AGRAPH_HOME", str(tmp_path / "other-machine"))
    with pytest.raises(RegistryError, match="holds no npu model"):
        agraph.get(name, "npu", build=False)

    def no_compiling(*args, **kwargs):
        raise AssertionError("the imported store was not used: a converter was made")
    monkeypatch.setattr(flow, "converter", no_compiling)
    Store().import_archive(archive)
    got = agraph.get(name, "npu", build=False)
    assert [f.read_bytes() for f in got.files] == [f.read_bytes() for f in built.files]
    assert agraph.evaluate(name, "npu", limit=64, progress=False).metrics["top1"] > 0.9


@pytest.mark.parametrize("change,message", [
    (lambda n, d: d[:-1] + bytes([d[-1] ^ 1]) if n.endswith("-0000.params") and "/npu/" in n else d,
     r"member digits_cnn_mx/npu/digits_cnn_mx-0000.params does not match its checksum"),
    (lambda n, d: None if n.endswith("npu/digits_cnn_mx-symbol.json") else d,
     r"member digits_cnn_mx/npu/digits_cnn_mx-symbol.json listed in MANIFEST.json is missing"),
])
def test_store_import_refuses_a_tampered_archive(agraph_session, tmp_path, monkeypatch, change, message):
    agraph.get("digits_cnn_mx", "npu", progress=False)
    archive = Store().export(tmp_path / "zoo.tar", ["digits_cnn_mx"])
    bad = _rewrite(archive, tmp_path / "bad.tar", change)
    empty = Store(tmp_path / "empty")
    with pytest.raises(StoreError, match=message):
        empty.import_archive(bad)
    assert not (tmp_path / "empty").exists() or not any((tmp_path / "empty").rglob("*"))


def test_store_import_refuses_an_extra_member(agraph_session, tmp_path):
    agraph.get("digits_cnn_mx", "npu", progress=False)
    archive = Store().export(tmp_path / "zoo.tar", ["digits_cnn_mx"])
    with tarfile.open(archive, "a") as tar:
        info = tarfile.TarInfo("digits_cnn_mx/npu/evil.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x=1"))
    with pytest.raises(StoreError, match="evil.py is not listed in MANIFEST.json"):
        Store(tmp_path / "empty").import_archive(archive)


def test_a_stored_file_altered_on_disk_is_reported(agraph_session, tmp_path, monkeypatch):
    monkeypatch.setenv("AGRAPH_HOME", str(tmp_path))
    model = agraph.get("digits_cnn_mx", "fp32")
    model.files[1].write_bytes(model.files[1].read_bytes() + b"\0")
    with pytest.raises(StoreError, match=r"digits_cnn_mx-0000.params does not match its manifest checksum"):
        agraph.get("digits_cnn_mx", "fp32")
    rebuilt = agraph.get("digits_cnn_mx", "fp32", force=True)  # what the message's `build --force` does
    assert agraph.get("digits_cnn_mx", "fp32").files[1].read_bytes() == rebuilt.files[1].read_bytes()
