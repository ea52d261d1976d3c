"""Feasibility is monotone in II when every reservation segment starts at its op's issue, and not
otherwise (docs/design.md §3.1e); the search then refutes single IIs and lifts the floor to the
highest one refuted."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from ortools.sat.python import cp_model

from tests.conftest import problem
from twill import Issuer, LoopBuilder, Use
from twill.arch.registry import get_arch
from twill.bounds import lower_bound, monotone_in_ii
from twill.problem import Problem, build_problem
from twill.random_loops import random_body, tiny_arch
from twill.solver import SolveOptions, solve
from twill.solver.model import build_model
from twill.validate import validate

SPAN = 8  # IIs checked from each body's lower bound


def feasible(problem: Problem, ii: int) -> bool:
    """The joint model at one fixed II, decided (a time-out would be no answer)."""
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.max_time_in_seconds = 60
    status = s.solve(build_model(problem, SolveOptions(workers=1), ii, ii).m)
    assert status != cp_model.UNKNOWN, f"{problem.body.name}: II {ii} undecided"
    return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def test_a_segment_after_issue_breaks_monotonicity():
    """One asynchronous op (it holds its issuer one cycle) using a unit of capacity 1 at cycles 0 and 3
    after issue: the two uses meet on the II circle at II 3 but not at 2 or 4. The stretch argument does not cover it, and the predicate says so."""
    arch = get_arch("h100")
    b = LoopBuilder("holes")
    b.op("a", kind="work", uses=[Use(unit="alu", offset=0, length=1), Use(unit="alu", offset=3, length=1)],
         latency=4, is_async=True, issue_cycles=1, issuer=Issuer.THREAD)
    p = build_problem(b.build(), arch)
    assert not monotone_in_ii(p)
    assert [feasible(p, ii) for ii in (2, 3, 4)] == [True, False, True]


# The first eight monotone tiny bodies (seeds 0-140) whose lower bound has no schedule: where feasibility
# could go wrong. Found by scanning; the first ten monotone bodies are checked as they come, too.
SWITCHING = (15, 68, 98, 106, 117, 125, 135, 137)


def test_bodies_whose_reservations_start_at_issue_have_up_closed_feasible_iis():
    """Tiny random bodies (units, in-order issue, registers, SMEM, TMEM on tiny archs) with every
    segment at offset 0: at each II from the lower bound up, once one II has a schedule every larger
    one has."""
    plain = [s for s in range(80) if monotone_in_ii(_tiny(s))][:10]
    assert len(plain) == 10
    for seed in plain + list(SWITCHING):
        p = _tiny(seed)
        assert monotone_in_ii(p)
        lb = lower_bound(p, SolveOptions(workers=1))
        pattern = [feasible(p, ii) for ii in range(lb, lb + SPAN)]
        first = pattern.index(True) if True in pattern else len(pattern)
        assert all(pattern[first:]), f"seed {seed}: feasible IIs from {lb}: {pattern}"
        assert seed not in SWITCHING or 0 < first < SPAN


def _tiny(seed: int) -> Problem:
    return build_problem(random_body(seed, 2 + seed % 4, profile="tiny"), tiny_arch(seed))


def test_the_search_lifts_its_floor_to_the_highest_refuted_ii():
    """On a monotone body the search's proof says so, and its schedule is the optimum exhaustive
    enumeration finds."""
    from twill.solver.exhaustive import solve_exhaustive

    p = _tiny(SWITCHING[3])  # IIs 9 and 10, at and above its lower bound, have no schedule
    sched = solve(p, SolveOptions(workers=1, time_limit=120))
    assert sched.status == "optimal" and validate(p, sched) == []
    assert "refuting one II refutes every smaller one" in sched.proof
    assert sched.ii == solve_exhaustive(p, SolveOptions(workers=1, time_limit=120)).ii


def test_a_bisection_probe_shares_the_work_left_over_the_probes_its_gap_needs():
    """Near the optimum a probe costs more and fewer are left to pay for: each gets the window's work left over
    ceil(log2(top - failed)) probes, never less than an ordinary probe's budget."""
    from twill.solver import phases
    from twill.solver.run import Work

    ctx = phases.Context(_tiny(SWITCHING[3]), SolveOptions(workers=1), Work.starting_now(60, 100))
    until = ctx.work.until(24)
    assert phases._probe_budget(ctx, 611, 613, until).at_least == 24  # 612 alone is left: all of it
    two = phases._probe_budget(ctx, 611, 614, until)  # 612 and 613: two probes
    assert two.at_least == 12 and (two.attempt, two.growth) == (phases.BISECT_II.attempt, phases.BISECT_II.growth)
    assert phases._probe_budget(ctx, 100, 1124, until) == phases.BISECT_II  # ten probes: 2.4 each, the floor is 6


