"""The II search's phases: each a function over a window of II with a budget in deterministic work
and one typed outcome, declared in the order the search tries them (docs/design.md §3.1).

A *window* [lo, hi] of II is decided by ``WINDOW_PHASES``, tried in order until one is decisive:

================== ============================== ===============================================
phase              model                          what its outcome proves
================== ============================== ===============================================
memory_relaxation  units, dependences, TMEM       EMPTY: no II in the window; a raised floor: no
                   (no warp groups, registers)    II below it; FOUND: its optimum completed in the
                                                  full model, the least II >= the floor
floor_hint         one II: the hint relaxation,   EMPTY; FOUND at the window's one II (its
                   then the joint model from its  optimum); else both hints kept for the
                   schedule in two slices         full window
hint_relaxation    the joint model without the    EMPTY (with the full stage bound); else a
                   register/TMEM peak families    schedule that hints the full window
full_window        the joint model, II minimised  FOUND at its optimum (or at an incumbent, with
                                                  CP-SAT's bound as the floor); EMPTY
================== ============================== ===============================================

On a monotone problem (``bounds.monotone_in_ii``: every reservation starts at issue) the sweep is a
bisection over fixed IIs, since a refutation of one II refutes every II below it (design.md §3.1e).

Every model here is the joint model or a relaxation of it, so a refutation by any of them is a
refutation of the joint problem. When a window stays undecided, ``UNDECIDED_PHASES`` look for any
schedule above its floor (each below the best found so far), and ``refute_below`` may then prove
the schedule found optimal with the memory relaxation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property

from ortools.sat.python import cp_model

from twill.bounds import binding_memory, monotone_in_ii, stage_bound
from twill.options import SolveOptions
from twill.problem import Problem
from twill.solver import hints
from twill.solver.assemble import Assignment
from twill.solver.groupings import Cuts, decide_by_groupings
from twill.solver.model import ScheduleModel, build_model, upper
from twill.solver.retime import RETIME_UNITS, register_rooms, reinserted, retimed
from twill.solver.run import (
    SEARCH_AND_BOUND,
    Budget,
    Solver,
    Work,
    attempts,
    decision_solver,
    leading_bound,
    solver,
    watching,
    worker_count,
)
from twill.solver.strategies import producer_consumer_split

__all__ = ["Verdict", "Window", "Found", "Outcome", "Context", "Phase", "WINDOW_PHASES", "UNDECIDED_PHASES",
           "refute_below", "complete", "memory_bound", "improve", "IMPROVE", "IMPROVE_GAP", "IMPROVE_OPS", "pull_to_floor",
           "staged_descent", "STAGED_DESCENT", "optimality_probe", "BISECT_CLOSE_II", "close_target",
           "retimed_found", "groupings_apply", "groupings_bisection", "GROUPINGS_BISECT"]

FEASIBLE = (cp_model.OPTIMAL, cp_model.FEASIBLE)


class Start(Enum):
    """How one of a probe's solves starts: cold, from the best schedule moved to its II, or branching on the
    stages first (``hints.stages_first``)."""

    COLD = "cold"
    MOVED = "moved"
    STAGED = "staged"


class Verdict(Enum):
    EMPTY = "empty"  # every II of the window is refuted
    FOUND = "found"  # a schedule of the full problem
    UNDECIDED = "undecided"  # the budget ran out


@dataclass(frozen=True, slots=True)
class Window:
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class Found:
    """A schedule of the full model in flight: the model and the solver holding its solution."""

    model: ScheduleModel
    solver: Solver

    @property
    def ii(self) -> int:
        return int(self.solver.value(self.model.ii))

    def free(self, options: SolveOptions) -> bool:
        """Whether its warp groups were the search's own choice (not pinned by a strategy)."""
        return self.model.o.fixed_groups == options.fixed_groups


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: Verdict
    floor: int  # every II below it is refuted; a phase only raises it
    found: Found | None = None


@dataclass
class Context:
    """What the phases share: the problem, options and work budget, and what earlier phases of the
    current window learnt (a relaxation's schedule to start from)."""

    problem: Problem
    options: SolveOptions
    work: Work
    memory_schedule: Assignment | None = None  # the memory relaxation's least-II schedule
    memory_ran: bool = False
    memory_feasible: int | None = None  # the least II at which the memory relaxation has held a schedule, any window
    hint: Assignment | None = None  # the hint relaxation's schedule
    sliced: bool = False  # the full model's hinted slices from ``hint`` were tried on this window (``_hint_slices``)
    relaxed: bool = False  # the hint relaxation ran on this window (in ``floor_hint``): a rerun repeats its start
    window_model: ScheduleModel | None = None  # the joint model of the window minimising II (``_window_model``)
    upper: Assignment | None = None  # the best schedule of the full problem known so far (with groups and budgets)
    refutations: list[tuple[int, int, str]] = field(default_factory=list)  # (lo, hi, by what): the proof
    window: Window | None = None  # the window being decided
    swept: float = 0.0  # work the sweep has spent over all windows (``SWEEP_TOTAL``)
    groupings: bool | None = None  # Benders over groupings: untried, decided a probe the joint model did not, or not
    staged: bool = False  # the staged descent found a schedule: the bisection's probes try the stages first too
    refuted_below: int = 0  # on a monotone problem the highest refuted II + 1, every II below refuted; else 0
    undecided: int | None = None  # the II the optimality probe left undecided (``optimality_probe``): no bisection repeats it
    proposed: int | None = None  # the II the first schedules ended at before the pipelines: the improvement's gate
    held_back: float = 0.0  # work the first window holds back for the descent (search._first_window); the elastic slice may use it
    grouped: set[int] = field(default_factory=set)  # the IIs Benders over groupings refuted (the proof names it); forks share it
    before: float = 0.0  # a fork's work starts here in the search's count (``fork``): its reports say so
    monotone: bool = field(init=False)  # feasibility closed upwards in II (design.md §3.1e)
    cuts: Cuts = field(init=False)  # Benders over groupings' cuts, for its loops at other IIs (design.md §3.1f)

    def __post_init__(self) -> None:
        self.monotone = monotone_in_ii(self.problem)
        self.cuts = Cuts(self.monotone)

    def hold(self, found: Found) -> None:
        """Make ``found`` the best schedule known (``upper``): what repairs, hints and the probes under it start from."""
        self.upper = hints.read(found.model, found.solver.value, budgets=True)

    @cached_property
    def registers_bind(self) -> bool:
        """Whether the register file's average occupancy sets the static bound (``bounds.binding_memory``)."""
        return binding_memory(self.problem, self.options) == "registers"

    @property
    def memory(self) -> bool:
        """The memory relaxation proves what the hint relaxation cannot only where it keeps a
        family that one leaves out: TMEM (the register budgets need warp groups, which it drops)."""
        return not self.options.swp_only and any(op.tmem_cols for op in self.problem.ops)

    def memory_may_refute(self, ii: int) -> bool:
        """Whether the memory relaxation could still refute II ``ii``. On a monotone problem it cannot once it has
        held a schedule at some II <= ``ii``: the stretch of design.md §3.1e maps each of its families (units,
        dependences, TMEM) on its own, so the relaxation's feasible IIs are closed upwards too, and a solve of it
        there could only repeat what is known (one-tile FA b200 spent 2 units in each of four windows above 1473,
        where the relaxation had its schedule, without a verdict)."""
        return self.memory and not (self.monotone and self.memory_feasible is not None and ii >= self.memory_feasible)

    def memory_held(self, a: Assignment | None) -> None:
        """Record a schedule of the memory relaxation (``memory_may_refute``)."""
        if a is not None and (self.memory_feasible is None or a.ii < self.memory_feasible):
            self.memory_feasible = a.ii

    def new_window(self, w: Window) -> None:
        self.memory_schedule, self.memory_ran, self.hint, self.sliced, self.window = None, False, None, False, w
        self.window_model, self.relaxed = None, False

    def solver(self, units: float, portfolio: tuple[str, ...] = (), seed: int = 0) -> Solver:
        return solver(self.work, units, self.options.workers, portfolio, seed)

    def report(self, message: str) -> None:
        if self.options.progress:
            self.options.progress(f"{message} ({self.work.seconds():.1f}s, {self.before + self.work.spent:.1f} units)")

    def fork(self, reserved: float) -> Context:
        """A context for a probe run beside others: the same problem, options and best schedule, with work of its
        own that starts ``reserved`` units on (what the probes before it may spend) and shares the wall-clock cap."""
        w = self.work
        fork = replace(self, work=Work(start=w.start, deadline=w.deadline, limit=max(0.0, w.left() - reserved)),
                       before=self.before + w.spent + reserved)
        fork.cuts = self.cuts.copy()  # its own: two probes learning at once would interleave their cuts
        return fork

    def join(self, fork: Context) -> None:
        """Charge what a forked probe spent, and its cut, to this context's work, and take what it learned of Benders
        over groupings: decided in any fork, it stays decided; tried and undecided, never again (``_paired``), and
        the cuts it learned. The same whatever order the forks finish in: they are joined in the order they began."""
        self.work.spent += fork.work.spent
        self.work.cut = self.work.cut or fork.work.cut
        self.cuts.merge(fork.cuts)
        if fork.groupings is not None and self.groupings is not True:
            self.groupings = fork.groupings

    def refuted(self, lo: int, hi: int, by: str) -> None:
        """Record that every II in [lo, hi] is infeasible, as shown by ``by`` (on a monotone problem,
        every II below hi too)."""
        if lo <= hi:
            self.refutations.append((lo, hi, by))
            if self.monotone:
                self.refuted_below = max(self.refuted_below, hi + 1)


def _empty(ctx: Context, w: Window, by: str, said: str = "proven infeasible") -> Outcome:
    """Every II of the window refuted by ``by``: recorded (``by`` names the proof in the output), reported as
    ``said``, and the window's verdict."""
    ctx.refuted(w.lo, w.hi, by)
    ctx.report(f"II window [{w.lo}, {w.hi}]: {said}")
    return Outcome(Verdict.EMPTY, w.hi + 1)


@dataclass(frozen=True, slots=True)
class Phase:
    name: str  # the row of docs/design.md §3.1 it implements
    applies: Callable[[Context], bool]
    run: Callable[[Context, Window, Budget], Outcome]
    budget: Budget


