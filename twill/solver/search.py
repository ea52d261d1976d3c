"""The search: the smallest II with a proof, then the secondary objectives, then a canonical schedule.

1. Bounds and a first schedule. The lower bound (``twill.bounds``), raised for a joint problem by
   the pure modulo optimum (a relaxation); a first schedule from Rau's heuristic or, failing it,
   a constructive one (``_construct``), which caps the search from above.
2. II. Windows [lo, hi] of II are decided one after another by the phases of
   ``twill.solver.phases`` (declared as data, each with a budget in deterministic work). An empty
   window proves every II in it impossible, so the next starts above it (windows grow). The first
   window with a schedule at its floor gives the smallest feasible II overall. No monotonicity of
   feasibility in II is assumed (design.md §3).
3. With II fixed, each further objective (fewest warp groups, hand-offs, registers, shortest
   length) is minimised in turn and then fixed; then one more solve picks the canonical schedule.

Every budget is deterministic work (``twill.solver.run``), so the same input, options and worker
count give the same schedule whatever else the machine runs; the wall-clock ``time_limit`` is a
safety cap, and a result it cut says so in its proof.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from twill.bounds import bound_and_reason, sequential_ii
from twill.errors import InfeasibleError
from twill.options import SolveOptions
from twill.problem import Problem
from twill.schedule import Schedule
from twill.solver import hints
from twill.solver.assemble import Assignment, assemble
from twill.solver.compact import compact_stages
from twill.solver.construct import construct_schedule
from twill.solver.ims import ims_swp, ims_triton_split
from twill.solver.model import ScheduleModel, build_model
from twill.solver.partitions import pipeline_groupings
from twill.solver.phases import (
    BISECT_CLOSE_II,
    CLOSE,
    FEASIBLE,
    GROUPINGS_BISECT,
    IMPROVE,
    IMPROVE_GAP,
    IMPROVE_OPS,
    STAGED_DESCENT,
    UNDECIDED_PHASES,
    WINDOW_PHASES,
    Context,
    Found,
    Outcome,
    Verdict,
    Window,
    close_target,
    descent,
    groupings_apply,
    groupings_bisection,
    improve,
    optimality_probe,
    pull_to_floor,
    refute_below,
    retimed_found,
    staged_descent,
)
from twill.solver.retime import retime
from twill.solver.run import Budget, Work, solver, watching
from twill.solver.sequential import sequential_witness
from twill.solver.strategies import consumer_components, producer_consumer_split
from twill.solver.structure import propose_grouping, structure_floor
from twill.solver.unrolled import PROBE_LP, build_unrolled, decide, registers_fit, solution
from twill.validate import validate

__all__ = ["solve"]

MODULO = Budget(share=0.05, at_least=2.0)  # the pure modulo optimum, a lower bound of the joint problem
FLOOR = Budget(share=1 / 15, at_least=1.0)  # the structure relaxation's bisection, a lower bound too
UNROLLED_CLOSE = Budget(share=1 / 3, at_least=3.0)  # its one probe under the improved schedule
CLOSE_COPIES = 1  # iterations on each side of iteration 0 in that probe (``_unrolled_close``)
SEED_SLACK = 1.1  # the seed's II over the floor: room for the registers the relaxation leaves out
SEED_LEAD = 1.25  # a seed this far under the best first schedule starts the improvement alone (``_improve``)
CONSTRUCT = Budget(share=0.0, at_least=2.0)  # a constructive first schedule, per attempt
ADOPT = Budget(share=0.0, at_least=10.0)  # the heuristic's schedule as a solution of the full model
CANONICAL = Budget(share=0.0, at_least=5.0)  # the canonical pass (2 units when it starts warm)
Value = Callable[[cp_model.LinearExprT], int]  # a solver's value function: variables and linear expressions
RESERVE = 0.1  # of the work kept for the secondary objectives once a schedule is in hand
# the improvement's seed, paid from that reserve so that it never cuts the II search: the relaxation's probe (a quarter:
# away from its floor it decides in a fraction of a unit, FA4 free 0.62, random-units-16519 0.10) and its completion
SEED = Budget(share=RESERVE, at_least=0.0)
# the neighbourhoods after an unproven II search (``_last_neighbourhoods``): two thirds of the reserve, the secondary
# objectives the rest
LAST_IMPROVE = Budget(share=RESERVE * 2 / 3, at_least=0.0)
# the reinsertion after them (``_retimed_result``): a third of what the II search left (the neighbourhoods are held to
# the rest: the II search often overruns its limit, and a fixed share would leave them nothing), up to a third of the
# reserve; the secondary objectives of an unproven II keep what is left after it
REINSERT_SHARE = 1 / 3
REINSERT = Budget(share=RESERVE / 3, at_least=0.0)
SEED_PROBE = 1 / 4
EARLY_DESCENT = Budget(share=1 / 10, at_least=3.0, attempt=1.0)  # the descent before the windows
SMALL_IMPROVE = Budget(share=1 / 10, at_least=3.0)  # the neighbourhoods after it, on small bodies (``_improve_small``)
# what the first window's phases leave for the descent and the undecided phases after it (``_first_window``)
DESCENT_RESERVE = Budget(share=1 / 4, at_least=EARLY_DESCENT.at_least)
STALL = 1.0  # units: a secondary objective stops after a slice this long that did not improve it
# The proposals and their constructive schedules together: a share of the work that grows with the body, from
# 1/10 to 1/4 (n_ops / 300 in between): CP-SAT's windows and descent find the best schedules of small bodies
# (FlashAttention, 20-30 ops) and need most of the budget to prove them, while on 50-80 ops they rarely improve on
# a first schedule, which construction under the proposals does (docs/benchmarks_notes.md, issue 16).
STRUCTURED_SHARE = (1 / 10, 1 / 4, 300)  # least share, largest share, ops per unit share

# work charged per constructive schedule and op: 80 ops take 1-3 s of Python (about a unit) on 2 cores
CONSTRUCT_UNITS_PER_OP = 0.015


def _structured_budget(problem: Problem) -> Budget:
    """The work of ``_structured``: ``STRUCTURED_SHARE`` of the budget, by the body's size."""
    least, most, per = STRUCTURED_SHARE
    return Budget(share=min(most, max(least, len(problem.ops) / per)), at_least=1.0)


@dataclass(frozen=True, slots=True)
class _IIResult:
    found: Found | None
    optimal: bool
    floor: int  # every II below it is proven infeasible
    exhausted: bool = False  # every II up to the search's cap is proven infeasible


def _result(ctx: Context, found: Found | None, floor: int) -> _IIResult:
    """The search's answer with the floor it proved, raised on a monotone problem to the least II above
    every refuted one (``Context.refuted_below``, design.md §3.1e); optimal when the schedule found meets it."""
    floor = max(floor, ctx.refuted_below)
    if found is None:
        return _IIResult(None, False, floor)
    return _IIResult(found, found.ii <= floor, min(floor, found.ii))