def test_a_bisection_probe_repairs_the_best_schedule_then_refutes_cold_in_one_solve(monkeypatch):
    """A probe is the best schedule's repair (LP level 1, at most BISECT_HINTED units), then one cold solve at
    LP level 2 with the probe's whole budget; without a schedule only the cold solve; ``cold=False`` the repair;
    where the staged descent found a schedule, a stages-first solve (BISECT_STAGED units) before both."""
    from twill.solver import hints, phases
    from twill.solver.run import Work

    p = _tiny(SWITCHING[3])
    best = hints.from_schedule(p, solve(p, SolveOptions(workers=1, time_limit=60)))
    ctx = phases.Context(p, SolveOptions(workers=1), Work.starting_now(60, 100))
    ctx.groupings = False  # Benders over groupings tried and failed: the probes are the joint model's alone
    plans = []
    monkeypatch.setattr(phases, "_solve_in_turn", lambda ctx, v, at, plan: (plans.append(list(plan)), (0, None))[1])
    until = ctx.work.until(50)
    phases._bisect_probe(ctx, 12, phases.BISECT_II, until)
    ctx.upper = best
    phases._bisect_probe(ctx, 12, phases.BISECT_II, until)
    phases._bisect_probe(ctx, 12, phases.BISECT_II, until, cold=False)
    cold = (phases.Start.COLD, phases.BISECT_II.at_least, 0, phases.BISECT_COLD_LP)
    moved = (phases.Start.MOVED, phases.BISECT_HINTED, 0, 1)
    assert plans == [[cold], [moved, cold], [moved]]
    ctx.staged = True  # the staged descent found a schedule: each probe tries the stages first
    phases._bisect_probe(ctx, 12, phases.BISECT_II, until)
    assert plans[-1] == [(phases.Start.STAGED, phases.BISECT_STAGED, 0, 1), moved, cold]


def test_with_two_workers_the_bisection_probes_in_pairs():
    """Two workers: the next probe and the one the bisection takes after it were it undecided (the middle below
    it), whose budget counts the first one's as spent; one worker, or once Benders over groupings has decided a
    probe: one probe."""
    from twill.solver import phases
    from twill.solver.run import Work

    p = _tiny(SWITCHING[3])
    b = phases._Bisection(failed=100, top=201, probe=200, budget=phases.BISECT_II)
    for workers, groupings, pairs in ((1, False, False), (2, None, True), (2, True, False), (2, False, True)):
        ctx = phases.Context(p, SolveOptions(workers=workers), Work.starting_now(60, 100))
        ctx.groupings = groupings
        until = ctx.work.until(60)
        plans = phases._paired(ctx, b, until)
        first = (200, phases.BISECT_II, False)
        if not pairs:
            assert plans == [first]
            continue
        after = b.after(200, cp_model.UNKNOWN, False, False)
        assert plans == [first, (150, phases._probe_budget(ctx, 100, 200, until, 6.0), False)] and after.top == 200
        assert plans[1][1].at_least == (60 - 6) / 7  # ceil(log2(100)) probes left for the 54 units not promised


