"""Writing files that readers never see half-written."""
from __future__ import annotations

import os
import tempfile
from typing import Callable, Union


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
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
