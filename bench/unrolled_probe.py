"""The unrolled relaxation (``twill.solver.unrolled``, design.md §3.1g) at fixed IIs of FlashAttention forward at
FA4's granularity on b200, FA4's roles pinned or the groups free (issue 20).

    python bench/unrolled_probe.py --roles fa4 --ii 2582,2625 --since 2546 --units 20
    python bench/unrolled_probe.py --roles fa4 --ii 2632 --since 2546 --copies 3 --units 80
    python bench/unrolled_probe.py --roles free --ii 2500 --since 2446 --units 20
    python bench/unrolled_probe.py --roles free --ii 2633 --since 2446 --units 20 --complete 20 --out fa4_free_2633.json

Each probe is one CP-SAT worker at LP level 2 for at most ``--units`` of deterministic work (``run.solver``), so it is
reproducible. A refutation at II refutes every II in [since, II] (the relaxation's feasible IIs are closed upwards);
``since`` must be a proven lower bound for that to be a statement about the problem (2546 with the roles pinned, 2446
free: the static bounds). A feasible answer says nothing about the problem (registers are left out); with
``--complete U`` its starts and groups hint the joint model at that II (two interleaved workers, U units), and a
schedule found is assembled, checked by the validator and, with ``--out``, written.
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
from twill.options import SolveOptions, pin_groups
from twill.problem import Problem, build_problem
from twill.solver.hints import hint
from twill.solver.model import build_model
from twill.solver.run import Work, solver
from twill.solver.unrolled import COPIES, UnrolledModel, build_unrolled, solution

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fa4_probe import checked, to_schedule, values  # noqa: E402

PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "fa_fwd.py"
FA4 = {"subtiles": 2, "block_m": 256, "s_frags": 4, "split_p": 3, "o_chunks": 2, "emu": 0.125}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles", choices=("fa4", "free"), default="fa4")
    ap.add_argument("--ii", required=True, help="comma-separated IIs")
    ap.add_argument("--since", type=int, required=True, help="a proven lower bound: the refuted range's floor")
    ap.add_argument("--copies", type=int, default=COPIES, help="iterations on each side of iteration 0")
    ap.add_argument("--units", type=float, default=20.0)
    ap.add_argument("--complete", type=float, help="units for the joint model from a feasible relaxation's solution")
    ap.add_argument("--out", help="where to write the completed schedule")
    args = ap.parse_args()
    arch = get_arch("b200")
    p = build_problem(load_program("fa_fwd", arch, FA4), arch)
    pins = pin_groups([op.name for op in p.ops], runpy.run_path(str(PROGRAM))["FA4_ROLES"]) if args.roles == "fa4" else ()
    options = SolveOptions(workers=1, fixed_groups=pins)
    for ii in (int(x) for x in args.ii.split(",")):
        t = time.time()
        s = solver(Work.starting_now(3600, args.units), args.units, 1, linearization=2)
        u = build_unrolled(p, options, ii, args.since, args.copies)
        status = s.solve(u.m)
        print(f"{args.roles} II {ii} (since {args.since}, copies {args.copies}): {s.status_name(status)} in "
              f"{s.deterministic_time:.2f} units, {time.time() - t:.1f} s", flush=True)
        if args.complete and status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            complete(p, options, ii, u, s, args.complete, args.out)


def complete(p: Problem, options: SolveOptions, ii: int, u: UnrolledModel, s: cp_model.CpSolver, units: float,
             out: str | None) -> None:
    """The joint model at ``ii`` hinted with the relaxation's starts (moved to begin at 0) and groups."""
    t = time.time()
    v = build_model(p, options, ii, ii)
    hint(v, solution(u, s.value))
    full = solver(Work.starting_now(3600, units), units, 2)
    status = full.solve(v.m)
    print(f"  joint model at II {ii} from it: {full.status_name(status)} in {full.deterministic_time:.2f} units, "
          f"{time.time() - t:.1f} s", flush=True)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return
    sched = to_schedule(p, options, ii, values(v, full), time.time() - t,
                        f"the unrolled relaxation's solution at II {ii} completed in the joint model; no bound proven here")
    if checked(p, sched) and out:
        sched.write(out)
        print(f"  wrote {out}")


if __name__ == "__main__":
    main()
