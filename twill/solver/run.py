"""Running CP-SAT reproducibly: a work budget in deterministic units, a wall-clock safety cap,
restarts, and progress reports.

Every decision of the search reads the deterministic work that its CP-SAT solves reported (about
one second of one core per unit, whatever else the machine runs), never the wall clock; with one
worker, or several interleaved in fixed batches, CP-SAT itself is deterministic. So the same
input, options and worker count take the same path and give the same schedule under any load.
Only the wall-clock cap (``--time-limit``) depends on the machine: when it stops a solve, the
``Work`` is marked cut, the search winds down at once, and the result says so.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ortools.sat.python import cp_model, cp_model_helper

__all__ = ["Budget", "Work", "Solver", "solver", "decision_solver", "worker_count", "attempts", "Progress", "watching",
           "leading_bound", "SEARCH_AND_BOUND", "RESTARTS", "has_hint"]

# Two subsolvers that together both find and refute: the LP-heavy search and restarts (used when
# there are exactly two workers; larger machines keep CP-SAT's own portfolio, which holds both).
SEARCH_AND_BOUND = ("max_lp", "quick_restart")
# Short decisions (the structure relaxation's, the memory relaxation's satisfaction solves): CP-SAT's restarts with
# the LP on ONE worker, whatever the worker count. Deterministic multi-worker search (interleave_search) runs each
# subsolver in tasks of one deterministic unit and ends a batch only when all of its tasks end, so a solve that one
# subsolver decides early is billed the others' whole tasks, and the restarts subsolver needed more work interleaved
# than alone. fa_fwd 2 sub-tiles on b200, every solve replayed: 15 memory
# relaxation solves 10.4 units interleaved, 2.8 alone; 24 structure solves 2.18 and 0.04; the same verdict in each
# (docs/benchmarks_notes.md, session 47).
RESTARTS = ("quick_restart",)
# CP-SAT 9.15's deepest probing (level 2, the default) aborts the whole process on some hinted models in
# interleaved search ("Check failed: heuristics.fixed_search != nullptr"; a window of fa_fwd at head_dim 64,
# block_n 128 on h100 with any one hinted variable, tests/test_solver.py); level 1 keeps presolve's probing
# of clauses and never takes that path. An abort cannot be caught, so every solve runs at level 1.
PROBING_LEVEL = 1

# CP-SAT 9.15's hint phase (QuickSolveWithHint: the search follows the hint for up to `hint_conflict_limit`
# conflicts and reports an infeasibility it proves to every subsolver) declared a feasible model infeasible in
# interleaved search: the window [1643, 1737] of one-tile FA forward on b200, minimising II from a relaxation's
# partial hint, came back INFEASIBLE (two runs of three) where II 1737 has a schedule the validator accepts
# (tests/data/cpsat_hint_false_infeasible.pb, tests/test_solver.py). Without the hint every run finds a schedule.
# The phase cannot be switched off (`hint_conflict_limit` 0 or 1 makes 9.15 abort in interleaved search whenever
# loading refutes a model, hinted or not), and it is what repairs a schedule moved to a nearby II (the descent).
# So a hinted interleaved solve keeps its hint for finding, and a refutation from it is confirmed by the same solve
# without the hint (``Solver.solve``); schedules need no such check: every one is validated.

# CP-SAT 9.15's `fixed` subsolver corrupts the heap in hinted interleaved search (upstream google/or-tools#5048
# reports a use-after-free in GenericLiteralWatcher::Untrail under interleaved search with hints, fixed after 9.15):
# the stored window above, solved with its hint at 2 workers and 12 units, aborted ("free(): invalid pointer",
# "free(): invalid next size") or segfaulted in 6 of 9 runs (3 of them with LNS off) and gave INFEASIBLE (2) or
# UNKNOWN (1) in the others.
# Left out, 10 of 10 runs gave UNKNOWN, as the hint-free solve does; but it is what follows a hint, and without it
# the shared fa_bwd graph lost its proof (1281 >= 1280) and the improvement phase on FA forward h100 stopped at
# 2355 (6 units) where it had proven 2048 in 5.6. A subsolver of our own in its place, branching as far as the
# hint goes (PARTIAL_FIXED_SEARCH; twill's models declare no strategy), gave FEASIBLE with the same work in 6 of 6
# runs of the stored window, and proves the improvement phase's 2048 in 5.58 units (FIXED_SEARCH or HINT_SEARCH
# in its place: 2393 and not 2048 within 12 units). So a hinted multi-worker solve that runs CP-SAT's own
# portfolio swaps `fixed` for it; hint-free solves keep CP-SAT's portfolio as it is. It is not `fixed` everywhere:
# four suite cases lost their proofs with it (three many-unit bodies, e.g. random-units-16018: 1344 optimal -> 2271,
# and fa_bwd with 2 sub-tiles on b200: 2049 >= 2048); fixed search in `fixed`'s own place in the portfolio regains
# the units bodies' and corrupts the heap again (docs/benchmarks_notes.md).
HINT_SAFE_FIXED = ('subsolver_params { name: "fixed_search" search_branching: PARTIAL_FIXED_SEARCH } '
                   'extra_subsolvers: "fixed_search" ignore_subsolvers: "fixed"')


@dataclass(frozen=True, slots=True)
class Budget:
    """Deterministic work one phase may spend: ``share`` of the solve's work budget, at least
    ``at_least`` units, and never more than is left. ``attempt`` is the length of a phase's first
    restart (each next one ``growth`` times longer, with the next seed) where it restarts."""

    share: float
    at_least: float
    attempt: float = 0.0
    growth: float = 1.5

    def units(self, total: float) -> float:
        return max(self.at_least, self.share * total)


@dataclass
class Work:
    """The search's budget in CP-SAT deterministic units, and the wall-clock safety cap."""

    start: float  # time.monotonic() at the start of the solve
    deadline: float  # time.monotonic() at which the wall-clock cap stops every solve
    limit: float  # deterministic units the search may spend
    spent: float = 0.0
    cut: bool = False
    first: float | None = None  # wall seconds at which the first validated schedule was in hand

    def found_first(self) -> None:
        """Record now as the moment the search first held a validated schedule (the answer from then on,
        should the wall-clock cap cut the rest)."""
        if self.first is None:
            self.first = self.seconds()

    @classmethod
    def starting_now(cls, seconds: float, units: float) -> Work:
        now = time.monotonic()
        return cls(start=now, deadline=now + seconds, limit=units)

    def left(self) -> float:
        return 0.0 if self.cut else max(0.0, self.limit - self.spent)

    def until(self, units: float) -> float:
        """The work mark ``units`` from now, within the budget."""
        return self.spent + min(self.left(), units)

    def wall_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def check_wall(self) -> bool:
        """Whether the wall-clock cap has passed (marking the work cut): pure-Python steps call it."""
        if self.wall_left() <= 0:
            self.cut = True
        return self.cut

    def seconds(self) -> float:
        """Wall seconds since the start, for progress reports and the result (never for decisions)."""
        return time.monotonic() - self.start


