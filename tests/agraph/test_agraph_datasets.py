"""Dataset archives under AGRAPH_DATA_DIR: prepared byte-reproducibly with their pinned
checksum; a missing, corrupt or mis-packed archive raises a DatasetError naming the file and
the docs/agraph-datasets.md step (docs/agraph-datasets.md)."""
import io
import tarfile

import numpy as np
import pytest

from agraph import cli, datasets
from agraph.errors import DatasetError


def test_prepared_archives_load_with_their_layout(agraph_data):
    fashion = datasets.get("fashion_mnist", agraph_data)
    assert fashion.samples.shape == (10000, 28, 28) and fashion.samples.dtype == np.uint8
    assert sorted(np.unique(fashion.labels)) == list(range(10))
    digits = datasets.get("digits", agraph_data)
    assert digits.samples.shape == (449, 8, 8) and digits.samples.max() == 16
    batches = list(digits.batches(100, limit=250))
    assert [len(x) for x, _ in batches] == [100, 100, 50] and digits.num_batches(100, 250) == 3
    assert np.array_equal(np.concatenate([y for _, y in batches]), digits.labels[:250])


def test_prepare_is_byte_reproducible_and_matches_the_pinned_checksum(tmp_path):
    first = datasets.prepare("lfw_face_nonface", tmp_path / "a")
    second = datasets.prepare("lfw_face_nonface", tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()
    assert datasets.sha256_file(first) == datasets.DATASETS["lfw_face_nonface"].sha256
    faces = datasets.get("lfw_face_nonface", tmp_path / "a")
    assert faces.samples.shape == (200, 25, 25) and faces.labels.sum() == 100


def test_missing_archive_names_the_file_and_the_tutorial_step(tmp_path):
    with pytest.raises(DatasetError) as e:
        datasets.get("digits", tmp_path)
    text = str(e.value)
    assert str(tmp_path / "digits.tar") in text and "missing" in text
    assert "python -m agraph prepare digits" in text and "docs/agraph-datasets.md, section 'digits'" in text


def test_corrupt_archive_fails_its_checksum(agraph_data, tmp_path):
    data = bytearray((agraph_data / "digits.tar").read_bytes())
    data[5000] ^= 0xFF
    (tmp_path / "digits.tar").write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"digits\.tar has sha256 [0-9a-f]{64}, expected") as e:
        datasets.get("digits", tmp_path)
    assert "agraph-datasets.md" in str(e.value)


def _user_dataset(tmp_path, key, members):
    """An unpinned user dataset whose archive holds ``members`` (name -> bytes)."""
    datasets.register(datasets.DatasetSpec(key, f"{key}.tgz", None, "test data", "Your own dataset"), replace=True)
    with tarfile.open(tmp_path / f"{key}.tgz", "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_wrong_layout_names_the_missing_member(tmp_path):
    _user_dataset(tmp_path, "shapes_nolayout", {"images/0.png": b"not ours"})
    with pytest.raises(DatasetError, match=r"shapes_nolayout\.tgz: wrong layout, no 'shapes_nolayout/meta.json'"):
        datasets.get("shapes_nolayout", tmp_path)
    meta = b'{"format": 1, "key": "shapes_nosamples", "count": 3, "samples": "array", "labels": false}'
    _user_dataset(tmp_path, "shapes_nosamples", {"shapes_nosamples/meta.json": meta})
    with pytest.raises(DatasetError, match=r"member 'shapes_nosamples/samples.npy' is missing"):
        datasets.get("shapes_nosamples", tmp_path)


def test_pack_round_trips_ragged_samples_and_counts(tmp_path):
    images = [np.zeros((5, 7, 3), np.uint8), np.ones((9, 4, 3), np.uint8)]
    datasets.register(datasets.DatasetSpec("ragged_photos", "ragged_photos.tgz", None, "", "x"), replace=True)
    datasets.pack("ragged_photos", images, None, tmp_path / "ragged_photos.tgz")
    loaded = datasets.get("ragged_photos", tmp_path)
    assert loaded.labels is None and [s.shape for s in loaded.samples] == [(5, 7, 3), (9, 4, 3)]
    with pytest.raises(DatasetError, match="2 samples but 3 labels"):
        datasets.pack("ragged_photos", images, np.arange(3), tmp_path / "x.tgz")
    with pytest.raises(DatasetError, match=".tar or .tgz"):
        datasets.pack("ragged_photos", images, None, tmp_path / "x.zip")


def test_cli_datasets_and_prepare_report_per_archive(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGRAPH_DATA_DIR", str(tmp_path))
    assert cli.main(["prepare", "lfw_face_nonface"]) == 0
    assert str(tmp_path / "lfw_face_nonface.tar") in capsys.readouterr().out
    assert cli.main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "ok (200 samples)" in out and "missing" in out  # the others are not prepared
