"""Op knowledge lives in the op registry (ratelnn/ir/registry.py, docs/adding-an-op.md).

No module of ``ratelnn`` or ``agraph`` other than the registry holds a literal collection
(tuple, list, set, dict keys) of two or more IR op names: a pass asks the registry's traits
(``registry.WEIGHTED_OPS``, ``registry.is_weighted(op)``...).  Exempt: the frontends'
translation tables (the dict given to ``registry.frontend_table`` / ``registry.exporter_table``,
keyed by framework spellings or IR ops, each with its own translation code and checked by the
registry) and a collection marked ``# not IR ops`` on its first line (names of another
vocabulary that happen to coincide, e.g. Keras layer classes).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, List

import pytest

from ratelnn.ir import registry

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = Path("ratelnn/ir/registry.py")
TRANSLATION_TABLES = {"frontend_table", "exporter_table"}
MARK = "# not IR ops"


def _translation_tables(tree: ast.AST) -> set:
    """ids of the dict literals given to frontend_table/exporter_table."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in TRANSLATION_TABLES and isinstance(node.args[1], ast.Dict):
                out.add(id(node.args[1]))
    return out


def op_name_literals(source: str, path: str, names: Iterable[str]) -> List[str]:
    """``path:line: [ops]`` for every literal collection of >= 2 of ``names`` in ``source``."""
    names = set(names)
    tree = ast.parse(source)
    lines = source.splitlines()
    exempt = _translation_tables(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict) and id(node) not in exempt:
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        ops = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]
        if len(ops) >= 2 and MARK not in lines[node.lineno - 1]:
            found.append(f"{path}:{node.lineno}: {ops}")
    return found


def _sources():
    for top in ("ratelnn", "agraph"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel != REGISTRY:
                yield rel.as_posix(), path.read_text(encoding="utf-8")


def test_no_module_outside_the_registry_lists_ir_ops():
    found = [hit for rel, text in _sources() for hit in op_name_literals(text, rel, registry.BY_NAME)]
    assert not found, "literal IR op collections outside ratelnn/ir/registry.py (ask the registry):\n" + \
        "\n".join(found)


@pytest.mark.parametrize("planted, line", [
    ('WEIGHTED = ("Conv2D", "MatMul")\n', 3),
    ('def f(node):\n    return node.op in {"Relu", "Relu6"}\n', 4),
    ('ACTS = {"Relu": "relu", "LeakyRelu": "leaky_relu"}\n', 3),
    ('X = frozenset(["Add", "Sub", "Mul"])\n', 3),
])
def test_a_planted_literal_is_named_by_file_and_line(planted, line):
    found = op_name_literals("import os\n\n" + planted, "ratelnn/planted.py", registry.BY_NAME)
    assert [hit.split(":")[:2] for hit in found] == [["ratelnn/planted.py", str(line)]], found


def test_the_check_fails_on_a_literal_planted_in_a_module():
    """The repository check itself, on a copy of one module with a literal added."""
    source = (ROOT / "ratelnn/ir/passes.py").read_text(encoding="utf-8")
    planted = source + '\n_PLANTED = ("Conv2D", "MatMul")\n'
    line = planted.count("\n")
    found = op_name_literals(planted, "ratelnn/ir/passes.py", registry.BY_NAME)
    assert found == [f"ratelnn/ir/passes.py:{line}: ['Conv2D', 'MatMul']"]


def test_exemptions():
    names = registry.BY_NAME
    table = 'T = registry.frontend_table("tf", {"Conv2D": f, "MatMul": g}, h)\n'
    assert op_name_literals(table, "x.py", names) == []
    marked = f'K = ("Add", "Maximum")  {MARK}: Keras classes\n'
    assert op_name_literals(marked, "x.py", names) == []
    assert op_name_literals('ONE = ("Conv2D", "conv")\nEQ = node.op == "Conv2D"\n', "x.py", names) == []


# ---------------------------------------------------------------- the traits
def test_traits_answer_what_the_passes_ask():
    assert registry.WEIGHTED_OPS == {op.name for op in registry.OPS if op.form == registry.WEIGHTED}
    assert registry.is_weighted("Conv2D") and not registry.is_weighted("Add") and not registry.is_weighted("nope")
    assert {"Sigmoid", "Tanh", "Exp"} <= registry.LUT_OPS and all(registry.get(o).npu == ("LUT",)
                                                                   for o in registry.LUT_OPS)
    assert registry.CUSTOM_OPS == {op.name for op in registry.OPS if op.custom_op}
    assert registry.moves_values("Reshape") and registry.moves_values("Identity") and not registry.moves_values("Add")
    assert registry.fused_act("Relu6") == "relu6" and registry.fused_act("Sigmoid") == ""
    assert registry.lowering("Conv2D") == "conv2d" and registry.lowering("Tanh") == "table"
    assert registry.lowering("Sqrt") == ""
    assert registry.cost_class("MatMul") == "fc"
    assert "div" in registry.SENSITIVE_OP_TYPES and "realdiv" in registry.SENSITIVE_OP_TYPES
    assert "log" in registry.SENSITIVE_OP_TYPES and "add" not in registry.SENSITIVE_OP_TYPES
    # every op with instructions has a lowering routine, every LUT op a float definition
    from ratelnn.compiler import lower
    from ratelnn.ir.evaluate import _NODE_FNS
    for op in registry.OPS:
        if op.npu:
            assert hasattr(lower._RegionLowering, "op_" + op.lowering), op.name
        if op.lut:
            assert op.fn is not None or op.name in _NODE_FNS, op.name


def test_a_temporary_op_is_registered_only_inside_the_block():
    before = (len(registry.OPS), set(registry.QUANTIZED_OPS), set(registry.SPELLINGS["tf"]))
    with registry.temporary_op(name="ThrowawayOp", tf="ThrowawayTf", fn=lambda x: x, quantized=True) as op:
        assert registry.get("ThrowawayOp") is op
        assert "ThrowawayOp" in registry.QUANTIZED_OPS
        assert registry.ir_ops("ThrowawayTf") == {"ThrowawayOp"}
        with pytest.raises(ValueError):
            registry.register(op)
    assert (len(registry.OPS), set(registry.QUANTIZED_OPS), set(registry.SPELLINGS["tf"])) == before
    with pytest.raises(registry.UnknownOpError):
        registry.get("ThrowawayOp")
