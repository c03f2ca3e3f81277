"""The sources and docs speak of the product, not of its development: no numbered references
to tracker entries, work sessions or checklist entries, and no references to a specification kept
outside the repository.  Every text file under ratelnn, agraph, docs, tests, bench, examples,
ops and README.md is read; a failure lists each offending file:line.  Pages of the repository
itself (docs/*.md and their sections, docs/architecture.md §N) are the references to use."""
from __future__ import annotations

import re

import pytest

from helpers.paths import REPO

# reads source files only (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math

ROOTS = ("ratelnn", "agraph", "docs", "tests", "bench", "examples", "ops", "README.md")
SUFFIXES = {".py", ".md", ".rst", ".txt", ".cc", ".c", ".h", ".hpp", ".cpp", ".inc", ".proto",
            ".toml", ".cfg", ".ini", ".yaml", ".yml", ".json", ".sh", ".in"}
SKIP_DIRS = {"__pycache__", ".pytest_cache", "build", "dist"}
MAX_BYTES = 2_000_000

# The words are split so that this file does not match its own patterns.
_PROCESS = "|".join(("iss" + "ue", "sess" + "ion", "it" + "em"))
PROCESS = re.compile(r"\b(?:%s)s?\s*[-#]?\s*\d" % _PROCESS, re.IGNORECASE)
_DESIGN = "DES" + "IGN"
DESIGN_DOC = re.compile(r"\b%s(?:\.md|\s*§|\s+doc(?:ument)?s?\b|\s+contract\b)|\b%s\b"
                        % (_DESIGN, _DESIGN), re.IGNORECASE)


def _is_design_doc_reference(line: str) -> bool:
    """A specification outside the repository: the capitalised file name, or the word followed
    by '.md', a section sign, 'doc(ument)' or 'contract' (any case)."""
    return any(m.group(0).isupper() or m.group(0).lower() != _DESIGN.lower()
               for m in DESIGN_DOC.finditer(line))


def text_files():
    """Every text file under ROOTS, by path relative to the repository."""
    for root in ROOTS:
        path = REPO / root
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for p in candidates:
            if not p.is_file() or SKIP_DIRS.intersection(p.relative_to(REPO).parts):
                continue
            if p.suffix not in SUFFIXES and p.name != "README.md":
                continue
            if p.stat().st_size > MAX_BYTES:
                continue
            try:
                yield p.relative_to(REPO).as_posix(), p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue


def offending_lines(text: str):
    """``(line number, line)`` of every line with a development-process reference."""
    for number, line in enumerate(text.splitlines(), 1):
        if PROCESS.search(line) or _is_design_doc_reference(line):
            yield number, line.strip()


@pytest.mark.parametrize("text, expected", [
    ("see " + "Iss" + "ue 16 for the reason", 1),
    ("(" + "iss" + "ues 5 and 7)", 1),
    ("it" + "ems 1-2 of the list", 1),
    ("sess" + "ion-9 code", 1),
    ("as " + "iss" + "ue #12 asked", 1),
    ("(" + _DESIGN + " §9)", 1),
    ("the " + _DESIGN.lower() + " document says", 1),
    ("a tf.compat.v1.Session() runs it; dict.items() of 3 items", 0),
    ("the design of the executor (docs/architecture.md §7)", 0),
])
def test_the_patterns_find_what_they_should(text, expected):
    assert len(list(offending_lines(text))) == expected


def test_no_development_process_references():
    files = list(text_files())
    assert any(name == "README.md" for name, _ in files) and len(files) > 100
    found = [f"{name}:{number}: {line[:160]}"
             for name, text in files for number, line in offending_lines(text)]
    assert not found, ("Say what the code does or what behaviour a test checks, and point to the "
                       "repository's own docs (docs/*.md) instead:\n" + "\n".join(found))
