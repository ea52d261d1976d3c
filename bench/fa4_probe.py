"""Fixed-II probes of FlashAttention forward at FA4's granularity on b200 (issue 20).

    python bench/fa4_probe.py --chunks 2 --roles fa4 --ii 2650,2700 --seconds 120 --out results/fa4
    python bench/fa4_probe.py --chunks 2 --roles free --ii 2700 --seconds 150 --min-groups
    python bench/fa4_probe.py --roles fa4 --ii 2650,2700 --units 10,15   # one worker, deterministic units

The window search (twill solve) spends its time refuting windows at this size; a model with II fixed is
far easier to satisfy. Each probe solves, at one II, (A) every constraint family but the register
families, with few stages, then (B) the full model hinted by A's starts, groups, warps and budgets.
A schedule found is assembled, checked by the independent validator and written as twill.schedule/1.
A probe proves nothing about smaller IIs; the lower bound comes from the search (twill solve).
"""

from __future__ import annotations

import argparse
import runpy
import time
from pathlib import Path

from ortools.sat.python import cp_model

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.options import SolveOptions, pin_groups
from twill.problem import Problem, build_problem
from twill.schedule import Schedule
from twill.solver import model as M
from twill.solver.assemble import Assignment, assemble, copies_needed
from twill.solver.hints import short_stage_bound
from twill.solver.run import Work, solver
from twill.validate import validate

PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "fa_fwd.py"
REGISTER_FAMILIES = ("register_budgets", "register_average", "register_rounded")


def model(problem: Problem, options: SolveOptions, ii: int, stages: int, skip: tuple[str, ...]) -> M.ScheduleModel:
    v = M.ScheduleModel(problem, options, ii, ii, stages)
    v.anchored = v.m.new_bool_var("anchored")
    v.anchored.proto.domain[0] = 1  # rotation anchor on (design.md §2.8c)
    for name, family in M.JOINT_FAMILIES:
        if name not in skip:
            family(v)
    M.add_strategy_restrictions(v)
    return v


def solve(v: M.ScheduleModel, seconds: float, hint: dict | None = None, seed: int = 0, units: float | None = None):
    """Solve ``v`` for ``seconds`` on CP-SAT's own two-worker portfolio, or, with ``units``, reproducibly: one worker,
    that much deterministic work (``twill.solver.run.solver``), the units spent printed by the caller."""
    if hint:
        for name, var in v.start.items():
            v.m.add_hint(var, hint["starts"][name])
        for name, var in v.group_of.items():
            v.m.add_hint(var, hint["groups"][name])
        for g, var in enumerate(v.warps):
            v.m.add_hint(var, hint["warps"][g])
        for g, var in enumerate(v.regs):
            v.m.add_hint(var, hint["regs"][g])
    if units is not None:
        s = solver(Work.starting_now(3600.0, units), units, 1, seed=seed)
        return s, s.solve(v.m)
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = seconds
    s.parameters.num_workers = 2
    s.parameters.random_seed = seed
    return s, s.solve(v.m)


def _spent(s: cp_model.CpSolver, t0: float) -> str:
    """What a solve cost: its deterministic units where it charged a ``Work``, else the wall seconds so far."""
    work = getattr(s, "work", None)
    return f"{work.spent:.2f} units" if work is not None else f"{time.time() - t0:.1f} s"


def values(v: M.ScheduleModel, s: cp_model.CpSolver) -> dict:
    return {"starts": {n: int(s.value(x)) for n, x in v.start.items()},
            "groups": {n: int(s.value(x)) for n, x in v.group_of.items()},
            "warps": [int(s.value(x)) for x in v.warps], "regs": [int(s.value(x)) for x in v.regs]}


def to_schedule(problem: Problem, options: SolveOptions, ii: int, got: dict, seconds: float, proof: str) -> Schedule:
    """The schedule of a joint-model solution at ``ii`` (``values``), assembled as the search assembles its own."""
    used = sorted(set(got["groups"].values()))
    assignment = Assignment(ii=ii, starts=got["starts"], groups=got["groups"],
                            warps={g: got["warps"][g] for g in used}, regs={g: got["regs"][g] for g in used},
                            copies={op.name: copies_needed(problem, got["starts"], ii, op.name) for op in problem.ops},
                            objective_values={"ii": ii, "groups": len(used)})
    return assemble(problem, options, assignment, optimal=False, proven_lb=0, proven={}, seconds=seconds, proof=proof)


