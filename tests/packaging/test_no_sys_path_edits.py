"""Tests import what they share with benches and examples from installed packages (``agraph``,
``ratelnn``) or from tests/helpers (pytest's ``pythonpath``), never by editing the import
path: no file under tests/ assigns to, inserts into or extends the interpreter's path list,
in its own code or in the code it hands a child interpreter (a subprocess that needs
tests/helpers gets it through ``PYTHONPATH``)."""
from __future__ import annotations

import ast
import re

import pytest

from helpers.paths import TESTS

# reads source files only (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math

# `sys.path` followed by an item/slice assignment, a mutating method or an assignment; in code
# and in string literals (code run with `python -c`)
EDIT = re.compile(r"\bsys\s*\.\s*path\s*(\[[^\]]*\]\s*=|\.\s*(insert|append|extend|remove|pop|clear)\s*\(|[+]?=[^=])")
MUTATORS = {"insert", "append", "extend", "remove", "pop", "clear"}


def _is_sys_path(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def edits_in_code(tree: ast.AST):
    """Lines where the parsed code itself edits ``sys.path`` (assignment, item or slice
    assignment, augmented assignment, or a mutating method call)."""
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            if _is_sys_path(target) or (isinstance(target, ast.Subscript) and _is_sys_path(target.value)):
                yield node.lineno
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
                and _is_sys_path(node.func.value)):
            yield node.lineno


def test_edit_patterns_are_recognised():
    code = "import sys\nsys.path.insert(0, 'x')\nsys.path[:0] = ['y']\nsys.path += ['z']\nsys.path = []\n"
    assert sorted(edits_in_code(ast.parse(code))) == [2, 3, 4, 5]
    assert [bool(EDIT.search(line)) for line in code.splitlines()] == [False, True, True, True, True]
    assert not EDIT.search("if sys.path == before:") and not EDIT.search("print(sys.path[0])")


def test_no_file_under_tests_edits_sys_path():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(TESTS)
        offenders += [f"{rel}:{line}" for line in edits_in_code(ast.parse(text, str(path)))]
        if path.name != "test_no_sys_path_edits.py":
            offenders += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1) if EDIT.search(line)]
    assert sorted(set(offenders)) == []
