"""Baselines a compiler would use, set beside the proven optimum (``twill compare``).

Two kinds of baseline:

* restrictions of the joint CP-SAT model (``SolveOptions.fixed_groups``, ``single_stage``): the
  best schedule a strategy allows, so their II can never beat the proven optimum;
* Rau's iterative modulo scheduling under Triton's fixed warp split (``twill.solver.ims``): what a
  compiler's heuristic pipeliner actually finds, with no optimality claim.

Every schedule in the table passes the same validator, and ``compare`` cross-checks the rows: a
valid schedule below a proven optimum or below the proven lower bound would mean a bug in the
solver or the validator, so it is reported as an internal error rather than printed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from twill.errors import InfeasibleError, TwillError
from twill.problem import Problem
from twill.schedule import Schedule
from twill.solver import SolveOptions, lower_bound, solve
from twill.solver.ims import ImsResult, ims_swp, ims_triton_split
from twill.solver.strategies import producer_consumer_split
from twill.validate import validate

__all__ = ["StrategyResult", "triton_split", "compare", "swp_reference", "table"]

HEADER = ["strategy", "II", "throughput vs optimum", "status", "groups", "warps x regs/thread", "solve s"]


@dataclass(frozen=True, slots=True)
class StrategyResult:
    """One row: the strategy, its schedule (None when none was found) and how long it took.
    ``heuristic`` rows make no optimality claim; the others are optimal for their restriction
    when their status says so."""

    strategy: str
    schedule: Schedule | None
    seconds: float
    note: str = ""
    heuristic: bool = False


def triton_split(problem: Problem) -> tuple[tuple[str, int], ...]:
    """Triton's warp specialisation: loads on a producer group, everything else on one consumer."""
    return producer_consumer_split(problem)


def _run(name: str, problem: Problem, options: SolveOptions) -> StrategyResult:
    t = time.monotonic()
    try:
        return StrategyResult(name, solve(problem, options), time.monotonic() - t)
    except InfeasibleError as err:
        return StrategyResult(name, None, time.monotonic() - t, str(err).split(": ", 1)[-1])


def _heuristic(name: str, result: ImsResult) -> StrategyResult:
    if result.schedule is not None:
        note = ""
    elif result.impossible:
        note = f"infeasible: {result.impossible}"
    else:
        note = f"no schedule up to a sequential iteration; last failure: {result.reason}"
    return StrategyResult(name, result.schedule, result.seconds, note, heuristic=True)


def compare(problem: Problem, options: SolveOptions) -> list[StrategyResult]:
    """The optimum first, then: Rau's IMS under Triton's split (the compiler's heuristic), the
    best schedule under Triton's split, and warp specialisation without a cross-iteration
    software pipeline.

    Raises
    ------
    TwillError
        When a validated row beats a proven optimum or the proven lower bound (an internal error).
    """
    joint = replace(options, swp_only=False)
    results = [
        _run("twill (joint optimum)", problem, joint),
        _heuristic("Rau IMS (heuristic SWP), Triton's split", ims_triton_split(problem, joint)),
        _run("SWP, then Triton's fixed warp split", problem, replace(joint, fixed_groups=triton_split(problem))),
        _run("warp specialization, no cross-iteration pipelining", problem, replace(joint, single_stage=True)),
    ]
    _cross_check(problem, results, results[0].schedule)
    return results


def swp_reference(problem: Problem, options: SolveOptions) -> list[StrategyResult]:
    """Pure modulo scheduling (no warp groups, registers or memory), by IMS and by CP-SAT: a
    relaxation of the joint problem, so its II may be below the joint optimum."""
    swp = replace(options, swp_only=True)
    results = [_heuristic("Rau IMS", ims_swp(problem, swp)), _run("CP-SAT", problem, swp)]
    _cross_check(problem, results, results[1].schedule)
    return results


def _cross_check(problem: Problem, results: list[StrategyResult], best: Schedule | None) -> None:
    """Every printed schedule validates, and none beats the exact search's proven optimum or bound."""
    for r in results:
        s = r.schedule
        if s is None:
            continue
        violations = validate(problem, s)
        if violations:
            raise TwillError(f"internal error: {r.strategy!r} produced a schedule that fails validation: "
                             f"{violations[0]}")
        if best is not None and (s.ii < best.ii_lower_bound or (best.status == "optimal" and s.ii < best.ii)):
            raise TwillError(f"internal error: {r.strategy!r} found a valid II {s.ii} below the exact search's "
                             f"proven bound {best.ii_lower_bound} (status {best.status}, II {best.ii})")


def _registers(s: Schedule) -> str:
    if s.swp_only or any(g.regs_per_thread is None for g in s.groups):
        return "-"
    return " + ".join(f"{g.warps}x{g.regs_per_thread}" for g in s.groups)


def table(problem: Problem, results: list[StrategyResult],
          reference: Sequence[StrategyResult] = ()) -> tuple[list[list[str]], list[str]]:
    """Rows under ``HEADER`` and the notes printed below them.

    Throughput relative to the optimum is optimum II / II. When the joint search found no
    schedule, the reference is its proven lower bound and the percentage is an upper bound
    ("<= x%": the problem's lower bound, the search may have proven more); when it found one
    without proving it, the note says so.
    """
    best = results[0].schedule
    lower = best.ii_lower_bound if best else lower_bound(problem, SolveOptions())
    rows, notes = [], []
    for r in results:
        s = r.schedule
        if s is None:
            rows.append([r.strategy, "-", "-", "none found", "-", "-", f"{r.seconds:.2f}"])
            continue
        rel = f"{100 * best.ii / s.ii:.1f}%" if best is not None else f"<= {100 * lower / s.ii:.1f}%"
        status = "heuristic" if r.heuristic else s.status
        rows.append([r.strategy, str(s.ii), rel, status, str(len(s.groups)), _registers(s), f"{r.seconds:.2f}"])
    if best is not None and best.status != "optimal":
        notes.append(f"the joint search hit its time limit: II {best.ii} is not proven optimal (every II below "
                     f"{best.ii_lower_bound} is proven infeasible); percentages are relative to {best.ii}")
    elif best is None:
        notes.append(f"the joint search found no schedule in its time limit ({results[0].note}); "
                     "percentages are relative to the proven lower bound, so they are upper bounds")
    notes.append("status: optimal = the best the strategy allows, proven (CP-SAT); feasible = its time limit hit; "
                 "heuristic = Rau's IMS, validated, no optimality claim")
    if reference:
        parts = [f"{r.strategy} II {r.schedule.ii}" if r.schedule else f"{r.strategy} none found" for r in reference]
        notes.append("warps ignored (pure modulo scheduling, a relaxation of the problem above): " + "; ".join(parts))
    return rows, notes

