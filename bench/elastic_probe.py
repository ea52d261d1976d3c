"""The elastic model at one II, from a relaxation's schedule (issue 16: what the register families stall on).

    python bench/elastic_probe.py CASE_OR_BODY --arch h100 --ii 1344 [--units 12] [--start pressure] [--short]
                                  [--fixed-groups] [--workers 2]

CASE_OR_BODY is a suite case id or a body .json (as in ``bench/family_ablation.py``). Steps, each on ``--workers``
interleaved CP-SAT workers with deterministic budgets: the hint relaxation at the II (5 units); with ``--start
pressure`` that schedule re-solved for few groups and short register lifetimes (``hints.pressure_objective``, 3
units, the search's pressure slice); then the elastic model (``build_model(..., elastic=True)``: the register and
TMEM peaks may overflow, the overflow minimised), hinted with that schedule completed into every variable, for
``--units``. Overflow 0 is a schedule of the full model at the II; above 0 proves nothing. ``--short`` caps the
stages as the pressure relaxation does (the search's slice); ``--fixed-groups`` pins the relaxation's groups (the
repair's model, elastic). Prints each step's status and units and the overflow's trajectory. A bench tool, not a test.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ortools.sat.python import cp_model

from twill.arch.registry import get_arch
from twill.options import SolveOptions
from twill.problem import build_problem
from twill.solver import hints
from twill.solver.model import build_model
from twill.solver.phases import hint_completed
from twill.solver.run import Work, solver

sys.path.insert(0, str(Path(__file__).resolve().parent))
from family_ablation import load_body  # noqa: E402

FEASIBLE = (cp_model.OPTIMAL, cp_model.FEASIBLE)


class Trajectory(cp_model.CpSolverSolutionCallback):
    """The overflow of each solution, with the deterministic time it was found at."""

    def __init__(self) -> None:
        super().__init__()
        self.points: list[tuple[float, float]] = []

    def on_solution_callback(self) -> None:
        self.points.append((self.deterministic_time, self.objective_value))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("body")
    ap.add_argument("--arch", required=True)
    ap.add_argument("--ii", type=int, required=True)
    ap.add_argument("--units", type=float, default=12.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--start", choices=("raw", "pressure"), default="pressure")
    ap.add_argument("--short", action="store_true", help="the pressure relaxation's stage cap")
    ap.add_argument("--fixed-groups", action="store_true", help="pin the relaxation's groups")
    args = ap.parse_args()
    p = build_problem(load_body(args.body), get_arch(args.arch))
    o = SolveOptions(workers=args.workers)
    work = Work.starting_now(24 * 3600, 1e9)

    def step(name: str, v, units: float, callback=None) -> cp_model.CpSolver:
        before = work.spent
        s = solver(work, units, args.workers)
        status = s.solve(v.m, callback)
        print(f"{name}: {s.status_name(status)} in {work.spent - before:.2f} units", flush=True)
        return s if status in FEASIBLE else None

    r = build_model(p, o, args.ii, args.ii, relaxed=True)
    s = step(f"hint relaxation at {args.ii}", r, 5.0)
    if s is None:
        return
    a = hints.read(r, s.value)
    short = hints.short_stage_bound(p, args.ii)
    if args.start == "pressure":
        q = build_model(p, o, args.ii, args.ii, relaxed=True, max_stage=short)
        hints.hint(q, a)
        q.m.minimize(hints.pressure_objective(q))
        s = step("pressure relaxation", q, 3.0)
        a = hints.read(q, s.value) if s is not None else a
    if args.fixed_groups:
        labels = hints.first_use_labels(p, a.groups)
        fixed = tuple((op.name, labels[a.groups[op.name]]) for op in p.ops)
        o, a = replace(o, fixed_groups=fixed), replace(a, groups=dict(fixed))
    e = build_model(p, o, args.ii, args.ii, elastic=True, max_stage=short if args.short else None)
    hint_completed(argparse.Namespace(work=work), e, a)
    trajectory = Trajectory()
    s = step("elastic model", e, args.units, trajectory)
    shown = trajectory.points[:3] + trajectory.points[3:][-3:]
    print("overflow (units: words): " + ", ".join(f"{t:.2f}: {x:.0f}" for t, x in shown))
    if s is not None:
        print(f"least overflow {s.objective_value:.0f}" + (": a schedule of the full model" if s.objective_value == 0 else ""))


if __name__ == "__main__":
    main()
