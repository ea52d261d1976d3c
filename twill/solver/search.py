"""The search: the smallest II with a proof, then the secondary objectives, then a canonical schedule.

1. II. Windows [lo, hi] of II are solved one after another, each as one CP-SAT model with II as
   a variable, minimising II. An infeasible window proves every II in it impossible, so the
   next starts above it (windows double in width). The first feasible window's optimum is the
   smallest feasible II overall: every smaller II lies in a window proven infeasible or below
   the model's own proven bound. No monotonicity of feasibility in II is assumed (design.md §3).
2. With II fixed, each further objective (fewest warp groups, fewest registers, shortest
   length) is minimised in turn and then fixed.
3. With every objective fixed, one single-worker deterministic solve picks the canonical
   schedule, so the output does not depend on the number of workers or on timing.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from twill.bounds import bound_and_reason, compute_bounds, sequential_ii, stage_bound
from twill.errors import InfeasibleError
from twill.options import SolveOptions
from twill.problem import Problem
from twill.schedule import Schedule
from twill.solver.assemble import Assignment, assemble
from twill.solver.model import ScheduleModel, build_model
from twill.solver.strategies import producer_consumer_split

__all__ = ["solve"]


@dataclass
class _Clock:
    """The search's budget in CP-SAT deterministic work, and the wall-clock safety cap.

    Every decision of the search reads ``elapsed``/``left``, the deterministic work its CP-SAT
    solves reported (about a second of one core per unit, whatever else the machine runs), so the
    same input, options and worker count take the same path and give the same schedule. Only the
    wall-clock cap (``--time-limit``) depends on the machine: when it cuts a solve, ``cut`` is set,
    the search winds down at once, and the result says so.
    """

    start: float  # time.monotonic() at the start of the solve
    deadline: float  # time.monotonic() at which the wall-clock cap stops every solve
    limit: float  # deterministic units the search may spend
    spent: float = 0.0
    cut: bool = False

    def left(self) -> float:
        if self.cut:
            return 0.0
        return max(0.0, self.limit - self.spent)

    def elapsed(self) -> float:
        return self.spent

    def wall_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def seconds(self) -> float:
        """Wall seconds since the start, for progress reports and the result (never for decisions)."""
        return time.monotonic() - self.start


class _Solver(cp_model.CpSolver):
    """A CP-SAT solver that charges its deterministic work to the search's clock and stops at the
    wall-clock cap; a solve the cap stopped marks the clock as cut."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self.clock = clock

    def solve(self, model: cp_model.CpModel, solution_callback=None) -> int:
        self.parameters.max_time_in_seconds = max(0.01, self.clock.wall_left())
        status = super().solve(model, solution_callback)
        self.clock.spent += self.response_proto.deterministic_time
        budget = self.parameters.max_deterministic_time
        if status in (cp_model.UNKNOWN, cp_model.FEASIBLE) and self.response_proto.deterministic_time < 0.999 * budget \
                and self.clock.wall_left() <= 0:
            self.clock.cut = True
        return status


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each improving solution: phase, incumbent, proven bound, elapsed wall seconds."""

    def __init__(self, report, phase: str, clock: _Clock) -> None:
        super().__init__()
        self.report, self.phase, self.clock = report, phase, clock

    def on_solution_callback(self) -> None:
        if self.report:
            self.report(f"  {self.phase}: incumbent {self.objective_value:.0f}, bound {self.best_objective_bound:.0f}, "
                        f"{self.clock.seconds():.1f}s")


# Two CP-SAT workers that together both find and refute: the LP-heavy search and restarts. CP-SAT's
# own choice for two workers took 4-22 s to refute the memory relaxation over [2148, 2279] on b200
# with 2 sub-tiles, where this pair takes 2-3 s (design.md §3.1 step 4). Larger machines keep the
# default portfolio, which holds both.
_SEARCH_AND_BOUND = ("max_lp", "quick_restart")
# For satisfaction (refuting a range of II, or any schedule at one II), restarts with and without
# the LP: [2048, 2319] on b200 with 2 sub-tiles refuted in 1.4-1.7 s over four seeds, against
# 3.7-9.8 s for the pair above, and [2148, 2279] in 0.8-1.6 s against 0.8-10.4 s.
_RESTARTS = ("quick_restart", "quick_restart_no_lp")


def _solver(clock: _Clock, units: float, workers: int, portfolio: tuple[str, ...] = ()) -> _Solver:
    """A CP-SAT solver that may spend ``units`` of deterministic work, reproducibly: one worker, or
    several interleaved in fixed batches (CP-SAT's ``interleave_search``), so that the same model
    and worker count give the same answer under any machine load. ``portfolio`` names the
    subsolvers when there are exactly that many workers."""
    s = _Solver(clock)
    n = workers or os.cpu_count() or 1
    s.parameters.num_workers = n
    if n > 1:
        s.parameters.interleave_search = True
        s.parameters.interleave_batch_size = n
    if portfolio and n == len(portfolio):
        s.parameters.subsolvers.extend(portfolio)
    s.parameters.max_deterministic_time = max(0.01, units)
    s.parameters.random_seed = 0
    return s


def _short_stage_bound(problem: Problem, lo: int) -> int:
    """Stages a schedule needs when each iteration runs its longest dependence chain at full
    speed, plus slack: the small search space in which hints are looked for."""
    import networkx as nx

    g = nx.DiGraph()
    for op in problem.ops:
        g.add_node(op.name)
    for e in problem.edges:
        if e.distance == 0:
            w = e.latency + problem.cross_group_cost(e)
            if not g.has_edge(e.src, e.dst) or g[e.src][e.dst]["w"] < w:
                g.add_edge(e.src, e.dst, w=w)
    chain = nx.dag_longest_path_length(g, weight="w") if g.number_of_edges() else 0
    tail = max(max(op.latency, problem.hold(op.name)) for op in problem.ops)
    return math.ceil((chain + tail) / lo) + 2


def _relaxed_hint(problem: Problem, options: SolveOptions, lo: int, hi: int, clock: _Clock):
    """Look for a schedule of the relaxation (no peak-storage families, few stages) to hint the
    full model with; the full model then only has to repair register and TMEM peaks.

    Returns ("infeasible", None) when the relaxation, with the full stage bound, proves the window
    empty; ("partial", starts and groups) when it found a schedule; ("unknown", None) otherwise.
    """
    until = clock.elapsed() + min(clock.left(), max(4.0, 0.15 * options.work))
    for stages in (_short_stage_bound(problem, lo), None):
        # few stages first (hints come quickly); where those are refuted, the full stage bound,
        # whose refutation is a proof (b200, 1 tile: 0.03 s for [1192, 1210])
        r = build_model(problem, options, lo, hi, relaxed=True, max_stage=stages)
        r.m.minimize(r.ii)
        s = _solver(clock, until - clock.elapsed(), options.workers)
        status = s.solve(r.m)
        if status == cp_model.INFEASIBLE and r.max_stage >= stage_bound(problem, lo, not options.swp_only):
            return "infeasible", None
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return "partial", _assignment(r, s.value)
        if status != cp_model.INFEASIBLE or until - clock.elapsed() <= 0.05:
            break
    return "unknown", None


def _pressure_hint(problem: Problem, options: SolveOptions, lo: int, first: dict, clock: _Clock) -> dict:
    """A relaxation schedule at ``first``'s II that prefers few groups and short register
    lifetimes: such hints fit the budgets the relaxation left out. ``first`` when none is found."""
    ii, short = first["ii"], _short_stage_bound(problem, lo)
    r = build_model(problem, options, ii, ii, relaxed=True, max_stage=short)
    _hint_starts_groups(r, first)
    r.m.minimize(_pressure_objective(r))
    s = _solver(clock, min(clock.left(), max(3.0, 0.05 * options.work)), options.workers)
    status = s.solve(r.m, _Progress(None, "pressure", clock))
    return _assignment(r, s.value) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else first


def _assignment(v: ScheduleModel, value: Callable[[cp_model.IntVar], int], budgets: bool = False) -> dict:
    """II, starts and groups of a solution of ``v`` (with ``budgets``, also each group's warps
    and registers), read through ``value``: a solver's ``value`` or a recorded solution's."""
    out = {"ii": int(value(v.ii)), "starts": {n: int(value(x)) for n, x in v.start.items()},
           "groups": {n: int(value(x)) for n, x in v.group_of.items()}}
    if budgets:
        out["warps"] = {g: int(value(x)) for g, x in enumerate(v.warps)}
        out["regs"] = {g: int(value(x)) for g, x in enumerate(v.regs)}
    return out


def _pressure_objective(v: ScheduleModel) -> cp_model.LinearExprT:
    """Groups first, then register words weighted by how long they live."""
    words = [(op.regs // 64 or 1) * (v.lifetime_of(op)[0] * v.ii_hi + v.lifetime_of(op)[1])
             for op in v.p.ops if op.regs]
    weight = 1 + sum(op.regs // 64 or 1 for op in v.p.ops if op.regs) * (v.max_stage + 3) * v.ii_hi
    return weight * v.objective_terms["groups"] + sum(words)


class _Exhausted(Exception):
    """Every II up to the search's cap is proven infeasible."""


def _window_search(problem: Problem, options: SolveOptions, lb: int, clock: _Clock, cap: int):
    """Find the smallest feasible II <= ``cap``; returns (model, solver, status, proven lower bound).
    Raises ``_Exhausted`` when every II in [lb, cap] is proven infeasible."""
    report = options.progress
    lo, width = lb, 0
    proven = None  # the smallest II not yet proven infeasible, once a window timed out
    memory = _memory_bound_helps(problem, options)
    while lo <= cap and clock.left() > 0:
        hi = min(cap, lo + width)
        if report:
            report(f"II window [{lo}, {hi}]: searching ({clock.seconds():.1f}s)")
        relaxed_schedule = True
        if memory:
            floor, relaxed = _memory_bound(problem, options, lo, hi, clock)
            if floor > hi:
                lo, width = hi + 1, max(8, 2 * width + 1, lo // 64)
                continue
            relaxed_schedule, raised, lo = relaxed is not None, floor > lo, floor
            if raised and relaxed is not None and relaxed["ii"] == lo:
                # the relaxation's optimum, every II below refuted: a completion of it is optimal.
                # (Where TMEM raised nothing, the hint relaxation's schedules, which have warp
                # groups, complete more easily: shared fa_bwd, 15 s for nothing from this one.)
                found = _complete(problem, options, relaxed, max(10.0, options.work / 8), clock)
                if found is not None:
                    if report:
                        report(f"  completed the memory relaxation's schedule at II {lo} ({clock.seconds():.1f}s)")
                    return found[0], found[1], (cp_model.OPTIMAL if proven is None else cp_model.FEASIBLE), (
                        lo if proven is None else proven)
        # where neither the memory relaxation nor the hint relaxation finds a schedule in its slice, the
        # full window, a harder model, would stall too (b200, 2 sub-tiles: a minute for nothing)
        v, s, status = _solve_window(problem, options, lo, hi, clock, full=relaxed_schedule)
        bound = proven if proven is not None else lo
        if status == cp_model.OPTIMAL:
            return v, s, (status if proven is None else cp_model.FEASIBLE), (int(s.value(v.ii)) if proven is None else bound)
        if status == cp_model.FEASIBLE:
            return v, s, status, bound if proven is not None else max(lo, math.ceil(s.best_objective_bound))
        if status == cp_model.INFEASIBLE:
            lo, width = hi + 1, max(8, 2 * width + 1, lo // 64)
            continue
        # undecided: remember the first unproven II, then look for any schedule (the memory probe
        # from the window's own lo: refuting is what stalled, and the optimum may sit inside)
        proven = bound
        if report:
            report(f"II window [{lo}, {hi}]: undecided in its time slice; probing for schedules ({clock.seconds():.1f}s)")
        found = _memory_probe(problem, options, lo, cap, clock) if memory else None
        if found is None:
            # an incumbent under Triton's split first, then probes of the free problem below it
            split = _split_window(problem, options, hi + 1, cap, clock)
            below = cap if split is None else int(split[1].value(split[0].ii)) - 1
            found = _probe_fixed(problem, options, hi + 1, below, clock) or split
        if found is not None:
            # optimal where nothing below is left unrefuted; not for a schedule under Triton's split,
            # whose secondary objectives would be optimised within the split only
            found_ii = int(found[1].value(found[0].ii))
            free = found[0].o.fixed_groups == options.fixed_groups
            if memory and free and _refuted_below(problem, options, proven, found_ii, clock):
                return found[0], found[1], cp_model.OPTIMAL, found_ii
            return found[0], found[1], cp_model.FEASIBLE, proven
        lo, width = hi + 1, max(8, 2 * width + 1, lo // 4)
    if proven is not None or clock.left() <= 0:
        return None, None, cp_model.UNKNOWN, proven if proven is not None else lo
    raise _Exhausted()


def _solve_window(problem: Problem, options: SolveOptions, lo: int, hi: int, clock: _Clock, full: bool = True):
    """(model, solver, status) of the full window [lo, hi] minimising II: the relaxation first
    (its infeasibility proves the window empty; its schedule hints the full model), then the
    full model, unless ``full`` is off and the relaxation found nothing either (status None:
    undecided). INFEASIBLE is reported (progress) before it is returned. The relaxation keeps
    warp groups and in-order issue, so it refutes windows the memory relaxation cannot."""
    report = options.progress
    verdict, hint = ("unknown", None) if options.swp_only else _relaxed_hint(problem, options, lo, hi, clock)
    if verdict == "infeasible":
        if report:
            report(f"II window [{lo}, {hi}]: proven infeasible by the relaxation ({clock.seconds():.1f}s)")
        return None, None, cp_model.INFEASIBLE
    if not full and verdict == "unknown":
        return None, None, None  # neither relaxation has a schedule: the full model would stall too
    v = build_model(problem, options, lo, hi)
    v.m.minimize(v.ii)
    status = None
    if verdict == "partial":
        if report:
            report(f"  relaxation found a schedule to start from ({clock.seconds():.1f}s)")
        s, status = _hinted_window(problem, options, v, lo, hint, clock)
    if status is None:
        s = _solver(clock, min(clock.left(), max(5.0, options.work / 4)), options.workers)
        status = s.solve(v.m, _Progress(report, "II", clock))
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"internal error: invalid CP-SAT model ({v.m.validate()[:300]})")
    if status == cp_model.INFEASIBLE and report:
        report(f"II window [{lo}, {hi}]: proven infeasible ({clock.seconds():.1f}s)")
    return v, s, status


def _memory_bound_helps(problem: Problem, options: SolveOptions) -> bool:
    """The memory relaxation proves what the hint relaxation cannot only where it keeps a family
    that one leaves out: TMEM (the register budgets need warp groups, which it drops)."""
    return not options.swp_only and any(op.tmem_cols for op in problem.ops)


def _memory_bound(problem: Problem, options: SolveOptions, lo: int, hi: int, clock: _Clock) -> tuple[int, dict | None]:
    """(the least II in [lo, hi] that the memory relaxation does not rule out, the relaxation's
    schedule with the smallest II it found, or None); the II is hi + 1 when it proves the window
    empty. The relaxation keeps units, dependences, residue cuts and TMEM, without warp groups or
    registers; its bound is a bound of the full problem, so the window can start there. When the
    schedule's II equals the returned II, that II is the relaxation's optimum over the window.

    Over a range of II the model multiplies stages by a variable II, and CP-SAT refutes empty
    ranges quickly but finds schedules in them slowly; at one fixed II the model is linear, and
    schedules near the optimum come in about a second (b200, 2 sub-tiles: [2280, 2543] took
    6-14 s to yield 2320 as a range, or nothing in two solves of eight; 2320 alone takes
    0.2-1.4 s). So a short attempt at the whole window comes first (it refutes empty ones),
    then fixed-II probes climb from lo (``_climb``), and the range below the least schedule
    found is refuted on its own; the whole-window minimisation is the fallback.
    """
    # limit/8: the refutation of [2148, 2279] on b200 takes 1-3 s, or 10-17 s in one run of three
    until = clock.elapsed() + min(clock.left(), max(5.0, options.work / 8))
    m, s, status, _ = _restarting(problem, options, lo, hi, min(until, clock.elapsed() + 2.0), clock)
    if status == cp_model.INFEASIBLE:
        return _floor_found(options, lo, hi, hi + 1, clock), None
    best = _assignment(m, s.value) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
    best, floor = _climb(problem, options, lo, hi, best, until, clock)
    if best is None:
        # nothing near the bottom: the whole window, minimised as a range (which also refutes)
        m, s, status, floor = _restarting(problem, options, lo, hi, until, clock, minimise=True)
        if status == cp_model.INFEASIBLE:
            floor = hi + 1
        elif status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            best = _assignment(m, s.value)
            refuted = status == cp_model.OPTIMAL or (
                floor < best["ii"] and _restarting(problem, options, floor, best["ii"] - 1, until, clock)[2]
                == cp_model.INFEASIBLE)
            if refuted:
                floor = best["ii"]
    return _floor_found(options, lo, hi, floor, clock), best


def _floor_found(options: SolveOptions, lo: int, hi: int, floor: int, clock: _Clock) -> int:
    """``floor``, reported when it raised the window's lo."""
    if options.progress and floor > lo:
        what = "empty" if floor > hi else f"II >= {floor}"
        options.progress(f"II window [{lo}, {hi}]: the memory relaxation proves {what} ({clock.seconds():.1f}s)")
    return floor


def _climb(problem: Problem, options: SolveOptions, lo: int, hi: int, best: dict | None, until: float,
           clock: _Clock) -> tuple[dict | None, int]:
    """(the memory relaxation's schedule with the least II found by fixed-II probes, the least II
    not ruled out): probes at lo, lo + s, lo + 3s, lo + 7s, ... (s = width / 32) until one has a
    schedule, then halving the gap to the highest probe without one; after each schedule, the
    range below it is refuted in one short attempt, and once the gap is closed, in full.
    ``best`` (a schedule from the window, or None) caps the climb."""
    step, failed, k = max(1, (hi - lo + 1) // 32), lo - 1, 0
    while best is None or failed + 1 < best["ii"]:
        if clock.elapsed() >= until:
            return best, lo
        if best is None:
            probe = min(hi, lo + step * (2 ** k - 1))
            k += 1
        else:
            probe = (failed + best["ii"]) // 2
        # a probe either ends within a second or runs long, depending on the seed (2320: 0.5 s, or
        # nothing in 5 s): short attempts with fresh seeds
        m, s, status, _ = _restarting(problem, options, probe, probe, min(until, clock.elapsed() + 2.0), clock,
                                      attempt=0.5, near=best)
        if status == cp_model.UNKNOWN and best is not None:
            # halving from a schedule, an undecided probe may well hold the optimum: once more, longer
            m, s, status, _ = _restarting(problem, options, probe, probe, min(until, clock.elapsed() + 4.0), clock,
                                          seed=7, attempt=0.5, near=best)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            failed = probe
            if best is None and probe >= hi:
                return None, lo
            continue
        best = _assignment(m, s.value)
        if lo < best["ii"] and _restarting(problem, options, lo, best["ii"] - 1,
                                           min(until, clock.elapsed() + 1.0), clock)[2] == cp_model.INFEASIBLE:
            return best, best["ii"]
    refuted = lo >= best["ii"] or _restarting(problem, options, lo, best["ii"] - 1, until, clock)[2] == cp_model.INFEASIBLE
    return best, best["ii"] if refuted else lo


def _restarting(problem: Problem, options: SolveOptions, lo: int, hi: int, until: float, clock: _Clock,
                minimise: bool = False, seed: int = 0, attempt: float = 3.0, near: dict | None = None):
    """The memory relaxation over [lo, hi] until clock time ``until``, in restarts (``_attempts``,
    the first ``attempt`` seconds long): (model, solver, status, proven least II) of the attempt
    that decided, or of the last. Its proofs are heavy-tailed: over [2148, 2279] on b200 five
    seeds took 1.9, 2.7, 2.9, 13 and 17 s, so restarting after 3 s beats waiting. ``minimise``
    minimises II and stops 2 s after the incumbent last improved (``_solve_until_stall``);
    otherwise any schedule will do, which refutes faster. ``near``: a schedule to start from,
    moved to II lo (``_hint_rescaled``)."""
    m = build_model(problem, options, lo, hi, memory_only=True)
    if near is not None:
        _hint_rescaled(m, near, lo)
    if minimise:
        m.m.minimize(m.ii)
    floor = lo
    for seconds, attempt_seed in _attempts(attempt, until, clock, seed):
        s = _solver(clock, seconds, options.workers, portfolio=_SEARCH_AND_BOUND if minimise else _RESTARTS)
        s.parameters.random_seed = attempt_seed
        status = (s.solve(m.m, _Progress(None, "memory", clock))
                  if minimise else s.solve(m.m))
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"internal error: invalid CP-SAT model ({m.m.validate()[:300]})")
        if minimise and status != cp_model.INFEASIBLE:
            floor = max(floor, math.ceil(s.best_objective_bound))
        if status != cp_model.UNKNOWN:
            break
    return m, s, status, floor


def _attempts(first: float, until: float, clock: _Clock, seed: int = 0):
    """(seconds, random seed) of each restart until clock time ``until``: the first attempt lasts
    ``first`` seconds, each next one 1.5 times longer, with the next seed. Where a solve's time
    is heavy-tailed in the seed, short attempts with fresh seeds end sooner than one long one."""
    seconds = first
    while True:
        yield min(seconds, until - clock.elapsed()), seed
        if until - clock.elapsed() <= 0.05:
            return
        seconds, seed = 1.5 * seconds, seed + 1


def _hint_rescaled(v: ScheduleModel, schedule: dict, ii: int) -> None:
    """Hint ``v`` with ``schedule`` moved to II ``ii``: each op keeps its stage and the same
    fraction of the II circle. A schedule a few cycles away is then a short repair."""
    old = schedule["ii"]
    for name, start in schedule["starts"].items():
        stage, offset = divmod(start, old)
        offset = min(ii - 1, round(offset * ii / old))
        v.m.add_hint(v.stage[name], stage)
        v.m.add_hint(v.offset[name], offset)
        v.m.add_hint(v.start[name], stage * ii + offset)


def _refuted_below(problem: Problem, options: SolveOptions, lo: int, ii: int, clock: _Clock) -> bool:
    """Whether the memory relaxation refutes every II in [lo, ii - 1] within a slice of
    max(5 s, limit/8): then a schedule at ``ii`` found by a probe is optimal. The refutation is
    quick where finding was slow (b200, 2 sub-tiles: [2280, 2319] in 0.2-1 s)."""
    if lo >= ii:
        return lo == ii
    until = clock.elapsed() + min(clock.left(), max(5.0, options.work / 8))
    refuted = _restarting(problem, options, lo, ii - 1, until, clock)[2] == cp_model.INFEASIBLE
    if refuted and options.progress:
        options.progress(f"II window [{lo}, {ii - 1}]: the memory relaxation proves empty ({clock.seconds():.1f}s)")
    return refuted


def _memory_probe(problem: Problem, options: SolveOptions, lo: int, cap: int, clock: _Clock):
    """A schedule at the smallest II in [lo, cap] that the memory relaxation reaches in a slice,
    completed in the full model from the relaxation's starts; None when either step fails.

    Where TMEM binds, the memory relaxation's schedules already place every tile's lifetime, and
    the warp groups and registers then fit around them: b200 with 2 sub-tiles, where the probes
    from the hint relaxation (no TMEM) found 2422, gets 2320 this way (the relaxation reaches
    2320 in 10-15 s, the full model completes it in 2.5-8 s), and 2320 is optimal (design.md §5).
    """
    r = build_model(problem, options, lo, cap, memory_only=True, max_stage=_short_stage_bound(problem, lo))
    r.m.minimize(r.ii)
    rs = _solver(clock, min(clock.left(), max(10.0, options.work / 8)), options.workers)
    if rs.solve(r.m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    hint = _assignment(r, rs.value)
    found = _complete(problem, options, hint, max(10.0, options.work / 8), clock)
    if found is not None and options.progress:
        options.progress(f"  found a schedule at II {hint['ii']} from the memory relaxation's ({clock.seconds():.1f}s)")
    return found


def _complete(problem: Problem, options: SolveOptions, hint: dict, seconds: float, clock: _Clock):
    """The full model at ``hint``'s II, solved from its starts (and groups, where it has them):
    (model, solver), or None when no schedule comes within ``seconds``.

    Completion times are heavy-tailed in the seed (b200, 2 sub-tiles, one hint: 0.5-10.5 s over
    four seeds), so it runs in restarts of 1.5 s, each 1.5 times longer (``_attempts``)."""
    v = build_model(problem, options, hint["ii"], hint["ii"])
    _hint_starts_groups(v, hint)
    for attempt, seed in _attempts(1.5, clock.elapsed() + min(clock.left(), seconds), clock):
        s = _solver(clock, attempt, options.workers)
        s.parameters.random_seed = seed
        status = s.solve(v.m)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return v, s
        if status != cp_model.UNKNOWN:
            return None
    return None


def _hinted_window(problem: Problem, options: SolveOptions, v: ScheduleModel, lo: int, hint: dict, clock: _Clock):
    """Solve the window model ``v`` from a relaxation's schedule; returns (solver, status), with
    status None when the window is still undecided and wants a plain solve (hinted by then).

    Hints escalate because each costs more to make than the last:
    1. the relaxation's own starts and groups, which often complete into a full schedule at once
       (it did on FA forward on h100 before the rotation anchor), tried for a short slice;
    2. a relaxation schedule that favours few groups and short register lifetimes
       (``_pressure_hint``), which steers past the register and TMEM peaks the relaxation left
       out (the shared B200 graphs), tried for a shorter slice;
    3. that schedule completed into a full one with its groups fixed (``_repair``), left to the
       window's plain solve.
    """
    s, status = _try_hint(v, hint, max(2.0, options.work / 60), options, clock)
    if status is not None:
        return s, status
    hint = _pressure_hint(problem, options, lo, hint, clock)
    s, status = _try_hint(v, hint, max(1.5, options.work / 80), options, clock)
    if status is not None:
        return s, status
    v.m.clear_hints()
    _hint_starts_groups(v, _repair(problem, options, hint, clock) or hint)
    return s, None


def _try_hint(v: ScheduleModel, hint: dict, seconds: float, options: SolveOptions, clock: _Clock):
    """One slice of the window model from ``hint``: (solver, status), status None when undecided.
    A schedule found without a proof becomes the complete hint of the solve that follows."""
    v.m.clear_hints()
    _hint_starts_groups(v, hint)
    s = _solver(clock, min(clock.left(), seconds), options.workers)
    status = s.solve(v.m, _Progress(options.progress, "II", clock))
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE, cp_model.MODEL_INVALID) or clock.left() <= 0:
        return s, status
    if status == cp_model.FEASIBLE:
        _hint_solution(v, _solution(v, s))
    return s, None


def _split_window(problem: Problem, options: SolveOptions, lo: int, cap: int, clock: _Clock):
    """The smallest II in [lo, min(cap, 2 lo)] under Triton's producer/consumer split, or None.

    With every op's group pinned the model loses its optional intervals and is far easier to
    solve; its schedules are schedules of the full problem, so when the free window stalls this
    is a quick incumbent that the probes of the free problem then try to beat. When it is the
    answer, the secondary objectives run with the split kept.
    """
    if options.swp_only or options.fixed_groups or lo > cap:
        return None
    w = build_model(problem, replace(options, fixed_groups=producer_consumer_split(problem)), lo, min(cap, 2 * lo))
    w.m.minimize(w.ii)
    s = _solver(clock, min(clock.left(), max(5.0, options.work / 8)), options.workers)
    if s.solve(w.m) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if options.progress:
            options.progress(f"  found a schedule at II {int(s.value(w.ii))} with Triton's producer/consumer split "
                             f"({clock.seconds():.1f}s)")
        return w, s
    return None


def _probe_fixed(problem: Problem, options: SolveOptions, start: int, cap: int, clock: _Clock):
    """Some schedule at a fixed II >= ``start``, or None: models with II fixed are much easier to
    satisfy than windows with II free, so this finds an incumbent where a window search stalls.
    Tries start, then steps of 1/16 of it doubling each time; each II gets a short relaxation (for
    a hint), a short full solve and, failing that, a short solve with a fixed producer/consumer split."""
    report = options.progress
    ii, step = start, max(1, start // 16)
    while ii <= cap and clock.left() > 1.0:
        short = _short_stage_bound(problem, ii)
        # the average-occupancy cut can make even the relaxation hard to satisfy (b200, 2 sub-tiles:
        # nothing in 5 s at II 2433, 0.6-2.8 s without it, and a full schedule from that hint in
        # 4 s); the cut is implied by the full model, so a hint made without it loses nothing
        for cuts in (True, False):
            r = build_model(problem, options, ii, ii, relaxed=True, max_stage=short, cuts=cuts)
            rs = _solver(clock, min(clock.left(), 5.0), options.workers)
            if rs.solve(r.m) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                break
        else:
            r = None
        if r is not None:
            found = _complete(problem, options, _assignment(r, rs.value), 10.0, clock)
            if found is not None:
                if report:
                    report(f"  found a schedule at II {ii} ({clock.seconds():.1f}s)")
                return found
            # the free assignment is hard to satisfy: a fixed producer/consumer split is easier
            # and still a valid schedule of the full problem
            w = build_model(problem, replace(options, fixed_groups=producer_consumer_split(problem)), ii, ii)
            relaxed_starts = _starts(r, rs)
            for name, var in w.start.items():
                w.m.add_hint(var, relaxed_starts[name])
            s = _solver(clock, min(clock.left(), 10.0), options.workers)
            if not options.fixed_groups and s.solve(w.m) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                if report:
                    report(f"  found a schedule at II {ii} with a producer/consumer split ({clock.seconds():.1f}s)")
                return w, s
        ii, step = ii + step, 2 * step
    return None


def _hint_starts_groups(v: ScheduleModel, hint: dict) -> None:
    for name, var in v.start.items():
        v.m.add_hint(var, hint["starts"][name])
    for name, var in v.group_of.items():
        if name in hint["groups"]:  # none from a relaxation without warp groups
            v.m.add_hint(var, hint["groups"][name])
    for key, variables in (("warps", v.warps), ("regs", v.regs)):
        for g, value in hint.get(key, {}).items():
            if g < len(variables):  # none in a pure modulo-scheduling model
                v.m.add_hint(variables[g], value)


def _first_use_labels(problem: Problem, groups: dict[str, int]) -> dict[int, int]:
    """Group label -> the label the model allows: groups numbered in the order their first op
    appears (the model's label symmetry breaking, design.md §2.6)."""
    order: dict[int, int] = {}
    for op in problem.ops:
        order.setdefault(groups[op.name], len(order))
    return order


def _repair(problem: Problem, options: SolveOptions, hint: dict, clock: _Clock, seconds: float = 5.0) -> dict | None:
    """Complete a relaxation's schedule into one of the full model, keeping its II and warp groups.

    With the groups fixed the register and TMEM peaks are one cumulative per group with no
    optional intervals, a far smaller problem than the free assignment; a complete schedule found
    here hints the window model much better than starts and groups alone. None when it fails.
    """
    if options.swp_only:
        return None
    labels = _first_use_labels(problem, hint["groups"])
    fixed = tuple((op.name, labels[hint["groups"][op.name]]) for op in problem.ops)
    ii = hint["ii"]
    w = build_model(problem, replace(options, fixed_groups=fixed), ii, ii)
    _hint_starts_groups(w, {"starts": hint["starts"], "groups": dict(fixed)})
    s = _solver(clock, min(clock.left(), seconds), options.workers)
    if s.solve(w.m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return _assignment(w, s.value, budgets=True)


def _fixed(problem: Problem, options: SolveOptions, ii: int, fixed: dict[str, int]) -> ScheduleModel:
    v = build_model(problem, options, ii, ii, anchor=False)  # the length value was reached released
    for name, value in fixed.items():
        v.m.add(v.objective_terms[name] <= value)
    return v


def _solution(v: ScheduleModel, s: cp_model.CpSolver) -> list[int]:
    return [int(x) for x in s.response_proto.solution]


def _hint_solution(v: ScheduleModel, solution: list[int]) -> None:
    """A complete hint: the model's last solution, variable by variable."""
    v.m.clear_hints()
    for i, value in enumerate(solution):
        v.m.add_hint(v.m.get_int_var_from_proto_index(i), value)


def _starts(v: ScheduleModel, s: cp_model.CpSolver) -> dict[str, int]:
    return {name: int(s.value(var)) for name, var in v.start.items()}


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
    now = time.monotonic()
    clock = _Clock(start=now, deadline=now + options.time_limit, limit=options.work)
    report = options.progress
    if not options.swp_only:
        problem.require_possible()
    bounds = compute_bounds(problem)
    lb, why = bound_and_reason(problem, options, bounds)
    if report:
        report(f"lower bound II >= {lb}: {why}")
    incumbent = _heuristic_incumbent(problem, options, lb)
    cap = sequential_ii(problem) if incumbent is None else incumbent.ii - 1
    if report and incumbent is not None:
        report(f"heuristic schedule (Rau's IMS) at II {incumbent.ii}: the search looks below it ({clock.seconds():.1f}s)")
    try:
        # with a schedule in hand, keep a tenth of the time for the secondary objectives
        clock.limit = options.work if incumbent is None else 0.9 * options.work
        v, s, status, proven_lb = _window_search(problem, options, lb, clock, cap) if cap >= lb else (
            None, None, cp_model.UNKNOWN, lb)
        clock.limit = options.work
        exhausted = cap < lb
    except _Exhausted:
        v, s, status, proven_lb, exhausted = None, None, cp_model.UNKNOWN, cap + 1, True
    ii_seconds = clock.seconds()
    if v is None and incumbent is not None:
        # the heuristic's II is the best known; proven optimal when every II below it is infeasible
        v, s = _adopt(problem, options, incumbent, clock)
        status, proven_lb = (cp_model.OPTIMAL if exhausted else cp_model.FEASIBLE), (
            incumbent.ii if exhausted else proven_lb)
        if v is None:
            return replace(_as_result(incumbent, exhausted, proven_lb, lb, why, clock), ii_seconds=ii_seconds)
    if v is None:
        if exhausted:
            raise InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: no schedule exists for any II up "
                                  f"to {cap} (a fully sequential iteration); a constraint can never be met",
                                  reason="search exhausted")
        raise InfeasibleError(f"{problem.body.name!r} on {problem.arch.name!r}: no schedule found within "
                              f"{options.work:g} units of work; II >= {proven_lb} is proven (raise --time-limit)",
                              reason="time limit", proven_lb=proven_lb)
    ii = int(s.value(v.ii))
    optimal = status == cp_model.OPTIMAL
    values: dict[str, int] = {"ii": ii}
    proven: dict[str, bool] = {"ii": optimal}
    # secondary objectives on the same model, II fixed, each hinted with the last solution
    v.m.add(v.ii == ii)
    solution = _solution(v, s)
    for name in options.objective[1:]:
        if name not in v.objective_terms:
            continue
        if name == "length":
            v.release_anchor()  # starts count from 0: a rotation changes the length
        _hint_solution(v, solution)
        v.m.minimize(v.objective_terms[name])
        if clock.left() < 0.2:
            break  # out of time: the remaining objectives keep the values the last solution has
        ws = _solver(clock, min(clock.left(), options.phase_limit), options.workers)
        st = ws.solve(v.m, _Progress(report, name, clock))
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        values[name] = int(ws.objective_value)
        proven[name] = st == cp_model.OPTIMAL
        v.m.add(v.objective_terms[name] <= values[name])
        solution = _solution(v, ws)
        if report:
            report(f"{name} = {values[name]} ({'proven' if proven[name] else 'best found'}, {clock.seconds():.1f}s)")
    all_proven = optimal and all(proven.get(name, False) for name in options.objective[1:] if name in v.objective_terms)
    final, fs = _canonical(problem, options, ii, values, v, solution, clock, warm=not all_proven)
    proof = _proof(optimal, ii, lb, proven_lb, why, clock.cut)
    if report:
        report(f"done: II {ii} ({'optimal' if optimal else 'feasible'}), {clock.seconds():.1f}s")
    return replace(_extract(problem, options, final, fs, optimal, proven_lb, proof, proven, clock.seconds()),
                   ii_seconds=ii_seconds)


def _heuristic_incumbent(problem: Problem, options: SolveOptions, lb: int) -> Schedule | None:
    """A validated schedule from Rau's iterative modulo scheduling (``twill.solver.ims``), or None.

    It bounds the search from above (windows stop below its II) and is the answer when the time
    limit runs out before CP-SAT finds anything. Not for a baseline strategy or an ablation whose
    restriction (fixed groups, one stage, no hand-off) the heuristic does not obey; it does obey
    a warp cap (``max_warps``), and the cap is checked again on its schedule.
    """
    if options.fixed_groups or options.single_stage or options.no_handoff:
        return None
    from twill.solver.ims import ims_swp, ims_triton_split  # a peer of the solver: imported on use

    result = (ims_swp if options.swp_only else ims_triton_split)(problem, options)
    sched = result.schedule
    if sched is None or len(sched.groups) > options.max_groups or sched.ii < lb:
        return None
    if options.max_warps is not None and sum(g.warps for g in sched.groups) > options.max_warps:
        return None
    return sched


def _adopt(problem: Problem, options: SolveOptions, incumbent: Schedule, clock: _Clock):
    """The incumbent as a solution of the full model at its II (complete hint), so the secondary
    objectives can improve it; (None, None) when CP-SAT cannot confirm it in a short slice."""
    v = build_model(problem, options, incumbent.ii, incumbent.ii, symmetry=False)
    order = _first_use_labels(problem, {o.id: o.group for o in incumbent.ops})
    hint = {"starts": {o.id: o.start for o in incumbent.ops},
            "groups": {o.id: order[o.group] for o in incumbent.ops},
            "warps": {order[g.id]: g.warps for g in incumbent.groups},
            "regs": {order[g.id]: g.regs_per_thread or 0 for g in incumbent.groups}}
    _hint_starts_groups(v, hint)
    v.m.minimize(v.length)  # II is fixed; keep the stages the heuristic chose
    s = _solver(clock, max(1.0, min(clock.left(), 10.0)), options.workers)
    if s.solve(v.m) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return v, s
    return None, None


def _as_result(incumbent: Schedule, optimal: bool, proven_lb: int, lb: int, why: str, clock: _Clock) -> Schedule:
    """The heuristic's own schedule, labelled with what the search proved."""
    proof = _proof(optimal, incumbent.ii, lb, proven_lb, why, clock.cut) + " (schedule from Rau's IMS heuristic)"
    return replace(incumbent, status="optimal" if optimal else "feasible",
                    ii_lower_bound=incumbent.ii if optimal else proven_lb, proof=proof, solve_seconds=clock.seconds())


def _canonical(problem, options, ii, values, last: ScheduleModel, solution: list[int], clock, warm: bool = False):
    """The canonical schedule among those meeting every objective value: deterministic, so the
    same input gives the same schedule whatever the worker count. Ties are broken towards issuing
    each op as late as the length allows and each variable-latency load as early as possible,
    keeping results close to their readers and loads ahead of theirs.

    ``warm``: some objective value is only the best found, which already depends on timing, so
    the pass starts from the last solution (a short, easy solve) instead of searching cold for a
    schedule meeting values that were hard to reach."""
    v = _fixed(problem, options, ii, values)
    late = [v.length - v.start[op.name] for op in problem.ops if not op.variable_latency]
    early = [v.start[op.name] for op in problem.ops if op.variable_latency]
    v.m.minimize(sum(late) + sum(early))
    if warm:
        _hint_starts_groups(v, _assignment(last, lambda x: solution[x.index], budgets=True))
    budget = 2.0 if warm else 5.0
    if not clock.cut:
        s = _solver(clock, budget, options.workers)
        if s.solve(v.m) in (cp_model.OPTIMAL, cp_model.FEASIBLE) and not clock.cut:
            return v, s.value
    # the pass found nothing in its budget (or the wall-clock cap stopped it): the last solution
    return last, lambda x: solution[x.index]


def _proof(optimal: bool, ii: int, lb: int, proven_lb: int, why: str, cut: bool = False) -> str:
    if not optimal:
        limit = ("the wall-clock cap (--time-limit) cut the search, so this answer depends on the machine's load"
                 if cut else "the search's work budget is spent")
        return f"feasible: {limit}; every II below {proven_lb} is proven infeasible"
    if ii == lb:
        return f"optimal: II meets the lower bound {lb} ({why})"
    return (f"optimal: every II in [{lb}, {ii - 1}] is proven infeasible by CP-SAT "
            f"(lower bound {lb}: {why})")


def _extract(problem, options, v: ScheduleModel, value: Callable[[cp_model.IntVar], int], optimal, proven_lb, proof,
             proven, seconds) -> Schedule:
    groups = {op.name: int(value(v.group_of[op.name])) for op in problem.ops} if v.joint else {}
    labels = set(groups.values())
    copies = {}
    for name, (full, rest) in v.lifetime.items():
        copies[name] = int(value(full)) + (1 if value(rest) > 0 else 0)
    a = Assignment(
        ii=int(value(v.ii)), starts={name: int(value(var)) for name, var in v.start.items()}, groups=groups,
        warps={g: int(value(v.warps[g])) for g in labels}, regs={g: int(value(v.regs[g])) for g in labels},
        copies=copies,
        objective_values={name: int(value(v.objective_terms[name])) for name in options.objective
                          if name in v.objective_terms})
    return assemble(problem, options, a, optimal=optimal, proven_lb=proven_lb, proof=proof, proven=proven,
                    seconds=seconds)
