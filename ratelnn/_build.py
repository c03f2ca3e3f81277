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
import functools
import hashlib
import os
import platform
import re
import subprocess
import tempfile
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Iterable, List, Sequence

from .fileio import normal_mode

OPS_DIR = Path(__file__).resolve().parent.parent / "ops"
if not OPS_DIR.is_dir():  # installed non-editable: sources are shipped inside the package
    OPS_DIR = Path(__file__).resolve().parent / "_ops_src"

# No -march: every object is built for the architecture's baseline (x86-64: SSE2), so a
# library runs on any machine of that architecture.  Kernels that use wider instruction
# sets are compiled per path inside the sources and chosen at run time (ops/core/isa.h).
COMPILE_FLAGS = ["-O3", "-fPIC", "-std=c++17", "-Wall", "-Wno-sign-compare",
                 "-Wno-unused-function",
                 "-Wno-psabi"]  # 32-byte vector-extension lanes in baseline builds (minmax.cc)
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


class BuildError(RuntimeError):
    """The C++ compiler failed; the message carries its output."""


def cache_dir() -> Path:
    d = Path(os.environ.get("RATELNN_CACHE_DIR") or Path.home() / ".cache" / "ratelnn")
    d.mkdir(parents=True, exist_ok=True)  # 0777 under the umask: 0755 usually
    return d


def _resolve_include(path: Path, inc: str) -> Path | None:
    """The file under ops/ that ``#include "inc"`` in ``path`` names (looked up beside
    ``path``, then in ops/, as the compiler does with ``-I ops``), or None (another header)."""
    for base in (path.parent, OPS_DIR):
        cand = (base / inc).resolve()
        if cand.is_file():
            return cand
    return None


def _local_includes(path: Path, seen: set) -> None:
    """Add to ``seen`` every file under ops/ that ``path`` includes, transitively (headers and
    the ``.inc`` kernel sources, e.g. ops/core/conv/*.inc through npu_conv_kernels.inc)."""
    for inc in _INCLUDE.findall(path.read_text(errors="replace")):
        cand = _resolve_include(path, inc)
        if cand is not None and cand not in seen:
            seen.add(cand)
            _local_includes(cand, seen)


@functools.lru_cache(maxsize=None)
def toolchain_identity(cxx: str) -> str:
    """What the objects depend on besides sources and flags: the compiler's version and
    target triple, and this machine's architecture (never its instruction-set extensions,
    which the built code detects at run time)."""
    try:
        proc = subprocess.run([cxx, "-dumpfullversion", "-dumpmachine"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)
        compiler = proc.stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"cannot run the C++ compiler {cxx!r}: {exc}") from exc
    return f"{compiler}\0{platform.machine()}\0{platform.system()}"