def test_near_the_best_schedule_the_rest_of_the_gap_is_one_window():
    """After a refuted window the next one is wider (0, 8, 2w + 1, at least lo/64): the windows gallop up from the
    floor. On a monotone problem whose best schedule lies within IMPROVE_GAP of the next window's start, that window
    reaches the schedule instead; not without a schedule, nor where a probe under it was left undecided, nor where
    feasibility is not monotone in II, nor on bodies of IMPROVE_OPS ops or more."""
    from twill.solver import phases, search
    from twill.solver.run import Work

    ctx = phases.Context(_tiny(SWITCHING[3]), SolveOptions(workers=1), Work.starting_now(60, 100))
    assert ctx.monotone
    assert search._next_width(ctx, 0, 1427, 1428, 1649) == 22  # no schedule known: lo / 64
    ctx.upper = SimpleNamespace(ii=1650)
    assert search._next_width(ctx, 0, 1427, 1428, 1649) == 1649 - 1428  # 1650 <= 1.25 x 1428: [1428, 1649]
    assert search._next_width(ctx, 24, 1569, 1594, 1649) == 1649 - 1594
    ctx.upper = SimpleNamespace(ii=2924)
    assert search._next_width(ctx, 0, 1568, 1569, 2923) == 24  # 2924 > 1.25 x 1569: galloping, lo / 64
    assert search._next_width(ctx, 24, 1569, 1594, 2923) == 49  # 2w + 1
    assert search._next_width(ctx, 399, 1944, 2344, 2923) == 2923 - 2344  # 2924 <= 1.25 x 2344
    ctx.undecided = 2923  # a probe under the schedule left undecided: its top is hard, the windows gallop
    assert search._next_width(ctx, 399, 1944, 2344, 2923) == 799
    ctx.undecided = None
    ctx.monotone = False
    assert search._next_width(ctx, 399, 1944, 2344, 2923) == 799
    big = phases.Context(build_problem(random_body(16526, 41, profile="handoff"), get_arch("h100")),
                         SolveOptions(workers=1), Work.starting_now(60, 100))
    big.monotone, big.upper = True, SimpleNamespace(ii=2924)  # 41 ops: the improvement phase's bodies gallop
    assert search._next_width(big, 399, 1944, 2344, 2923) == 799


def test_a_pair_joins_whether_benders_over_groupings_decided_a_probe(monkeypatch):
    """Each probe of a pair runs on a fork of the context; whether Benders over groupings decided one of them
    (tried on the first probe the joint model leaves undecided) comes back to the search: decided in either, it
    goes first from then on; tried and undecided in both, never again; untried, still untried."""
    from twill.solver import phases
    from twill.solver.run import Work

    def probe(verdicts):
        def run(ctx, ii, budget, until, cold=True):
            ctx.groupings = verdicts.get(ii, ctx.groupings)
            return cp_model.UNKNOWN, None
        return run

    plans = [(200, phases.BISECT_II, False), (150, phases.BISECT_II, False)]
    for verdicts, joined in (({200: False, 150: True}, True), ({200: False, 150: False}, False), ({}, None)):
        ctx = phases.Context(_tiny(SWITCHING[3]), SolveOptions(workers=2), Work.starting_now(60, 100))
        monkeypatch.setattr(phases, "_bisect_probe", probe(verdicts))
        phases._run_probes(ctx, plans, ctx.work.until(60))
        assert ctx.groupings is joined


def test_a_forked_probe_reports_its_work_where_it_sits_in_the_search():
    """A pair's second probe runs on a fork whose work starts after the first probe's budget: its progress lines
    count from there, not from zero (a Benders line inside a fork read 6.7 units where the search stood at 20)."""
    from twill.solver import phases
    from twill.solver.run import Work

    lines: list[str] = []
    ctx = phases.Context(_tiny(SWITCHING[3]), SolveOptions(workers=2, progress=lines.append), Work.starting_now(60, 100))
    ctx.work.spent = 13.25
    fork = ctx.fork(7.0)
    fork.work.spent = 6.5
    fork.report("probe")
    assert lines[-1].endswith("26.8 units)") and fork.fork(1.0).before == 13.25 + 7.0 + 6.5 + 1.0


def test_a_pair_applies_in_order_and_an_undecided_probe_under_a_refuted_one_proves_nothing():
    """The pair's results apply from the upper probe down: 1611 refuted and 1527 undecided (one-tile FA d64 h100
    at the suite's budget) leave the gap above 1611; 1527 found and 1611 undecided lower the top to 1527."""
    from twill.solver import phases

    b = phases._Bisection(failed=1443, top=1684, probe=1611, budget=phases.BISECT_II)
    after = b.after(1611, cp_model.INFEASIBLE, False, False).after(1527, cp_model.UNKNOWN, False, False)
    assert (after.failed, after.top, after.first) == (1611, 1684, False)
    after = b.after(1611, cp_model.UNKNOWN, False, False).after(1527, cp_model.FEASIBLE, True, False)
    assert (after.failed, after.top) == (1443, 1527)
    assert b.after(1683, cp_model.UNKNOWN, False, True).top == 1684  # the repair alone, undecided


