"""The free model (no pinned groups) at a schedule's II, started from it, minimising warp groups (issue 20).

    python bench/fa4_fewer_groups.py notebooks/data/fa4_pinned_2650.json --seconds 150 --out fa4_free.json

Asks which of FA4's roles the objective's second rank (fewest groups) keeps at the II where FA4's pinned
roles have a schedule. It proves nothing about smaller IIs; the groups bound it prints is CP-SAT's for that II
and stage cap. The pinned schedule may be a rotation or mirror image the model's symmetry cuts exclude, so
those cuts are left out here (they only remove equivalent schedules).
"""

from __future__ import annotations

import argparse
import runpy
import sys
import time
from pathlib import Path

from ortools.sat.python import cp_model

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.options import SolveOptions
from twill.problem import build_problem
from twill.schedule import Schedule
from twill.solver import model as M
from twill.solver.assemble import Assignment, assemble, copies_needed
from twill.solver.hints import short_stage_bound
from twill.validate import validate

sys.path.insert(0, str(Path(__file__).resolve().parent))

PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "fa_fwd.py"


class _Report(cp_model.CpSolverSolutionCallback):
    def __init__(self, t0: float) -> None:
        super().__init__()
        self.t0 = t0

    def on_solution_callback(self) -> None:
        print(f"  {time.time() - self.t0:.1f} s: {self.objective_value:.0f} groups", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schedule", help="a twill.schedule/1 file of fa_fwd at FA4's granularity (its II is kept)")
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--out", help="write the schedule found")
    args = ap.parse_args()
    fa = runpy.run_path(str(PROGRAM))
    start = Schedule.read(args.schedule)
    arch = get_arch("b200")
    p = build_problem(load_program("fa_fwd", arch, dict(start.body.params)), arch)
    ii, options = start.ii, SolveOptions(workers=2)
    v = M.ScheduleModel(p, options, ii, ii, short_stage_bound(p, ii))
    for name, family in M.JOINT_FAMILIES:
        if name != "symmetry_breaking":
            family(v)
    v.m.minimize(sum(v.used))
    for o in start.ops:
        v.m.add_hint(v.start[o.id], o.start)
        v.m.add_hint(v.group_of[o.id], o.group)
    for g in start.groups:
        v.m.add_hint(v.warps[g.id], g.warps)
        v.m.add_hint(v.regs[g.id], g.regs_per_thread)
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = args.seconds
    s.parameters.num_workers = 2
    t0 = time.time()
    status = s.solve(v.m, _Report(t0))
    print(f"{s.status_name(status)} after {time.time() - t0:.1f} s; groups bound {s.best_objective_bound:.0f}")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return
    starts = {n: int(s.value(x)) for n, x in v.start.items()}
    groups = {n: int(s.value(x)) for n, x in v.group_of.items()}
    used = sorted(set(groups.values()))
    a = Assignment(ii=ii, starts=starts, groups=groups, warps={g: int(s.value(v.warps[g])) for g in used},
                   regs={g: int(s.value(v.regs[g])) for g in used},
                   copies={o.name: copies_needed(p, starts, ii, o.name) for o in p.ops},
                   objective_values={"ii": ii, "groups": len(used)})
    sched = assemble(p, options, a, optimal=False, proven_lb=0, proven={}, seconds=time.time() - t0,
                     proof=f"free groups at II {ii}, minimised from {Path(args.schedule).name} "
                           f"({s.status_name(status)}; groups >= {s.best_objective_bound:.0f}); no II bound proven here")
    print("validator:", "; ".join(map(str, validate(p, sched))) or "every check passes")
    for g in sched.groups:
        print(f"  group {g.id}: {g.warps} warps x {g.regs_per_thread} regs: {' '.join(g.ops)}")
    print("FA4 roles:", fa["fa4_roles"]({o.id: o.group for o in sched.ops}))
    if args.out:
        sched.write(args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
