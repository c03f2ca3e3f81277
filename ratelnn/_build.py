"""Build and cache the C++ shared libraries of ``ops/``.

Objects and libraries are kept in a cache directory (``$RATELNN_CACHE_DIR`` or
``~/.cache/ratelnn``) under keys that hash the sources, the ``ops/`` headers they include
and the flags (which carry the framework version through its include paths and defines),
so a second call or a new process reuses the .so and an edited source triggers a rebuild
of just that object.  Concurrent first builds from several
processes are serialised by an ``fcntl`` lock; the compiler writes to a private temporary
file that is renamed into place only when complete, so no process ever loads a partial
library.
"""
from __future__ import annotations

import fcntl
import re
import hashlib
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Sequence

OPS_DIR = Path(__file__).resolve().parent.parent / "ops"
if not OPS_DIR.is_dir():  # installed non-editable: sources are shipped inside the package
    OPS_DIR = Path(__file__).resolve().parent / "_ops_src"

COMPILE_FLAGS = ["-O3", "-fPIC", "-march=native", "-std=c++17", "-Wall", "-Wno-sign-compare",
                 "-Wno-unused-function"]
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


class BuildError(RuntimeError):
    """The C++ compiler failed; the message carries its output."""


def cache_dir() -> Path:
    d = Path(os.environ.get("RATELNN_CACHE_DIR") or Path.home() / ".cache" / "ratelnn")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _local_includes(path: Path, seen: set) -> None:
    """Add to ``seen`` every header under ops/ that ``path`` includes, transitively."""
    for inc in _INCLUDE.findall(path.read_text(errors="replace")):
        for base in (path.parent, OPS_DIR):
            cand = (base / inc).resolve()
            if cand.is_file() and cand not in seen:
                seen.add(cand)
                _local_includes(cand, seen)
                break


def object_key(source: Path, flags: Sequence[str]) -> str:
    """Hash of the source, the ops/ headers it includes (transitively), flags and compiler."""
    h = hashlib.sha256()
    headers: set = set()
    _local_includes(source, headers)
    for p in [source, *sorted(headers)]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update("\0".join(flags).encode())
    return h.hexdigest()[:20]


def _run_locked(target: Path, cmd_for_tmp) -> None:
    """Create ``target`` with the command ``cmd_for_tmp(tmp_path)`` unless it exists; the
    output is written to a private temporary file and renamed into place when complete."""
    if target.exists():
        return
    with open(target.with_name("." + target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():  # another process built it while we waited
            return
        fd, tmp = tempfile.mkstemp(prefix="." + target.name, suffix=".tmp", dir=target.parent)
        os.close(fd)
        cmd = cmd_for_tmp(tmp)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            os.unlink(tmp)
            raise BuildError(f"building {target.name} failed:\n$ {' '.join(cmd)}\n{proc.stdout}")
        os.replace(tmp, target)


def build_library(name: str, sources: Iterable[Path], compile_flags: Sequence[str] = (),
                  link_flags: Sequence[str] = (), cxx: str | None = None) -> Path:
    """Return the path of ``lib<name>-<key>.so`` built from ``sources``, building it if needed.

    Each source is compiled to an object cached under its own key (source, included
    headers, flags), in parallel; the library key combines the object keys and link flags.
    So editing one file recompiles only that file.  Raises :class:`BuildError` on failure.
    """
    sources = [Path(s).resolve() for s in sources]
    cxx = cxx or os.environ.get("CXX", "g++")
    flags = [cxx, *COMPILE_FLAGS, f"-I{OPS_DIR}", *compile_flags]
    objdir = cache_dir() / "obj"
    objdir.mkdir(exist_ok=True)
    objects = [objdir / f"{s.stem}-{object_key(s, flags)}.o" for s in sources]

    def compile_one(pair) -> None:
        src, obj = pair
        _run_locked(obj, lambda tmp: [*flags, "-c", str(src), "-o", tmp])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(compile_one, zip(sources, objects)))
    h = hashlib.sha256(name.encode())
    for o in objects:
        h.update(o.name.encode())
    h.update("\0".join([cxx, *link_flags]).encode())
    out = cache_dir() / f"lib{name}-{h.hexdigest()[:20]}.so"
    _run_locked(out, lambda tmp: [cxx, "-shared", *map(str, objects), "-o", tmp, *link_flags])
    return out