def test_a_pair_of_probes_decides_and_spends_what_the_two_would_in_turn():
    """Each probe of a pair runs on work of its own, so the pair's statuses and the work charged are those of
    the two probes run one after the other, whatever the threads' timing."""
    from twill.solver import phases
    from twill.solver.run import Work

    p = _tiny(SWITCHING[3])  # 9 and 10 refuted, 11 has a schedule
    plans = [(11, phases.BISECT_II, False), (10, phases.BISECT_II, False)]
    ctx = phases.Context(p, SolveOptions(workers=2), Work.starting_now(60, 100))
    paired = phases._run_probes(ctx, plans, ctx.work.until(60))
    alone = phases.Context(p, SolveOptions(workers=1), Work.starting_now(60, 100))
    until = alone.work.until(60)
    in_turn = [phases._bisect_probe(alone, ii, budget, until) for ii, budget, _ in plans]
    assert [status for status, _ in paired] == [status for status, _ in in_turn]
    assert [status for status, _ in paired] == [cp_model.OPTIMAL, cp_model.INFEASIBLE]
    assert paired[0][1].ii == 11 and paired[1][1] is None
    assert ctx.work.spent == pytest.approx(alone.work.spent, abs=1e-9) and ctx.work.spent > 0


@pytest.mark.slow
def test_bisection_proves_a_twelve_op_tmem_body_that_the_ii_by_ii_sweep_left_open():
    """random-tmem-16004 (12 ops, b200): the sweep II by II, started from the 552 schedule, stalled at 544
    (30 units: 552 >= 545); refutations of 547-551 (each refutes every II below) prove 552 optimal."""
    from bench.suite.cases import build_case, read_manifest

    case = next(c for c in read_manifest("tuned")["cases"] if c["id"] == "random-tmem-16004-n12-b200")
    p = build_case(case)
    sched = solve(p, SolveOptions(workers=2, work_limit=30, time_limit=600))
    assert (sched.ii, sched.status) == (552, "optimal") and validate(p, sched) == []


@pytest.mark.slow
def test_one_tile_fa_h100_is_within_two_percent_of_its_proven_bound():
    """One-tile FA forward on h100 (the issue's one-tile criterion): the bisection's probe 2% under the
    2440 schedule, with twice a probe's work, refutes 2393, which refutes every II below it."""
    p = problem("fa_fwd", "h100")
    sched = solve(p, SolveOptions(workers=2, work_limit=30, time_limit=600))
    assert validate(p, sched) == []
    assert sched.ii <= 1.02 * sched.ii_lower_bound and sched.ii_lower_bound >= 2394
    assert "refuting one II refutes every smaller one" in sched.proof


def test_the_staged_descent_halves_and_stops_at_one_miss_before_a_find_two_after(monkeypatch):
    """The staged descent halves between its highest miss (at first the floor) and the lowest schedule; it stops at
    its first probe without a schedule, or at its second in a row once it has found one (``STAGED_MISSES``,
    docs/design.md §3.1). From a schedule at 1000 over the floor 800 with schedules only at 899 and below 860: 899
    finds, 849 finds, 824 and 836 miss; with none at all: one probe, 899."""
    from twill.solver import hints, phases
    from twill.solver.run import Work

    p = _tiny(SWITCHING[3])
    probes: list[int] = []

    def run(finds) -> phases.Outcome:
        ctx = phases.Context(p, SolveOptions(workers=1), Work.starting_now(60, 100))
        ctx.upper = SimpleNamespace(ii=1000, groups={})  # no groups to pin: the free probes alone
        probes.clear()

        def solve_in_turn(ctx, v, at, plan):
            probes.append(at)
            assert [step[0] for step in plan] == [phases.Start.STAGED]
            found = SimpleNamespace(ii=at, model=None, solver=SimpleNamespace(value=None))
            return (cp_model.FEASIBLE, found) if finds(at) else (cp_model.UNKNOWN, None)

        monkeypatch.setattr(phases, "_solve_in_turn", solve_in_turn)
        monkeypatch.setattr(hints, "read", lambda *a, **k: SimpleNamespace(ii=probes[-1], groups={}))
        return phases.staged_descent(ctx, phases.Window(800, 999), phases.STAGED_DESCENT)

    monkeypatch.setattr(phases, "build_model", lambda *a: None)
    out = run(lambda ii: ii == 899 or 837 <= ii < 860)
    assert probes == [899, 849, 824, 836]
    assert out.verdict is phases.Verdict.FOUND and out.found.ii == 849
    out = run(lambda ii: False)
    assert probes == [899] and out.verdict is phases.Verdict.UNDECIDED


