"""Decide a window of II grouping by grouping (issue 16, a prototype of the next search phase; not used by twill).

    python bench/grouping_probe.py BODY.json --arch h100 --lo 653 --hi 726 [--seconds 300] [--per 20]

The structure relaxation (``twill.solver.structure``) at ``hi`` proposes a grouping (which op each warp group
issues); the joint model pinned to it (``SolveOptions.fixed_groups``) minimises II in [lo, hi]. A schedule lowers
``hi`` and the structure model is rebuilt there; a grouping refuted on [lo, hi] gets a no-good cut, which stays
valid for every lower ``hi``; one undecided within ``--per`` seconds is set aside (cut too, and counted). When the
structure model has no grouping left, every II in [lo, hi] is refuted except through the undecided groupings.
Sound because each structure condition is monotone in II (a grouping with a schedule at some II <= hi is
feasible in the relaxation at hi) and both models label groups by first use. Wall-clock budgets: a probe, not a
reproducible search.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from ortools.sat.python import cp_model

from twill.arch.registry import get_arch
from twill.body_json import read_body
from twill.options import SolveOptions
from twill.problem import Problem, build_problem
from twill.solver.model import build_model
from twill.solver.run import PROBING_LEVEL
from twill.solver.structure import StructureModel, build_structure

Grouping = dict[str, int]


def structure(problem: Problem, options: SolveOptions, hi: int, excluded: list[Grouping]) -> StructureModel:
    """The structure relaxation at ``hi`` without the groupings already decided."""
    s = build_structure(problem, options, hi)
    for g in excluded:
        exclude(s, g)
    return s


def exclude(s: StructureModel, groups: Grouping) -> None:
    """No-good cut: not exactly this membership."""
    s.m.add_bool_or([~s.x[name, g] for name, g in groups.items()])


def cpsat(seconds: float, workers: int) -> cp_model.CpSolver:
    """A CP-SAT solver on a wall-clock limit (a probe, not the search's work budget), at the search's probing
    level (``run.PROBING_LEVEL``: level 2 aborts CP-SAT 9.15 on some models)."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.cp_model_probing_level = PROBING_LEVEL
    return solver


def pinned(problem: Problem, options: SolveOptions, groups: Grouping, lo: int, hi: int, seconds: float):
    """The least II in [lo, hi] with ``groups`` pinned: (status, II or None)."""
    v = build_model(problem, replace(options, fixed_groups=tuple(groups.items())), lo, hi)
    v.m.minimize(v.ii)
    solver = cpsat(seconds, options.workers)
    status = solver.solve(v.m)
    return status, (int(solver.value(v.ii)) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("body")
    ap.add_argument("--arch", required=True)
    ap.add_argument("--lo", type=int, required=True)
    ap.add_argument("--hi", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--per", type=float, default=20.0, help="seconds per pinned solve")
    args = ap.parse_args(argv)
    problem = build_problem(read_body(args.body), get_arch(args.arch))
    options = SolveOptions(workers=2)
    names = [op.name for op in problem.ops]
    refuted: list[Grouping] = []
    undecided: list[Grouping] = []
    lo, hi, best, n, t0 = args.lo, args.hi, None, 0, time.time()
    s = structure(problem, options, hi, [])
    while time.time() - t0 < args.seconds and lo <= hi:
        solver = cpsat(10, options.workers)
        status = solver.solve(s.m)
        if status == cp_model.INFEASIBLE:
            print(f"[{time.time() - t0:.0f} s] no grouping left at hi {hi}: [{lo}, {hi}] refuted"
                  + (f" except through {len(undecided)} undecided groupings" if undecided else ""))
            break
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            print("the structure relaxation itself is undecided")
            break
        groups = {name: int(solver.value(s.group_of[name])) for name in names}
        n += 1
        status, ii = pinned(problem, options, groups, lo, hi, args.per)
        if ii is not None:
            best = ii
            print(f"[{time.time() - t0:.0f} s] grouping {n}: a schedule at II {ii}"
                  + (" (this grouping's optimum)" if status == cp_model.OPTIMAL else ""), flush=True)
            if status == cp_model.OPTIMAL:
                refuted.append(groups)
            hi = ii - 1
            s = structure(problem, options, hi, refuted + undecided)
            continue
        (refuted if status == cp_model.INFEASIBLE else undecided).append(groups)
        exclude(s, groups)
        if status != cp_model.INFEASIBLE:
            print(f"[{time.time() - t0:.0f} s] grouping {n}: undecided", flush=True)
    print(f"best II {best}; {n} groupings: {len(refuted)} refuted, {len(undecided)} undecided; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