# -- the memory relaxation --------------------------------------------------------------------

MEMORY = Budget(share=1 / 6, at_least=8.0, attempt=3.0)  # its proofs are heavy-tailed in the seed: restarts
WHOLE_WINDOW_ATTEMPT = 2.0  # one short try at the whole window first: it refutes empty windows
CLIMB = Budget(share=0.0, at_least=2.0, attempt=0.5)  # one fixed-II probe of the climb, in short restarts
CLIMB_RETRY = 4.0  # a probe halving down from a schedule, undecided, once more with other seeds
COMPLETE = Budget(share=1 / 8, at_least=10.0, attempt=1.5)  # a relaxation's schedule completed in the full model


def memory_relaxation(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """The memory relaxation over the window; its optimum, where it raised the floor, completed in
    the full model is the window's optimum (every II below it refuted)."""
    floor, relaxed = memory_bound(ctx, w, ctx.work.until(budget.units(ctx.options.work)))
    ctx.memory_ran, ctx.memory_schedule = True, relaxed
    ctx.memory_held(relaxed)
    if floor > w.lo:
        ctx.refuted(w.lo, min(floor, w.hi + 1) - 1, "the memory relaxation")
        ctx.report(f"II window [{w.lo}, {w.hi}]: the memory relaxation proves "
                   f"{'empty' if floor > w.hi else f'II >= {floor}'}")
    if floor > w.hi:
        return Outcome(Verdict.EMPTY, floor)
    if floor > w.lo and relaxed is not None and relaxed.ii == floor:
        # (where TMEM raised nothing, the hint relaxation's schedules, which have warp groups,
        # complete more easily)
        found = complete(ctx, relaxed, COMPLETE)
        if found is not None:
            ctx.report(f"  completed the memory relaxation's schedule at II {floor}")
            return Outcome(Verdict.FOUND, floor, found)
    return Outcome(Verdict.UNDECIDED, floor)


def memory_bound(ctx: Context, w: Window, until: float) -> tuple[int, Assignment | None]:
    """(the least II in the window that the memory relaxation does not rule out, hi + 1 when it
    proves the window empty; its schedule with the least II found, or None).

    Over a range of II the model multiplies stages by a variable II: CP-SAT refutes empty ranges
    quickly but finds schedules in them slowly, while at one fixed II the model is linear. So a
    short attempt at the whole window comes first (it refutes empty ones), then fixed-II probes
    climb from lo (``_climb``), and the range below the least schedule found is refuted on its
    own; the whole-window minimisation is the fallback.
    """
    m, s, status, _ = _memory_solve(ctx, w.lo, w.hi, min(until, ctx.work.until(WHOLE_WINDOW_ATTEMPT)))
    if status == cp_model.INFEASIBLE:
        return w.hi + 1, None
    best = hints.read(m, s.value) if status in FEASIBLE else None
    best, floor = _climb(ctx, w, best, until)
    if best is None:
        m, s, status, floor = _memory_solve(ctx, w.lo, w.hi, until, minimise=True)
        if status == cp_model.INFEASIBLE:
            floor = w.hi + 1
        elif status in FEASIBLE:
            best = hints.read(m, s.value)
            if status == cp_model.OPTIMAL or (floor < best.ii and _memory_solve(
                    ctx, floor, best.ii - 1, until)[2] == cp_model.INFEASIBLE):
                floor = best.ii
    return floor, best


def _climb(ctx: Context, w: Window, best: Assignment | None, until: float) -> tuple[Assignment | None, int]:
    """(the memory relaxation's least-II schedule found by fixed-II probes, the least II not ruled
    out): probes at lo, lo + s, lo + 3s, lo + 7s, ... (s = width / 32) until one has a schedule,
    then halving the gap to the highest probe without one; once the gap is closed, the range below
    the least schedule is refuted. ``best`` caps the climb. With a full schedule in hand
    (``Context.upper``) the first probe is at hi, from it: the halving then starts from a schedule."""
    lo, hi = w.lo, w.hi
    step, failed, k = max(1, (hi - lo + 1) // 32), lo - 1, 0
    if best is None and ctx.upper is not None and ctx.upper.ii > hi:
        # from the top: the best full schedule moved to hi is a short repair, and the halving
        # below then starts from a schedule (moving it far down at once is not)
        m, s, status, _ = _memory_solve(ctx, hi, hi, min(until, ctx.work.until(CLIMB.at_least)),
                                        attempt=CLIMB.attempt, near=ctx.upper)
        if status in FEASIBLE:
            best = hints.read(m, s.value)
    while best is None or failed + 1 < best.ii:
        if ctx.work.spent >= until or ctx.work.left() <= 0:
            return best, lo
        if best is None:
            probe = min(hi, lo + step * (2 ** k - 1))
            k += 1
        else:
            probe = (failed + best.ii) // 2
        # from the least schedule found so far moved to the probe's II: a schedule a few cycles away
        # is a short repair, a cold search at one II is heavy-tailed in the seed
        m, s, status, _ = _memory_solve(ctx, probe, probe, min(until, ctx.work.until(CLIMB.at_least)),
                                        attempt=CLIMB.attempt, near=best)
        if status == cp_model.UNKNOWN and best is not None:
            # halving from a schedule, an undecided probe may well hold the optimum: once more, longer
            m, s, status, _ = _memory_solve(ctx, probe, probe, min(until, ctx.work.until(CLIMB_RETRY)),
                                            seed=7, attempt=CLIMB.attempt, near=best)
        if status not in FEASIBLE:
            failed = probe
            if best is None and probe >= hi:
                return None, lo
            continue
        best = hints.read(m, s.value)
    refuted = lo >= best.ii or _memory_solve(ctx, lo, best.ii - 1, until)[2] == cp_model.INFEASIBLE
    return best, best.ii if refuted else lo


def _memory_solve(ctx: Context, lo: int, hi: int, until: float, minimise: bool = False, seed: int = 0,
                  attempt: float = MEMORY.attempt, near: Assignment | None = None):
    """The memory relaxation over [lo, hi] until the work mark ``until``, in restarts: (model,
    solver, status, proven least II) of the attempt that decided, or of the last. ``minimise``
    minimises II; otherwise any schedule will do, which refutes faster. ``near``: a schedule to
    start from, moved to II lo; such a solve only steers the climb (a probe it refutes is not recorded:
    the range below the least schedule is refuted by a solve without a hint), so its refutations are
    not confirmed (``Solver.confirm_refutations``): confirming them cost fa_fwd 2 sub-tiles on b200 its
    proof of 2320 (2494 >= 2280 at 30 units)."""
    m = build_model(ctx.problem, ctx.options, lo, hi, memory_only=True)
    if near is not None:
        hints.hint_rescaled(m, near, lo)
    if minimise:
        m.m.minimize(m.ii)
    floor, s, status = lo, None, cp_model.UNKNOWN
    for units, seed_k in attempts(attempt, until, ctx.work, seed, MEMORY.growth):
        s = ctx.solver(units, SEARCH_AND_BOUND, seed_k) if minimise else decision_solver(ctx.work, units, seed_k)
        s.confirm_refutations = near is None
        status = s.solve(m.m)
        if minimise and status != cp_model.INFEASIBLE:
            floor = max(floor, math.ceil(s.best_objective_bound))
        if status != cp_model.UNKNOWN:
            break
    if s is None:  # no work left for even one attempt
        s = ctx.solver(0.0)
    return m, s, status, floor


def complete(ctx: Context, a: Assignment, budget: Budget) -> Found | None:
    """The full model at ``a``'s II, solved from its starts (and groups, where it has them), in
    restarts (completion work is heavy-tailed in the seed); None when nothing comes in budget."""
    v = build_model(ctx.problem, ctx.options, a.ii, a.ii)
    hints.hint(v, a)
    for units, seed in attempts(budget.attempt, ctx.work.until(budget.units(ctx.options.work)), ctx.work,
                                growth=budget.growth):
        s = ctx.solver(units, seed=seed)
        status = s.solve(v.m)
        if status in FEASIBLE:
            return Found(v, s)
        if status != cp_model.UNKNOWN:
            return None
    return None


# -- the hint relaxation and the full window ----------------------------------------------------

HINT = Budget(share=0.15, at_least=4.0)
FULL = Budget(share=1 / 4, at_least=5.0)
RAW_HINT = Budget(share=1 / 60, at_least=2.0)  # the full window from the relaxation's own schedule
PRESSURE = Budget(share=0.05, at_least=3.0)  # a relaxation schedule with few groups, short lifetimes
PRESSURE_HINT = Budget(share=1 / 80, at_least=1.5)  # the full window from that one
REPAIR = Budget(share=0.0, at_least=5.0)  # that schedule completed with its groups fixed
ELASTIC = Budget(share=1 / 3, at_least=6.0)  # the pressure schedule pulled into the full model (``_elastic``)
ELASTIC_HANDOFF = 0.5  # units kept for the window's model to take the elastic model's schedule


def hint_relaxation(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """The joint model without the register and TMEM peak families (which make schedules hard to
    find), few stages first; refuted with the full stage bound it refutes the window."""
    p, o = ctx.problem, ctx.options
    until = ctx.work.until(budget.units(o.work))
    ctx.relaxed = True
    for stages in (hints.short_stage_bound(p, w.lo), None):
        r = build_model(p, o, w.lo, w.hi, relaxed=True, max_stage=stages)
        r.m.minimize(r.ii)
        s = ctx.solver(until - ctx.work.spent)
        status = s.solve(r.m)
        if status == cp_model.INFEASIBLE and r.max_stage >= stage_bound(p, w.lo, not o.swp_only):
            return _empty(ctx, w, "the hint relaxation", "proven infeasible by the relaxation")
        if status in FEASIBLE:
            ctx.hint = hints.read(r, s.value)
            ctx.report("  relaxation found a schedule to start from")
            break
        if status != cp_model.INFEASIBLE or until - ctx.work.spent <= 0.01:
            break
    return Outcome(Verdict.UNDECIDED, w.lo)


def _joint(ctx: Context) -> bool:
    return not ctx.options.swp_only


def _unhinted(ctx: Context) -> bool:
    """The hint relaxation, where ``floor_hint`` has not already run it on the window. Where floor_hint's relaxation
    ended undecided, a second run is the same model with the same parameters: deterministic, it repeats the first
    run's units exactly before it goes further, and those units come off the full window after it
    (fa_fwd-st2-d256-bn128-b200, fresh: 6603 with the rerun, 5976 without; docs/benchmarks_notes.md, session 39). The
    skip is safe because floor_hint's run has this phase's budget (``FLOOR_HINT``): with less, random-fa-16503 (fresh)
    lost its proof, 12288 -> 12734, to the units the rerun had past the first run's (session 40)."""
    return _joint(ctx) and ctx.hint is None and not ctx.relaxed


def _single_ii(ctx: Context) -> bool:
    """A window of one II (the first window, at the lower bound), where the register file does not set the static
    bound: ``floor_hint`` applies. Its relaxation leaves out the register peaks, so where registers bind, its
    schedule at the floor is the one least likely to complete, and the work it takes is the bisection's, which
    refutes there (random-regs-16009 tuned, 16508 fresh: bounds 1840 and 1204 with it, 1898 and 1223 without;
    docs/benchmarks_notes.md, session 38)."""
    return (_joint(ctx) and ctx.window is not None and ctx.window.lo == ctx.window.hi
            and not ctx.registers_bind)


# The relaxation at a single II, before the one-worker phases, gets the hint relaxation's own budget: it is the one
# run of that model on the window (``_unhinted`` skips the rerun), so a smaller budget here would be all the window
# ever spends on it. With 1/20 (>= 1.5) and the rerun skipped, random-fa-16503 (fresh) lost its proof, 12288 ->
# 12734; with HINT it keeps it and fa_fwd-st2-d256-bn128-b200 keeps 5976 (docs/benchmarks_notes.md, session 40).
FLOOR_HINT = HINT


def floor_hint(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """At a single II, before the one-worker phases: the hint relaxation and, where it has a schedule, the full
    model's first two hinted slices from it (``_hint_slices``). A fixed-II probe on one worker is built to refute; at
    a bound the body meets (the shared graphs' recurrence and tensor-core bounds) it spends 8-13 units undecided,
    where the relaxation finds a schedule in 0.5-2.7 units and the slices complete it in 1.4-6.4
    (docs/benchmarks_notes.md, session 38). Any schedule found is at the window's one II, its optimum. Undecided,
    the window keeps the pressure schedule, and its full window goes on from the repair (``_hinted``)."""
    out = hint_relaxation(ctx, w, budget)
    if out.verdict is not Verdict.UNDECIDED or ctx.hint is None:
        return out
    v = _window_model(ctx, w)
    s, status = _hint_slices(ctx, v, w.lo)
    if status == cp_model.INFEASIBLE:
        return _empty(ctx, w, "CP-SAT (the joint model)")
    if _holds_schedule(s):  # not merely a status: a slice the work budget ended returns UNKNOWN
        ctx.report(f"II window [{w.lo}, {w.hi}]: the relaxation's schedule completed")
        return Outcome(Verdict.FOUND, w.lo, Found(v, s))
    return Outcome(Verdict.UNDECIDED, w.lo)


def _worth_a_full_window(ctx: Context) -> bool:
    """Where neither relaxation found a schedule in its budget, the full window, a harder model,
    would stall too."""
    return ctx.hint is not None or not ctx.memory_ran or ctx.memory_schedule is not None or ctx.options.swp_only


def full_window(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """The joint model over the window minimising II, from the hint relaxation's schedule when
    there is one (three hints, each costlier to make than the last: ``_hinted``)."""
    v = _window_model(ctx, w)
    s, status = _hinted(ctx, v, w.lo) if ctx.hint is not None else (None, None)
    if status is None:
        sliced = s if s is not None and _holds_schedule(s) else None
        s = ctx.solver(budget.units(ctx.options.work))
        status = s.solve(v.m, watching(ctx.options.progress, "II", ctx.work))
        if sliced is not None and (status not in FEASIBLE or sliced.value(v.ii) < s.value(v.ii)):
            s, status = sliced, cp_model.FEASIBLE  # the slice's schedule, which the plain solve did not keep
    if status == cp_model.INFEASIBLE:
        return _empty(ctx, w, "CP-SAT (the joint model)")
    if status in FEASIBLE:
        found = Found(v, s)
        floor = found.ii if status == cp_model.OPTIMAL else max(w.lo, math.ceil(s.best_objective_bound))
        ctx.refuted(w.lo, floor - 1, "CP-SAT (the joint model)")
        return Outcome(Verdict.FOUND, floor, found)
    return Outcome(Verdict.UNDECIDED, w.lo)


def _window_model(ctx: Context, w: Window) -> ScheduleModel:
    """The joint model over ``w`` minimising II, without hints. Built once per window: where ``floor_hint`` stays
    undecided, ``full_window`` solves the same model (a fresh build is the same proto; it costs about 0.1 s on an
    80-op body, so this saves little time and mainly keeps one model per window); each phase sets its own hints."""
    v = ctx.window_model
    if v is None or (v.ii_lo, v.ii_hi) != (w.lo, w.hi):
        v = build_model(ctx.problem, ctx.options, w.lo, w.hi)
        v.m.minimize(v.ii)
        ctx.window_model = v
    v.m.clear_hints()
    return v


def _hinted(ctx: Context, v: ScheduleModel, lo: int) -> tuple[Solver | None, int | None]:
    """Solve the window model from the relaxation's schedule: (solver, status), status None when
    the window is still undecided and wants a plain solve (hinted by then). A slice that finds a
    schedule ends the hints: the plain solve starts from it, and the solver returned holds it, so
    that it is kept if the plain solve ends without one (a later slice's hint would replace it).

    1-2. ``_hint_slices`` (unless ``floor_hint`` ran them on this window already);
    3. the pressure schedule completed into a full one with its groups fixed (``_repair``), left to
       the window's plain solve.
    """
    s: Solver | None = None
    if not ctx.sliced:
        s, status = _hint_slices(ctx, v, lo)
        if status is not None or _holds_schedule(s):
            return s, status
    v.m.clear_hints()
    hints.hint(v, _repair(ctx, ctx.hint) or ctx.hint)
    return s, None


def _hint_slices(ctx: Context, v: ScheduleModel, lo: int) -> tuple[Solver, int | None]:
    """The window model in two short slices: (solver, status) as ``_try_hint``'s, from

    1. the relaxation's own starts and groups, which often complete into a full schedule at once;
    2. a relaxation schedule that favours few groups and short register lifetimes, which steers
       past the register and TMEM peaks the relaxation left out (it replaces ``ctx.hint``), pulled
       into the full model by the elastic model (``_elastic``), a complete hint where that works.
    """
    s, status = _try_hint(ctx, v, ctx.hint, RAW_HINT)
    if status is None and not _holds_schedule(s):
        ctx.hint = _pressure_hint(ctx, lo, ctx.hint)
        ctx.work.limit += ctx.held_back  # a schedule at the floor needs no descent: lend the elastic slice its reserve
        try:
            pulled = _elastic(ctx, lo, ctx.hint) if ctx.work.left() > ELASTIC_HANDOFF + ctx.held_back / 2 else None
            if pulled is not None:
                s, status = _try_hint(ctx, v, pulled, PRESSURE_HINT, complete=True)
        finally:
            ctx.work.limit -= ctx.held_back
    ctx.sliced = True
    return s, status


def _holds_schedule(s: Solver) -> bool:
    """Whether ``s``'s last solve ended with a schedule (a hint slice's, kept for the plain solve)."""
    return s.response_proto.status in FEASIBLE


def _try_hint(ctx: Context, v: ScheduleModel, a: Assignment, budget: Budget,
              complete: bool = False) -> tuple[Solver, int | None]:
    """One slice of the window model from ``a``: (solver, status), status None when undecided.
    A schedule found without a proof becomes the complete hint of the solve that follows. With
    ``complete``, ``a`` is a schedule of the full model, hinted with every variable (``_completed``)."""
    v.m.clear_hints()
    if complete:
        hint_completed(ctx, v, a)
    else:
        hints.hint(v, a)
    s = ctx.solver(budget.units(ctx.options.work))
    status = s.solve(v.m, watching(ctx.options.progress, "II", ctx.work))
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) or ctx.work.left() <= 0:
        return s, status
    if status == cp_model.FEASIBLE:
        hints.hint_solution(v, hints.solution_of(s))
    return s, None


def _pressure_hint(ctx: Context, lo: int, first: Assignment) -> Assignment:
    """A relaxation schedule at ``first``'s II that prefers few groups and short register
    lifetimes; ``first`` when none is found."""
    p, o = ctx.problem, ctx.options
    r = build_model(p, o, first.ii, first.ii, relaxed=True, max_stage=hints.short_stage_bound(p, lo))
    hints.hint(r, first)
    r.m.minimize(hints.pressure_objective(r))
    s = ctx.solver(PRESSURE.units(o.work))
    return hints.read(r, s.value) if s.solve(r.m) in FEASIBLE else first


def _elastic(ctx: Context, lo: int, a: Assignment, budget: Budget = ELASTIC) -> Assignment | None:
    """A schedule of the full model at ``a``'s II, pulled from the relaxation's schedule ``a``: the
    elastic model (the register and TMEM peaks may overflow, by as little as CP-SAT can make it)
    starts from ``a``, a solution of it, and its large-neighbourhood workers lower the overflow; at 0
    it is a full schedule. Where a feasibility solve from the same hint has no gradient to follow,
    this one has (random-units-16018 at its ALU bound 1344: overflow 0 in 9.7 units, where every
    window phase stalls; design.md §3.2). None when the overflow stays above 0."""
    p, o = ctx.problem, ctx.options
    if o.swp_only:
        return None
    e = build_model(p, o, a.ii, a.ii, elastic=True, max_stage=hints.short_stage_bound(p, lo))
    hint_completed(ctx, e, a)  # its first solution at once, not after units of search
    # the window's model must still take the schedule (a complete hint, ~0.1 units), and the descent keeps half of
    # what the first window holds back for it (``_hint_slices`` lends the rest)
    s = ctx.solver(min(budget.units(o.work), ctx.work.left() - ELASTIC_HANDOFF - ctx.held_back / 2))
    found = s.solve(e.m) in FEASIBLE and s.objective_value == 0
    ctx.report(f"II {a.ii}: the elastic model's overflow {'0: a schedule' if found else 'stays above 0'}")
    return hints.read(e, s.value, budgets=True) if found else None


def _repair(ctx: Context, a: Assignment) -> Assignment | None:
    """Complete a relaxation's schedule into one of the full model, keeping its II and warp groups:
    with the groups fixed the register and TMEM peaks are one cumulative per group with no
    optional intervals, a far smaller problem than the free assignment."""
    p, o = ctx.problem, ctx.options
    if o.swp_only:
        return None
    labels = hints.first_use_labels(p, a.groups)
    fixed = tuple((op.name, labels[a.groups[op.name]]) for op in p.ops)
    w = build_model(p, replace(o, fixed_groups=fixed), a.ii, a.ii)
    hints.hint(w, replace(a, groups=dict(fixed)))
    s = ctx.solver(REPAIR.units(o.work))
    return hints.read(w, s.value, budgets=True) if s.solve(w.m) in FEASIBLE else None


# -- the window II by II, on one worker ---------------------------------------------------------------

SWEEP = Budget(share=1 / 3, at_least=4.0)  # per window
SWEEP_TOTAL = 1 / 2  # of the work, over all windows: where II by II does not pay, the other phases keep the rest
SWEEP_WINDOW = Budget(share=0.0, at_least=2.0, attempt=1.0)  # the whole window, any schedule, in restarts
SWEEP_II = Budget(share=0.0, at_least=2.0, attempt=1.0)  # one II, in restarts
BISECT_II = Budget(share=0.0, at_least=6.0)  # one II of the bisection: its refutation refutes every II below
BISECT = Budget(share=1 / 2, at_least=4.0)  # per window (the sweep's total still caps it)
BISECT_TOTAL = 2 / 3  # of the work, over all windows: on a monotone problem the bisection is the proof
CLOSE = 1.02  # the bisection's first probe below a schedule: within 2% is the gap a user reads as closed
BISECT_CLOSE_II = Budget(share=0.0, at_least=12.0)  # that probe: its refutation is the user's answer
SWEEP_WIDTH = 64  # the widest window swept: wider ones cost more IIs than the budget holds
# CP-SAT's LP (``linearization_level``) for the sweep's restarts, in turn. Level 2 keeps every constraint's LP
# relaxation: it refutes one fixed II 2-4x cheaper on the suite's tuned small bodies (the register and in-order rows
# are what refute it), but each node costs more, so it finds a schedule moved to the II far more slowly than level 1
# (docs/benchmarks_notes.md, sessions 13, 14). The whole window is asked for any schedule: level 1 first. The IIs
# below it are mostly refuted: level 2 first.
SWEEP_WINDOW_LP = (1, 2)
SWEEP_II_LP = (2, 1)
# A bisection probe is two solves (``_bisect_probe``): the best schedule moved to the probe's II at level 1, for at
# most ``BISECT_HINTED`` units, then cold at level 2 with the probe's whole budget in one attempt. A moved schedule
# that repairs does so at once (one-tile FA h100's 2440 from the 2441 schedule: 0.01 units) and one that does not
# repairs no later; a refutation's cost at one II varies little with the seed, so restarts
# mostly cut solves short (one-tile FA d64 h100's 1621: 5.2 and 6.1 units cold at level 2 over two seeds, 6.0 and 7.7
# at level 1, where restarts of 3 had left it undecided after 6; FA h100's 2393: 4.5, >8 and 3.4 at level 2, 3.3,
# 3.1 and 2.6 at level 1, where the restarts spent 10 units on it; bench/worker_probe.py, docs/benchmarks_notes.md,
# session 26).
BISECT_HINTED = 1.0
BISECT_COLD_LP = 2
# Before both, the shallow pipelines first (``hints.stages_first``, CP-SAT's fixed search): where it finds a schedule
# on the suite's unproven rows it does so in 0.02-0.70 units (docs/benchmarks_notes.md, session 48).
BISECT_STAGED = 0.5
# Benders over groupings (``_groupings_probe``), for bodies of at most GROUPINGS_MAX_OPS ops: measured on the
# suite's register-bound bodies of 12-25 ops, where a refuted II took 0-7 groupings; the grouping space grows
# fast with the ops (docs/benchmarks_notes.md, "Benders over groupings in the bisection", issue 16)
GROUPINGS_MAX_OPS = 40
GROUPING_UNITS = 1.0  # one grouping's joint solve
GROUPINGS_PROBE = 2.0  # the most one II's Benders loop spends


def bisection(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """The sweep's bisection (``_bisect``), on a monotone problem, with a budget of its own."""
    return _charged(ctx, w, budget, _bisect)


def sweep(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """Decide a narrow window II by II with the joint model at one fixed II on one CP-SAT worker.

    At a fixed II the model is linear (no stages times a variable II), and a single worker spends its
    deterministic work on one search instead of interleaving a portfolio: on small bodies that refutes
    an II in 0.06-1.8 units where the two-worker window search stalls for ten (bench/worker_probe.py).
    First any schedule in the whole window (refutes an empty one, or caps the sweep), then each II
    from lo: an II refuted raises the floor, the first with a schedule is the window's optimum. A
    window of ``SWEEP_WIDTH`` or more is swept only after the two-worker phases, from the floor they
    left, without the whole-window attempt: there the sweep only raises the floor.
    """
    return _charged(ctx, w, budget, _sweep)


def _charged(ctx: Context, w: Window, budget: Budget, run: Callable[[Context, Window, float], Outcome]) -> Outcome:
    """``run`` (the sweep or the bisection) until the work mark its budget and the sweeps' total leave,
    its work charged to that total."""
    start = ctx.work.spent
    until = ctx.work.until(min(budget.units(ctx.options.work), _sweep_total(ctx) - ctx.swept))
    out = run(ctx, w, until)
    ctx.swept += ctx.work.spent - start
    return out


def _sweep(ctx: Context, w: Window, until: float) -> Outcome:
    whole = w.lo < w.hi < w.lo + SWEEP_WIDTH  # a wide window is what the two-worker phases just failed at
    status, found = _one_worker(ctx, w.lo, w.hi, SWEEP_WINDOW, SWEEP_WINDOW_LP, until) if whole else (cp_model.UNKNOWN, None)
    if status == cp_model.INFEASIBLE:
        return _empty(ctx, w, "CP-SAT on one worker (the joint model)", "proven infeasible on one worker")
    top = found.ii - 1 if found is not None else w.hi
    ii = w.lo
    while ii <= top and ctx.work.spent < until and ctx.work.left() > 0:
        status, at = _one_worker(ctx, ii, ii, SWEEP_II, SWEEP_II_LP, until)
        if status in FEASIBLE:
            found, top = at, ii - 1
            break
        if status != cp_model.INFEASIBLE:
            break
        ii += 1
    ctx.refuted(w.lo, min(ii, top + 1) - 1, "CP-SAT on one worker, II by II (the joint model)")
    if ii > w.lo:
        ctx.report(f"II window [{w.lo}, {w.hi}]: every II below {min(ii, top + 1)} refuted on one worker")
    if found is not None:
        return Outcome(Verdict.FOUND, found.ii if ii > top else ii, found)
    return Outcome(Verdict.EMPTY if ii > w.hi else Verdict.UNDECIDED, ii)


_VERDICT_WORDS = {cp_model.INFEASIBLE: "refuted", cp_model.FEASIBLE: "has a schedule", cp_model.OPTIMAL: "has a schedule"}


def _bisect(ctx: Context, w: Window, until: float) -> Outcome:
    """The sweep on a monotone problem (``bounds.monotone_in_ii``, design.md §3.1e): refuting one II
    refutes every smaller one, so the window is decided by bisection over fixed IIs, from its top: hi
    refuted empties the window at once, a schedule at hi is lowered towards the floor, and after an
    undecided probe the next one goes lower, where a refutation that raises the floor comes cheaper.
    Where the window ends one under the best schedule known, its top is the hardest II to decide, so
    there it is first only the schedule's repair (a find is a cycle gained at once). The first probe
    under the best schedule is then the II ``CLOSE`` under it: refuted, the schedule is within that
    ratio of optimal, which is what a user reads first, so that probe has twice the others' work
    (one-tile FA h100's 2393: one solve refutes it in 1.3-5.3 units, 3.6 median, from 11 of 12 starts,
    LPs and seeds, and one is undecided after 12). With two workers the probes go in pairs
    (``_paired``): each is one worker's solve, so the pair takes the wall time of the longer."""
    b = _Bisection(max(w.lo, ctx.refuted_below) - 1, w.hi + 1, w.hi, BISECT_II)
    if ctx.undecided is not None and w.lo <= ctx.undecided <= w.hi:  # probed cold on its own budget already: go below
        b = replace(b, top=ctx.undecided).next(ctx, until)
    found: Found | None = None
    whole = ctx.work.until(_sweep_total(ctx) - ctx.swept)  # once the window holds a schedule, no later one is searched
    while b.failed + 1 < b.top and ctx.work.spent < until and ctx.work.left() > 0:
        plans = _paired(ctx, b, until)
        for (probe, _budget, repair_only), (status, at) in zip(plans, _run_probes(ctx, plans, until), strict=True):
            b = b.after(probe, status, at is not None, repair_only)
            if status == cp_model.INFEASIBLE:
                ctx.refuted(w.lo, probe, _probe_proof(ctx, probe))
            if at is not None and (found is None or at.ii < found.ii):  # the next probes start from it
                found = at
                ctx.hold(at)
                until = max(until, whole)
            ctx.report(f"  bisection: II {probe} {_VERDICT_WORDS.get(status, 'undecided')}"
                       + (" (the best schedule's repair alone)" if repair_only and at is None else ""))
        b = b.next(ctx, until)
    floor = b.failed + 1
    if floor > w.lo:
        ctx.report(f"II window [{w.lo}, {w.hi}]: every II below {floor} refuted (bisection on one worker)")
    if found is not None:
        return Outcome(Verdict.FOUND, floor, found)
    return Outcome(Verdict.EMPTY if floor > w.hi else Verdict.UNDECIDED, floor)


@dataclass(frozen=True, slots=True)
class _Bisection:
    """Where the bisection stands: every II up to ``failed`` refuted, ``top`` a schedule or an undecided probe
    (the next probes go below it), and the next probe with its budget."""

    failed: int
    top: int
    probe: int
    budget: Budget
    first: bool = True  # no probe taken yet: the top one may be the best schedule's repair alone
    close: bool = True  # the probe ``CLOSE`` under the best schedule not yet taken

    def plan(self, ctx: Context) -> tuple[int, Budget, bool]:
        """(II, budget, the repair alone) of the next probe: one under the best schedule it is the optimality
        proof, with the close probe's budget; the first such is only the schedule's repair while the close
        probe lies below it."""
        at_best = ctx.upper is not None and self.probe == ctx.upper.ii - 1
        repair_only = at_best and self.first and _close_target(ctx, self.failed, self.top) is not None
        return self.probe, _no_less(BISECT_CLOSE_II, self.budget) if at_best else self.budget, repair_only

    def after(self, probe: int, status: int, found: bool, repair_only: bool) -> _Bisection:
        """The gap once ``probe`` came back with ``status``: refuted raises the floor; a schedule, or an
        undecided cold probe, lowers the top (the repair alone, undecided, leaves it, as does an undecided probe
        of a pair under a refuted one)."""
        if status == cp_model.INFEASIBLE:
            return replace(self, failed=max(self.failed, probe), first=False)
        if found or (not repair_only and probe > self.failed):
            return replace(self, top=min(self.top, probe), first=False)
        return replace(self, first=False)

    def next(self, ctx: Context, until: float, reserved: float = 0.0) -> _Bisection:
        """The next probe: the gap's middle, or the close probe where that lies above it, with its share of the
        work left (``reserved`` units of it already promised to a probe running beside it)."""
        probe, budget, close = (self.failed + self.top) // 2, _probe_budget(ctx, self.failed, self.top, until, reserved), self.close
        target = _close_target(ctx, self.failed, self.top)
        if close and target is not None and probe < target:
            probe, close, budget = target, False, _no_less(BISECT_CLOSE_II, budget)
        return replace(self, probe=probe, budget=budget, close=close)


PAIRED_LEAST = 1.0  # the second probe of a pair runs only with at least this much work left to it


def _paired(ctx: Context, b: _Bisection, until: float) -> list[tuple[int, Budget, bool]]:
    """The probes to run at once: the next one and, where the search has two workers, the one that would follow
    it were it left undecided (then the next probe goes below it; near the optimum, where probes run out their
    budgets, that is the common outcome). Each is one worker's deterministic solve, so the pair decides what
    the two would in turn, in the wall time of the longer (two one-worker probes in two threads: the same
    statuses and units, 26.0 s instead of 39.1, docs/benchmarks_notes.md). Its work is planned as if the first
    ran out its budget. Not where Benders over groupings has decided a probe, or applies where the register file
    sets the static bound: its probes learn from each other. Elsewhere the probes go in pairs until a probe
    is left undecided, exactly as where Benders does not apply (unpaired from the start, fresh
    random-recurrence-16512 lost its proof, 624 optimal -> 624 >= 623: the single probes took a different path
    and left the last one 5 units short; docs/benchmarks_notes.md, session 73)."""
    first = b.plan(ctx)
    if worker_count(ctx.options.workers) < 2 or (groupings_apply(ctx) and (ctx.registers_bind or ctx.groupings)):
        return [first]
    most = _probe_most(ctx, first[1], first[2], until)
    after = b.after(first[0], cp_model.UNKNOWN, False, first[2]).next(ctx, until, most)
    second = after.plan(ctx)
    room = min(until - ctx.work.spent, ctx.work.left()) - most
    if not after.failed + 1 < after.top or second[0] >= first[0] or room < PAIRED_LEAST:
        return [first]
    return [first, second]


def _probe_most(ctx: Context, budget: Budget, repair_only: bool, until: float) -> float:
    """The most work ``_bisect_probe`` may spend on one probe: its plan's solves together."""
    most = sum(units for _, _, units in _probe_plan(ctx, budget, cold=not repair_only))
    return min(most, until - ctx.work.spent, ctx.work.left())


def _run_probes(ctx: Context, plans: list[tuple[int, Budget, bool]], until: float) -> list[tuple[int, Found | None]]:
    """``_bisect_probe`` on each plan: alone, or two at once in threads (CP-SAT releases the interpreter while it
    solves), each on a context of its own whose work starts where the earlier ones' budgets end, so each probe
    spends exactly what it would have spent alone, whatever the threads' timing; their work is charged after."""
    if len(plans) == 1:
        probe, budget, repair_only = plans[0]
        return [_bisect_probe(ctx, probe, budget, until, cold=not repair_only)]
    forks, reserved = [], 0.0
    for _, budget, repair_only in plans:
        forks.append((ctx.fork(reserved), until - ctx.work.spent - reserved))
        reserved += _probe_most(ctx, budget, repair_only, until)
    with ThreadPoolExecutor(max_workers=len(plans)) as pool:
        runs = [pool.submit(_bisect_probe, fork, probe, budget, mark, not repair_only)
                for (fork, mark), (probe, budget, repair_only) in zip(forks, plans, strict=True)]
        results = [run.result() for run in runs]
    for fork, _ in forks:
        ctx.join(fork)
    return results


def optimality_probe(ctx: Context, lo: int, units: float, ii: int | None = None,
                     cold: bool = True) -> tuple[int, Found | None]:
    """The bisection's probe one under the best schedule (``_bisect_probe``: its repair, then one cold solve), taken
    before any window above ``lo``, for at most ``units``: on a monotone problem its refutation refutes every II
    below it, so it is the proof, however far below the floor stands. Charged to the sweeps' total like any
    bisection probe; undecided, it is recorded so that no window's bisection spends its work on that II again.
    ``ii``: another II to probe (the ``CLOSE`` point, ``search._one_under``); ``cold=False``: the repair alone, a
    finder only, whose failure records nothing."""
    ii = ctx.upper.ii - 1 if ii is None else ii
    start = ctx.work.spent
    status, found = _bisect_probe(ctx, ii, replace(BISECT_II, at_least=units), ctx.work.until(units), cold)
    ctx.swept += ctx.work.spent - start
    if status == cp_model.INFEASIBLE:
        ctx.refuted(lo, ii, _probe_proof(ctx, ii))
    elif found is None and cold:
        ctx.undecided = ii
    return status, found


def close_target(ii: int) -> int:
    """The highest II whose refutation leaves a schedule at ``ii`` within ``CLOSE`` of the floor it raises: refuted,
    the floor is that II + 1 and ``ii <= CLOSE * floor`` (``search._one_under``'s probe where the floor lies further
    down: one-tile FA b200's 1731 needs 1697 refuted; docs/benchmarks_notes.md, sessions 71-72)."""
    return math.ceil(ii / CLOSE) - 1


def _close_target(ctx: Context, failed: int, top: int) -> int | None:
    """The II ``CLOSE`` under the best schedule known, one above ``close_target``, where it lies strictly inside
    (failed, top): refuted, that schedule is within ``CLOSE`` of optimal."""
    if ctx.upper is None:
        return None
    target = close_target(ctx.upper.ii) + 1
    return target if failed < target < top and target < ctx.upper.ii - 1 else None


def _probe_budget(ctx: Context, failed: int, top: int, until: float, reserved: float = 0.0) -> Budget:
    """One probe's share of what the window has left: the work left over the probes that bisection
    still needs to close the gap (failed, top), at least ``BISECT_II``. Near the optimum a probe costs
    more (random-recurrence-16512: one worker refutes 612 cold in 2.8-13.6 units, 4.6 median over eight
    seeds and LP levels, and finds a schedule at 613), and fewer of them are left to pay for: the last
    one gets what is left, where six units in two restarts of three left 612 undecided."""
    needed = max(1, math.ceil(math.log2(top - failed)))
    share = (min(until, ctx.work.until(math.inf)) - ctx.work.spent - reserved) / needed
    return _no_less(BISECT_II, replace(BISECT_II, at_least=share))


def _bisect_probe(ctx: Context, ii: int, budget: Budget, until: float, cold: bool = True) -> tuple[int, Found | None]:
    """One II of the bisection on one worker: (status, the schedule found or None). First the best schedule known,
    moved to ``ii``, at LP level 1 for at most ``BISECT_HINTED`` units (it repairs at once or not at all; restricted
    to probes within 2% under the schedule, two FA proofs of the suite were lost); then cold at LP level
    ``BISECT_COLD_LP``, where refutations come cheapest, with the probe's whole budget in one solve (the repair's
    short try comes on top: it is the finder, the cold solve the refuter). ``cold=False``: the repair alone.
    Where Benders over groupings applies (``_groupings_apply``), the first probe the cold solve leaves undecided
    gets it for at most ``GROUPINGS_PROBE`` units of its own: if it decides that probe, it goes before the cold solve from then
    on; if not, it is not tried again (what it spends undecided the probes after it lack)."""
    def steps() -> Iterator[tuple[Start, float, int, int]]:
        for start, lp, most in _probe_plan(ctx, budget, cold):
            units = min(most, until - ctx.work.spent, ctx.work.left())
            if units <= 0.01:
                return
            yield start, units, 0, lp

    benders, units = cold and groupings_apply(ctx), min(budget.at_least, GROUPINGS_PROBE)
    if benders and ctx.groupings is True:
        status, found = _groupings_probe(ctx, ii, units, until)
        if status != cp_model.UNKNOWN:
            return status, found
    status, found = _solve_in_turn(ctx, build_model(ctx.problem, ctx.options, ii, ii), ii, steps())
    if status == cp_model.UNKNOWN and benders and ctx.groupings is None:
        # its own units past the probe's mark: the joint solve spent the probe's budget, and capped by ``until`` the
        # loop had no work left and never ran (two-tile FA h100 d64 at 1107: undecided after the joint model's 7.4
        # units, refuted by the loop in 0.12; docs/benchmarks_notes.md, session 79)
        status, found = _groupings_probe(ctx, ii, units, max(until, ctx.work.until(units)))
        ctx.groupings = status != cp_model.UNKNOWN
    return status, found


def _probe_plan(ctx: Context, budget: Budget, cold: bool) -> list[tuple[Start, int, float]]:
    """A probe's solves as (how it starts, LP level, most units): the shallow pipelines first where the staged
    descent found a schedule (``Context.staged``), the repair where a schedule is known, then the cold solve unless
    ``cold`` is False. Where the staged descent found none, a staged try per probe only took work from the cold
    solves that raise the floor (fresh one-tile FA h100 at head_dim 64: floor 1651 -> 1612)."""
    return (([(Start.STAGED, 1, BISECT_STAGED)] if ctx.staged else [])
            + ([(Start.MOVED, 1, BISECT_HINTED)] if ctx.upper is not None else [])
            + ([(Start.COLD, BISECT_COLD_LP, budget.at_least)] if cold else []))


def groupings_apply(ctx: Context) -> bool:
    """Benders over groupings applies where the groups are free and few enough ops make the grouping space small
    (``GROUPINGS_MAX_OPS``). It is tried once, at the first probe the joint model leaves undecided, for at most
    ``GROUPINGS_PROBE`` units (``_bisect_probe``), so where it does not decide it costs the search that once. Where
    the joint model stalls on the register peaks, a pinned grouping decides them at once, whatever sets the static
    bound: on fresh random-handoff-16524 (15 ops, bound the fp32 unit) the joint probes at 1843 and 1943 stay
    undecided and Benders refutes 1943 (floor 1744 -> 1944 against the schedule's 2924; docs/benchmarks_notes.md,
    session 73). Session 29 kept it to bodies whose static bound is the register file after its work cost one-tile
    FA h100 a refutation (that search's floor 2405 -> 2394), with the whole budget and tried once alike."""
    o = ctx.options
    return (not o.swp_only and not o.fixed_groups and len(ctx.problem.ops) <= GROUPINGS_MAX_OPS)


def _groupings_probe(ctx: Context, ii: int, units: float, until: float) -> tuple[int, Found | None]:
    """``ii`` decided by Benders over groupings (``twill.solver.groupings``) within ``units`` and the work mark
    ``until``. It starts from the cuts learned at other IIs that hold at ``ii`` (``Context.cuts``) and adds its own."""
    mark = min(until, ctx.work.until(units))
    status, v, s = decide_by_groupings(ctx.problem, ctx.options, ii, ctx.work, mark, GROUPING_UNITS, ctx.cuts)
    if status == cp_model.INFEASIBLE:
        ctx.grouped.add(ii)
    ctx.report(f"  Benders over groupings at II {ii}: {_VERDICT_WORDS.get(status, 'undecided')}")
    return status, (Found(v, s) if v is not None and s is not None else None)


# Benders bisecting the whole gap (``groupings_bisection``): its share of the work and the most one probe spends. Measured
# (session 87, a throwaway script, 5 per probe, 20 in all, no carried cuts): every floor of five register and hand-off
# bodies rose, fresh random-handoff-16524 1744 -> 2573 against its schedule's 2924 (docs/benchmarks_notes.md)
GROUPINGS_BISECT = Budget(share=1 / 3, at_least=0.0)
GROUPINGS_BISECT_PROBE = 5.0


def groupings_bisection(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """Bisect [w.lo, w.hi] with Benders over groupings alone, each probe the middle of what is left, at most
    ``GROUPINGS_BISECT_PROBE`` units: refuted raises the floor (monotone, §3.1e), a schedule or an undecided probe
    lowers the top. For a gap the joint model's windows would climb from the floor: there Benders is dear, since
    far under the optimum every grouping is refuted on its own (fresh random-handoff-16524: 7.7 units at 1843), and
    cheap in the middle (1.4 at 2300). Each probe starts from the cuts the probes above it learned (``Context.cuts``),
    which hold below them. Sets ``Context.groupings`` for the bisection's probes after it: decided one, or none."""
    until = ctx.work.until(budget.units(ctx.options.work))
    failed, top, found = max(w.lo, ctx.refuted_below) - 1, w.hi + 1, None
    decided = False
    while failed + 1 < top and ctx.work.spent < until and ctx.work.left() > 0:
        probe = (failed + top) // 2
        status, at = _groupings_probe(ctx, probe, GROUPINGS_BISECT_PROBE, until)
        decided = decided or status != cp_model.UNKNOWN
        if status == cp_model.INFEASIBLE:
            failed = probe
            ctx.refuted(w.lo, probe, _probe_proof(ctx, probe))
            continue
        if at is not None and (found is None or at.ii < found.ii):
            found = at
            ctx.hold(at)
        top = probe if at is None else min(probe, at.ii)
    ctx.groupings = decided
    floor = failed + 1
    if floor > w.lo:
        ctx.report(f"II window [{w.lo}, {w.hi}]: every II below {floor} refuted (Benders over groupings, bisecting)")
    if found is not None:
        return Outcome(Verdict.FOUND, floor, found)
    return Outcome(Verdict.EMPTY if floor > w.hi else Verdict.UNDECIDED, floor)


def _probe_proof(ctx: Context, ii: int) -> str:
    """How a bisection probe's refutation of ``ii`` was proven, for the output's proof line."""
    how = ("CP-SAT on one worker, every warp grouping refuted (Benders cuts)" if ii in ctx.grouped
           else "CP-SAT on one worker (the joint model)")
    return f"{how}, and monotonicity"


def _no_less(b: Budget, share: Budget) -> Budget:
    """``b`` with at least ``share``'s units: a probe with a budget of its own still gets its share of the window."""
    return replace(b, at_least=max(b.at_least, share.at_least))


def _one_worker(ctx: Context, lo: int, hi: int, budget: Budget, lp: tuple[int, ...],
                until: float, hinted: Callable[[int], bool] = lambda seed: True) -> tuple[int, Found | None]:
    """The joint model over [lo, hi], any schedule, on one worker in restarts (its work is
    heavy-tailed in the seed) at the LP levels ``lp`` in turn: (status, the schedule found or None).
    A restart whose seed ``hinted`` accepts starts from the best schedule known moved to lo, the others
    cold: a moved schedule speeds finding but can cost a refutation dearly (tmem-16004's II 547:
    undecided after 6 units hinted, refuted in under 1 cold; docs/benchmarks_notes.md, sessions 11 and 16)."""
    plan = ((Start.MOVED if ctx.upper is not None and hinted(seed) else Start.COLD, units, seed, lp[seed % len(lp)])
            for units, seed in attempts(budget.attempt, min(until, ctx.work.until(budget.at_least)), ctx.work,
                                        growth=budget.growth))
    return _solve_in_turn(ctx, build_model(ctx.problem, ctx.options, lo, hi), lo, plan)


def _solve_in_turn(ctx: Context, v: ScheduleModel, at: int,
                   plan: Iterable[tuple[Start, float, int, int]]) -> tuple[int, Found | None]:
    """``v`` solved on one worker once per step of ``plan`` (how it starts, units, seed, LP level) until a step
    decides it: (status, the schedule found or None). Where the register file sets the static bound, a cold step at one
    II solves the same problem with the register peaks on the line (``build_model(line=True)``, made once, at its first
    cold step): there they refute where the circle's statement stalls (fresh random-regs-16508: floor 1494 -> 1634
    under its schedule's 1636), while the hinted steps keep the circle, whose moved schedules repair at once. Where
    a unit sets it, the line cost two one-tile FA b200 rows their floors (1698 -> 1642, 1532 -> 1372), so there the
    circle stays (design.md §2.8, §3.1e; docs/benchmarks_notes.md, session 83)."""
    status, line, has_hint = cp_model.UNKNOWN, None, False
    for start, units, seed, lp in plan:
        if start is Start.COLD and v.ii_lo == v.ii_hi and not v.elastic and v.joint and ctx.registers_bind:
            line = w = line or build_model(ctx.problem, v.o, at, at, line=True)  # only cold steps: never hinted
        else:
            w = v
            if (start is Start.MOVED) != has_hint:
                if start is Start.MOVED:
                    hints.hint_moved(v, ctx.upper, at)
                else:
                    v.m.clear_hints()
                has_hint = start is Start.MOVED
        s = solver(ctx.work, units, 1, seed=seed, linearization=lp)
        status = hints.solve_stages_first(s, w) if start is Start.STAGED else s.solve(w.m)
        if status in FEASIBLE:
            return status, Found(w, s)
        if status != cp_model.UNKNOWN:
            break
    return status, None


def _narrow(ctx: Context) -> bool:
    return _sweep_left(ctx) and not ctx.monotone and ctx.window.hi - ctx.window.lo < SWEEP_WIDTH


def _monotone(ctx: Context) -> bool:
    """Any window of a monotone problem, which the sweep bisects."""
    return _sweep_left(ctx) and ctx.monotone


def _wide(ctx: Context) -> bool:
    """A wide window the two-worker phases left undecided: the sweep still raises its floor."""
    return _sweep_left(ctx) and not ctx.monotone and ctx.window.hi - ctx.window.lo >= SWEEP_WIDTH


def _sweep_left(ctx: Context) -> bool:
    return ctx.window is not None and ctx.swept < _sweep_total(ctx)


def _sweep_total(ctx: Context) -> float:
    """Units the sweeps may spend over all windows: more on a monotone problem, where they are the proof."""
    return (BISECT_TOTAL if ctx.monotone else SWEEP_TOTAL) * ctx.options.work


WINDOW_PHASES: tuple[Phase, ...] = (
    Phase("memory_relaxation", lambda ctx: ctx.memory_may_refute(ctx.window.lo), memory_relaxation, MEMORY),
    Phase("floor_hint", _single_ii, floor_hint, FLOOR_HINT),
    Phase("sweep", _narrow, sweep, SWEEP),
    Phase("bisection", _monotone, bisection, BISECT),
    Phase("hint_relaxation", _unhinted, hint_relaxation, HINT),
    Phase("full_window", _worth_a_full_window, full_window, FULL),
    Phase("sweep", _wide, sweep, SWEEP),
)


# -- when a window stays undecided: any schedule above its floor ---------------------------------

SPLIT = Budget(share=1 / 8, at_least=5.0)
PROBE_RELAXED = Budget(share=0.0, at_least=5.0)  # one fixed-II probe: a relaxation for a hint
PROBE_FULL = Budget(share=0.0, at_least=10.0, attempt=1.5)  # its completion, and the split's
REFUTE = Budget(share=1 / 8, at_least=5.0, attempt=MEMORY.attempt)


def memory_probe(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """A schedule at the least II in the window that the memory relaxation reaches in its budget,
    completed in the full model: where TMEM binds, the relaxation's schedules already place every
    tile's lifetime, and the warp groups and registers then fit around them."""
    p, o = ctx.problem, ctx.options
    r = build_model(p, o, w.lo, w.hi, memory_only=True, max_stage=hints.short_stage_bound(p, w.lo))
    r.m.minimize(r.ii)
    rs = ctx.solver(budget.units(o.work))
    if rs.solve(r.m) not in FEASIBLE:
        return Outcome(Verdict.UNDECIDED, w.lo)
    a = hints.read(r, rs.value)
    found = complete(ctx, a, replace(COMPLETE, share=budget.share, at_least=budget.at_least))
    if found is None:
        return Outcome(Verdict.UNDECIDED, w.lo)
    ctx.report(f"  found a schedule at II {a.ii} from the memory relaxation's")
    return Outcome(Verdict.FOUND, w.lo, found)


def triton_split(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """The least II in [lo, min(hi, 2 lo)] under Triton's producer/consumer split: with every op's
    group pinned the model loses its optional intervals and is far easier to solve, and its
    schedules are schedules of the full problem; probes of the free problem then try to beat it."""
    p, o = ctx.problem, ctx.options
    hi = min(w.hi, 2 * w.lo)
    v = build_model(p, replace(o, fixed_groups=producer_consumer_split(p)), w.lo, hi)
    v.m.minimize(v.ii)
    s = ctx.solver(budget.units(o.work))
    if s.solve(v.m) not in FEASIBLE:
        return Outcome(Verdict.UNDECIDED, w.lo)
    found = Found(v, s)
    ctx.report(f"  found a schedule at II {found.ii} with Triton's producer/consumer split")
    return Outcome(Verdict.FOUND, w.lo, found)


def fixed_probes(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """Some schedule at a fixed II in the window: models with II fixed are much easier to satisfy
    than windows with II free. Tries lo, then steps of lo/16 doubling each time; each II gets a
    short relaxation (for a hint), its completion and, failing that, a producer/consumer split."""
    del budget  # each probe has its own budgets (PROBE_RELAXED, PROBE_FULL)
    ii, step = w.lo, max(1, w.lo // 16)
    while ii <= w.hi and ctx.work.left() > 1.0:
        found = _probe(ctx, ii)
        if found is not None:
            ctx.report(f"  found a schedule at II {ii}")
            return Outcome(Verdict.FOUND, w.lo, found)
        ii, step = ii + step, 2 * step
    return Outcome(Verdict.UNDECIDED, w.lo)


def _probe(ctx: Context, ii: int) -> Found | None:
    p, o = ctx.problem, ctx.options
    short = hints.short_stage_bound(p, ii)
    # the average-occupancy cut can make even the relaxation hard to satisfy; it is implied by the
    # full model, so a hint made without it loses nothing
    for cuts in (True, False):
        r = build_model(p, o, ii, ii, relaxed=True, max_stage=short, cuts=cuts)
        rs = ctx.solver(PROBE_RELAXED.units(o.work))
        if rs.solve(r.m) in FEASIBLE:
            break
    else:
        return None
    a = hints.read(r, rs.value)
    found = complete(ctx, a, PROBE_FULL)
    if found is not None or o.fixed_groups:
        return found
    # the free assignment is hard to satisfy: a fixed producer/consumer split is easier and still
    # a valid schedule of the full problem
    v = build_model(p, replace(o, fixed_groups=producer_consumer_split(p)), ii, ii)
    for name, var in v.start.items():
        v.m.add_hint(var, a.starts[name])
    s = ctx.solver(PROBE_FULL.at_least)
    return Found(v, s) if s.solve(v.m) in FEASIBLE else None


# The floor pulled before the improvement (``pull_to_floor``): each step short, since on most large bodies the first
# one has no schedule in its budget and what it spends comes off the improvement (docs/benchmarks_notes.md, session 45).
PULL_RELAXATION = Budget(share=1 / 15, at_least=1.0)
PULL_ELASTIC = Budget(share=1 / 15, at_least=1.0)


def pull_to_floor(ctx: Context, lo: int) -> Found | None:
    """A schedule at the floor ``lo`` by the elastic slice's path, short: the hint relaxation at ``lo`` (few stages),
    its pressure schedule, the elastic model from that, and the full model at ``lo`` from the elastic model's schedule
    as a complete hint. Meant for a large body whose first schedules sit far above its floor, before the improvement
    lowers them step by step from above: where the floor is the optimum, this reaches it at once (random-units-16019,
    74 ops: the relaxation 1.5 units, the pressure schedule 4.1, overflow 0 in 0.3; the improvement from 3332 ended
    at 3025 in 15). None where a step has nothing (on most large bodies the relaxation has no schedule in 2 units)."""
    p, o = ctx.problem, ctx.options
    if o.swp_only or ctx.work.left() <= 0:
        return None
    r = build_model(p, o, lo, lo, relaxed=True, max_stage=hints.short_stage_bound(p, lo))
    s = ctx.solver(PULL_RELAXATION.units(o.work))
    if s.solve(r.m) not in FEASIBLE:
        return None
    pulled = _elastic(ctx, lo, _pressure_hint(ctx, lo, hints.read(r, s.value)), PULL_ELASTIC)
    if pulled is None:
        return None
    v = build_model(p, o, lo, lo)
    s, _ = _try_hint(ctx, v, pulled, PRESSURE_HINT, complete=True)  # the elastic slice's hand-off
    return Found(v, s) if _holds_schedule(s) else None


IMPROVE = Budget(share=1 / 2, at_least=3.0)  # 1/4 gained 0.1-11% of II on the suite's large bodies; 1/2 up to 22% more
IMPROVE_GAP = 1.25  # the best schedule this far above the floor is worth improving before any window
# ... on bodies of this many ops or more. Below it the window phases at the floor find and prove the optimum with
# the whole budget, which the improvement would take from them (suite, session 15: units-16017 and units-16518,
# 26 and 36 ops, lost their proofs; one-tile FA b200, 15 ops, ended at 2198 instead of 1860); from 40 ops on, no
# case lost anything (docs/benchmarks_notes.md, session 15). Smaller bodies get a tenth of the work for it after the
# first window and the descent instead (``search._improve_small``, session 61).
IMPROVE_OPS = 40


def improve(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """The joint model over [lo, the best schedule's II] started from that schedule as a complete hint at its own
    II: a solution from the first node, which CP-SAT's neighbourhood (LNS) workers lower step by step. A window that
    stops below the best schedule has no solution to improve, and on large bodies (40-80 ops) no search of any window
    at the floor finds one in its budget (docs/benchmarks_notes.md, session 15).

    The objective is II, then length (II x W + length, W above any length): a neighbourhood worker accepts only a
    strictly better objective, so with II alone one that shortens the schedule at the same II is no move (free
    groups: two-tile FA h100 from 6825 reaches 2048 where II alone ended at 2960). The neighbourhoods alone: a
    full-problem subsolver spends its share on a model it cannot move, while each neighbourhood fixes most of the
    schedule and re-solves the rest (6 of 7 large tuned rows lower on half the work, session 54; with the tie-breaker
    also where the groups are pinned: FA4's roles 3793 -> 2633 in 15 units, against 2697 on the whole portfolio and
    3038 there with II alone; sessions 53-58). Their bound comes from presolve and the LP, so the phase's floor is
    mostly the window's. Without symmetry breaking, which the schedule may not meet: a relaxation of the model with
    it, so CP-SAT's bound is still a floor. The neighbourhoods' schedule is then held and retimed (``retimed_found``:
    every op moved at once, which no neighbourhood does; random-handoff-16526 9033 -> 7544, docs/design.md §3.1h)."""
    if ctx.upper is None:
        return Outcome(Verdict.UNDECIDED, w.lo)
    v = build_model(ctx.problem, ctx.options, w.lo, max(w.hi, ctx.upper.ii), symmetry=False)
    hint_completed(ctx, v, ctx.upper)
    weight = upper(v.length) + 1  # II first, ties broken by length (lexicographic: length < weight)
    v.m.minimize(v.ii * weight + v.length)
    s = ctx.solver(budget.units(ctx.options.work))
    s.parameters.use_lns_only = True  # the neighbourhoods alone (above)
    status = s.solve(v.m, watching(ctx.options.progress, "II", ctx.work, weight))
    if status not in FEASIBLE:
        return Outcome(Verdict.UNDECIDED, w.lo)
    found = Found(v, s)
    floor = found.ii if status == cp_model.OPTIMAL else max(w.lo, leading_bound(s.best_objective_bound, weight))
    if floor < found.ii:  # every op moved at once, which the neighbourhoods do not do
        ctx.hold(found)
        found = retimed_found(ctx, floor, v) or found
    ctx.refuted(w.lo, floor - 1, "CP-SAT (the joint model, from the best schedule)")
    return Outcome(Verdict.FOUND, floor, found)


def retimed_found(ctx: Context, lo: int, v: ScheduleModel | None = None, until: float | None = None) -> Found | None:
    """The best schedule (``ctx.upper``) at the least II its orders allow (``twill.solver.retime``), then, up to the
    work mark ``until``, lowered by re-placing a few ops at a time under the retiming (``reinserted``); held and
    returned as a solution of ``v`` (by default the joint model over [lo, its II], built only where it is lower);
    None where nothing is lower. The joint model pinned to it checks it (``_at_schedule``)."""
    a = ctx.upper
    if a is None or not a.groups:
        return None
    got = retimed(ctx.problem, a.ii, a.starts, a.groups, solver(ctx.work, RETIME_UNITS, 1))
    how = "retimed"
    if until is not None:
        ii, starts = got or (a.ii, a.starts)
        placed = reinserted(ctx.problem, ii, starts, a.groups, register_rooms(ctx.problem, a.warps, a.regs), ctx.work,
                            until, lo)
        got, how = (placed, "ops re-placed") if placed is not None else (got, how)
    if got is None or got[0] < lo:
        return None
    v = v if v is not None else build_model(ctx.problem, ctx.options, lo, a.ii, symmetry=False)
    s = _at_schedule(ctx, v, replace(a, ii=got[0], starts=got[1]))
    if s is None:
        return None
    found = Found(v, s)
    ctx.hold(found)
    ctx.report(f"  {how}: II {found.ii}")
    return found


def hint_completed(ctx: Context, v: ScheduleModel, a: Assignment) -> None:
    """Hint ``v`` with the schedule ``a``: every variable where ``_completed`` completes it, else its decisions."""
    hints.hint(v, a)
    solution = _completed(ctx, v, a)
    if solution is not None:
        hints.hint_solution(v, solution)


def _completed(ctx: Context, v: ScheduleModel, a: Assignment) -> list[int] | None:
    """Every variable of ``v`` at the schedule ``a`` (``_at_schedule``), for a complete hint. CP-SAT does not always
    complete a hint of the decisions alone: on a 66-op body it had not in 5 units (docs/benchmarks_notes.md,
    session 15)."""
    s = _at_schedule(ctx, v, a)
    return None if s is None else hints.solution_of(s)


def _at_schedule(ctx: Context, v: ScheduleModel, a: Assignment) -> Solver | None:
    """A solver holding ``v`` at the schedule ``a``: ``v`` with a's II, starts, groups and budgets fixed, solved on one
    worker (a propagation, 0.00-0.04 units on the suite's bodies; ``hints.pinned`` keeps ``v``'s variable indices, so
    the solver reads ``v``); None where ``a`` breaks one of ``v``'s constraints."""
    s = solver(ctx.work, COMPLETE_HINT, 1)
    return s if s.solve(hints.pinned(v, a)) in FEASIBLE else None


COMPLETE_HINT = 1.0  # units: at most, for ``_completed``
DESCENT = Budget(share=1 / 4, at_least=5.0, attempt=1.0)
DESCENT_STEP = 8  # a probe of the descent lies at most 1/8 under the best schedule (``descent``)


def descent(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """Lower the best known schedule of the full problem by halving between the window's floor and
    its II; each probe is the full model at one II, started from the best schedule moved to that
    II (``hints.hint_rescaled``, groups and budgets kept), which CP-SAT repairs quickly where a
    cold search at one II is heavy-tailed. A probe lies at most 1/``DESCENT_STEP`` under the best schedule: a repair
    keeps the schedule's shape, and halving towards a floor far below asks it to shrink by a fifth or more at once,
    where it stays undecided and the descent's few units are gone (random-handoff-16524, fresh: floor 1568, schedule
    2704, its probe at 2135 undecided; at 2366 a schedule at once, and 2332 after the neighbourhoods;
    docs/benchmarks_notes.md, session 65). Within a third over the floor the halving probe lies that close already."""
    if ctx.upper is None:
        return Outcome(Verdict.UNDECIDED, w.lo)
    until = ctx.work.until(budget.units(ctx.options.work))
    best, found, failed = ctx.upper, None, w.lo - 1
    while failed + 1 < best.ii and ctx.work.spent < until and ctx.work.left() > 0:
        probe = max((failed + best.ii) // 2, best.ii - max(1, best.ii // DESCENT_STEP))  # always below the best
        v = build_model(ctx.problem, ctx.options, probe, probe)
        hints.hint_moved(v, best, probe)
        s = ctx.solver(min(budget.attempt, until - ctx.work.spent))
        status = s.solve(v.m)
        if status in FEASIBLE:
            found = Found(v, s)
            best = ctx.upper = hints.read(v, s.value, budgets=True)
            ctx.report(f"  descent: a schedule at II {probe}")
        else:
            failed = probe
            if status == cp_model.INFEASIBLE:  # a proof; on a monotone problem, of every II below too
                ctx.refuted(probe, probe, "the full model (descent)")
    if found is None or found.ii > w.hi:
        return Outcome(Verdict.UNDECIDED, w.lo)
    return Outcome(Verdict.FOUND, w.lo, found)


STAGED_DESCENT = Budget(share=0.0, at_least=3.0)  # the staged descent's whole budget: six probes that find nothing
STAGED_MISSES = (1, 2)  # the staged descent stops at its first probe without a schedule, or its second after a find


def staged_descent(ctx: Context, w: Window, budget: Budget) -> Outcome:
    """Lower the best known schedule by halving between the window's floor and its II with the joint model at one
    II solved on one worker for ``BISECT_STAGED`` units, branching on the stages first (``hints.stages_first``):
    where it finds a schedule it does so at once, and a schedule gained before the windows caps them and starts
    every later probe nearer the optimum. An undecided probe proves nothing; a refuted one (fixed search refutes
    what propagation does) is a proof. It stops at its first probe without a schedule, or, once it has found one,
    at its second in a row (``STAGED_MISSES``): what it spends undecided the bisection's refutations lack, and on rows
    whose proofs come at the budget's edge one unit decided them (random-recurrence-16512, where it finds nothing:
    613 optimal, and 623 >= 600 after two misses; fresh one-tile FA h100 at head_dim 64: floor 1651, and 1612),
    while where it finds, a miss after a run of finds is often a probe just too low (one-tile FA b200: 1785 with
    two misses, 1798 with one)."""
    if ctx.upper is None:
        return Outcome(Verdict.UNDECIDED, w.lo)
    until = ctx.work.until(budget.units(ctx.options.work))
    found, failed, top, misses = None, w.lo - 1, ctx.upper.ii, 0
    pins: tuple[tuple[str, int], ...] = ()  # the best schedule's groups, once the first free probe missed
    while failed + 1 < top and until - ctx.work.spent > 0.01 and ctx.work.left() > 0 and misses < STAGED_MISSES[found is not None]:
        probe = (failed + top) // 2
        units = min(BISECT_STAGED, until - ctx.work.spent)
        options = replace(ctx.options, fixed_groups=pins) if pins else ctx.options
        status, at = _solve_in_turn(ctx, build_model(ctx.problem, options, probe, probe), probe,
                                    [(Start.STAGED, units, 0, 1)])
        if pins:
            at = None if at is None else _freed(ctx, at)
            status = cp_model.UNKNOWN if status == cp_model.INFEASIBLE else status  # proves nothing for free groups
        elif found is None and at is None and status != cp_model.INFEASIBLE and (pins := _pins(ctx)):
            continue  # the same probe again, with the groups pinned
        else:
            ctx.staged = ctx.staged or at is not None
        if at is not None:
            found, top, misses = at, probe, 0
            ctx.hold(at)
            ctx.report(f"  staged descent: a schedule at II {probe}" + (" (the best schedule's groups)" if pins else ""))
            continue
        failed, misses = probe, misses + 1  # a find resets the count
        if status == cp_model.INFEASIBLE:
            ctx.refuted(probe, probe, "the full model (staged descent)")
    if found is None or found.ii > w.hi:
        return Outcome(Verdict.UNDECIDED, w.lo)
    return Outcome(Verdict.FOUND, w.lo, found)


def _pins(ctx: Context) -> tuple[tuple[str, int], ...]:
    """The best schedule's groups as pins for the staged descent's probes, where the first free probe neither found nor
    refuted (empty where the groups are pinned already or there are none). With the groups free, the stages-first
    search also picks the groups, and on a body whose register file admits few groupings it picks ones without a
    schedule: fa_fwd at head_dim 256 with two sub-tiles on h100 (suite, tuned) missed its first probe (6143) and ended
    at the constructive schedule's 8191 >= 4096, where the same probes with that schedule's groups pinned reach 4223
    (2.6 units from the first probe) and the search 4214 (docs/benchmarks_notes.md, session 64). Only after a first
    miss: where the free search finds, it keeps the choice of groups, and every such body's descent is as before."""
    if ctx.options.fixed_groups or ctx.options.swp_only:
        return ()
    return tuple(sorted(ctx.upper.groups.items()))


def _freed(ctx: Context, found: Found) -> Found:
    """``found`` (a schedule of a model with its groups pinned) as a schedule of the free model at its II
    (``_at_schedule``). Where that fails (the schedule breaks a cut of the free model's symmetry breaking, which pinned
    models leave out: the sub-tiles' order) the schedule stays with its pinned model: still valid, and its secondary
    objectives are then optimised within those groups."""
    a = hints.read(found.model, found.solver.value, budgets=True)
    v = build_model(ctx.problem, ctx.options, a.ii, a.ii)
    s = _at_schedule(ctx, v, a)
    return found if s is None else Found(v, s)


def _groups_free(ctx: Context) -> bool:
    return not ctx.options.swp_only and not ctx.options.fixed_groups


# Tried in order after an undecided window, each below the least II found so far, until a schedule
# whose groups are the search's own choice is found (the split's schedule is only an incumbent).
# descent and memory_probe start at the undecided window's floor (refuting is what stalled; the
# optimum may sit inside), the others above the window.
UNDECIDED_PHASES: tuple[tuple[Phase, bool], ...] = (
    (Phase("descent", lambda ctx: ctx.upper is not None, descent, DESCENT), True),
    (Phase("memory_probe", lambda ctx: ctx.memory, memory_probe, COMPLETE), True),
    (Phase("triton_split", _groups_free, triton_split, SPLIT), False),
    (Phase("fixed_probes", lambda ctx: True, fixed_probes, PROBE_FULL), False),
)


def refute_below(ctx: Context, lo: int, ii: int) -> bool:
    """Whether the memory relaxation refutes every II in [lo, ii - 1]: then a schedule at ``ii``
    found by a probe is optimal. Refuting is often quick where finding was slow."""
    if lo >= ii:
        return lo == ii
    if not ctx.memory_may_refute(ii - 1):
        return False
    until = ctx.work.until(REFUTE.units(ctx.options.work))
    refuted = _memory_solve(ctx, lo, ii - 1, until)[2] == cp_model.INFEASIBLE
    if refuted:
        ctx.refuted(lo, ii - 1, "the memory relaxation")
        ctx.report(f"II window [{lo}, {ii - 1}]: the memory relaxation proves empty")
    return refuted
