"""Build and cache the C++ shared libraries of ``ops/``.

A library is compiled once per (name, source hash, compiler flags) and kept in a cache
directory (``$RATELNN_CACHE_DIR`` or ``~/.cache/ratelnn``).  The key includes the hash of
every source and header under ``ops/`` that the build reads plus the flags (which carry the
framework version through its include paths), so a second call or a new process reuses the
.so, and an edited source triggers a rebuild.  Concurrent first builds from several
processes are serialised by an ``fcntl`` lock; the compiler writes to a private temporary
file that is renamed into place only when complete, so no process ever loads a partial
library.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable, List, Sequence

OPS_DIR = Path(__file__).resolve().parent.parent / "ops"
if not OPS_DIR.is_dir():  # installed non-editable: sources are shipped inside the package
    OPS_DIR = Path(__file__).resolve().parent / "_ops_src"

BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-march=native", "-Wall", "-Wno-sign-compare",
              "-Wno-unused-function"]


class BuildError(RuntimeError):
    """The C++ compiler failed; the message carries its output."""


def cache_dir() -> Path:
    d = Path(os.environ.get("RATELNN_CACHE_DIR") or Path.home() / ".cache" / "ratelnn")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _source_files() -> List[Path]:
    return sorted(p for p in OPS_DIR.rglob("*") if p.suffix in (".cc", ".h", ".cpp", ".hpp"))


def build_key(name: str, sources: Sequence[Path], flags: Sequence[str]) -> str:
    """Hash of every file under ops/ (headers included), the sources list and the flags."""
    h = hashlib.sha256()
    h.update(name.encode())
    for p in _source_files():
        h.update(str(p.relative_to(OPS_DIR)).encode())
        h.update(p.read_bytes())
    for s in sources:
        h.update(str(s).encode())
        if not str(Path(s)).startswith(str(OPS_DIR)):
            h.update(Path(s).read_bytes())
    h.update("\0".join(flags).encode())
    h.update(sys.version.encode())
    return h.hexdigest()[:20]


def build_library(name: str, sources: Iterable[Path], compile_flags: Sequence[str] = (),
                  link_flags: Sequence[str] = (), cxx: str | None = None) -> Path:
    """Return the path of ``lib<name>-<key>.so`` built from ``sources``, building it if needed.

    ``compile_flags``/``link_flags`` are added to :data:`BASE_FLAGS`; the result is cached
    (see the module docstring).  Raises :class:`BuildError` with the compiler output on failure.
    """
    sources = [Path(s) for s in sources]
    cxx = cxx or os.environ.get("CXX", "g++")
    flags = BASE_FLAGS + ["-std=c++17", f"-I{OPS_DIR}"] + list(compile_flags)
    key = build_key(name, sources, flags + list(link_flags) + [cxx])
    out = cache_dir() / f"lib{name}-{key}.so"
    if out.exists():
        return out
    lock_path = cache_dir() / f".lib{name}-{key}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():  # another process built it while we waited
            return out
        fd, tmp = tempfile.mkstemp(prefix=f".lib{name}-", suffix=".so.tmp", dir=cache_dir())
        os.close(fd)
        cmd = [cxx, *flags, *map(str, sources), "-o", tmp, *link_flags]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            os.unlink(tmp)
            raise BuildError(f"building {name} failed:\n$ {' '.join(cmd)}\n{proc.stdout}")
        os.replace(tmp, out)
    return out