def solve(problem: Problem, options: SolveOptions | None = None) -> Schedule:
    """Find the schedule with the smallest II, proven, then best on the secondary objectives.

    Raises
    ------
    InfeasibleError
        When no schedule can exist (memory that never fits, or every II proven impossible),
        or when the time limit ran out before any schedule was found.

    Examples
    --------
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> from twill.arch.registry import get_arch
    >>> arch = get_arch("h100")
    >>> sched = solve(build_problem(load_program("toy", arch), arch), SolveOptions(workers=1))
    >>> sched.ii, sched.status, [o.start for o in sched.ops]
    (2, 'optimal', [0, 2, 3])
    """
    options = options or SolveOptions()
    ctx = Context(problem, options, Work.starting_now(options.time_limit, options.work))
    if not options.swp_only:
        problem.require_possible()
    lb, why = bound_and_reason(problem, options)
    ctx.report(f"lower bound II >= {lb}: {why}")
    incumbent = _heuristic_incumbent(problem, options, lb, ctx.work, ctx.report)
    if incumbent is not None:
        ctx.work.found_first()  # a no-op where IMS's schedule, in hand earlier, already marked it
        ctx.report(f"first schedule, from {_source(incumbent)}, at II {incumbent.ii}")
    lb, why = _structure_floor(ctx, lb, why, sequential_ii(problem) if incumbent is None else incumbent.ii - 1)
    incumbent = _better(ctx, incumbent, _structured(ctx, lb, incumbent))
    ctx.proposed = None if incumbent is None else incumbent.ii  # the improvement's gate (``_improvable``)
    incumbent = _better(ctx, incumbent, _pipelined(ctx, lb, incumbent))
    cap = sequential_ii(problem) if incumbent is None else incumbent.ii - 1
    if incumbent is not None:
        ctx.upper = hints.from_schedule(problem, incumbent)
        ctx.report(f"best first schedule at II {incumbent.ii}: the search looks below it")
    lb, why = _modulo_floor(ctx, lb, why, cap)
    fallback = _construct(ctx, lb, cap) if incumbent is None else None
    if fallback is not None:
        cap = fallback.ii - 1
        ctx.work.found_first()
        ctx.hold(fallback)
    ctx.work.limit = options.work * (1 - RESERVE if incumbent is not None or fallback is not None else 1)
    result = _search_ii(ctx, lb, cap) if cap >= lb else _IIResult(None, False, lb, exhausted=True)
    # what the II search left of the work: the last neighbourhoods, then the reinsertion its share (REINSERT_SHARE)
    ctx.work.limit = ctx.work.spent + max(0.0, options.work - ctx.work.spent) * (1 - REINSERT_SHARE)
    result = _last_neighbourhoods(ctx, result)
    ctx.work.limit = options.work
    result = _retimed_result(ctx, result)
    ii_seconds = ctx.work.seconds()
    first = ctx.work.first
    found, optimal, floor = result.found, result.optimal, result.floor
    if found is None:
        found = fallback or (_adopt(ctx, incumbent) if incumbent is not None else None)
        optimal, floor = (result.exhausted, found.ii if result.exhausted else floor) if found is not None else (
            optimal, floor)
    if found is None and incumbent is not None:
        incumbent = incumbent if result.exhausted else retime(problem, incumbent)
        return replace(compact_stages(problem, _as_result(incumbent, result.exhausted, floor, lb, why, ctx)),
                       ii_seconds=ii_seconds, first_seconds=first, work=ctx.work.spent)
    if found is None:
        raise _no_schedule(problem, options, result, cap)
    first = ii_seconds if first is None else first
    return replace(compact_stages(problem, _finish(ctx, found, optimal, floor, lb, why)), ii_seconds=ii_seconds,
                   first_seconds=first)


def _last_neighbourhoods(ctx: Context, result: _IIResult) -> _IIResult:
    """Where the II search ends unproven, the improvement phase's neighbourhoods (``phases.improve``, which retimes
    what they reach) from its schedule, on ``LAST_IMPROVE`` of the work: the part of the secondary objectives'
    reserve that a lower II is worth more than. The windows and the probes have spent their budget on the floor,
    which this leaves as it is (CP-SAT's bound can only raise it); the schedule lowers instead: on the suite's
    unproven rows at 30 units, 15 of 38 lower and none higher, fresh random-fa-16503 12319 -> 12288 optimal, two-tile
    FA b200 at head_dim 256 7054 -> 6718 (docs/benchmarks_notes.md, session 77). The secondary objectives keep what
    is left of the reserve; a proven II never comes here, so its secondary objectives are as before. Where CP-SAT's
    bound meets the schedule without lowering it, the schedule is optimal as it stands."""
    if result.optimal or result.exhausted or ctx.options.swp_only or ctx.work.left() <= 0:
        return result
    if result.found is not None:
        ctx.hold(result.found)
    if ctx.upper is None:
        return result
    top = ctx.upper.ii
    out = improve(ctx, Window(result.floor, top), LAST_IMPROVE)
    floor = max(result.floor, out.floor)  # improve's floor is the window's where it found nothing
    if out.found is None or (out.found.ii >= top and floor < top):  # nothing lower
        return replace(result, floor=floor)
    if out.found.ii >= top:  # nothing lower, and the bound met it: optimal (the search's own schedule where it has one)
        return replace(result, floor=top, optimal=True, found=result.found or out.found)
    ctx.report(f"the neighbourhoods after the II search: II {out.found.ii}")
    return replace(result, found=out.found, optimal=floor >= out.found.ii, floor=min(floor, out.found.ii))


def _retimed_result(ctx: Context, result: _IIResult) -> _IIResult:
    """The II search's schedule at the least II its orders allow (``phases.retimed_found``) where
    it is not proven: every op moved at once, which no phase of the search does (the improvement's neighbourhoods
    leave random-handoff-16526 at 9033 with a schedule 7604 cycles long; retimed, 7544); then, on ``REINSERT`` of the
    work, ops re-placed one at a time and a group at a time under the retiming (``retime.reinserted``). Optimal where
    that meets the floor."""
    found = result.found
    if found is None or result.optimal or ctx.options.swp_only:
        return result
    ctx.hold(found)
    lower = retimed_found(ctx, result.floor, until=ctx.work.until(REINSERT.units(ctx.options.work)))
    return result if lower is None else replace(result, found=lower, optimal=lower.ii <= result.floor)


def _structure_floor(ctx: Context, lb: int, why: str, cap: int) -> tuple[int, str]:
    """The structure relaxation's least II (``twill.solver.structure``): below it no grouping of
    the ops fits in-order issue, registers, shared-memory hand-offs and hand-off recurrences."""
    if cap < lb or ctx.options.swp_only:
        return lb, why
    floor = structure_floor(ctx.problem, ctx.options, lb, cap, ctx.work, ctx.work.until(FLOOR.units(ctx.options.work)))
    if floor is None or floor.ii <= lb:
        return lb, why
    ctx.refuted(lb, floor.ii - 1, "the warp-group structure relaxation")
    ctx.report(f"lower bound II >= {floor.ii}: {floor.sentence()}")
    return floor.ii, floor.sentence()


def _unrolled_close(ctx: Context, lo: int, cap: int) -> int:
    """After the improvement phase, the unrolled relaxation at the II ``CLOSE`` under the improved schedule: refuted,
    every II up to it is (the relaxation's feasible IIs are closed upwards), the schedule is within ``CLOSE`` of
    optimal and the windows start above it (FA4's roles: 2582 refuted in 5.6 units, where the joint model stays
    undecided). Not as a floor before the first schedules: galloping there (1/10 of the work) raised the recurrence
    rows' floors but switched their improvement phase off through its gate, and their schedules rose 2499 -> 2928
    and 3202 -> 3452 (docs/benchmarks_notes.md, session 59)."""
    target = math.ceil(ctx.upper.ii / CLOSE) if ctx.upper is not None else 0
    if ctx.options.swp_only or not lo <= target <= cap or ctx.work.left() <= 0:
        return lo
    units = UNROLLED_CLOSE.units(ctx.options.work)
    if decide(ctx.problem, ctx.options, target, lo, ctx.work, units, CLOSE_COPIES) != cp_model.INFEASIBLE:
        return lo
    ctx.refuted(lo, target, "the unrolled relaxation")
    ctx.report(f"lower bound II >= {target + 1}: the unrolled relaxation refutes II {target}, "
               f"{CLOSE - 1:.0%} under the improved schedule")
    return target + 1


