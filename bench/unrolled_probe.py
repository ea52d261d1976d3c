"""The unrolled relaxation (``twill.solver.unrolled``, design.md §3.1g) at fixed IIs of FlashAttention forward at
FA4's granularity on b200, FA4's roles pinned or the groups free (issue 20).

    python bench/unrolled_probe.py --roles fa4 --ii 2582,2625 --since 2546 --units 20
    python bench/unrolled_probe.py --roles fa4 --ii 2632 --since 2546 --copies 3 --units 80
    python bench/unrolled_probe.py --roles free --ii 2500 --since 2446 --units 20

Each probe is one CP-SAT worker at LP level 2 for at most ``--units`` of deterministic work (``run.solver``), so it is
reproducible. A refutation at II refutes every II in [since, II] (the relaxation's feasible IIs are closed upwards);
``since`` must be a proven lower bound for that to be a statement about the problem (2546 with the roles pinned, 2446
free: the static bounds). A feasible answer says nothing about the problem (registers are left out).
"""

from __future__ import annotations

import argparse
import runpy
import time
from pathlib import Path

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.options import SolveOptions, pin_groups
from twill.problem import build_problem
from twill.solver.run import Work, solver
from twill.solver.unrolled import COPIES, build_unrolled

PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "fa_fwd.py"
FA4 = {"subtiles": 2, "block_m": 256, "s_frags": 4, "split_p": 3, "o_chunks": 2, "emu": 0.125}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles", choices=("fa4", "free"), default="fa4")
    ap.add_argument("--ii", required=True, help="comma-separated IIs")
    ap.add_argument("--since", type=int, required=True, help="a proven lower bound: the refuted range's floor")
    ap.add_argument("--copies", type=int, default=COPIES, help="iterations on each side of iteration 0")
    ap.add_argument("--units", type=float, default=20.0)
    args = ap.parse_args()
    arch = get_arch("b200")
    p = build_problem(load_program("fa_fwd", arch, FA4), arch)
    pins = pin_groups([op.name for op in p.ops], runpy.run_path(str(PROGRAM))["FA4_ROLES"]) if args.roles == "fa4" else ()
    options = SolveOptions(workers=1, fixed_groups=pins)
    for ii in (int(x) for x in args.ii.split(",")):
        t = time.time()
        s = solver(Work.starting_now(3600, args.units), args.units, 1, linearization=2)
        status = s.solve(build_unrolled(p, options, ii, args.since, args.copies).m)
        print(f"{args.roles} II {ii} (since {args.since}, copies {args.copies}): {s.status_name(status)} in "
              f"{s.deterministic_time:.2f} units, {time.time() - t:.1f} s", flush=True)


if __name__ == "__main__":
    main()
