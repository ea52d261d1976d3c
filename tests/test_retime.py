"""Retiming (``twill.solver.retime``): the least II at which a schedule's orders hold, validated."""

from __future__ import annotations

from dataclasses import replace

import pytest

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.options import SolveOptions
from twill.problem import Problem, build_problem
from twill.random_loops import random_body
from twill.schedule import Schedule
from twill.solver import hints, solve
from twill.solver.compact import _rebuffered
from twill.solver.phases import Context
from twill.solver.retime import reinsert, retime, retimed
from twill.solver.run import Work
from twill.solver.search import RESERVE, _IIResult, _last_neighbourhoods
from twill.solver.sequential import sequential_witness
from twill.validate import validate


def _problem(program: str, arch: str, **params: int) -> Problem:
    a = get_arch(arch)
    return build_problem(load_program(program, a, params), a)


def _orders(problem: Problem, sched: Schedule) -> dict[int, list[str]]:
    """Each group's ops in the order of their offsets (the in-order issue the retiming keeps)."""
    out: dict[int, list[str]] = {}
    for o in sorted(sched.ops, key=lambda o: (o.offset, o.id)):
        if problem.hold(o.id) > 0:
            out.setdefault(o.group, []).append(o.id)
    return out


@pytest.mark.parametrize(("program", "arch", "params", "before", "after"), [
    ("fa_fwd", "h100", {"subtiles": 2}, 10817, 5916),
    ("fa_fwd", "b200", {"subtiles": 2}, 9565, 6588),
    ("fa_bwd", "h100", {}, 11769, 5781),
    ("gemm", "h100", {}, 13498, 4670),
])
def test_the_sequential_schedule_compresses_to_a_valid_lower_ii(program, arch, params, before, after):
    """One iteration at a time leaves most of each II idle; every op moved at once in its own order closes it, and
    the result passes the validator with the same groups, warps and budgets (and above the proven optima: fa_fwd 2
    sub-tiles h100 2048)."""
    p = _problem(program, arch, **params)
    seq = sequential_witness(p)
    out = retime(p, seq)
    assert (seq.ii, out.ii) == (before, after)
    assert not validate(p, out)
    assert [(g.ops, g.warps, g.regs_per_thread) for g in out.groups] == [
        (g.ops, g.warps, g.regs_per_thread) for g in seq.groups]
    assert [o.stage for o in out.ops] == [o.stage for o in seq.ops]
    assert _orders(p, out) == _orders(p, seq)


def _stretched(problem: Problem, sched: Schedule, ii: int) -> Schedule:
    """``sched`` at a longer II with every op at its stage and offset: valid, with idle cycles in each II."""
    ops = tuple(replace(o, start=o.stage * ii + o.offset) for o in sched.ops)
    starts = {o.id: o.start for o in ops}
    buffers = tuple(_rebuffered(problem, b, starts, ii) for b in sched.buffers)  # the stretch may deepen a ring
    return replace(sched, ii=ii, ops=ops, buffers=buffers)


def test_a_stretched_schedule_comes_back_to_its_ii():
    """A retimed schedule moved 500 cycles up with every stage and offset kept is valid, and retiming returns it to
    its II: the stretch changed no order of what the rules count."""
    p = _problem("fa_fwd", "h100", subtiles=2)
    best = retime(p, sequential_witness(p))
    stretched = _stretched(p, best, best.ii + 500)
    assert not validate(p, stretched)
    assert retime(p, stretched).ii == best.ii == 5916


def test_the_optimum_moved_ten_cycles_up_returns_to_it():
    """Two-tile FA on h100, solved to its proven optimum (II 2048), moved to 2058: retiming returns to 2048 and no
    lower, since 2048 is proven."""
    p = _problem("fa_fwd", "h100", subtiles=2)
    opt = solve(p, SolveOptions(workers=1, work_limit=20))
    assert (opt.ii, opt.status) == (2048, "optimal")
    out = retime(p, _stretched(p, opt, 2058))
    assert out.ii == 2048 and not validate(p, out)


def test_a_schedule_at_its_least_ii_comes_back_unchanged():
    p = _problem("gemm", "h100")
    once = retime(p, sequential_witness(p))
    assert retime(p, once) is once
    assert retimed(p, once.ii, {o.id: o.start for o in once.ops}, {o.id: o.group for o in once.ops}) is None


