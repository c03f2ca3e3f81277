"""Running ``ratelnn.cli.main`` in-process with its output captured."""
from __future__ import annotations

import contextlib
import io
from typing import Sequence, Tuple

from ratelnn.cli import main


def call(argv: Sequence[str]) -> Tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``main(argv)``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def succeeds(argv: Sequence[str]) -> str:
    """stdout of ``main(argv)``, asserting exit code 0; a failure's message carries the
    command's error line (stderr), so a short test summary names the cause."""
    code, out, err = call(argv)
    assert code == 0, f"ratelnn {' '.join(argv[:1])} exited {code}: {err.strip()[-1500:]}"
    return out