def _seeded(ctx: Context, lb: int, cap: int) -> Found | None:
    """Where the improvement phase applies, a start for it below the best schedule: the unrolled relaxation's solution
    at ``SEED_SLACK`` over the floor, completed in the joint model at that II (its starts and groups as hints). The
    improvement's neighbourhoods keep most of the schedule they start from (docs/benchmarks_notes.md, session 35), and
    the constructive schedules' groupings can be far from the best: on FA4 free the improvement ends at 3198 from them
    and at 2633, the optimum, from the 2691 seed (session 60). What the seed brings is a grouping chosen with the
    times, so not where every op's group is pinned (FA4's roles: the improvement reaches 2633 from the first schedule,
    and the seed's units would be the close probe's). A refutation at the seed's II is kept as one."""
    target = math.ceil(lb * SEED_SLACK)
    pinned = len(dict(ctx.options.fixed_groups)) == len(ctx.problem.ops)
    if not _improvable(ctx, lb) or ctx.options.swp_only or pinned or not lb <= target <= cap or ctx.work.left() <= 0:
        return None
    until = ctx.work.until(SEED.units(ctx.options.work))
    relax = solver(ctx.work, SEED_PROBE * (until - ctx.work.spent), 1, linearization=PROBE_LP)
    u = build_unrolled(ctx.problem, ctx.options, target, lb)
    status = relax.solve(u.m)
    if status == cp_model.INFEASIBLE:
        ctx.refuted(lb, target, "the unrolled relaxation")
        ctx.report(f"lower bound II >= {target + 1}: the unrolled relaxation refutes II {target}")
        return None
    seed = solution(u, relax.value) if status in FEASIBLE else None
    if seed is None or until - ctx.work.spent <= 0 or not registers_fit(ctx.problem, seed):
        return None
    v = build_model(ctx.problem, ctx.options, target, target)
    hints.hint(v, seed)
    s = ctx.solver(until - ctx.work.spent)
    if s.solve(v.m) not in FEASIBLE:
        return None
    ctx.report(f"II {target}: the unrolled relaxation's solution completed in the joint model, the improvement's start")
    return Found(v, s)


def _better(ctx: Context, incumbent: Schedule | None, better: Schedule | None) -> Schedule | None:
    """``better`` where a phase returned one (it returns only schedules below ``incumbent``), else ``incumbent``."""
    if better is None:
        return incumbent
    ctx.work.found_first()
    return better


PIPELINE_GROUPS = 4  # the most groups of fixed-latency work a pipeline grouping has (``twill.solver.partitions``)
PIPELINE_GAP = 1.10  # pipelines are tried where the proposals' best schedule ends this far above the floor


def _pipelined(ctx: Context, lb: int, best: Schedule | None) -> Schedule | None:
    """A better first schedule on a large body still far from its floor after the proposals (``IMPROVE_OPS``
    ops or more, ``best`` above ``PIPELINE_GAP`` times the floor): the constructive scheduler under groupings that
    cut the body's topological order into 2..``PIPELINE_GROUPS`` runs of balanced issue work
    (``twill.solver.partitions``), each charged as any construction; the best one below ``best``, or None.
    After the proposals, not before or beside them: from a pipeline's lower II the proposals' bisection of targets
    misses schedules it builds from higher (random-fa-16003: 7295 instead of 7103), and a pipeline's schedule
    handed to the search in place of the proposals' cost random-fa-16503 its proof (12414 instead of 12288
    optimal); bodies whose proposals end within 10% of the floor keep the path they had. One run (k = 1) was
    never the best and is the slowest to build (docs/benchmarks_notes.md, session 34)."""
    p, o = ctx.problem, ctx.options
    if (not _heuristics_apply(o) or len(p.ops) < IMPROVE_OPS
            or (best is not None and best.ii <= PIPELINE_GAP * lb)):
        return None
    found: Schedule | None = None
    for groups in pipeline_groupings(p, o, range(2, PIPELINE_GROUPS + 1)):
        if ctx.work.left() <= 0 or ctx.work.check_wall():
            break
        sched = _constructed(ctx, groups, found or best, lb)
        if sched is not None:
            found = sched
            ctx.report(f"  constructed under a pipeline of {len(sched.groups)} groups: II {sched.ii}")
    return found


def _structured(ctx: Context, lb: int, best: Schedule | None) -> Schedule | None:
    """A better first schedule: the storage-aware constructive scheduler (``twill.solver.construct``)
    under groupings the structure relaxation proposes, at target IIs bisected between the floor and
    the best schedule so far (a target below which a schedule was built becomes the new top, one
    where none was, the new bottom). At each target: the fewest groups that admit it and one more,
    each with the fewest hand-offs and the most balanced holds, within half the work left (a target whose
    groupings all fail to build, as the floor's often do on large bodies, leaves work for the targets above
    it). Within ``_structured_budget``'s work; the best validated schedule below ``best``, or None.
    Proposals and construction are deterministic, so this is too (unless the wall-clock cap cuts it)."""
    p, o = ctx.problem, ctx.options
    if not _heuristics_apply(o):
        return None
    found: Schedule | None = None
    tried: set[tuple[int, ...]] = set()
    until = ctx.work.until(_structured_budget(p).units(o.work))
    lo, hi = lb, (best.ii if best is not None else sequential_ii(p))
    target = lb
    while lo < hi and ctx.work.spent < until and ctx.work.left() > 0 and not ctx.work.check_wall():
        half = ctx.work.spent + (until - ctx.work.spent) / 2  # the work mark this target stops at
        sched = _at_target(ctx, target, found or best, lb, tried, half)
        if sched is not None:
            found, hi = sched, sched.ii
            ctx.report(f"  constructed under a grouping proposed at II {target}: II {found.ii}")
        else:
            lo = target + 1
        target = (lo + hi) // 2
    return found


def _at_target(ctx: Context, target: int, top: Schedule | None, lb: int, tried: set[tuple[int, ...]],
               until: float) -> Schedule | None:
    """The first schedule built under the proposals at ``target`` (``_structured``), or None."""
    p, o = ctx.problem, ctx.options
    least = None
    for count in range(1, min(o.max_groups, len(p.ops)) + 1):
        for balanced in (False, True):
            if ctx.work.spent >= until or ctx.work.left() <= 0 or (least is not None and count > least + 1):
                return None
            groups = propose_grouping(p, o, target, ctx.work, count, balanced)
            if groups is None:
                break  # balanced or not, this count admits no grouping in budget
            least = count if least is None else least
            labels = hints.first_use_labels(p, groups)
            key = tuple(labels[groups[op.name]] for op in p.ops)
            if key in tried:
                continue
            tried.add(key)
            sched = _constructed(ctx, groups, top, lb)
            if sched is not None:
                return sched
    return None


def _constructed(ctx: Context, groups: dict[str, int], top: Schedule | None, lb: int) -> Schedule | None:
    """``_built`` for the search's context."""
    return _built(ctx.problem, ctx.options, groups, ctx.work, lb, top)


def _built(problem: Problem, options: SolveOptions, groups: dict[str, int], work: Work, lb: int,
           top: Schedule | None = None) -> Schedule | None:
    """The constructive scheduler's schedule under ``groups`` below ``top``'s II, charged to the work
    budget by the body's size (``CONSTRUCT_UNITS_PER_OP``: its Python time is not CP-SAT's); None when
    it finds none, the wall-clock cap cut it, or the schedule breaks the options' caps."""
    sched = construct_schedule(problem, options, groups, upper=None if top is None else top.ii - 1,
                               deadline=work.deadline, lower_bound=lb).schedule
    work.spent += CONSTRUCT_UNITS_PER_OP * len(problem.ops)
    if sched is None or work.check_wall() or sched.ii < lb or not _fits(sched, options):
        return None
    return sched if top is None or sched.ii < top.ii else None


