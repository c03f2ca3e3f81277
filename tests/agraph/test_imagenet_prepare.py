"""``python -m agraph prepare imagenet --from DIR_OR_TAR``: the ImageNet validation archive
from a user's copy in each real layout (synset folders; flat images with the devkit ground
truth, a ``filename label`` file or LOC_val_solution.csv; a tar of them), class indices in
sorted-synset order, a calibration part evaluation never sees, and bad copies refused with
an error naming the file and no archive left behind (docs/agraph-datasets.md, 'imagenet')."""
from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest
from helpers import imagenet_copies as copies

from agraph import cli, datasets, imagenet
from agraph.errors import DatasetError

# six images of three classes far apart in the sorted order: first, a cat, last
LABELS = [0, 281, 999, 281, 0, 999]


def _load(data_dir):
    datasets._loaded.clear()
    return datasets.get(imagenet.KEY, data_dir)


def _pixels_and_labels(dataset):
    both = [*dataset.samples, *dataset.calibration.samples]
    return [np.asarray(p) for p in both], np.concatenate([dataset.labels, dataset.calibration.labels])


def test_synset_list_is_the_sorted_ilsvrc2012_thousand():
    names = imagenet.synsets()
    assert len(names) == 1000 and list(names) == sorted(names) and len(set(names)) == 1000
    assert imagenet.class_index()["n01440764"] == 0 and imagenet.class_index()["n15075141"] == 999


def test_every_layout_gives_the_same_images_and_class_indices(tmp_path):
    truth = copies.synset_copy(tmp_path / "folders", LABELS)
    flat = tmp_path / "flat"
    copies.flat_copy(flat, LABELS)
    devkit = copies.devkit(tmp_path / "devkit", truth, ids=list(np.random.default_rng(0).permutation(1000) + 1))
    label_files = {"pairs": copies.pairs_file(tmp_path / "val.txt", truth),
                   "pairs_synsets": copies.pairs_file(tmp_path / "val_synsets.txt", truth, synset_names=True),
                   "loc": copies.loc_solution(tmp_path / "LOC_val_solution.csv", truth),
                   "devkit": devkit}
    tar = copies.tar_of(flat, tmp_path / "ILSVRC2012_img_val.tar")
    built = {"folders": datasets.prepare(imagenet.KEY, tmp_path / "out-folders", source=tmp_path / "folders"),
             "tar": datasets.prepare(imagenet.KEY, tmp_path / "out-tar", source=tar, labels=label_files["loc"])}
    for form, labels in label_files.items():
        built[form] = datasets.prepare(imagenet.KEY, tmp_path / f"out-{form}", source=flat, labels=labels)
    reference_pixels, reference_labels = _pixels_and_labels(_load(tmp_path / "out-folders"))
    # sorted by file name: the labels in file-number order, the last image held for calibration
    assert reference_labels.tolist() == LABELS
    for form in built:
        pixels, labels = _pixels_and_labels(_load(tmp_path / f"out-{form}"))
        assert labels.tolist() == LABELS, form
        assert all(np.array_equal(a, b) for a, b in zip(pixels, reference_pixels)), form
    dataset = _load(tmp_path / "out-folders")
    assert len(dataset) == 5 and len(dataset.calibration) == 1
    assert dataset.samples[0].dtype == np.uint8 and dataset.samples[0].shape == (72, 96, 3)
    calibration = [x for x, _ in dataset.calibration_batches(8, 4)]
    assert len(calibration) == 1 and len(calibration[0]) == 1
    assert not any(np.array_equal(calibration[0][0], x) for x in dataset.samples[:])


def test_jpeg_bytes_are_kept_as_given_and_checked_on_read(tmp_path):
    copies.synset_copy(tmp_path / "copy", LABELS)
    path = datasets.prepare(imagenet.KEY, tmp_path / "data", source=tmp_path / "copy")
    with tarfile.open(path) as tar:
        meta = json.loads(tar.extractfile("imagenet/meta.json").read())
        first = tar.extractfile(imagenet.member_name(0)).read()
        offset = tar.getmember(imagenet.member_name(2)).offset_data
    assert first == (tmp_path / "copy" / meta["files"][0]).read_bytes()
    data = bytearray(path.read_bytes())
    data[offset + 400] ^= 0xFF
    path.write_bytes(bytes(data))
    dataset = _load(tmp_path / "data")
    dataset.samples[0]  # intact members still read
    with pytest.raises(DatasetError, match=r"member 00002 \(.*ILSVRC2012_val_00000003\.JPEG\) does not match"):
        dataset.samples[2]