@functools.lru_cache(maxsize=None)
def avx512fp16_off_flags(cxx: str | None = None) -> List[str]:
    """``["-mno-avx512fp16"]`` where the compiler knows the option, else ``[]``.

    TensorFlow's bundled Eigen does not compile with AVX512-FP16 enabled (its
    PacketMathFP16.h), which a compiler whose default or configured target is Sapphire
    Rapids or newer enables; the TF glue turns it off so it compiles for any target.
    """
    cxx = cxx or os.environ.get("CXX", "g++")
    probe = subprocess.run([cxx, "-mno-avx512fp16", "-x", "c++", "-fsyntax-only", "-"], input="",
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    return ["-mno-avx512fp16"] if probe.returncode == 0 else []


def object_key(source: Path, flags: Sequence[str]) -> str:
    """Hash of the source, the ops/ headers it includes (transitively), the flags and the
    toolchain (:func:`toolchain_identity` of ``flags[0]``, the compiler).  The include flag of
    the ops/ folder enters by name, not by path: the files it reaches are hashed by content,
    so a checkout and an installed package (``_ops_src``) with the same sources share objects."""
    h = hashlib.sha256(toolchain_identity(flags[0]).encode())
    headers: set = set()
    _local_includes(source, headers)
    for p in [source, *sorted(headers)]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update("\0".join("-I<ops>" if f == f"-I{OPS_DIR}" else f for f in flags).encode())
    return h.hexdigest()[:20]


def object_path(source: Path, flags: Sequence[str]) -> Path:
    """Where the object of ``source`` compiled with ``flags`` (a :func:`compiler_command`) is
    cached: ``<cache>/obj/<stem>-<object_key>.o``."""
    return cache_dir() / "obj" / f"{source.stem}-{object_key(source, flags)}.o"


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
        # mkstemp made it 0600 (the linker adds x bits): others must be able to load it
        normal_mode(tmp, executable=target.suffix == ".so")
        os.replace(tmp, target)


def compiler_command(compile_flags: Sequence[str] = (), cxx: str | None = None) -> List[str]:
    """The compiler and every flag an object of ops/ is compiled with (add ``-c SRC -o OBJ``)."""
    return [cxx or os.environ.get("CXX", "g++"), *COMPILE_FLAGS, f"-I{OPS_DIR}", *compile_flags]


def core_flags(compile_flags: Sequence[str] = ()) -> List[str]:
    """The flags, besides :data:`COMPILE_FLAGS`, of the framework-independent objects of a
    library whose own sources take ``compile_flags``: ``-DNDEBUG`` and the C++ library ABI
    define of ``compile_flags`` (the objects pass ``std::string`` to each other, so they must
    agree on it).  Libraries of one ABI thus share these objects in the cache."""
    abi = [f for f in compile_flags if f.startswith("-D_GLIBCXX_USE_CXX11_ABI=")]
    return ["-DNDEBUG", *abi[-1:]]


def _compile_cost(source: Path) -> int:
    """Bytes the compiler reads for ``source``: its text with the ops/ files it includes
    expanded, transitively; a header (``.h``) counted once, any other file (``.inc``) at each
    include of it."""
    headers: set = set()

    def expanded(path: Path, active: tuple) -> int:
        text = path.read_text(errors="replace")
        size = len(text)
        for inc in _INCLUDE.findall(text):
            cand = _resolve_include(path, inc)
            if cand is None or cand in headers or cand in active:
                continue
            if cand.suffix == ".h":
                headers.add(cand)
            size += expanded(cand, active + (cand,))
        return size

    return expanded(source.resolve(), (source.resolve(),))


def build_library(name: str, sources: Iterable[Path], compile_flags: Sequence[str] = (),
                  link_flags: Sequence[str] = (), cxx: str | None = None,
                  core_sources: Iterable[Path] = ()) -> Path:
    """Return the path of ``lib<name>-<key>.so`` built from ``sources`` (compiled with
    ``compile_flags``) and ``core_sources`` (which include no framework header: compiled with
    :func:`core_flags` of ``compile_flags``), building it if needed.

    Each source is compiled to an object cached under its own key (source, included
    headers, flags), on ``os.cpu_count()`` threads, the costliest first; the library key
    combines the object keys and link flags.  So editing one file recompiles only that
    file, and the TensorFlow and C API libraries compile ops/core once between them.
    Raises :class:`BuildError` on failure (the first failing compile's output).
    """
    cxx = cxx or os.environ.get("CXX", "g++")
    units = [(Path(s).resolve(), compiler_command(core_flags(compile_flags), cxx)) for s in core_sources]
    units += [(Path(s).resolve(), compiler_command(compile_flags, cxx)) for s in sources]
    (cache_dir() / "obj").mkdir(exist_ok=True)
    objects = [object_path(src, flags) for src, flags in units]
    todo = sorted((-_compile_cost(src), i) for i, (src, _) in enumerate(units) if not objects[i].exists())

    def compile_one(i: int) -> None:
        src, flags = units[i]
        _run_locked(objects[i], lambda tmp: [*flags, "-c", str(src), "-o", tmp])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = [pool.submit(compile_one, i) for _, i in todo]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            f.cancel()  # after a failure: no new compile starts; running ones finish
        for f in futures:
            if not f.cancelled():
                f.result()  # raises the first failure in cost order
    h = hashlib.sha256(name.encode())
    for o in objects:
        h.update(o.name.encode())
    h.update("\0".join([cxx, *link_flags]).encode())
    out = cache_dir() / f"lib{name}-{h.hexdigest()[:20]}.so"
    _run_locked(out, lambda tmp: [cxx, "-shared", *map(str, objects), "-o", tmp, *link_flags])
    return out
