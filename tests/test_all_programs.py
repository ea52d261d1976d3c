"""Issue 4: every built-in program on h100 and b200 — validator passes, simulation runs at II."""

from __future__ import annotations

import pytest

from tests.conftest import problem
from twill.frontend.programs import list_programs
from twill.sim import simulate
from twill.solver import SolveOptions, solve
from twill.validate import validate

CASES = [(info.name, arch) for info in list_programs() for arch in ("h100", "b200")]


@pytest.mark.slow
@pytest.mark.parametrize("name, arch", CASES)
def test_program_schedule_validates_and_simulates_at_ii(name, arch):
    """The solver's schedule passes the independent validator and replays at its II within 1%."""
    p = problem(name, arch)
    sched = solve(p, SolveOptions(work_limit=60, time_limit=1800))
    assert validate(p, sched) == []
    result = simulate(p, sched, iterations=12)
    assert abs(result.achieved_ii - sched.ii) <= 0.01 * sched.ii, result.warnings