def _fits(sched: Schedule, options: SolveOptions) -> bool:
    """Whether a heuristic's schedule obeys the options' group and warp caps."""
    if len(sched.groups) > options.max_groups:
        return False
    return options.max_warps is None or sum(g.warps for g in sched.groups) <= options.max_warps


def _modulo_floor(ctx: Context, lb: int, why: str, cap: int) -> tuple[int, str]:
    """The joint problem only adds constraints to pure modulo scheduling, so the proven modulo
    optimum (or CP-SAT's bound on it) is a lower bound of the joint II. Where TMEM binds, the memory
    relaxation (pure modulo scheduling plus TMEM) runs on every window instead, a stronger bound."""
    if ctx.options.swp_only or ctx.memory or cap < lb or ctx.work.left() <= 0:
        return lb, why
    v = build_model(ctx.problem, replace(ctx.options, swp_only=True), lb, cap)
    v.m.minimize(v.ii)
    s = ctx.solver(MODULO.units(ctx.options.work))
    status = s.solve(v.m)
    floor = int(s.value(v.ii)) if status == cp_model.OPTIMAL else (
        max(lb, math.ceil(s.best_objective_bound)) if status == cp_model.FEASIBLE else
        cap + 1 if status == cp_model.INFEASIBLE else lb)
    if floor <= lb:
        return lb, why
    ctx.refuted(lb, floor - 1, "pure modulo scheduling (a relaxation)")
    why = f"pure modulo scheduling needs II >= {floor} (a relaxation of the joint problem)"
    ctx.report(f"lower bound II >= {floor}: {why}")
    return floor, why


def _construct(ctx: Context, lb: int, cap: int) -> Found | None:
    """A first schedule where the heuristic has none: the full model at the cap (one iteration at a
    time fits whenever any schedule does), satisfied with Triton's producer/consumer split pinned,
    else with groups free. Easy models: no optional intervals, no II to minimise."""
    if cap < lb or ctx.work.left() <= 0:
        return None
    p, o = ctx.problem, ctx.options
    strategies = [o] if o.swp_only or o.fixed_groups else [replace(o, fixed_groups=producer_consumer_split(p)), o]
    for opts in strategies:
        v = build_model(p, opts, cap, cap)
        s = ctx.solver(CONSTRUCT.units(o.work))
        if s.solve(v.m) in FEASIBLE:
            ctx.report(f"constructive schedule at II {cap}: the search looks below it")
            return Found(v, s)
    return None


def _staged(ctx: Context, lb: int, cap: int) -> Found | None:
    """The staged descent (``phases.staged_descent``) from the best schedule so far (the first, or the
    improvement's), before any window."""
    if ctx.upper is None or cap < lb or ctx.work.left() <= 0 or ctx.options.swp_only:
        return None
    out = staged_descent(ctx, Window(lb, cap), STAGED_DESCENT)
    if out.found is not None:
        ctx.report(f"staged descent from the first schedule: II {out.found.ii}; the search looks below it")
    return out.found


def _descend(ctx: Context, lb: int, cap: int) -> Found | None:
    """The descent phase (``phases.descent``) from the first schedule, before any window."""
    if ctx.upper is None or cap < lb or ctx.work.left() <= 0:
        return None
    out = descent(ctx, Window(lb, cap), EARLY_DESCENT)
    if out.found is not None:
        ctx.report(f"descent from the first schedule: II {out.found.ii}; the search looks below it")
    return out.found


def _improve_small(ctx: Context, floor: int, best: Found | None) -> Found | None:
    """On a body under ``IMPROVE_OPS`` ops, after the first window and the descent, the improvement phase's
    neighbourhoods (``phases.improve``) from the descent's schedule for ``SMALL_IMPROVE`` of the work, where that
    schedule lies more than ``CLOSE`` over the floor; a lower schedule it finds, else None. The descent's repairs move
    a whole schedule to one II and fail where it must change shape; the neighbourhoods re-solve a part at a time
    (one-tile FA b200: the descent stops at 1763, its probes at 1714, 1738 and 1750 undecided, and the neighbourhoods
    reach 1731 in 3.1 units). Within ``CLOSE`` the schedule needs a proof, not a lower II, so the bisection keeps the
    work there (docs/benchmarks_notes.md, session 61). Where the descent found nothing, from the best schedule
    known (``Context.upper``), if that lies more than ``IMPROVE_GAP`` over the floor: two-tile FA b200 at head_dim
    256, whose descent finds nothing under the constructive scheduler's 8657, reaches 7054; nearer the floor the
    window phases' proof is worth more (fresh random-recurrence-16512: 634 over the floor 578, 7.1 units for 633, and
    it lost the proof of 624 that the windows find; session 71)."""
    start = best if best is not None else ctx.upper
    ii = None if start is None else start.ii
    gap = CLOSE if best is not None else IMPROVE_GAP
    if ii is None or len(ctx.problem.ops) >= IMPROVE_OPS or ii <= gap * floor or ctx.work.left() <= 0:
        return None
    if best is not None:
        ctx.hold(best)
    out = improve(ctx, Window(floor, ii), SMALL_IMPROVE)
    if out.found is None or out.found.ii >= ii:
        return None
    ctx.hold(out.found)
    source = "best known" if best is None else "descent's"
    ctx.report(f"the neighbourhoods from the {source} schedule: II {out.found.ii}")
    return out.found


OPTIMALITY_LEAST = 2.0  # units: below this the probe one under the best schedule is left to the bisection


def _one_under(ctx: Context, floor: int, best: Found | None) -> Found | None:
    """On a monotone problem, after the first window and the descent, the probe one under the best schedule
    (``phases.optimality_probe``) with the bisection's budget for it (``BISECT_CLOSE_II``, at most half the work
    left): refuted, the schedule is optimal. The windows from the floor would come to that II last, after
    refutations that leave the answer as it is: one-tile FA h100 spent 15.7 units raising its floor 2049 -> 2416 and
    had none left for 2438 (3.84 units cold), FA d256 h100 (fresh) 17 units raising 4097 -> 6112 with 6200 needing
    7.33 (docs/benchmarks_notes.md, session 62). The best schedule after it: the one it found, else ``best``.
    Where the floor lies more than ``CLOSE`` under the schedule, first the repair alone one under (two-tile FA b200
    finds 2510 under 2511 so in 0.1 units), then the probe at the highest II whose refutation brings the schedule
    within ``CLOSE`` of optimal, then the cold probe one under with what is left: one-tile FA b200 refutes 1697 and
    ends 1731 >= 1698 (1.9%) where the probe one under, undecided, had left the floor at 1642; one-tile FA h100
    refutes 2391 and then 2438. Probing the CLOSE point instead of one under lost two FA proofs (session 71); this
    order lost none on the suite, and one fresh floor (random-handoff-16525: 2152 -> 2086; session 72)."""
    if best is None or not ctx.monotone or not best.free(ctx.options) or best.ii - 1 < max(floor, ctx.refuted_below):
        return best
    units = min(BISECT_CLOSE_II.at_least, ctx.work.left() / 2)
    if units < OPTIMALITY_LEAST:
        return best
    ctx.hold(best)
    lo = max(floor, ctx.refuted_below)
    close = close_target(best.ii)
    if lo < close < best.ii - 1:  # under II 51 the 2% point is one under: the probe below is that probe
        found = _close_probe(ctx, lo, close, units)
        units = min(BISECT_CLOSE_II.at_least, ctx.work.left() / 2)
        if found is not None or units < OPTIMALITY_LEAST:
            return found or best
        lo = max(lo, ctx.refuted_below)
    status, found = optimality_probe(ctx, lo, units)
    if status == cp_model.INFEASIBLE:
        ctx.report(f"II {best.ii - 1} refuted: the schedule at II {best.ii} is optimal")
        return best
    if found is None:
        ctx.report(f"II {best.ii - 1}: undecided in {units:.1f} units; the windows go on from the floor")
        return best
    ctx.hold(found)
    ctx.report(f"II {found.ii}: a schedule one under the best")
    return found