def test_a_staged_descent_whose_first_free_probe_misses_goes_on_with_the_best_schedules_groups(monkeypatch):
    """Where the staged descent's first probe, groups free, neither finds nor refutes, that probe and every later one
    run with the best schedule's groups pinned (``phases._pins``): their schedules count as finds, and their
    refutations prove nothing for the free problem, so none is recorded. A free refutation is a proof and stops the
    descent as before; where the first free probe finds, no probe is pinned. From 1000 over the floor 800, pinned
    probes finding at 860 and above: (a) 899 refuted free: one probe, recorded; (b) free undecided everywhere: 899
    free, then 899 pinned finds, 849 misses, 874 and 861 find, 855 and 858 miss (two in a row after a find);
    (c) free finding at 860 and above: the same IIs, none pinned."""
    from twill.solver import hints, phases
    from twill.solver.run import Work

    p = _tiny(SWITCHING[3])
    calls: list[tuple[int, bool]] = []

    def run(free) -> tuple[phases.Context, phases.Outcome]:
        ctx = phases.Context(p, SolveOptions(workers=1), Work.starting_now(60, 100))
        ctx.upper = SimpleNamespace(ii=1000, groups={"x": 0, "y": 1})
        calls.clear()

        def solve_in_turn(ctx, pinned, at, plan):
            calls.append((at, bool(pinned)))
            status = free(at) if not pinned else (cp_model.FEASIBLE if at >= 860 else cp_model.INFEASIBLE)
            found = SimpleNamespace(ii=at, model=None, solver=SimpleNamespace(value=None))
            return status, (found if status == cp_model.FEASIBLE else None)

        monkeypatch.setattr(phases, "_solve_in_turn", solve_in_turn)
        return ctx, phases.staged_descent(ctx, phases.Window(800, 999), phases.STAGED_DESCENT)

    monkeypatch.setattr(phases, "build_model", lambda problem, options, lo, hi: options.fixed_groups)
    monkeypatch.setattr(phases, "_freed", lambda ctx, found: found)
    monkeypatch.setattr(hints, "read", lambda *a, **k: SimpleNamespace(ii=calls[-1][0], groups={"x": 0, "y": 1}))
    ctx, out = run(lambda ii: cp_model.INFEASIBLE if ii == 899 else cp_model.UNKNOWN)
    assert calls == [(899, False)] and out.verdict is phases.Verdict.UNDECIDED
    assert [r[:2] for r in ctx.refutations] == [(899, 899)]
    ctx, out = run(lambda ii: cp_model.UNKNOWN)
    assert calls == [(899, False)] + [(ii, True) for ii in (899, 849, 874, 861, 855, 858)]
    assert out.verdict is phases.Verdict.FOUND and out.found.ii == 861
    assert ctx.refutations == [] and not ctx.staged  # pinned refutations prove nothing; no free probe found
    ctx, out = run(lambda ii: cp_model.FEASIBLE if ii >= 860 else cp_model.UNKNOWN)
    assert calls == [(ii, False) for ii in (899, 849, 874, 861, 855, 858)]
    assert out.found.ii == 861 and ctx.staged


def test_a_schedule_found_with_pinned_groups_is_made_a_schedule_of_the_free_model():
    """``phases._freed``: a schedule of the joint model with its groups pinned becomes a schedule of the free model at
    the same II, starts and groups (one propagation), so the search's later phases treat it as its own choice."""
    from twill.solver import hints, phases
    from twill.solver.run import Work

    p = _tiny(SWITCHING[3])
    options = SolveOptions(workers=1)
    ctx = phases.Context(p, options, Work.starting_now(60, 100))
    ii = _optimum(p) + 2
    free = _at(ctx, ii)
    a = hints.read(free.model, free.solver.value, budgets=True)
    pinned_options = replace(options, fixed_groups=tuple(sorted(a.groups.items())))
    pinned_ctx = phases.Context(p, pinned_options, Work.starting_now(60, 100))
    pinned = _at(pinned_ctx, ii)
    assert not pinned.free(options)
    made = phases._freed(ctx, pinned)
    assert made.free(options) and made.ii == ii
    b, c = hints.read(pinned.model, pinned.solver.value), hints.read(made.model, made.solver.value)
    assert (b.starts, b.groups) == (c.starts, c.groups)