def _refused(tmp_path, source, match, labels=None):
    data = tmp_path / "data"
    with pytest.raises(DatasetError, match=match):
        datasets.prepare(imagenet.KEY, data, source=source, labels=labels)
    assert not data.exists() or list(data.iterdir()) == [], "a refused copy left files behind"


def test_bad_copies_are_refused_naming_the_file_and_leave_no_archive(tmp_path):
    truth = copies.flat_copy(tmp_path / "flat", LABELS)
    # a label file without the last image
    partial = dict(list(truth.items())[:-1])
    _refused(tmp_path, tmp_path / "flat", r"ILSVRC2012_val_00000006\.JPEG has no label in .*partial\.txt",
             copies.pairs_file(tmp_path / "partial.txt", partial))
    # flat images and no label file at all
    _refused(tmp_path, tmp_path / "flat", r"ILSVRC2012_val_00000001\.JPEG .* no label file was given")
    # a synset folder that is not one of the 1,000
    copies.synset_copy(tmp_path / "folders", LABELS)
    (tmp_path / "folders" / "n01440764").rename(tmp_path / "folders" / "n00000042")
    _refused(tmp_path, tmp_path / "folders", r"n00000042/ILSVRC2012_val_00000001\.JPEG: unknown synset 'n00000042'")
    # an unknown synset in LOC_val_solution.csv
    bad_loc = tmp_path / "LOC_val_solution.csv"
    copies.loc_solution(bad_loc, truth)
    bad_loc.write_text(bad_loc.read_text().replace("n15075141", "n99999999"))
    _refused(tmp_path, tmp_path / "flat", r"LOC_val_solution\.csv, line \d: unknown synset 'n99999999'", bad_loc)
    # a truncated JPEG
    copies.synset_copy(tmp_path / "broken", LABELS)
    victim = sorted((tmp_path / "broken").rglob("*00000004.JPEG"))[0]
    victim.write_bytes(victim.read_bytes()[:600])
    _refused(tmp_path, tmp_path / "broken", r"ILSVRC2012_val_00000004\.JPEG is not a readable JPEG image")
    # an empty folder, and a path that does not exist
    (tmp_path / "empty").mkdir()
    _refused(tmp_path, tmp_path / "empty", r"empty: holds no \.JPEG image")
    _refused(tmp_path, tmp_path / "nowhere", r"nowhere: no such folder or tar archive")
    # the devkit ground truth without its meta.mat
    devkit = copies.devkit(tmp_path / "devkit", truth, ids=list(range(1, 1001)))
    (devkit.parent / "meta.mat").unlink()
    _refused(tmp_path, tmp_path / "flat", r"ground_truth\.txt: .* meta\.mat .* must be beside it", devkit)


def test_prepare_command_builds_the_archive_and_reports_errors_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGRAPH_DATA_DIR", str(tmp_path / "data"))
    copies.synset_copy(tmp_path / "copy", LABELS)
    assert cli.main(["prepare", "imagenet", "--from", str(tmp_path / "copy")]) == 0
    assert f"imagenet: {tmp_path / 'data' / 'imagenet.tar'}" in capsys.readouterr().out
    assert len(_load(tmp_path / "data")) == 5
    assert cli.main(["prepare", "imagenet"]) == 2
    assert "prepare imagenet --from DIR_OR_TAR" in capsys.readouterr().err
    (tmp_path / "data" / "imagenet.tar").unlink()
    datasets._loaded.clear()
    with pytest.raises(DatasetError, match=r"imagenet\.tar is missing; make it with `python -m agraph prepare "
                                           r"imagenet --from DIR_OR_TAR`"):
        datasets.get(imagenet.KEY)