def _close_probe(ctx: Context, lo: int, close: int, units: float) -> Found | None:
    """``_one_under``'s probes before the cold one under the best schedule (``ctx.upper``) where the floor lies more
    than ``CLOSE`` under it: the repair alone one under (a finder: two-tile FA b200 finds 2510 under 2511 so), then
    the probe at ``close`` (``phases.close_target``), whose refutation brings the schedule within ``CLOSE`` of optimal. A schedule either finds,
    held as the new best; else None, with the floor raised where ``close`` was refuted."""
    _, found = optimality_probe(ctx, lo, units, cold=False)
    words = "one"
    if found is None:
        status, found = optimality_probe(ctx, lo, units, close)
        words = f"{CLOSE - 1:.0%}"
    if found is not None:
        ctx.hold(found)
        ctx.report(f"II {found.ii}: a schedule {words} under the best")
        return found
    ctx.report(f"II {close} " + (f"refuted: the schedule is within {CLOSE - 1:.0%} of optimal"
                                 if status == cp_model.INFEASIBLE else f"undecided in {units:.1f} units"))
    return None


def _improvable(ctx: Context, lb: int) -> bool:
    """Whether the improvement phase applies: a body of ``IMPROVE_OPS`` ops or more whose first schedules ended
    more than ``IMPROVE_GAP`` times the floor. The gate reads the II before the pipeline groupings
    (``ctx.proposed``): a pipeline that lands just under the gate would otherwise skip the phase and end higher
    than the phase from the proposals' schedule does (random-units-16019: 3332 instead of 3127;
    docs/benchmarks_notes.md, session 35)."""
    if ctx.upper is None or len(ctx.problem.ops) < IMPROVE_OPS:
        return False
    judged = ctx.proposed if ctx.proposed is not None else ctx.upper.ii
    return judged > IMPROVE_GAP * lb


def _pulled(ctx: Context, lb: int, cap: int) -> Found | None:
    """Where the improvement phase applies, first a schedule at the floor itself (``phases.pull_to_floor``): the
    improvement lowers the best schedule from above and seldom reaches a floor that is the optimum."""
    if not _improvable(ctx, lb) or cap < lb:
        return None
    found = pull_to_floor(ctx, lb)
    if found is not None:
        ctx.report(f"II {lb}: the floor, from the relaxation's schedule pulled into the full model")
    return found


def _improve(ctx: Context, lb: int, cap: int, seed: Found | None) -> Outcome | None:
    """The improvement phase (``phases.improve``) before any window where ``_improvable``; None where it does
    not apply or found nothing. With a seed (``_seeded``), in two halves: the first from the best schedule, the second
    from the lower of what the first reached and the seed. The neighbourhoods keep most of the schedule they start
    from and neither start is better everywhere: FA4 free ends at 3198 from its first schedules and at 2633 from the
    seed, random-units-16519 (fresh) at 2576 from its first schedules and at 2824 from the seed (session 60). Where the
    seed lies ``SEED_LEAD`` times or more under the best first schedule, one half from the seed alone, and the half the
    first schedules would have had goes to the windows, first the close probe: on FA4 free that half lowered 4301 to
    3288, still 22% above the seed, and without it the answer is 2633 >= 2583 (session 61). ``SEED_LEAD`` is the
    improvement's own gate ratio (``IMPROVE_GAP``), chosen on that one body, not a measured limit of a half."""
    if not _improvable(ctx, lb) or cap < lb or ctx.work.left() <= 0:
        return None
    half = Budget(share=IMPROVE.share / 2, at_least=IMPROVE.at_least / 2)
    if seed is None:
        out = improve(ctx, Window(lb, cap + 1), IMPROVE)
    elif seed.ii * SEED_LEAD <= ctx.upper.ii:  # the first schedules' half could not reach the seed's start
        ctx.hold(seed)
        ctx.report(f"the seed at II {seed.ii} is {SEED_LEAD:.2f}x or more below the best schedule: it starts the "
                   "improvement alone, on half its work")
        out = improve(ctx, Window(lb, cap + 1), half)
        out = Outcome(Verdict.FOUND, out.floor, _lowest(out.found, seed))
    else:
        first = improve(ctx, Window(lb, cap + 1), half)
        if first.found is None or seed.ii < first.found.ii:
            ctx.hold(seed)
            ctx.report(f"the seed at II {seed.ii} is below the improvement's first half: it starts the second")
        else:
            ctx.hold(first.found)
        out = improve(ctx, Window(lb, cap + 1), half)
        # the lowest of the three: the second half may end without a solution where the work runs out
        out = Outcome(Verdict.FOUND, max(out.floor, first.floor), _lowest(out.found, first.found, seed))
    if out.found is None:
        return None
    if out.found.ii <= cap:
        ctx.hold(out.found)
        ctx.report(f"improved from the best schedule: II {out.found.ii}, every II below {out.floor} refuted")
    else:
        ctx.report(f"no lower II from the best schedule; every II below {out.floor} refuted")
    return out


def _lowest(*found: Found | None) -> Found:
    """The schedule with the least II among those found (at least one is: the improvement's seed)."""
    return min((f for f in found if f is not None), key=lambda f: f.ii)


