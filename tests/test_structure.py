"""The warp-group structure relaxation (``twill.solver.structure``): a sound lower bound on the joint
II that is often tight, monotone in II (so bisection finds its least II), and a source of groupings
under which the heuristics find schedules where Triton's split finds none."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.problem import build_problem
from twill.random_loops import random_body, tiny_arch
from twill.solver import SolveOptions, lower_bound, solve
from twill.solver.exhaustive import solve_exhaustive
from twill.solver.ims import ims_triton_split, iterative_modulo_schedule
from twill.solver.run import Work
from twill.solver.structure import build_structure, propose_grouping, structure_floor
from twill.validate import validate


def _work() -> Work:
    return Work.starting_now(600.0, 100.0)


def _feasible(p, options, ii) -> bool:
    s = build_structure(p, options, ii)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    status = solver.solve(s.m)
    assert status != cp_model.UNKNOWN
    return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def test_the_relaxation_never_refutes_an_optimum_and_often_meets_it():
    """On 120 tiny graphs whose joint optimum the exhaustive search proves (it trusts no bound),
    the structure floor is never above the optimum, raises the static bound on a fair share (21)
    and equals the optimum on at least half of those (14)."""
    raised = tight = 0
    for seed in range(120):
        p = build_problem(random_body(seed, 2 + seed % 4, profile="tiny"), tiny_arch(seed))
        options = SolveOptions(workers=1)
        lb = lower_bound(p, options)
        floor = structure_floor(p, options, lb, lb + 200, _work())
        if floor is None:
            continue
        optimum = solve_exhaustive(p, options).ii
        assert floor.decided and floor.ii <= optimum, (seed, floor, optimum)
        raised += 1
        tight += floor.ii == optimum
    assert raised >= 15 and tight >= raised // 2


@pytest.mark.parametrize("profile,seed", [("regs", 1), ("recurrence", 2), ("loads", 3)])
def test_feasibility_is_monotone_in_ii(profile, seed):
    """Every family is monotone in II (docs/design.md §3.1b), which the bisection relies on:
    refuted at every II below the floor that is probed, feasible at every II from it on."""
    arch = "b200" if profile == "loads" else "h100"
    p = build_problem(random_body(seed, 12, profile=profile), get_arch(arch))
    options = SolveOptions(workers=1)
    lb = lower_bound(p, options)
    floor = structure_floor(p, options, lb, 20000, _work())
    assert floor is not None and floor.decided
    step = max(1, floor.ii // 40)
    for ii in range(max(lb, floor.ii - 6 * step), floor.ii + 6 * step, step):
        assert _feasible(p, options, ii) == (ii >= floor.ii), ii


def test_a_register_bound_body_names_what_binds():
    """An 11-op register-heavy body on h100: the static bound is 462 (MUFU and holds); below 566 no
    grouping fits in-order issue, registers and the shared memory its hand-offs would need."""
    p = build_problem(random_body(1, 11, profile="regs"), get_arch("h100"))
    options = SolveOptions(workers=1)
    assert lower_bound(p, options) == 462
    floor = structure_floor(p, options, 462, 2000, _work())
    assert floor.ii == 566
    assert {"issue", "registers", "smem"} <= set(floor.binding)
    assert "warp-group structure" in floor.sentence()


def test_proposed_groupings_meet_the_relaxation():
    """A proposed grouping at II keeps every group's holds within II and loads on their own."""
    p = build_problem(random_body(2, 14, profile="regs"), get_arch("h100"))
    options = SolveOptions(workers=1)
    floor = structure_floor(p, options, lower_bound(p, options), 5000, _work())
    for count in (2, 3):
        groups = propose_grouping(p, options, floor.ii, _work(), count)
        if groups is None:
            continue
        assert len(set(groups.values())) == count
        for g in set(groups.values()):
            members = [op for op in p.ops if groups[op.name] == g]
            assert sum(p.hold(op.name) for op in members) <= floor.ii
            if any(op.variable_latency for op in members):
                assert all(op.variable_latency or p.hold(op.name) == 0 for op in members)


def test_a_proposed_grouping_schedules_what_triton_split_cannot():
    """FlashAttention forward, two 64-row sub-tiles at head_dim 256 and block_n 64 on b200: under
    Triton's split (one consumer group) IMS overflows TMEM at every II; under the proposed grouping
    of one producer and one group per sub-tile it finds a valid schedule, so solve has an answer
    (it used to end 'no schedule found')."""
    arch = get_arch("b200")
    p = build_problem(load_program("fa_fwd", arch, {"subtiles": 2, "head_dim": 256, "block_n": 64}), arch)
    options = SolveOptions(workers=1)
    assert ims_triton_split(p).schedule is None
    groups = propose_grouping(p, options, 2208, _work(), 3)
    assert {groups[n] for n in ("load_k", "load_v")} == {0}
    assert groups["qk0"] != groups["qk1"]
    sched = iterative_modulo_schedule(p, options, groups=groups).schedule
    assert sched is not None and validate(p, sched) == []


def test_solve_uses_the_structure_floor_as_a_bound():
    """The solve reports the structure floor as its proven bound where nothing else binds as high."""
    p = build_problem(random_body(1, 11, profile="regs"), get_arch("h100"))
    sched = solve(p, SolveOptions(workers=1, work_limit=4.0, time_limit=600.0,
                                  objective=("ii",)))
    assert validate(p, sched) == []
    assert sched.ii_lower_bound >= 566
    assert sched.ii >= sched.ii_lower_bound
