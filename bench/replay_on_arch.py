"""Replay stored schedules' placements on the problem another arch model builds (issue 21).

    python bench/replay_on_arch.py bench/codegen/h200_warpgroup_rates.toml bench/codegen/fa_opt.json \\
        bench/codegen/fa_1stage.json bench/codegen/fa_split.json bench/results/h200/fa_variants/fa_opt2.json \\
        bench/results/h200/fa_variants/fa_cap.json

Each schedule keeps its starts, groups and buffers; its program is rebuilt with the same parameters on ARCH (a
built-in name or a TOML file) and replayed by the simulator (`twill.sim.simulate`, 32 iterations): the cycles
per iteration that arch predicts for the kernel built from that schedule. The tables of docs/benchmarks_notes.md
that compare a model change against measured kernels come from here. Deterministic, no GPU.
"""

from __future__ import annotations

import argparse

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.problem import build_problem
from twill.schedule import Schedule
from twill.sim.gpu import simulate


def replay(arch_name: str, path: str, iterations: int = 32) -> tuple[int, float]:
    """(the schedule's II, the interval the simulator achieves on ``arch_name``'s costs)."""
    arch = get_arch(arch_name)
    sched = Schedule.read(path)
    problem = build_problem(load_program(sched.program, arch, dict(sched.body.params)), arch)
    return sched.ii, simulate(problem, sched, iterations=iterations).achieved_ii


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arch")
    ap.add_argument("schedules", nargs="+")
    ap.add_argument("--iterations", type=int, default=32)
    args = ap.parse_args()
    print("| schedule | II when solved | replayed cycles/iteration |\n|---|---|---|")
    for path in args.schedules:
        ii, achieved = replay(args.arch, path, args.iterations)
        print(f"| {path} | {ii} | {achieved:.0f} |")


if __name__ == "__main__":
    main()