class Solver(cp_model.CpSolver):
    """A CP-SAT solver that charges its deterministic work to a ``Work`` and stops at the
    wall-clock cap; a solve that the cap stopped before its own budget marks the work as cut."""

    def __init__(self, work: Work) -> None:
        super().__init__()
        self.work = work
        # Whether a hinted multi-worker refutation is confirmed without the hint before it is returned. A
        # caller that only steers by the answer (a probe whose refutation proves nothing, the proof coming
        # from a hint-free solve after it) turns this off: the confirmation would cost it a second solve.
        self.confirm_refutations = True

    def solve(self, model: cp_model.CpModel, solution_callback: cp_model.CpSolverSolutionCallback | None = None) -> int:
        hinted = self.parameters.num_workers > 1 and has_hint(model)
        refuted = hinted and self._loading_refutes(model)
        self.parameters.max_time_in_seconds = max(0.01, self.work.wall_left())
        if refuted:
            with _without_hint(model):  # refuted at loading: the hint-free solve says so at once
                status = super().solve(model, solution_callback)
        else:
            with _hint_safe(self, hinted):
                status = super().solve(model, solution_callback)
            if hinted and self.confirm_refutations and status == cp_model.INFEASIBLE:  # the hint phase's refutations are not trusted
                status = self._confirm_without_hint(model, solution_callback)
        used = self.response_proto.deterministic_time
        self.work.spent += used
        if status in (cp_model.UNKNOWN, cp_model.FEASIBLE) and used < 0.999 * self.parameters.max_deterministic_time:
            self.work.check_wall()
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"internal error: invalid CP-SAT model ({model.validate()[:300]})")
        return status

    def _confirm_without_hint(self, model: cp_model.CpModel,
                              solution_callback: cp_model.CpSolverSolutionCallback | None) -> int:
        """The same solve without the hint, on what is left of its budget: a refutation stands only if this
        one proves it too (CP-SAT's hint phase refuted a feasible window: the note under ``PROBING_LEVEL``)."""
        used = self.response_proto.deterministic_time
        self.work.spent += used
        self.parameters.max_deterministic_time = max(0.01, self.parameters.max_deterministic_time - used)
        with _without_hint(model):
            return super().solve(model, solution_callback)

    def _loading_refutes(self, model: cp_model.CpModel) -> bool:
        """Whether loading the model with the strongest LP among the subsolvers refutes it (one worker, no
        conflict allowed, no hint). Why: in CP-SAT 9.15's interleaved search, a subsolver whose loading
        proves the model infeasible goes on to follow the hint before the others have heard, and aborts
        the whole process ("Check failed: heuristics.fixed_search != nullptr" in ConfigureSearchHeuristics,
        via QuickSolveWithHint): max_lp did so on a window of a 12-op random body, tests/test_solver.py.
        No caller can catch an abort, so such a model is solved without its hint."""
        probe = cp_model.CpSolver()
        subsolvers = list(self.parameters.subsolvers)
        probe.parameters.linearization_level = 2 if not subsolvers or "max_lp" in subsolvers else 1
        probe.parameters.add_lp_constraints_lazily = probe.parameters.linearization_level < 2
        probe.parameters.num_workers = 1
        probe.parameters.max_number_of_conflicts = 0
        probe.parameters.cp_model_probing_level = self.parameters.cp_model_probing_level
        probe.parameters.max_deterministic_time = self.parameters.max_deterministic_time
        probe.parameters.max_time_in_seconds = max(0.01, self.work.wall_left())
        with _without_hint(model):
            status = probe.solve(model)
        self.work.spent += probe.response_proto.deterministic_time
        return status == cp_model.INFEASIBLE


