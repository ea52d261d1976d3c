"""Which constraint family makes a fixed-II probe hard (issue 16: choose the method from the profile).

    python bench/family_ablation.py CASE_OR_BODY --arch b200 --ii 1700 [--units 5] [--drop register_budgets ...]

CASE_OR_BODY is a suite case id (bench/suite/tuned.json or fresh.json) or a body .json. The joint model at one II
(``twill.solver.model.build_model``, every family of ``JOINT_FAMILIES``) is solved on one worker for ``--units``
of deterministic work, then again with each ``--drop`` set of families left out (comma-separated names; default:
the register peak, both register families, in-order issue, the memories). A drop that turns an undecided probe
into a quick answer names the family the search stalls on; a schedule found without a family says nothing about
the full model (a relaxation), a refutation without one refutes the full model too. Deterministic, not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from twill.arch.registry import get_arch
from twill.body_json import read_body
from twill.ir import LoopBody
from twill.options import SolveOptions
from twill.problem import Problem, build_problem
from twill.solver import model
from twill.solver.run import Work, solver

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.cases import HALVES, build_body, read_manifest  # noqa: E402

DROPS = ("", "register_budgets", "register_budgets,register_average,register_rounded", "in_order_issue",
         "smem_capacity,tmem_capacity,average_occupancy")


def load_body(name: str) -> LoopBody:
    """A suite case's body by id, or a body file."""
    if Path(name).suffix == ".json":
        return read_body(name)
    for half in HALVES:
        for case in read_manifest(half)["cases"]:
            if case["id"] == name:
                return build_body(case)
    raise SystemExit(f"{name}: neither a body .json nor a suite case id")


def probe(problem: Problem, ii: int, units: float, drop: frozenset[str]) -> tuple[str, float]:
    """(CP-SAT status, units spent) of the joint model at ``ii`` without the families in ``drop``."""
    families = model.JOINT_FAMILIES
    model.JOINT_FAMILIES = tuple((name, f) for name, f in families if name not in drop)
    try:
        v = model.build_model(problem, SolveOptions(workers=1), ii, ii)
    finally:
        model.JOINT_FAMILIES = families
    work = Work.starting_now(3600, units)
    cp = solver(work, units, 1, linearization=2)
    status = cp.solve(v.m)
    return cp.status_name(status), work.spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("body")
    ap.add_argument("--arch", required=True)
    ap.add_argument("--ii", type=int, required=True)
    ap.add_argument("--units", type=float, default=5.0)
    ap.add_argument("--drop", nargs="*", default=list(DROPS), help="family sets to leave out ('' = none)")
    args = ap.parse_args()
    problem = build_problem(load_body(args.body), get_arch(args.arch))
    known = {name for name, _ in model.JOINT_FAMILIES}
    print(f"| {args.body} at II {args.ii} | left out | status | units |\n|---|---|---|---|")
    for spec in args.drop:
        drop = frozenset(n for n in spec.split(",") if n)
        if drop - known:
            raise SystemExit(f"unknown families {sorted(drop - known)}; known: {sorted(known)}")
        status, spent = probe(problem, args.ii, args.units, drop)
        print(f"| | {', '.join(sorted(drop)) or '(none)'} | {status} | {spent:.2f} |", flush=True)


if __name__ == "__main__":
    main()