def _at(ctx, ii: int):
    """A schedule of ``ctx``'s problem at exactly ``ii`` (the joint model at that II on one worker)."""
    from twill.solver.phases import SWEEP_II, _one_worker

    status, found = _one_worker(ctx, ii, ii, SWEEP_II, (1,), ctx.work.until(10))
    assert found is not None and found.ii == ii, status
    return found


def _optimum(p: Problem) -> int:
    lb = lower_bound(p, SolveOptions(workers=1))
    return next(ii for ii in range(lb, lb + SPAN) if feasible(p, ii))


def test_the_probe_one_under_the_best_schedule_proves_it_before_any_window():
    """``search._one_under``: on a monotone body whose lower bound has no schedule, a schedule at the optimum
    is proven optimal by the one probe under it (every II below refuted at once), and a schedule one above
    the optimum gives way to one at the optimum (the probe's repair or cold solve finds it)."""
    from twill.solver.phases import Context
    from twill.solver.run import Work
    from twill.solver.search import _one_under

    p = _tiny(SWITCHING[0])
    opt, lb = _optimum(p), lower_bound(p, SolveOptions(workers=1))
    assert opt > lb
    said: list[str] = []
    options = replace(SolveOptions(workers=1), progress=said.append)
    ctx = Context(p, options, Work.starting_now(3600, 60))
    best = _at(ctx, opt)
    assert _one_under(ctx, lb, best) is best
    assert ctx.refuted_below == opt and ctx.refutations[-1][:2] == (lb, opt - 1)
    assert said[-1].startswith(f"II {opt - 1} refuted: the schedule at II {opt} is optimal")
    ctx = Context(p, options, Work.starting_now(3600, 60))
    lower = _one_under(ctx, lb, _at(ctx, opt + 1))
    assert lower.ii == opt and ctx.refuted_below == 0


def test_far_under_the_schedule_the_repair_then_the_close_point_then_the_cold_probe_one_under(monkeypatch):
    """``search._one_under`` where the floor lies more than ``CLOSE`` under the best schedule (II 1731, floor 1642:
    one-tile FA b200's numbers): the repair alone one under, then the probe at ``close_target`` (1697), then the cold
    probe one under; the refuted 1697 raises the floor the last probe starts from. A schedule from the repair ends
    it at once; none of the three where the 2% point is one under (II 50)."""
    from types import SimpleNamespace

    from twill.solver import search
    from twill.solver.phases import close_target

    assert close_target(1731) == 1697 and close_target(50) == 49
    calls: list[tuple[int, int | None, bool]] = []
    repaired = SimpleNamespace(ii=1730)

    def probe(ctx, lo, units, ii=None, cold=True):
        calls.append((lo, ii, cold))
        if ii == 1697:
            ctx.refuted_below = 1698
            return cp_model.INFEASIBLE, None
        return (cp_model.FEASIBLE, repaired) if not cold and ctx.repairs else (cp_model.UNKNOWN, None)

    said: list[str] = []
    work = SimpleNamespace(left=lambda: 30.0)
    best = SimpleNamespace(ii=1731, free=lambda options: True)
    monkeypatch.setattr(search, "optimality_probe", probe)

    def run(best, repairs: bool, floor: int = 1642):
        ctx = SimpleNamespace(monotone=True, options=None, refuted_below=0, work=work, report=said.append,
                              hold=lambda found: None, repairs=repairs)
        calls.clear()
        return search._one_under(ctx, floor, best)

    assert run(best, repairs=False) is best
    assert calls == [(1642, None, False), (1642, 1697, True), (1698, None, True)]
    assert "II 1697 refuted: the schedule is within 2% of optimal" in said
    assert run(best, repairs=True) is repaired and calls == [(1642, None, False)]
    assert run(SimpleNamespace(ii=50, free=lambda options: True), repairs=False, floor=10).ii == 50
    assert calls == [(10, None, True)]