@contextmanager
def _hint_safe(solver: cp_model.CpSolver, hinted: bool) -> Iterator[None]:
    """The solver with CP-SAT's `fixed` subsolver swapped for ``HINT_SAFE_FIXED`` where the solve is hinted
    and runs CP-SAT's own portfolio, and its parameters put back after (a hint-free solve, the
    confirmation among them, runs the portfolio unchanged)."""
    if not hinted or len(solver.parameters.subsolvers) > 0:
        yield
        return
    saved = cp_model_helper.SatParameters()
    saved.copy_from(solver.parameters)
    solver.parameters.merge_text_format(HINT_SAFE_FIXED)
    try:
        yield
    finally:
        solver.parameters.copy_from(saved)


def has_hint(model: cp_model.CpModel) -> bool:
    """Whether ``model`` carries a solution hint with at least one value, read without creating one: reading
    ``model.proto.solution_hint`` adds an empty hint to the model (the field is a mutable sub-message), and CP-SAT
    runs its hint phase on any model that has a hint, empty or not. An empty hint put there by such a read made a
    hint-free two-worker solve of the memory relaxation abort the process in 5 of 5 replays ("free(): invalid
    pointer", CP-SAT 9.15's heap corruption under hints in interleaved search); without it, 3 of 3 were clean
    (FA4's configuration with free groups at 150 units; docs/benchmarks_notes.md, session 55)."""
    return model.proto.has_solution_hint() and len(model.proto.solution_hint.vars) > 0


@contextmanager
def _without_hint(model: cp_model.CpModel) -> Iterator[None]:
    """The model with its solution hint taken off, and put back after (a model without one is left as it is:
    see ``has_hint``)."""
    if not model.proto.has_solution_hint():
        yield
        return
    hint = model.proto.solution_hint
    saved = (list(hint.vars), list(hint.values))
    model.clear_hints()
    try:
        yield
    finally:
        if saved[0]:
            hint = model.proto.solution_hint
            hint.vars.extend(saved[0])
            hint.values.extend(saved[1])


