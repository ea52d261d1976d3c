"""What one CP-SAT worker buys at a fixed II (issue 16; the measurement behind the search's `sweep` phase,
docs/design.md §3.1d). Not a test: it prints deterministic units, which depend on the model, not the machine.

    python bench/worker_probe.py random-fa-16000-n10-h100 --lo 2094 --hi 2120
    python bench/worker_probe.py fa_fwd-st1-d128-bn128-h100 --lo 2148 --hi 2160 --workers 1
    twill solve fa_fwd --arch h100 --out fa1.json
    python bench/worker_probe.py fa_fwd-st1-d128-bn128-h100 --lo 2200 --hi 2210 --workers 1 --hint fa1.json
    python bench/worker_probe.py random-regs-16008-n11-h100 --lo 680 --hi 680 --workers 1 --lp 1,2   # the LP's level
    python bench/worker_probe.py random-tmem-16004-n12-b200 --body-out t04.json   # a random case's body, to solve

For each worker count: the joint model at every fixed II of [lo, hi] (any schedule, no hint), its status and
the units it spent; then the joint model over the whole window. CASE is a suite case id (bench/suite/*.json).
With ``--hint``, every solve starts from that schedule moved to its II (the sweep's start, ``hints.hint_moved``),
and each line is printed twice, hinted and cold: the hint can cost a refutation or save it (docs/benchmarks_notes.md,
session 11).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from ortools.sat.python import cp_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import build_body, read_manifest  # noqa: E402

from twill.arch.registry import get_arch  # noqa: E402
from twill.body_json import write_body  # noqa: E402
from twill.options import SolveOptions  # noqa: E402
from twill.problem import Problem, build_problem  # noqa: E402
from twill.schedule import Schedule  # noqa: E402
from twill.solver import hints  # noqa: E402
from twill.solver.assemble import Assignment  # noqa: E402
from twill.solver.model import build_model  # noqa: E402
from twill.solver.run import Work, solver  # noqa: E402

MARK = {cp_model.INFEASIBLE: "x", cp_model.OPTIMAL: "F", cp_model.FEASIBLE: "F", cp_model.UNKNOWN: "?"}


def case(case_id: str) -> dict:
    for half in ("tuned", "fresh"):
        for c in read_manifest(half)["cases"]:
            if c["id"] == case_id:
                return c
    raise SystemExit(f"no suite case {case_id!r}")


def spend(p: Problem, workers: int, lo: int, hi: int, units: float, hint: Assignment | None,
          lp: int | None = None, seed: int = 0) -> tuple[int, float]:
    """(status, units spent) of the joint model over [lo, hi], any schedule, from ``hint`` moved to lo,
    at CP-SAT's LP level ``lp`` (its default where None) and random seed ``seed``."""
    work = Work.starting_now(3600, units)
    v = build_model(p, SolveOptions(workers=workers), lo, hi)
    if hint is not None:
        hints.hint_moved(v, hint, lo)
    status = solver(work, units, workers, seed=seed, linearization=lp).solve(v.m)
    return status, work.spent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case")
    ap.add_argument("--lo", type=int)
    ap.add_argument("--hi", type=int)
    ap.add_argument("--workers", default="1,2", help="worker counts to compare (default 1,2)")
    ap.add_argument("--units", type=float, default=5.0, help="units per solve (default 5)")
    ap.add_argument("--lp", help="CP-SAT LP levels to compare, e.g. 1,2 (linearization_level; default: CP-SAT's own)")
    ap.add_argument("--seeds", default="0", help="CP-SAT random seeds, one row each, e.g. 0,1,2 (default 0)")
    ap.add_argument("--hint", metavar="SCHEDULE.json", help="also start each solve from this schedule (twill solve --out)")
    ap.add_argument("--body-out", metavar="BODY.json", help="only write the case's loop body (for twill solve) and stop")
    args = ap.parse_args(argv)
    c = case(args.case)
    body = build_body(c)
    if args.body_out:
        write_body(body, args.body_out)
        return 0
    if args.lo is None or args.hi is None:
        ap.error("--lo and --hi are required")
    p = build_problem(body, get_arch(c["arch"]))
    starts: list[tuple[str, Assignment | None]] = [("cold", None)]
    if args.hint:
        sched = Schedule.read(args.hint)
        starts.append((f"from II {sched.ii}", hints.from_schedule(p, sched)))
    levels = [int(x) for x in args.lp.split(",")] if args.lp else [None]
    print("| workers | LP | seed | start | IIs (x refuted, F schedule, ? undecided) | units per II | units, all IIs | whole window |")
    print("|---|---|---|---|---|---|---|---|")
    for workers, lp, seed in itertools.product(map(int, args.workers.split(",")), levels, map(int, args.seeds.split(","))):
        for name, hint in starts:
            marks, spent = "", []
            for ii in range(args.lo, args.hi + 1):
                status, units = spend(p, workers, ii, ii, args.units, hint, lp, seed)
                marks, spent = marks + MARK[status], [*spent, units]
            status, units = spend(p, workers, args.lo, args.hi, args.units, hint, lp, seed)
            print(f"| {workers} | {lp or 'default'} | {seed} | {name} | {marks} | {min(spent):.2f}-{max(spent):.2f} | "
                  f"{sum(spent):.1f} | {MARK[status]} in {units:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
