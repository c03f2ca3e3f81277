"""Paths of the checkout the tests run from."""
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
HELPERS = TESTS / "helpers"          # shared test code (and a C++ probe)
SCRIPTS = TESTS / "scripts"          # small programs the tests run in subprocesses
BENCH = REPO / "bench"
EXAMPLES = REPO / "examples"
