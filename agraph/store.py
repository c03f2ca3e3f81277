"""The local model store under ``$AGRAPH_HOME/store`` (docs/agraph.md, "The model store").

One entry per (model, stage, size): ``<root>/<name>/<stage>[-test]/`` with the model files and
``manifest.json`` (``name``, ``stage``, ``size``, ``key`` = hash of the model folder's source
and build options, ``files`` = file name -> sha256).  An entry is written in a temporary
folder and renamed into place; reading one verifies every checksum.  :meth:`Store.export`
packs every entry into one ``.tar`` whose ``MANIFEST.json`` lists each member's sha256;
:meth:`Store.import_archive` refuses an archive with a missing, extra, unsafe or altered
member before anything lands in the store.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, Optional, Sequence

from ratelnn.fileio import write_atomic

from . import paths
from .errors import StoreError

ARCHIVE_FORMAT = 1
MANIFEST = "manifest.json"
ARCHIVE_MANIFEST = "MANIFEST.json"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry_dirname(stage: str, size: str) -> str:
    return stage if size == "full" else f"{stage}-{size}"


class Store:
    """The store at ``root`` (default ``$AGRAPH_HOME/store``)."""

    def __init__(self, root: Optional[os.PathLike] = None) -> None:
        self.root = Path(root) if root is not None else paths.store_dir()

    def entry_dir(self, name: str, stage: str, size: str = "full") -> Path:
        return self.root / name / entry_dirname(stage, size)

    def manifest(self, name: str, stage: str, size: str = "full") -> Optional[Dict[str, Any]]:
        """The manifest of an entry, or None if there is none."""
        path = self.entry_dir(name, stage, size) / MANIFEST
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError as e:
            raise StoreError(f"{path}: unreadable store manifest ({e}); delete "
                             f"{path.parent} or rebuild with `python -m agraph build {name} --force`") from None

    def lookup(self, name: str, stage: str, size: str = "full", key: Optional[str] = None) -> Optional[List[Path]]:
        """Paths of the stored files of an entry, verified, if it exists and was built with
        ``key`` (any key when None); None otherwise.  StoreError if a file is missing or
        altered."""
        manifest = self.manifest(name, stage, size)
        if manifest is None or (key is not None and manifest.get("key") != key):
            return None
        folder = self.entry_dir(name, stage, size)
        files = []
        for fname, digest in manifest["files"].items():
            path = folder / fname
            if not path.is_file():
                raise StoreError(f"store entry {folder}: {fname} is missing; rebuild with "
                                 f"`python -m agraph build {name} --force`")
            if sha256_bytes(path.read_bytes()) != digest:
                raise StoreError(f"store entry {folder}: {fname} does not match its manifest "
                                 f"checksum (altered or corrupt); rebuild with `python -m agraph build {name} --force`")
            files.append(path)
        return files

    def put(self, name: str, stage: str, size: str, key: str, files: Sequence[Path],
            meta: Optional[Dict[str, Any]] = None) -> List[Path]:
        """Copy ``files`` into the entry (replacing an old one whole); returns the new paths."""
        target = self.entry_dir(name, stage, size)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".tmp-{target.name}-"))
        try:
            digests = {}
            for f in files:
                shutil.copyfile(f, tmp / Path(f).name)
                digests[Path(f).name] = sha256_bytes((tmp / Path(f).name).read_bytes())
            manifest = {"name": name, "stage": stage, "size": size, "key": key, "files": digests, **(meta or {})}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            _replace_dir(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return [target / Path(f).name for f in files]

    def entries(self) -> List[Dict[str, Any]]:
        """Manifests of every entry, in path order."""
        found = []
        for path in sorted(self.root.glob(f"*/*/{MANIFEST}")):
            if not path.parent.name.startswith("."):
                found.append(json.loads(path.read_text()))
        return found

    def export(self, archive: os.PathLike, names: Sequence[str] = ()) -> Path:
        """Write every entry (of models ``names``, all when empty) as one ``.tar`` at
        ``archive``, verified first; same store gives the same bytes.  Returns the path."""
        archive = Path(archive)
        members: Dict[str, bytes] = {}
        for path in sorted(self.root.glob(f"*/*/{MANIFEST}")):
            entry_dir = path.parent
            if entry_dir.name.startswith(".") or (names and entry_dir.parent.name not in names):
                continue
            manifest = json.loads(path.read_text())
            self.lookup(manifest["name"], manifest["stage"], manifest["size"])  # verifies
            for f in sorted(entry_dir.iterdir()):
                members[f"{entry_dir.parent.name}/{entry_dir.name}/{f.name}"] = f.read_bytes()
        if not members:
            raise StoreError(f"nothing to export: the store {self.root} holds no entry"
                             + (f" of {list(names)}" if names else ""))
        index = {"format": ARCHIVE_FORMAT, "files": {k: sha256_bytes(v) for k, v in members.items()}}

        def write(tmp: str) -> None:
            with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
                for name, data in [(ARCHIVE_MANIFEST, json.dumps(index, indent=1, sort_keys=True).encode())] \
                        + sorted(members.items()):
                    info = tarfile.TarInfo(name)
                    info.size, info.mode, info.mtime = len(data), 0o644, 0
                    tar.addfile(info, io.BytesIO(data))

        archive.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(archive, write)
        return archive

    def import_archive(self, archive: os.PathLike) -> List[Path]:
        """Verify the archive of :meth:`export` whole, then move its entries into this store
        (each replacing an entry of the same model/stage).  Returns the entry folders.
        StoreError naming the member when anything does not match."""
        archive = Path(archive)
        members = _read_archive(archive)
        try:
            index = json.loads(members.pop(ARCHIVE_MANIFEST))
            expected = dict(index["files"])
        except (KeyError, ValueError, TypeError):
            raise StoreError(f"{archive}: no valid {ARCHIVE_MANIFEST}; not a store export") from None
        if index.get("format") != ARCHIVE_FORMAT:
            raise StoreError(f"{archive}: store archive format {index.get('format')!r}, expected {ARCHIVE_FORMAT}")
        for name in sorted(set(expected) | set(members)):
            if name not in members:
                raise StoreError(f"{archive}: member {name} listed in {ARCHIVE_MANIFEST} is missing")
            if name not in expected:
                raise StoreError(f"{archive}: member {name} is not listed in {ARCHIVE_MANIFEST} (tampered)")
            if sha256_bytes(members[name]) != expected[name]:
                raise StoreError(f"{archive}: member {name} does not match its checksum (tampered or corrupt)")
        groups: Dict[str, Dict[str, bytes]] = {}
        for name, data in members.items():
            parts = PurePosixPath(name).parts
            if len(parts) != 3:
                raise StoreError(f"{archive}: member {name} is not <model>/<stage>/<file>")
            groups.setdefault(f"{parts[0]}/{parts[1]}", {})[parts[2]] = data
        for group, files in groups.items():
            _check_entry(archive, group, files)
        done = []
        for group, files in sorted(groups.items()):
            target = self.root / group
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".tmp-{target.name}-"))
            try:
                for fname, data in files.items():
                    (tmp / fname).write_bytes(data)
                _replace_dir(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            done.append(target)
        return done


def _check_entry(archive: Path, group: str, files: Dict[str, bytes]) -> None:
    """The entry's own manifest must list exactly its other files with their checksums."""
    if MANIFEST not in files:
        raise StoreError(f"{archive}: entry {group} has no {MANIFEST}")
    try:
        listed = json.loads(files[MANIFEST])["files"]
    except (ValueError, KeyError, TypeError):
        raise StoreError(f"{archive}: {group}/{MANIFEST} is not a store manifest") from None
    others = {k: v for k, v in files.items() if k != MANIFEST}
    if set(listed) != set(others) or any(sha256_bytes(others[k]) != listed[k] for k in listed):
        raise StoreError(f"{archive}: entry {group} does not match its {MANIFEST}")


def _read_archive(archive: Path) -> Dict[str, bytes]:
    """Members of a store archive by name; only regular files at safe relative paths."""
    if not archive.is_file():
        raise StoreError(f"{archive}: no such store archive")
    members: Dict[str, bytes] = {}
    try:
        with tarfile.open(archive) as tar:
            for info in tar:
                path = PurePosixPath(info.name)
                if not info.isfile() or path.is_absolute() or ".." in path.parts or str(path) != info.name:
                    raise StoreError(f"{archive}: member {info.name!r} is not a plain relative file (refused)")
                if info.name in members:
                    raise StoreError(f"{archive}: member {info.name} appears twice (tampered)")
                members[info.name] = tar.extractfile(info).read()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise StoreError(f"{archive}: not a readable store archive: {e}") from None
    return members


def _replace_dir(new: Path, target: Path) -> None:
    """Rename the complete folder ``new`` to ``target``, replacing an old one whole."""
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".old-{target.name}-"))
        os.rmdir(old)
        os.replace(target, old)
    os.chmod(new, 0o755)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
