"""Replay stored schedules' placements on the problem another arch model builds (issue 21).

    python bench/replay_on_arch.py bench/codegen/h200_warpgroup_rates.toml bench/codegen/fa_opt.json \\
        bench/codegen/fa_1stage.json bench/codegen/fa_split.json bench/results/h200/fa_variants/fa_opt2.json \\
        bench/results/h200/fa_variants/fa_cap.json

Each schedule keeps its starts, groups and buffers; its program is rebuilt with the same parameters on ARCH (a
built-in name or a TOML file) and replayed by the simulator (`twill.sim.simulate`, 32 iterations): the cycles
per iteration that arch predicts for the kernel built from that schedule. The tables of docs/benchmarks_notes.md
that compare a model change against measured kernels come from here. Deterministic, no GPU.

``--retire-before-register-work`` tests a hypothesis about ptxas (issue 21, session 28) before it becomes a rule of
the model: a warp group's synchronous (register) op does not issue while a wgmma of the same group is in flight, as
if ptxas put the ``wgmma.wait_group`` in front of it (what session 24 read in fa_cap's SASS).
"""

from __future__ import annotations

import argparse

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.ir import Issuer, Op
from twill.problem import Problem, build_problem
from twill.schedule import Schedule
from twill.sim import gpu
from twill.sim.gpu import simulate


class _RetireFirst(gpu._Gpu):
    """The simulator's GPU with one more wait: a synchronous op with a hold waits until every wgmma its group
    issued before it has completed (issue + latency). Kept here, not in twill.sim, while it is a hypothesis."""

    def __init__(self, problem: Problem, schedule: Schedule, iterations: int) -> None:
        self.in_flight: dict[int, list[int]] = {}  # per group: completion cycles of its wgmmas in flight
        super().__init__(problem, schedule, iterations, jitter=0.0, seed=0)

    def _evaluate(self, s: gpu._Stream) -> None:
        _, v, _ = s.items[s.pos]
        pending = self.in_flight.pop(s.group, [])
        if pending and not self.p.op(v).is_async and self.hold[v] > 0:
            s.free_at = max(s.free_at, *pending)
        elif pending:
            self.in_flight[s.group] = pending
        super()._evaluate(s)

    def _issue(self, s: gpu._Stream, op: Op, k: int, now: int) -> None:
        super()._issue(s, op, k, now)
        if op.is_async and op.issuer is Issuer.WARPGROUP:
            self.in_flight.setdefault(s.group, []).append(now + self.latency[op.name, k])


def replay(arch_name: str, path: str, iterations: int = 32, retire_first: bool = False) -> tuple[int, float]:
    """(the schedule's II, the interval the simulator achieves on ``arch_name``'s costs)."""
    arch = get_arch(arch_name)
    sched = Schedule.read(path)
    problem = build_problem(load_program(sched.program, arch, dict(sched.body.params)), arch)
    if retire_first:
        machine = _RetireFirst(problem, sched, iterations)
        machine.run()
        return sched.ii, machine.result().achieved_ii
    return sched.ii, simulate(problem, sched, iterations=iterations).achieved_ii


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arch")
    ap.add_argument("schedules", nargs="+")
    ap.add_argument("--iterations", type=int, default=32)
    ap.add_argument("--retire-before-register-work", action="store_true",
                    help="register work waits for its group's in-flight wgmmas (a hypothesis about ptxas)")
    args = ap.parse_args()
    print("| schedule | II when solved | replayed cycles/iteration |\n|---|---|---|")
    for path in args.schedules:
        ii, achieved = replay(args.arch, path, args.iterations, args.retire_before_register_work)
        print(f"| {path} | {ii} | {achieved:.0f} |")


if __name__ == "__main__":
    main()
