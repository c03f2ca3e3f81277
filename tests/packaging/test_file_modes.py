"""Caches and outputs get normal permissions (docs/reliability.md): 0644 files and 0755
libraries/directories under the umask, not mkstemp's 0600."""
from __future__ import annotations

import os
import stat

from ratelnn import _build
from ratelnn.fileio import write_atomic


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_atomic_gives_files_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.pb", b"x")
        write_atomic(tmp_path / "b.params", lambda tmp: open(tmp, "wb").write(b"y"))
    finally:
        os.umask(old)
    assert mode(tmp_path / "a.pb") == 0o644 and mode(tmp_path / "b.params") == 0o644


def test_built_library_and_objects_are_readable_by_others(tmp_path, monkeypatch):
    monkeypatch.setenv("RATELNN_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "tiny.cc"
    src.write_text('extern "C" int ratel_tiny(void) { return 7; }\n')
    old = os.umask(0o022)
    try:
        lib = _build.build_library("tiny", [src])
    finally:
        os.umask(old)
    assert mode(lib) == 0o755
    (obj,) = (tmp_path / "cache" / "obj").glob("tiny-*.o")
    assert mode(obj) == 0o644
    assert mode(tmp_path / "cache") == 0o755