def _search_ii(ctx: Context, lb: int, cap: int) -> _IIResult:
    """Decide windows of II from ``lb`` up to ``cap`` until one holds a schedule. Before them, on a large
    body far from its floor, the improvement phase lowers the first schedule, and then the staged descent; after
    the first window (the lower bound itself, often the optimum), unless the improvement ran, the descent does.
    Such a schedule then caps the windows and is the answer should the budget run out before a proof."""
    lo, width, proven = lb, 0, None  # proven: the floor of the first window left undecided
    pulled = _pulled(ctx, lb, cap)
    if pulled is not None:
        return _result(ctx, pulled, lb)
    best: Found | None = None  # the improved, staged or descent's schedule
    before = ctx.work.spent
    seed = _seeded(ctx, lb, cap)
    # the seed is paid from the secondary objectives' reserve (it spends at most that, up to CP-SAT's overshoot of a
    # deterministic limit): where it finds nothing, the II search that follows has the work it had without it, so its
    # answer is the same (a lower II is worth more than a secondary objective's proof)
    ctx.work.limit += ctx.work.spent - before
    out = _improve(ctx, lb, cap, seed)
    if out is not None:
        lo, best = out.floor, out.found if out.found.ii <= cap else None
        cap = cap if best is None else best.ii - 1
        if lo > cap:  # CP-SAT's bound met the schedule (or the first schedule): every II below it is refuted
            return _IIResult(best, True, lo) if best is not None else _IIResult(None, False, lo, exhausted=True)
    improved = best is not None
    if improved:
        lo = _unrolled_close(ctx, lo, cap)
    staged = _staged(ctx, lo, cap)
    best, cap = (best, cap) if staged is None else (staged, staged.ii - 1)
    if best is not None and best.ii <= max(lo, ctx.refuted_below):
        return _IIResult(best, True, best.ii)
    while lo <= cap and ctx.work.left() > 0:
        lo = max(lo, ctx.refuted_below)  # on a monotone problem a refutation above the window refutes it
        if lo > cap:
            break
        hi = min(cap, lo + width)
        ctx.report(f"II window [{lo}, {hi}]: searching")
        first = not improved and width == 0  # the descent runs after this window, unless the improvement ran
        out = _first_window(ctx, Window(lo, hi)) if first else _decide(ctx, Window(lo, hi))
        if out.verdict is Verdict.FOUND:
            return _result(ctx, out.found, out.floor if proven is None else proven)
        if first:
            best = _descend(ctx, max(lo, out.floor), cap) or best
            best = _improve_small(ctx, max(lo, out.floor), best) or best
            best = _one_under(ctx, max(lo, out.floor), best)
            cap = cap if best is None else best.ii - 1
            floor = max(lo, out.floor, ctx.refuted_below)
            best = _groupings_bisected(ctx, floor, cap) or best
            cap = cap if best is None else best.ii - 1
            if best is not None and ctx.refuted_below >= best.ii:
                return _IIResult(best, True, best.ii)
        if out.verdict is Verdict.EMPTY:
            nxt = max(hi + 1, ctx.refuted_below)  # a later phase's refutations may have raised it
            lo, width = nxt, _next_width(ctx, width, lo, nxt, cap)
            continue
        proven = out.floor if proven is None else proven
        ctx.report(f"II window [{lo}, {hi}]: undecided in its budget; probing for schedules")
        found = _probe_above(ctx, out.floor, hi, cap)
        if found is not None:
            return _settle(ctx, found, proven)
        lo, width = hi + 1, max(8, 2 * width + 1, lo // 4)
    if proven is not None or ctx.work.left() <= 0:
        result = _result(ctx, best, proven if proven is not None else lo)
        # every II up to the first schedule's refuted (on a monotone problem, by one refutation above a gap)
        return replace(result, exhausted=True) if result.found is None and result.floor > cap else result
    if best is not None:  # every II below the descent's schedule is refuted
        return _IIResult(best, True, best.ii)
    return _IIResult(None, False, cap + 1, exhausted=True)


def _groupings_bisected(ctx: Context, floor: int, cap: int) -> Found | None:
    """Benders over groupings bisecting the whole gap [floor, cap] (``phases.groupings_bisection``) where the windows
    would otherwise climb to the best schedule from a floor more than ``IMPROVE_GAP`` under it (``_next_width``) on
    a monotone body Benders applies to: there the joint model's probes near the floor stay undecided (fresh
    random-handoff-16524: 1843 and 1943, 18 units, the answer 2924 >= 1744) and Benders refutes the middle of the gap
    in a unit or two. Its schedule, where it finds one. Only with its whole budget left: with less, its probes in the
    middle of the gap stay undecided, and the windows' cheap refutations from the floor are lost (tuned
    random-regs-16009, 25 units spent before it: floor 1751 -> 1670, and three more rows alike; session 88)."""
    if (not ctx.monotone or not groupings_apply(ctx) or ctx.upper is None or floor > cap
            or ctx.upper.ii <= IMPROVE_GAP * floor or ctx.work.left() < GROUPINGS_BISECT.units(ctx.options.work)):
        return None
    ctx.report(f"the best schedule at II {ctx.upper.ii} lies over {IMPROVE_GAP:.2f}x the floor {floor}: "
               "Benders over groupings bisects the gap")
    return groupings_bisection(ctx, Window(floor, cap), GROUPINGS_BISECT).found


def _next_width(ctx: Context, width: int, lo: int, nxt: int, cap: int) -> int:
    """The width of the window after [lo, lo + width] was refuted, the next starting at ``nxt``: wider each time
    (0, 8, 2w + 1, ..., at least lo/64), so that the windows gallop up from the floor, where the optimum often lies
    and refutations far under it come cheap (fresh random-handoff-16524: 1593-1743 at no cost, 2343 by Benders in
    1.1 units). On a monotone problem whose best schedule lies within ``IMPROVE_GAP`` of ``nxt``, the rest of the gap
    is one window instead, bisected from the schedule down: there every window's refutation lies near the optimum,
    costs about what a proof does, and is made moot by the bisection's own refutations under the schedule (fresh
    random-regs-16508: 2.8 and 4.0 units refuting 1496 and 1588, then 1618 and 1633 refuted under its 1650, and no
    work left for 1635, the proof; docs/benchmarks_notes.md, session 85). Not where a probe under the schedule was
    already left undecided (``Context.undecided``): its top is known to be hard, and the windows' refutations are
    the floor the answer will carry (one-tile FA b200 at head_dim 64: 1678 >= 1532 galloping, >= 1372 in one window).
    Only on bodies under ``IMPROVE_OPS`` ops, the suite's 78 rows it was measured on; the larger ones, whose first
    schedules the improvement phase lowers before any window, gallop as before (unmeasured: session 85 had no lent
    machine for their 25 rows)."""
    small = len(ctx.problem.ops) < IMPROVE_OPS
    if small and ctx.monotone and ctx.upper is not None and ctx.undecided is None and ctx.upper.ii <= IMPROVE_GAP * nxt:
        ctx.report(f"the best schedule at II {ctx.upper.ii} lies within {IMPROVE_GAP:.2f}x the floor {nxt}: "
                   "the rest of the gap is one window")
        return max(0, cap - nxt)
    return max(8, 2 * width + 1, lo // 64)


def _first_window(ctx: Context, w: Window) -> Outcome:
    """``_decide`` on the first window with ``DESCENT_RESERVE`` of the work held back (at most half of what is left)
    for the descent from the first schedule that follows an undecided window. Without it the first window's phases
    can spend the whole budget undecided, and the answer is the first schedule however far above the floor
    (random-units-16017-n26-b200, tuned: 1563 >= 1088, and 1272 with the reserve; docs/benchmarks_notes.md,
    sessions 39-40). A window decided within the rest is decided as before: the reserve only cuts phases that would
    have run past it."""
    if ctx.upper is None:  # no schedule to descend from
        return _decide(ctx, w)
    reserve = min(DESCENT_RESERVE.units(ctx.options.work), ctx.work.left() / 2)
    ctx.work.limit -= reserve
    ctx.held_back = reserve
    try:
        return _decide(ctx, w)
    finally:
        ctx.work.limit += reserve
        ctx.held_back = 0.0


def _settle(ctx: Context, found: Found, proven: int) -> _IIResult:
    """A schedule found above an undecided window's floor ``proven`` is optimal when every II in
    between is refuted: first by the memory relaxation (quick where TMEM binds), else by the window
    phases once more on [proven, found.ii - 1], with the schedule now the upper bound. Not for a
    schedule under Triton's split, whose secondary objectives would be optimised within the split."""
    proven = max(proven, ctx.refuted_below)  # 0 unless the problem is monotone
    if not found.free(ctx.options):
        return _IIResult(found, False, min(proven, found.ii))
    if proven >= found.ii or (ctx.memory and refute_below(ctx, proven, found.ii)):
        return _IIResult(found, True, found.ii)
    out = _decide(ctx, Window(proven, found.ii - 1))
    if out.verdict is Verdict.EMPTY:
        return _IIResult(found, True, found.ii)
    if out.verdict is Verdict.FOUND:
        return _result(ctx, out.found, out.floor)
    return _result(ctx, found, out.floor)


def _decide(ctx: Context, w: Window) -> Outcome:
    """The window's phases in order, each on the window above the floor the earlier ones proved,
    until one is decisive. A schedule above its phase's floor (the sweep's, stopped part-way) is
    kept, becomes the best known, and the later phases decide the window below it."""
    ctx.new_window(w)
    best: Found | None = None
    for phase in WINDOW_PHASES:
        if not phase.applies(ctx) or ctx.work.left() <= 0:
            continue
        out = phase.run(ctx, w, phase.budget)
        floor = max(w.lo, out.floor)
        if out.verdict is Verdict.FOUND and out.found.ii > floor:  # kept; the window below it goes on
            best = out.found
            ctx.hold(best)
            w = Window(floor, best.ii - 1)
            continue
        if out.verdict is Verdict.EMPTY and best is not None:
            return Outcome(Verdict.FOUND, best.ii, best)  # every II below the kept schedule is refuted
        if out.verdict is not Verdict.UNDECIDED:
            return out
        w = Window(floor, w.hi)
    return Outcome(Verdict.FOUND, w.lo, best) if best is not None else Outcome(Verdict.UNDECIDED, w.lo)


def _probe_above(ctx: Context, floor: int, hi: int, cap: int) -> Found | None:
    """The undecided phases in order, each below the least II found so far, until one finds a
    schedule whose groups are the search's own choice."""
    best: Found | None = None
    for phase, from_floor in UNDECIDED_PHASES:
        top = cap if best is None else best.ii - 1
        lo = floor if from_floor else hi + 1
        if not phase.applies(ctx) or lo > top or ctx.work.left() <= 0:
            continue
        out = phase.run(ctx, Window(lo, top), phase.budget)
        if out.found is not None:
            best = out.found
            ctx.hold(best)
        if best is not None and best.free(ctx.options):
            break
    return best


def _finish(ctx: Context, found: Found, optimal: bool, floor: int, lb: int, why: str) -> Schedule:
    """Secondary objectives on the found schedule's model, II fixed, each hinted with the last
    solution; then the canonical schedule."""
    p, o = ctx.problem, ctx.options
    v, ii = found.model, found.ii
    values: dict[str, int] = {"ii": ii}
    proven: dict[str, bool] = {"ii": optimal}
    v.m.add(v.ii == ii)
    solution, last_value = hints.solution_of(found.solver), found.solver.value
    for name in o.objective[1:]:
        if name not in v.objective_terms:
            continue
        if ctx.work.left() < 0.2:
            break  # out of work: the remaining objectives keep the values the last solution has
        if name == "length":
            v.release_anchor()  # starts count from 0: a rotation changes the length
        found = _minimise(ctx, v, name, solution)
        if found is None:
            break
        values[name], proven[name], solution, last_value = found
        v.m.add(v.objective_terms[name] <= values[name])
        ctx.report(f"{name} = {values[name]} ({'proven' if proven[name] else 'best found'})")
    for name in o.objective[1:]:
        if name in v.objective_terms:
            proven.setdefault(name, False)  # not reached in the budget: its value is the last solution's
    all_proven = optimal and all(proven[n] for n in o.objective[1:] if n in v.objective_terms)
    final, value = _canonical(ctx, ii, values, v, solution, last_value, warm=not all_proven)
    proof = _proof(optimal, ii, lb, floor, why, ctx.work.cut, ctx.monotone, ctx.refutations)
    ctx.report(f"done: II {ii} ({'optimal' if optimal else 'feasible'}), {ctx.work.spent:.1f} units of work")
    return replace(_extract(p, o, final, value, optimal, floor, proof, proven, ctx.work.seconds()), work=ctx.work.spent)


def _minimise(ctx: Context, v: ScheduleModel, name: str, solution: list[int]) -> tuple[int, bool, list[int], Value] | None:
    """Minimise objective ``name`` from ``solution`` in slices of ``STALL`` units, within
    ``--phase-limit``: (value, proven, solution, its value function), or None when no slice finds
    a solution. A slice
    that does not improve on the last ends the phase ("best found"): CP-SAT often finds the best
    register budget at once and then spends any budget failing to close the bound. Slices of
    deterministic work keep this reproducible, where a clock-based stall would not be."""
    o = ctx.options
    v.m.minimize(v.objective_terms[name])
    until, best = ctx.work.until(o.phase_limit), None
    while ctx.work.spent < until and ctx.work.left() > 0:
        hints.hint_solution(v, solution)
        s = ctx.solver(min(STALL, until - ctx.work.spent))
        status = s.solve(v.m, watching(o.progress, name, ctx.work))
        if status not in FEASIBLE:
            break
        value = int(s.objective_value)
        if best is not None and value >= best[0] and status != cp_model.OPTIMAL:
            break
        best = value, status == cp_model.OPTIMAL, hints.solution_of(s), s.value
        solution = best[2]
        if best[1]:
            break
    return best


def _no_schedule(problem: Problem, options: SolveOptions, result: _IIResult, cap: int) -> InfeasibleError:
    if result.exhausted:
        return InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: no schedule exists for any II up to "
                               f"{cap} (a fully sequential iteration); a constraint can never be met",
                               reason="search exhausted")
    return InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: no schedule found within "
                           f"{options.work:g} units of work; II >= {result.floor} is proven{_why_no_first(problem, options)} "
                           "(raise --work-limit, or --time-limit)", reason="time limit", proven_lb=result.floor)


