"""Imports point down the pipeline: the validator and simulator never reach into the solver."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "twill"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(("." * node.level) + node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_validator_and_simulator_are_independent_of_the_solver():
    """A bug in the solver's constraints cannot hide behind the same code in the checker."""
    for path in [PACKAGE / "validate.py", *sorted((PACKAGE / "sim").glob("*.py"))]:
        assert not any("solver" in m for m in imported_modules(path)), path


def test_ir_knows_nothing_about_architectures():
    """The loop-body IR is arch-free: unit names are checked later, in Problem."""
    mods = imported_modules(PACKAGE / "ir.py")
    assert not any(m.lstrip(".").startswith(("arch", "problem", "solver", "registry")) for m in mods)
