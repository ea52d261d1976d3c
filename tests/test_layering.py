"""Imports point down the pipeline: each module imports only modules of its own layer or below,
the package's import graph has no cycle, and the checkers never reach into the solver."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "twill"

# The pipeline, bottom first (README "Layout", docs/design.md §1). A module may import any module
# of a lower or equal layer; an import of a higher layer runs back up the flow. The first prefix
# that matches a module's dotted name gives its layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("twill.errors", "twill.jsonfile"),
    ("twill.ir", "twill.body_json"),
    ("twill.arch",),
    ("twill.frontend",),
    ("twill.problem", "twill.options"),
    ("twill.bounds",),
    ("twill.schedule",),
    ("twill.validate",),  # checks a schedule, knows no solver; the solvers check their answers with it
    ("twill.solver",),
    ("twill.timeline", "twill.sim"),
    ("twill.viz", "twill.estimate", "twill.compare", "twill.codegen", "twill.random_loops", "twill.sweep"),
    ("twill.cli", "twill.__main__", "twill"),
)


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the twill modules ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    me = module_name(path).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            out.add(name)
            out.update(f"{name}.{a.name}" for a in node.names if _is_module(f"{name}.{a.name}"))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m == "twill" or m.startswith("twill.")}


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").exists() or (PACKAGE.parent / rel / "__init__.py").exists()


def layer(name: str) -> int:
    for i, prefixes in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"module {name} is in no layer of tests/test_layering.py")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_import_runs_back_up_the_flow():
    """A lower layer never imports a higher one (the package root re-exports, so it sits on top)."""
    bad = []
    for path in modules():
        me = module_name(path)
        for other in imported_modules(path):
            if other != "twill" and layer(other) > layer(me):
                bad.append(f"{me} (layer {layer(me)}) imports {other} (layer {layer(other)})")
    assert not bad, "\n".join(bad)


def test_the_import_graph_has_no_cycle():
    """Modules (not packages: a package's __init__ may re-export its own modules) form a DAG."""
    g = nx.DiGraph()
    for path in modules():
        if path.name == "__init__.py":
            continue
        me = module_name(path)
        g.add_node(me)
        for other in imported_modules(path):
            if _is_module(other) and not (PACKAGE.parent / Path(*other.split(".")) / "__init__.py").exists():
                g.add_edge(me, other)
    cycles = list(nx.simple_cycles(g))
    assert not cycles, cycles


def test_validator_and_simulator_are_independent_of_the_solver():
    """A bug in the solver's constraints cannot hide behind the same code in the checker."""
    for path in [PACKAGE / "validate.py", *sorted((PACKAGE / "sim").glob("*.py"))]:
        assert not any(m.startswith("twill.solver") for m in imported_modules(path)), path


def test_reference_backends_build_no_cp_sat_model():
    """z3 and the exhaustive search check CP-SAT; they read bounds from twill.bounds, not from a model."""
    for name in ("z3_backend.py", "exhaustive.py"):
        mods = imported_modules(PACKAGE / "solver" / name)
        assert not any(m.startswith(("twill.solver.model", "twill.solver.search")) for m in mods), name


def test_ir_knows_nothing_about_architectures():
    """The loop-body IR is arch-free: unit names are checked later, in Problem."""
    assert imported_modules(PACKAGE / "ir.py") <= {"twill.errors"}

