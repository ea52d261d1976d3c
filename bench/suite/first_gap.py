"""Each suite case's first schedule against its floor, where the II search starts (never a test).

Which rows can a change to the search's later phases reach? One that only acts far above the floor (the descent's
step, ``phases.DESCENT_STEP``: no probe changes unless the best schedule lies more than 4/3 over the floor) reaches
only the rows whose first schedule lies that far over the floor when the II search starts, since the best schedule
only falls and the floor only rises from there. This runs each case up to that point (the bounds and first-schedule
phases, deterministic in work) and stops it there; a case whose first schedule already meets its floor never
enters the II search and prints "meets its floor".

    python bench/suite/first_gap.py --half both [--over 1.3333] [--only ID,...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, so that "suite" is importable

from suite.cases import HALVES, CaseUnavailable, build_case, read_manifest  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.problem import Problem  # noqa: E402
from twill.solver import search  # noqa: E402


class _Entered(Exception):
    """Raised at the II search's entry (or at the answer, where the search never starts), to stop the solve."""

    def __init__(self, floor: int | None = None, first: int | None = None):
        super().__init__()
        self.floor, self.first = floor, first


def _enter(ctx: search.Context, lb: int, cap: int) -> search._IIResult:
    raise _Entered(lb, ctx.upper.ii if ctx.upper is not None else None)


def _answer(*args: object, **kwargs: object) -> None:
    raise _Entered()


def first_gap(problem: Problem, work: float) -> tuple[int | None, int | None]:
    """(floor, first schedule's II) where the II search starts; (None, None) where it never does."""
    saved = search._search_ii, search._finish
    search._search_ii, search._finish = _enter, _answer
    try:
        search.solve(problem, SolveOptions(time_limit=600, workers=2, work_limit=work))
    except _Entered as at:
        return at.floor, at.first
    finally:
        search._search_ii, search._finish = saved
    return None, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=[*HALVES, "both"], required=True)
    ap.add_argument("--over", type=float, default=4 / 3, help="flag first schedules above this times the floor")
    ap.add_argument("--work-limit", type=float, default=30.0, help="the suite's work per case (the phases' shares)")
    ap.add_argument("--only", default="", help="comma-separated case ids")
    args = ap.parse_args()
    only = {c for c in args.only.split(",") if c}
    for half in HALVES if args.half == "both" else (args.half,):
        for case in read_manifest(half)["cases"]:
            if only and case["id"] not in only:
                continue
            try:
                problem = build_case(case)
            except CaseUnavailable:
                continue
            floor, first = first_gap(problem, args.work_limit)
            if floor is None or first is None:
                print(f"{half} {case['id']}: meets its floor", flush=True)
                continue
            flag = "  REACHED" if first > args.over * (floor - 1) else ""
            print(f"{half} {case['id']}: floor {floor}, first schedule {first}{flag}", flush=True)


if __name__ == "__main__":
    main()
