"""Digests of the calibration files: the bytes decide, not the file's marks: a rewrite in
place keeping size and mtime is seen, a young file is read again on every call."""
from __future__ import annotations

import hashlib
import os

from ratelnn.calibration import digest
from ratelnn.calibration.digest import calibration_digests, file_digest


def test_rewrite_keeping_size_and_mtime_changes_the_digest(tmp_path):
    path = tmp_path / "a.rstats"
    path.write_bytes(b"first")
    old = os.stat(path).st_mtime_ns - 10 * digest.SETTLED_NS
    os.utime(path, ns=(old, old))
    first = file_digest(path)
    assert first == hashlib.sha256(b"first").hexdigest()
    with open(path, "r+b") as f:   # same inode, same size
        f.write(b"other")
    os.utime(path, ns=(old, old))
    assert file_digest(path) == hashlib.sha256(b"other").hexdigest()


def test_young_file_is_read_again(tmp_path, monkeypatch):
    path = tmp_path / "b.rstats"
    path.write_bytes(b"one")
    file_digest(path)
    marks = os.stat(path)
    assert not any(key[0] == str(path) for key in digest._memo)
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: reads.append(a[0]) or real_open(*a, **k))
    file_digest(path)
    assert reads == [path] and os.stat(path).st_mtime_ns == marks.st_mtime_ns


def test_calibration_digests_cover_statistics_and_sample(tmp_path):
    stats = tmp_path / "ratel_stats"
    stats.mkdir()
    (stats / "h-1-x.rstats").write_bytes(b"stats")
    (stats / ".h-1-y.rstats.tmp").write_bytes(b"partial")
    fingerprint = "f" * 64
    assert [p for p, _ in calibration_digests(tmp_path, fingerprint)] == [str(stats / "h-1-x.rstats")]
    sample = tmp_path / "ratel_sample" / f"{fingerprint[:16]}.npz"
    sample.parent.mkdir()
    sample.write_bytes(b"sample")
    assert [p for p, _ in calibration_digests(tmp_path, fingerprint)] == [str(stats / "h-1-x.rstats"), str(sample)]
