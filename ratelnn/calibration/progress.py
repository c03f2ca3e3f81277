"""A small progress bar on stderr: items done / total, rate and ETA; no dependencies.

On a terminal the line is redrawn in place (at most every ``min_interval`` seconds); on
anything else (a log file, a pipe, CI) a full line is printed at most every
``min_interval_pipe`` seconds.  :meth:`Progress.close` always prints the final line.
"""
from __future__ import annotations

import sys
import time
from typing import IO, Optional


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` (or ``M:SS`` under an hour) of a non-negative number of seconds."""
    seconds = int(round(max(seconds, 0.0)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Progress of ``total`` items (None: unknown) called ``unit``, labelled ``label``.

    ``enabled=False`` makes every method a no-op.  Use as a context manager or call
    :meth:`update` per item and :meth:`close` at the end.
    """

    def __init__(self, total: Optional[int], label: str = "", unit: str = "batches",
                 enabled: bool = True, stream: Optional[IO[str]] = None,
                 min_interval: float = 0.1, min_interval_pipe: float = 5.0) -> None:
        self.total = total
        self.label = label
        self.unit = unit
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = min_interval if self.tty else min_interval_pipe
        self.done = 0
        self.start = time.monotonic()
        self._last_draw = self.start
        self._closed = False

    def line(self) -> str:
        """The current status text, e.g. ``calibrate: 12/40 batches, 3.4 batches/s, ETA 0:08``."""
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        if self.total is None or rate <= 0:
            eta = "?"
        else:
            eta = format_duration((self.total - self.done) / rate)
        prefix = f"{self.label}: " if self.label else ""
        return (f"{prefix}{count} {self.unit}, {rate:.2f} {self.unit}/s, ETA {eta}, "
                f"elapsed {format_duration(elapsed)}")

    def _draw(self, final: bool = False) -> None:
        text = self.line()
        if self.tty:
            self.stream.write("\r" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._last_draw = time.monotonic()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more items done; redraw if the last draw is old enough."""
        if not self.enabled or self._closed:
            return
        self.done += n
        if time.monotonic() - self._last_draw >= self.interval:
            self._draw()

    def close(self) -> None:
        """Print the final line (once)."""
        if self.enabled and not self._closed:
            self._draw(final=True)
        self._closed = True

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
