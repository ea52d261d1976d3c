"""Is feasibility monotone in II? The joint model at every fixed II from each tiny random body's lower bound
up to 40 above it (issue 16, docs/design.md §3.1e). Not a test: it takes minutes.

    python bench/monotone_check.py 0 700
    python bench/monotone_check.py --suite     # which of the generalization suite's bodies the claim covers

Prints every body where an II with a schedule is followed by a refuted one (none is expected where
``bounds.monotone_in_ii`` holds; bodies with segments after issue are checked too, and counted apart), then
the counts.
"""

from __future__ import annotations

import argparse

from ortools.sat.python import cp_model

from twill.bounds import lower_bound, monotone_in_ii, sequential_ii
from twill.errors import InfeasibleError
from twill.problem import Problem, build_problem
from twill.random_loops import random_body, tiny_arch
from twill.solver import SolveOptions
from twill.solver.model import build_model

SPAN = 40  # IIs checked above each body's lower bound


def statuses(problem: Problem, lo: int, hi: int) -> list[tuple[int, int]]:
    """(II, CP-SAT status) of the joint model at each II in [lo, hi], one worker."""
    out = []
    for ii in range(lo, hi + 1):
        s = cp_model.CpSolver()
        s.parameters.num_workers = 1
        s.parameters.max_time_in_seconds = 20
        out.append((ii, s.solve(build_model(problem, SolveOptions(workers=1), ii, ii).m)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first", type=int, nargs="?", default=0, help="first seed")
    ap.add_argument("last", type=int, nargs="?", default=700, help="one past the last seed")
    ap.add_argument("--suite", action="store_true", help="only count the suite's bodies with monotone_in_ii")
    args = ap.parse_args()
    if args.suite:
        return suite_counts()
    counts = {"bodies": 0, "with segments after issue": 0, "not up-closed": 0, "undecided IIs": 0}
    for seed in range(args.first, args.last):
        p = build_problem(random_body(seed, 2 + seed % 5, profile="tiny"), tiny_arch(seed))
        try:
            lb = lower_bound(p, SolveOptions(workers=1))
        except InfeasibleError:  # no II at all: nothing to compare
            continue
        found = statuses(p, lb, min(sequential_ii(p), lb + SPAN))
        counts["bodies"] += 1
        counts["with segments after issue"] += not monotone_in_ii(p)
        counts["undecided IIs"] += sum(st == cp_model.UNKNOWN for _, st in found)
        seen = False
        for ii, st in found:
            seen = seen or st in (cp_model.OPTIMAL, cp_model.FEASIBLE)
            if seen and st == cp_model.INFEASIBLE:
                counts["not up-closed"] += 1
                print(f"seed {seed}: II {ii} refuted above a schedule (monotone_in_ii: {monotone_in_ii(p)})", flush=True)
                break
    print(counts)


def suite_counts() -> None:
    """Per half of bench/suite, how many bodies have every segment at issue (the bisection applies)."""
    from suite.cases import HALVES, CaseUnavailable, build_case, read_manifest  # bench/ is the script's path

    for half in HALVES:
        cases = read_manifest(half)["cases"]
        covered, absent = 0, 0
        for case in cases:
            try:
                covered += monotone_in_ii(build_case(case))
            except CaseUnavailable:
                absent += 1
        print(f"{half}: {covered} of {len(cases)} bodies monotone ({absent} not on this machine)")


if __name__ == "__main__":
    main()
