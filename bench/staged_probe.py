"""Does branching on the stages first find schedules CP-SAT's own search misses? (issue 16, session 48; the measurement
behind ``hints.stages_first``, docs/design.md §3.1, "The staged finder"). Not a test: it prints deterministic units.

    python bench/staged_probe.py                      # every unproven row of bench/results/suite_*.json
    python bench/staged_probe.py random-tmem-16005-n20-b200 --units 2

For each case: the joint model at one II, free groups, the full stage bound, one worker, ``--units`` per solve, at
the II one under the row's schedule, 5% under it and midway to its proven floor; solved cold with CP-SAT's own search
and with the stages first (``hints.stages_first`` under CP-SAT's fixed search). Prints one row per II and the
totals: probes where only one of the two found a schedule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ortools.sat.python import cp_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import build_case, read_manifest  # noqa: E402

from twill.options import SolveOptions  # noqa: E402
from twill.solver import hints  # noqa: E402
from twill.solver.model import build_model  # noqa: E402
from twill.solver.run import Work, solver  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FOUND = (cp_model.OPTIMAL, cp_model.FEASIBLE)
WORD = {cp_model.OPTIMAL: "schedule", cp_model.FEASIBLE: "schedule", cp_model.INFEASIBLE: "refuted",
        cp_model.UNKNOWN: "undecided"}


def probe(p, ii: int, units: float, staged: bool) -> tuple[int, float]:
    """(status, units spent) of the joint model at ``ii`` on one worker, cold or with the stages first."""
    v = build_model(p, SolveOptions(workers=1), ii, ii)
    work = Work.starting_now(3600, units)
    s = solver(work, units, 1)
    status = hints.solve_stages_first(s, v) if staged else s.solve(v.m)
    return status, work.spent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help="suite case ids (default: every unproven row of the results)")
    ap.add_argument("--units", type=float, default=2.0, help="units per solve (default 2)")
    args = ap.parse_args(argv)
    rows, cases = {}, {}
    for half in ("tuned", "fresh"):
        rows.update(json.loads((RESULTS / f"suite_{half}.json").read_text())["rows"])
        cases.update({c["id"]: c for c in read_manifest(half)["cases"]})
    ids = args.cases or [k for k, r in rows.items() if r["status"] != "optimal" and cases[k]["source"]["kind"] != "graph"]
    only = {"cold": 0, "staged": 0}
    print("| case | II (schedule, floor) | CP-SAT's search | stages first |")
    print("|---|---|---|---|")
    for cid in ids:
        row, p = rows[cid], build_case(cases[cid])
        for ii in sorted({row["ii"] - 1, int(row["ii"] * 0.95), (row["ii"] + row["bound"]) // 2}):
            if ii < row["bound"]:
                continue
            (cs, cu), (ss, su) = probe(p, ii, args.units, False), probe(p, ii, args.units, True)
            only["cold"] += cs in FOUND and ss not in FOUND
            only["staged"] += ss in FOUND and cs not in FOUND
            print(f"| {cid} | {ii} ({row['ii']}, {row['bound']}) | {WORD[cs]} {cu:.2f} | {WORD[ss]} {su:.2f} |",
                  flush=True)
    print(f"\nonly CP-SAT's search found a schedule: {only['cold']}; only the stages first: {only['staged']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