def _why_no_first(problem: Problem, options: SolveOptions) -> str:
    """Why the sequential schedule, the first schedule of last resort, was no answer: its first
    broken rule (a footprint that does not fit even one iteration at a time), or nothing."""
    if not _heuristics_apply(options):
        return ""
    broken = validate(problem, sequential_witness(problem, swp_only=options.swp_only))
    return f"; the sequential schedule breaks {broken[0].rule} ({broken[0].message})" if broken else ""


def _heuristics_apply(options: SolveOptions) -> bool:
    """Whether IMS and the sequential schedule obey the options: not under a baseline or ablation whose
    restriction (fixed groups, one stage, no hand-off) they ignore."""
    return not (options.fixed_groups or options.single_stage or options.no_handoff)


def _heuristic_incumbent(problem: Problem, options: SolveOptions, lb: int, work: Work,
                         report: Callable[[str], None] = lambda message: None) -> Schedule | None:
    """A validated first schedule without a solver: the better of Rau's iterative modulo scheduling
    (``twill.solver.ims``) and the storage-aware constructive scheduler (``twill.solver.construct``)
    under Triton's producer/consumer split (and, where accumulators cap groups, a consumer per
    sub-tile: ``_heuristic_groupings``) or, where all find none, the sequential schedule
    (``twill.solver.sequential``); None when none holds.

    The sequential schedule comes first (milliseconds, ``report``ed as it is found): IMS and the
    constructive scheduler take seconds of Python on large bodies (on a 2-core machine, 1.9-2.1 s of IMS
    that finds none on the suite's 68-77-op bodies before construction starts), and until they end it
    is the answer.

    It bounds the search from above (windows stop below its II) and is the answer when the budget
    runs out before CP-SAT finds anything. Where every op's group is pinned, the constructive schedule
    under that grouping (``_pinned_incumbent``); none under an ablation whose restriction (one stage,
    no hand-off) the heuristics do not obey. They do obey a warp cap (``max_warps``), and the cap is
    checked again on their schedules.
    """
    if options.fixed_groups:
        return _pinned_incumbent(problem, options, lb, work)
    if not _heuristics_apply(options):
        return None
    fallback = _sequential(problem, options, lb)
    if fallback is not None:
        work.found_first()
        report(f"a schedule in hand: the sequential one (one iteration at a time), at II {fallback.ii}")

    result = (ims_swp if options.swp_only else ims_triton_split)(problem, options, deadline=work.deadline)
    # where the cap cut the heuristic, its schedule would depend on the machine's load
    heuristic = None if work.check_wall() else result.schedule
    if heuristic is not None and (heuristic.ii < lb or not _fits(heuristic, options)):
        heuristic = None
    if heuristic is not None:
        work.found_first()  # the answer from here on, whatever the constructive scheduler adds
    if not options.swp_only:
        for groups in _heuristic_groupings(problem):
            built = _built(problem, options, groups, work, lb, heuristic)
            if built is not None:
                heuristic = built
                break
    return heuristic if heuristic is not None else fallback