def worker_count(workers: int) -> int:
    """The CP-SAT workers a ``workers`` option means: itself, or one per core where it is 0."""
    return workers or os.cpu_count() or 1


def solver(work: Work, units: float, workers: int, portfolio: tuple[str, ...] = (), seed: int = 0,
           linearization: int | None = None) -> Solver:
    """A CP-SAT solver that may spend ``units`` of deterministic work, reproducibly: one worker, or
    several interleaved in fixed batches (``interleave_search``), so the same model and worker count
    give the same answer under any load. ``portfolio`` names the subsolvers when there are exactly
    that many workers; ``linearization`` sets CP-SAT's ``linearization_level`` (its LP's strength)."""
    s = Solver(work)
    n = worker_count(workers)
    s.parameters.num_workers = n
    if n > 1:
        s.parameters.interleave_search = True
        s.parameters.interleave_batch_size = n
    if portfolio and n == len(portfolio):
        s.parameters.subsolvers.extend(portfolio)
    s.parameters.max_deterministic_time = max(0.01, min(units, work.left()))
    s.parameters.random_seed = seed
    s.parameters.cp_model_probing_level = PROBING_LEVEL
    if linearization is not None:
        s.parameters.linearization_level = linearization
    return s


def decision_solver(work: Work, units: float, seed: int = 0) -> Solver:
    """A solver for a short decision (the structure relaxation's, the memory relaxation's satisfaction solves): one
    worker with CP-SAT's restarts whatever the worker count, since interleaved search bills whole one-unit tasks
    (``RESTARTS``)."""
    return solver(work, units, 1, RESTARTS, seed)


def attempts(first: float, until: float, work: Work, seed: int = 0, growth: float = 1.5) -> Iterator[tuple[float, int]]:
    """(units, random seed) of each restart until the work mark ``until``: the first attempt
    spends ``first`` units, each next one ``growth`` times more, with the next seed. Where a solve's
    work is heavy-tailed in the seed, short attempts with fresh seeds end sooner than one long one."""
    units = first
    while True:
        yield min(units, until - work.spent), seed
        if until - work.spent <= 0.01 or work.left() <= 0:
            return
        units, seed = growth * units, seed + 1


class Progress(cp_model.CpSolverSolutionCallback):
    """Reports each improving solution: phase, incumbent, proven bound, elapsed wall seconds. ``scale`` is the
    weight of the reported quantity in a lexicographic objective (quantity x scale + tie-breaker < scale), so the
    report shows the quantity, not the weighted sum."""

    def __init__(self, report: Callable[[str], None], phase: str, work: Work, scale: int = 1) -> None:
        super().__init__()
        self.report, self.phase, self.work, self.scale = report, phase, work, scale

    def on_solution_callback(self) -> None:
        incumbent = int(round(self.objective_value)) // self.scale
        bound = leading_bound(self.best_objective_bound, self.scale)
        self.report(f"  {self.phase}: incumbent {incumbent}, bound {bound}, {self.work.seconds():.1f}s")


def watching(report: Callable[[str], None] | None, phase: str, work: Work, scale: int = 1) -> Progress | None:
    """A ``Progress`` callback where progress is reported, else none. CP-SAT 9.15 corrupts its heap now and then in a
    hinted two-worker interleaved solve, and a Python solution callback (run on its worker threads) makes that
    likelier: FA4's improvement solve at 75 units, replayed, aborted the process in 2 of 4 runs with one attached and
    in 1 of 8 without (docs/benchmarks_notes.md, session 58). So a quiet solve attaches none; the answer is the same
    either way (interleaved search is deterministic)."""
    return Progress(report, phase, work, scale) if report else None


def leading_bound(bound: float, scale: int) -> int:
    """The floor on the leading quantity q of an objective q x scale + t with 0 <= t < scale, from CP-SAT's bound on
    the whole: q x scale >= bound - t > bound - scale, so q >= floor(ceil(bound) / scale)."""
    return math.ceil(bound) // scale
