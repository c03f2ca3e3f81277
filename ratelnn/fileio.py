"""Writing files that readers never see half-written."""
from __future__ import annotations

import os
import tempfile
from typing import Callable, Union


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def normal_mode(path: "str | os.PathLike", executable: bool = False) -> None:
    """Give ``path`` the mode a plain ``open``/``mkdir`` would: 0644 (0755 for libraries and
    directories) under the process umask.  Temporary files are created 0600; a file renamed
    into place keeps that mode unless it is reset."""
    os.chmod(path, (0o777 if executable else 0o666) & ~_umask())


def write_atomic(path: "str | os.PathLike", data: Union[bytes, Callable[[str], None]]) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder renamed into
    place: a reader sees the old file or the whole new one, and a failure leaves neither a
    partial ``path`` nor the temporary file.  ``data``: the bytes, or a function that writes
    the file at the temporary path it is given (a framework's own save function)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"" if callable(data) else data)
        if callable(data):
            data(tmp)
        normal_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