def _heuristic_groupings(problem: Problem) -> list[dict[str, int]]:
    """The groupings the constructive scheduler tries for the first schedule, in order, until one
    gives a schedule: Triton's split; where some wgmma's accumulator caps its group at its
    warpgroups (``Op.max_warps``), first a consumer group per independent sub-tile
    (``consumer_components``), since Triton's single consumer must then hold every sub-tile's
    accumulator in one warpgroup (FA forward, 2 sub-tiles, h100: 2048 against 6825, found in
    about the time the split takes to fail on larger tiles)."""
    split = dict(producer_consumer_split(problem))
    if not any(op.max_warps for op in problem.ops):
        return [split]
    parts = dict(consumer_components(problem))
    return [split] if parts == split else [parts, split]


def _pinned_incumbent(problem: Problem, options: SolveOptions, lb: int, work: Work) -> Schedule | None:
    """Where the options pin every op's group (a baseline, or roles given with ``--groups``), the
    constructive scheduler's schedule under exactly that grouping; None under a one-stage or no-hand-off
    restriction, which it does not obey, or where some op is left free."""
    groups = dict(options.fixed_groups)
    if options.single_stage or options.no_handoff or len(groups) != len(problem.ops):
        return None
    return _built(problem, options, groups, work, lb)


def _source(sched: Schedule) -> str:
    if sched.proof.startswith("heuristic: storage-aware"):
        return "the constructive scheduler"
    return "Rau's IMS heuristic" if sched.proof.startswith("heuristic") else "the sequential schedule"


def _sequential(problem: Problem, options: SolveOptions, lb: int) -> Schedule | None:
    """The sequential schedule where the validator accepts it (its footprints may not fit), its II is not below
    ``lb`` and it keeps the options' caps: under its own grouping, else (with groups) under each grouping the
    constructive scheduler tries first (``_heuristic_groupings``), a consumer group per sub-tile where one
    group cannot hold every sub-tile's accumulator."""
    def tried() -> Iterator[Schedule]:
        yield sequential_witness(problem, swp_only=options.swp_only)
        if not options.swp_only:
            # the last grouping is Triton's split, which is the witness's own (labels aside)
            yield from (sequential_witness(problem, groups=g) for g in _heuristic_groupings(problem)[:-1])

    return next((s for s in tried() if not validate(problem, s) and s.ii >= lb and _fits(s, options)), None)


def _adopt(ctx: Context, incumbent: Schedule) -> Found | None:
    """The incumbent as a solution of the full model at its II (complete hint), so the secondary
    objectives can improve it; None when CP-SAT cannot confirm it in its budget."""
    p, o = ctx.problem, ctx.options
    v = build_model(p, o, incumbent.ii, incumbent.ii, symmetry=False)
    hints.hint(v, hints.from_schedule(p, incumbent))
    v.m.minimize(v.length)  # II is fixed; keep the stages the heuristic chose
    s = ctx.solver(ADOPT.units(o.work))
    return Found(v, s) if s.solve(v.m) in FEASIBLE else None


def _as_result(incumbent: Schedule, optimal: bool, floor: int, lb: int, why: str, ctx: Context) -> Schedule:
    """The heuristic's own schedule, labelled with what the search proved."""
    work = ctx.work
    proof = (_proof(optimal, incumbent.ii, lb, floor, why, work.cut, ctx.monotone, ctx.refutations)
             + f" (schedule from {_source(incumbent)})")
    return replace(incumbent, status="optimal" if optimal else "feasible",
                   ii_lower_bound=incumbent.ii if optimal else floor, proof=proof, solve_seconds=work.seconds())


def _fixed(problem: Problem, options: SolveOptions, ii: int, fixed: dict[str, int]) -> ScheduleModel:
    v = build_model(problem, options, ii, ii, anchor=False)  # the length value was reached released
    for name, value in fixed.items():
        v.m.add(v.objective_terms[name] <= value)
    return v


def _canonical(ctx: Context, ii: int, values: dict[str, int], last: ScheduleModel, solution: list[int],
               last_value: Value, warm: bool = False) -> tuple[ScheduleModel, Value]:
    """The canonical schedule among those meeting every objective value. Ties are broken towards
    issuing each op as late as the length allows and each variable-latency load as early as
    possible, keeping results close to their readers and loads ahead of theirs.

    ``warm``: some objective value is only the best found, so the pass starts from the last
    solution (a short, easy solve) instead of searching cold for a schedule meeting values that
    were hard to reach. When the pass finds nothing, the last solution (``last_value``) stands."""
    p = ctx.problem
    if not ctx.work.cut:
        v = _fixed(p, ctx.options, ii, values)
        late = [v.length - v.start[op.name] for op in p.ops if not op.variable_latency]
        early = [v.start[op.name] for op in p.ops if op.variable_latency]
        v.m.minimize(sum(late) + sum(early))
        if warm:
            hints.hint(v, hints.read(last, lambda x: solution[x.index], budgets=True))
        # one worker: where every value was proven, the schedule then does not depend on the worker count
        s = solver(ctx.work, 2.0 if warm else CANONICAL.units(ctx.options.work), workers=1)
        if s.solve(v.m) in FEASIBLE and not ctx.work.cut:
            return v, s.value
    return last, last_value


def _proof(optimal: bool, ii: int, lb: int, floor: int, why: str, cut: bool = False, monotone: bool = False,
           refutations: Sequence[tuple[int, int, str]] = ()) -> str:
    """The proof line; ``monotone``: refutations of single IIs stand for every II below them (§3.1e).
    ``refutations`` (``Context.refutations``) name what refuted the II just under the floor, the one a reader checks."""
    how = " (feasibility is monotone in II here: refuting one II refutes every smaller one)" if monotone else ""
    top = [by for lo, hi, by in refutations if lo <= floor - 1 <= hi]
    how += f" (II {floor - 1}: {top[-1]})" if top and floor > lb else ""
    if not optimal:
        limit = ("the wall-clock cap (--time-limit) cut the search, so this answer depends on the machine's load"
                 if cut else "the search's work budget is spent")
        refuted = "" if floor <= lb else f"; CP-SAT refuted [{lb}, {floor - 1}]{how}"
        return f"feasible: {limit}; every II below {floor} is proven infeasible (lower bound {lb}: {why}{refuted})"
    # II is proven whatever the load; what the cap cut after it (the secondary objectives, the canonical pass) is not
    after = ("; the wall-clock cap (--time-limit) cut the search: II is proven, but the secondary objectives and the "
             "starts depend on the machine's load") if cut else ""
    if ii == lb:
        return f"optimal: II meets the lower bound {lb} ({why}){after}"
    return f"optimal: every II in [{lb}, {ii - 1}] is proven infeasible by CP-SAT{how} (lower bound {lb}: {why}){after}"


def _extract(problem: Problem, options: SolveOptions, v: ScheduleModel, value: Value,
             optimal: bool, floor: int, proof: str, proven: dict[str, bool], seconds: float) -> Schedule:
    groups = {op.name: int(value(v.group_of[op.name])) for op in problem.ops} if v.joint else {}
    labels = set(groups.values())
    copies = {name: int(value(full)) + (1 if value(rest) > 0 else 0) for name, (full, rest) in v.lifetime.items()}
    a = Assignment(
        ii=int(value(v.ii)), starts={name: int(value(var)) for name, var in v.start.items()}, groups=groups,
        warps={g: int(value(v.warps[g])) for g in labels}, regs={g: int(value(v.regs[g])) for g in labels},
        copies=copies,
        objective_values={name: int(value(v.objective_terms[name])) for name in options.objective
                          if name in v.objective_terms})
    return assemble(problem, options, a, optimal=optimal, proven_lb=floor, proof=proof, proven=proven,
                    seconds=seconds)