def checked(problem: Problem, sched: Schedule) -> bool:
    """Whether the independent validator accepts ``sched``, printed with its groups."""
    broken = validate(problem, sched)
    print("  validator:", "every check passes" if not broken else "; ".join(map(str, broken[:3])))
    for g in sched.groups:
        print(f"  group {g.id}: {g.warps} warps x {g.regs_per_thread} regs: {' '.join(g.ops)}")
    return not broken


def probe(problem: Problem, options: SolveOptions, ii: int, seconds: float, min_groups: bool, tag: str,
          units: tuple[float, float] | None = None):
    """A validated schedule at ``ii``, or None; prints what each stage did (with ``units``, the deterministic work
    of each step on one worker instead of wall seconds)."""
    t0, stages = time.time(), short_stage_bound(problem, ii)
    a = model(problem, options, ii, stages, REGISTER_FAMILIES)
    if min_groups:
        a.m.minimize(sum(a.used))
    sa, status = solve(a, seconds / 2, units=units and units[0])
    print(f"II {ii}: without registers {sa.status_name(status)} ({_spent(sa, t0)}, stages <= {stages})",
          flush=True)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    b = model(problem, options, ii, stages, ())
    if min_groups:
        b.m.minimize(sum(b.used))
    sb, status = solve(b, seconds, values(a, sa), units=units and units[1])
    groups = f", groups {sb.objective_value:.0f} (bound {sb.best_objective_bound:.0f})" if min_groups and status in (
        cp_model.OPTIMAL, cp_model.FEASIBLE) else ""
    print(f"II {ii}: full model {sb.status_name(status)} ({_spent(sb, t0)}){groups}", flush=True)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    sched = to_schedule(problem, options, ii, values(b, sb), time.time() - t0,
                        f"fixed-II probe at II {ii} ({tag} groups, stages <= {stages}); no bound proven here")
    return sched if checked(problem, sched) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=2, help="o_chunks (FA4 streams 8; see docs/design.md §5)")
    ap.add_argument("--roles", default="fa4", help="'fa4' (FA4's five roles pinned), 'free', or a --groups spec")
    ap.add_argument("--ii", required=True, help="comma-separated IIs, tried in order until one has a schedule")
    ap.add_argument("--seconds", type=float, default=120.0, help="full-model limit per II (half for stage A)")
    ap.add_argument("--min-groups", action="store_true", help="minimise the number of warp groups at that II")
    ap.add_argument("--units", help="A,B: deterministic units for the two steps on one worker (reproducible on any "
                    "load) instead of --seconds on two")
    ap.add_argument("--out", help="folder for the schedules found (fa4_<chunks>_<roles>_<ii>.json)")
    args = ap.parse_args()
    fa = runpy.run_path(str(PROGRAM))
    arch = get_arch("b200")
    problem = build_problem(load_program("fa_fwd", arch, {**fa["FA4"], "o_chunks": args.chunks}), arch)
    spec = fa["FA4_ROLES"] if args.roles == "fa4" else args.roles
    fixed = () if args.roles == "free" else pin_groups([op.name for op in problem.ops], spec)
    tag = args.roles if args.roles in ("fa4", "free") else "pinned"
    options = SolveOptions(workers=2, fixed_groups=fixed)
    for ii in (int(x) for x in args.ii.split(",")):
        units = tuple(float(x) for x in args.units.split(",")) if args.units else None
        sched = probe(problem, options, ii, args.seconds, args.min_groups, tag, units)
        if sched is not None:
            print("  FA4 roles:", fa["fa4_roles"]({o.id: o.group for o in sched.ops}))
            if args.out:
                Path(args.out).mkdir(parents=True, exist_ok=True)
                path = Path(args.out) / f"fa4_{args.chunks}_{tag}_{ii}.json"
                sched.write(path)
                print(f"  wrote {path}")
            break


if __name__ == "__main__":
    main()