@pytest.mark.parametrize(("program", "before", "after", "optimal"), [
    ("gemm", 13498, 1428, True),  # CP-SAT's bound meets the schedule: 1428 is gemm's proven optimum on h100
    ("fa_bwd", 11769, 3167, False),
])
def test_the_neighbourhoods_after_an_unproven_search_lower_its_schedule(program, before, after, optimal):
    """``search._last_neighbourhoods`` on an II search that ended unproven at the sequential schedule (nothing refuted):
    the neighbourhoods and the retiming lower it on two thirds of the reserve, and where CP-SAT's bound meets the
    schedule the result is optimal with its floor at the II."""
    p = _problem(program, "h100")
    options = SolveOptions(workers=2, work_limit=30, time_limit=900)
    ctx = Context(p, options, Work.starting_now(900, 30))
    seq = sequential_witness(p)
    ctx.upper = hints.from_schedule(p, seq)
    out = _last_neighbourhoods(ctx, _IIResult(None, False, 1))
    assert (seq.ii, out.found.ii, out.optimal) == (before, after, optimal)
    assert out.floor == after if optimal else 1 <= out.floor < after
    assert ctx.work.spent <= 30 * RESERVE


def test_the_neighbourhoods_prove_a_schedule_they_cannot_lower():
    """From gemm h100's optimum (1428) with nothing refuted, the neighbourhoods find nothing lower and CP-SAT's bound
    meets the schedule: the search's own schedule is returned, now proven optimal."""
    p = _problem("gemm", "h100")
    ctx = Context(p, SolveOptions(workers=2, work_limit=30, time_limit=900), Work.starting_now(900, 30))
    ctx.upper = hints.from_schedule(p, sequential_witness(p))
    best = _last_neighbourhoods(ctx, _IIResult(None, False, 1)).found
    assert best.ii == 1428
    out = _last_neighbourhoods(ctx, _IIResult(best, False, 1))
    assert (out.found, out.optimal, out.floor) == (best, True, 1428)


def _lowered_in_place(problem: Problem, before: Schedule, after: Schedule) -> None:
    """``after`` passes the validator with ``before``'s groups, warps, budgets and ring depths, at a lower II."""
    assert after.ii < before.ii
    assert not validate(problem, after)
    assert [(g.ops, g.warps, g.regs_per_thread) for g in after.groups] == [
        (g.ops, g.warps, g.regs_per_thread) for g in before.groups]
    assert after.buffers == before.buffers


@pytest.mark.parametrize(("program", "arch", "params", "retimed_ii", "most"), [
    ("fa_fwd", "h100", {}, 5643, 4000),
    ("fa_bwd", "h100", {}, 5781, 3700),
    ("fa_fwd", "b200", {"subtiles": 2}, 6588, 4300),
])
def test_reinsertion_lowers_what_the_retiming_cannot(program, arch, params, retimed_ii, most):
    """The retiming leaves a schedule at the least II its orders allow; re-placing one op at a time, then a group at a
    time, under the retiming changes orders and goes lower on one unit of work, with the same groups and budgets."""
    p = _problem(program, arch, **params)
    retimed_seq = retime(p, sequential_witness(p))
    assert retimed_seq.ii == retimed_ii
    out = reinsert(p, retimed_seq, units=1.0)
    _lowered_in_place(p, retimed_seq, out)
    assert out.ii <= most
    assert retime(p, retimed_seq) is retimed_seq  # the retiming alone goes no lower: an order or a turn had to change


@pytest.mark.parametrize(("seed", "ops", "profile", "arch"), [
    (81001, 14, "regs", "h100"), (81002, 20, "tmem", "b200"), (81003, 24, "handoff", "h100"),
    (81004, 30, "units", "b200"), (81005, 18, "loads", "h100"), (81006, 16, "recurrence", "b200"),
])
def test_every_reinsertion_passes_the_validator(seed, ops, profile, arch):
    """Random bodies nobody looked at: whatever the reinsertion returns from the retimed sequential schedule passes the
    validator with every rule kept (the module's capacities on the circle are the model's); the sequential schedule
    leaves room, so it lowers each."""
    a = get_arch(arch)
    p = build_problem(random_body(seed, ops, profile=profile), a)
    retimed_seq = retime(p, sequential_witness(p))
    out = reinsert(p, retimed_seq, units=0.5)
    _lowered_in_place(p, retimed_seq, out)
