"""Write one benchmark's results into its own section of docs/benchmarks.md.

Each bench script owns the section between ``<!-- <key>: start -->`` and
``<!-- <key>: end -->``; rerunning it replaces just that section (appended when absent), with a ``Date:`` line after
its heading when the script's markdown has none.
The file is rewritten through a temporary file renamed into place.
"""
from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = ("# Benchmarks\n\nMeasured numbers. Each section is written by the script and command "
          "named in it; rerun that command to refresh the section in place.\n")


def write_section(key: str, markdown: str, doc: Path = DOC) -> None:
    """Replace section ``key`` of ``doc`` with ``markdown`` (a whole section, heading included);
    ``doc`` ``-`` writes nothing (the scripts print their section too)."""
    if str(doc) == "-":
        return
    start, end = f"<!-- {key}: start -->", f"<!-- {key}: end -->"
    text = doc.read_text() if doc.exists() else HEADER
    block = f"{start}\n{dated(markdown)}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = doc.with_name(doc.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, doc)


def dated(markdown: str) -> str:
    """``markdown`` (stripped) with a ``Date: <UTC time>.`` line after its heading, unless it
    already has a line starting with ``Date:``."""
    lines = markdown.strip().splitlines()
    if not lines or any(line.startswith("Date:") for line in lines):
        return "\n".join(lines)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return "\n".join(lines[:1] + ["", f"Date: {stamp}."] + lines[1:])


def demote_headings(markdown: str) -> str:
    """A page's headings one level down, so its title becomes a section heading."""
    return "\n".join("#" + line if line.startswith("#") else line for line in markdown.splitlines())


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (or the platform's processor string) and the native
    kernel path that runs on it (``ratelnn.npu.native_isa()``)."""
    from ratelnn.npu import native_isa

    try:
        match = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    except OSError:
        match = None
    model = match.group(1).strip() if match else platform.processor() or "unknown CPU"
    return f"{model}, kernel path {native_isa()}"