def test_the_probe_one_under_keeps_to_monotone_problems_with_work_and_room():
    """No probe (and no work spent) where feasibility is not monotone, where the floor already meets the
    schedule, or where less than ``OPTIMALITY_LEAST`` units would be the probe's."""
    from twill.solver.phases import Context
    from twill.solver.run import Work
    from twill.solver.search import OPTIMALITY_LEAST, _one_under

    p = _tiny(SWITCHING[0])
    opt = _optimum(p)
    ctx = Context(p, SolveOptions(workers=1), Work.starting_now(3600, 60))
    best = _at(ctx, opt)
    spent = ctx.work.spent
    assert _one_under(ctx, opt, best) is best  # the floor is the schedule's II
    ctx.work.limit = spent + 2 * OPTIMALITY_LEAST - 0.01
    assert _one_under(ctx, opt - SPAN, best) is best
    ctx.monotone, ctx.work.limit = False, spent + 60
    assert _one_under(ctx, opt - SPAN, best) is best
    assert ctx.work.spent == spent and ctx.refuted_below == 0


def test_the_bisection_does_not_repeat_the_probe_left_undecided():
    """Where the probe one under the best schedule ended undecided (``Context.undecided``), a window's bisection
    starts below it: that II was probed cold on a budget of its own already."""
    from twill.solver.phases import BISECT, Context, Window, bisection
    from twill.solver.run import Work

    p = _tiny(SWITCHING[0])
    opt, lb = _optimum(p), lower_bound(p, SolveOptions(workers=1))
    said: list[str] = []
    ctx = Context(p, replace(SolveOptions(workers=1), progress=said.append), Work.starting_now(3600, 60))
    ctx.undecided = opt + 1
    out = bisection(ctx, Window(lb, opt + 1), BISECT)
    probes = [int(line.split()[2]) for line in said if line.startswith("  bisection: II")]
    assert probes and opt + 1 not in probes
    assert out.found is not None and out.found.ii == opt


def test_the_descent_probes_at_most_an_eighth_under_the_best_schedule(monkeypatch):
    """``phases.descent`` halves between the floor and the best schedule, but no probe lies more than 1/8
    (``DESCENT_STEP``) under the best schedule: a repair keeps the schedule's shape. From 1000 over the floor 400
    (schedules at 850 and above): 875 finds, 766 misses, 820 and 847 miss too, 861 finds, and so on down to 850; over a
    floor within a third of the schedule the probes are the plain halving ones (900 over 700: 799, 849, 874, ...)."""
    from twill.solver import hints, phases
    from twill.solver.run import Work

    p = _tiny(SWITCHING[3])
    probes: list[int] = []

    def run(floor: int, best: int) -> phases.Outcome:
        ctx = phases.Context(p, SolveOptions(workers=1), Work.starting_now(60, 100))
        ctx.upper = SimpleNamespace(ii=best, groups={})
        probes.clear()
        return phases.descent(ctx, phases.Window(floor, 999), phases.DESCENT)

    def build(problem, options, lo, hi):
        probes.append(lo)
        return SimpleNamespace(m=lo, ii=lo)

    class Solver:
        def __init__(self, *a):
            self.value = lambda x: x

        def solve(self, m):
            return cp_model.FEASIBLE if m >= 850 else cp_model.UNKNOWN

    monkeypatch.setattr(phases, "build_model", build)
    monkeypatch.setattr(hints, "hint_moved", lambda *a: None)
    monkeypatch.setattr(phases.Context, "solver", lambda self, units: Solver())
    monkeypatch.setattr(hints, "read", lambda v, value, budgets: SimpleNamespace(ii=v.ii, groups={}))
    out = run(400, 1000)
    assert probes[:4] == [875, 766, 820, 847] and out.found.ii == 850
    out = run(700, 900)
    assert probes[:3] == [799, 849, 874] and out.found.ii == 850  # (699 + 900) // 2 = 799 > 900 - 112
    ctx = phases.Context(p, SolveOptions(workers=1), Work.starting_now(60, 100))
    ctx.upper, probes[:] = SimpleNamespace(ii=7, groups={}), []  # under 8 cycles the step is one cycle, never zero
    Solver.solve = lambda self, m: cp_model.FEASIBLE if m >= 5 else cp_model.INFEASIBLE
    assert phases.descent(ctx, phases.Window(2, 6), phases.DESCENT).found.ii == 5 and probes == [6, 5, 4]
