"""The register peaks stated on the line (``build_model(line=True)``, docs/design.md §2.8): exact, so the same IIs
are feasible as with the circle's statement, and used by the search only in its cold solves at one II of bodies
whose static bound is the register file (§3.1e)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ortools.sat.python import cp_model

from tests.conftest import problem
from twill.arch.registry import get_arch
from twill.bounds import lower_bound
from twill.problem import Problem, build_problem
from twill.random_loops import random_body, tiny_arch
from twill.solver import SolveOptions, hints, phases, solve
from twill.solver.assemble import assemble
from twill.solver.model import build_model
from twill.solver.run import Work
from twill.validate import validate

# tiny bodies (2-5 ops) on the tiny arch, whose register file binds: the first 60, and those up to 400 with an II at
# which the peak families decide (infeasible, while the model without them is not)
SEEDS = (*range(60), 78, 82, 95, 102, 117, 120, 137, 140, 170, 183, 184, 217, 226, 251, 276, 341, 370, 372, 380)
SPAN = 6  # IIs compared from each body's lower bound


def _decide(problem: Problem, ii: int, line: bool) -> tuple[int, cp_model.CpSolver, object]:
    """The joint model at ``ii`` solved to a verdict on one worker."""
    v = build_model(problem, SolveOptions(workers=1), ii, ii, line=line)
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.max_time_in_seconds = 60
    status = s.solve(v.m)
    assert status != cp_model.UNKNOWN, f"{problem.body.name}: II {ii} undecided (line={line})"
    return status, s, v


@pytest.mark.parametrize("seed", SEEDS)
def test_the_line_and_the_circle_admit_the_same_iis_and_the_lines_schedules_validate(seed):
    p = build_problem(random_body(seed, 2 + seed % 4, profile="tiny"), tiny_arch(seed))
    if not any(op.regs for op in p.ops):
        pytest.skip("no value in registers")
    lo = lower_bound(p, SolveOptions(workers=1))
    for ii in range(lo, lo + SPAN):
        circle, _, _ = _decide(p, ii, line=False)
        line, s, v = _decide(p, ii, line=True)
        assert (circle == cp_model.INFEASIBLE) == (line == cp_model.INFEASIBLE), f"seed {seed}, II {ii}"
        if line != cp_model.INFEASIBLE:
            a = hints.read(v, s.value, budgets=True)
            sched = assemble(p, SolveOptions(workers=1), a, optimal=False, proven_lb=lo, proof="test",
                             proven={}, seconds=0.0)
            assert validate(p, sched) == [], f"seed {seed}, II {ii}"
            break


class _Stub:
    """A solver that records the model each step solves and decides nothing."""

    def __init__(self, seen: list) -> None:
        self.seen = seen

    def solve(self, m: SimpleNamespace) -> int:
        self.seen.append(m.label)
        return cp_model.UNKNOWN


@pytest.mark.parametrize("registers_bind", [True, False])
def test_only_cold_steps_at_one_ii_solve_on_the_line_and_only_where_registers_bind(monkeypatch, registers_bind):
    p = build_problem(random_body(16508, 12, profile="regs"), get_arch("h100"))
    ctx = phases.Context(p, SolveOptions(workers=1), Work.starting_now(60, 100))
    ctx.__dict__["registers_bind"] = registers_bind  # the cached property, stated
    built, seen = [], []

    def build(problem, options, lo, hi, line=False):
        built.append(line)
        m = SimpleNamespace(label=f"line {line}", clear_hints=lambda: None)
        return SimpleNamespace(m=m, ii_lo=lo, ii_hi=hi, elastic=False, joint=True, o=options)

    monkeypatch.setattr(phases, "build_model", build)
    monkeypatch.setattr(phases, "solver", lambda *a, **k: _Stub(seen))
    monkeypatch.setattr(hints, "hint_moved", lambda *a: None)
    circle = phases.build_model(p, ctx.options, 1600, 1600)
    plan = [(phases.Start.MOVED, 1.0, 0, 1), (phases.Start.COLD, 2.0, 0, 2), (phases.Start.COLD, 2.0, 1, 2)]
    status, found = phases._solve_in_turn(ctx, circle, 1600, plan)
    assert (status, found) == (cp_model.UNKNOWN, None)
    if registers_bind:  # the line's model made once, at the first cold step
        assert built == [False, True] and seen == ["line False", "line True", "line True"]
    else:
        assert built == [False] and seen == ["line False"] * 3
    window = build(p, ctx.options, 1600, 1700)  # a window of IIs keeps the circle
    built.clear()
    seen.clear()
    phases._solve_in_turn(ctx, window, 1600, plan[1:])
    assert built == [] and seen == ["line False"] * 2


def test_the_suite_body_16508_is_register_bound():
    """The body the line statement was measured on sets its static bound by the register file (so the search uses
    the line there), and the one-tile FA forward on b200, where the line cost floors, by a unit."""
    opts = SolveOptions(workers=1)
    regs = phases.Context(build_problem(random_body(16508, 12, profile="regs"), get_arch("h100")), opts,
                          Work.starting_now(60, 100))
    assert regs.registers_bind
    fa = phases.Context(problem("fa_fwd", "b200"), opts, Work.starting_now(60, 100))
    assert not fa.registers_bind


@pytest.mark.slow
def test_the_line_refutes_a_register_bound_probe_that_the_circle_leaves_open():
    """Fresh random-regs-16508 at II 1600 (its optimum lies in [1634, 1636]): on one worker at LP level 2 the line's
    model is refuted within 6 units of CP-SAT's deterministic time (3.1 measured), the circle's is still open after
    them (docs/benchmarks_notes.md, sessions 82-83)."""
    p = build_problem(random_body(16508, 12, profile="regs"), get_arch("h100"))
    verdicts = {}
    for line in (True, False):
        s = cp_model.CpSolver()
        s.parameters.num_workers = 1
        s.parameters.linearization_level = 2
        s.parameters.max_deterministic_time = 6.0
        s.parameters.max_time_in_seconds = 600
        verdicts[line] = s.solve(build_model(p, SolveOptions(workers=1), 1600, 1600, line=line).m)
    assert verdicts == {True: cp_model.INFEASIBLE, False: cp_model.UNKNOWN}


def test_a_register_bound_body_is_proven_with_its_cold_probes_on_the_line(monkeypatch):
    """The whole search on a small register-bound body (7 ops, h100) builds the line's model for a cold probe and
    still proves its optimum; the schedule validates."""
    p = build_problem(random_body(18, 7, profile="regs"), get_arch("h100"))
    lines = []
    build = phases.build_model

    def counting(*args, **kwargs):
        lines.append(kwargs.get("line", False))
        return build(*args, **kwargs)

    monkeypatch.setattr(phases, "build_model", counting)
    s = solve(p, SolveOptions(workers=1, work_limit=6, time_limit=120))
    assert (s.ii, s.status) == (1048, "optimal")
    assert any(lines)
    assert validate(p, s) == []
