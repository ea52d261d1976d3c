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

``--rs-operand-war`` tests a narrower one (session 43): an RS wgmma reads its register operand until it completes, and
a loop body that is not unrolled has one register set per loop-carried value, so the producer of the operand's next
instance (FA's cast of P) does not issue before that read is done; ``--rs-operand-war chain`` extends the wait to
that producer's own same-iteration register producers (the exp feeding the cast), as if the chain wrote the
operand's registers as it went. ``--same-group`` keeps that wait to a reader in the writer's group (one across groups
reads a shared-memory copy).

``--rates-by-overlap FA_CONSUMER_JSON`` (session 69) charges FA's register steps at the arch's rate (beside wgmmas)
only while the tensor core is busy and at their rate alone (that record's alone / beside-wgmma ratio) while it is idle,
replayed in passes until the interval repeats. The hypotheses combine.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from pathlib import Path

from twill.arch.registry import get_arch
from twill.frontend.programs import load_program
from twill.ir import Carrier, Edge, Issuer, Op
from twill.problem import Problem, build_problem
from twill.schedule import Schedule
from twill.sim import gpu
from twill.sim.gpu import simulate


class _RetireFirst(gpu._Gpu):
    """The simulator's GPU with one more wait where ``retire_first``: a synchronous op with a hold waits until every
    wgmma its group issued before it has completed (issue + latency). Kept here, not in twill.sim, while it is a
    hypothesis; the base of the other hypotheses, so that they combine."""

    def __init__(self, problem: Problem, schedule: Schedule, iterations: int, retire_first: bool = True) -> None:
        self.in_flight: dict[int, list[int]] = {}  # per group: completion cycles of its wgmmas in flight
        self.retire_first = retire_first
        super().__init__(problem, schedule, iterations, jitter=0.0, seed=0)

    def _evaluate(self, s: gpu._Stream) -> None:
        _, v, _ = s.items[s.pos]
        pending = self.in_flight.pop(s.group, []) if self.retire_first else []
        if pending and not self.p.op(v).is_async and self.hold[v] > 0:
            s.free_at = max(s.free_at, *pending)
        elif pending:
            self.in_flight[s.group] = pending
        super()._evaluate(s)

    def _issue(self, s: gpu._Stream, op: Op, k: int, now: int) -> None:
        super()._issue(s, op, k, now)
        if self.retire_first and op.is_async and op.issuer is Issuer.WARPGROUP:
            self.in_flight.setdefault(s.group, []).append(now + self.latency[op.name, k])


class _OperandWar(_RetireFirst):
    """The simulator's GPU with one more wait: the producer of an RS wgmma's register operand (a register edge into
    an asynchronous op, not in place) issues instance k only once the reader of instance k - 1 has completed; with
    ``chain``, the same for that producer's own distance-0 register producers; with ``same_group``, only where the
    reader is in the writer's group. ``war=None`` adds no wait (the base of `_ByOverlap`). Kept here while it is a
    hypothesis."""

    def __init__(self, problem: Problem, schedule: Schedule, iterations: int, war: str | None = "operand",
                 same_group: bool = False, retire_first: bool = False) -> None:
        super().__init__(problem, schedule, iterations, retire_first)
        self.war: dict[str, list[Edge]] = {}
        for e in problem.edges if war else []:
            if e.carrier is Carrier.REGISTERS and problem.op(e.dst).is_async and not e.in_place:
                self.war.setdefault(e.src, []).append(e)
        for src, reads in list(self.war.items()) if war == "chain" else []:
            for e in problem.body.in_edges(src):
                if e.distance == 0 and e.carrier is Carrier.REGISTERS and not problem.op(e.src).is_async:
                    self.war.setdefault(e.src, []).extend(reads)
        if same_group:  # a reader in another group reads a shared-memory copy, not the producer's registers
            self.war = {v: [e for e in reads if self.group[v] == self.group[e.dst]] for v, reads in self.war.items()}

    def _evaluate(self, s: gpu._Stream) -> None:
        _, v, k = s.items[s.pos]
        for e in self.war.get(v, []):
            j = k - 1 + e.distance  # the reader of the previous instance of the value v writes
            if j < 0:
                continue
            issued = self.issued.get((e.dst, j))
            if issued is None:
                s.blocked = f"register operand: reader {e.dst} iteration {j} has not issued"
                return
            s.free_at = max(s.free_at, issued + self.latency[e.dst, j])
        super()._evaluate(s)


# The FA program's register steps and the fa_consumer.cu step that measures each (issue 21, session 69).
FA_STEPS = {"rowmax": "row_max", "exp": "ex2", "rowsum": "row_sum", "cast": "cast", "rescale": "rescale"}


@functools.cache
def step_cycles(path: str | Path) -> dict[tuple[str, str], float]:
    """A fa_consumer record's cycles per round of each step in each mode: (step, mode) -> cycles."""
    records = json.loads(Path(path).read_text())["records"]
    return {(r["step"], r["mode"]): r["cycles"] for r in records if r.get("kind") == "step"}


def alone_ratios(records: str) -> dict[str, float]:
    """Each FA step's cycles alone over its cycles beside another warpgroup's wgmmas, from a fa_consumer record."""
    cycles = step_cycles(records)
    return {step: cycles[step, "alone"] / cycles[step, "beside_wgmma"] for step in FA_STEPS.values()}


class _ByOverlap(_OperandWar):
    """The simulator's GPU with one more hypothesis (and its bases' where chosen): a register step runs at its rate
    beside wgmmas (the arch's hold) only while the tensor core is busy, and at its rate alone (hold x ``ratio``) while
    it is idle. The tensor core's busy spans come from ``busy`` (the previous pass) and the reservations already made;
    `replay_by_overlap` iterates passes."""

    def __init__(self, problem: Problem, schedule: Schedule, iterations: int, ratio: dict[str, float],
                 busy: list[tuple[int, int]], war: str | None = None, same_group: bool = False,
                 retire_first: bool = False) -> None:
        super().__init__(problem, schedule, iterations, war, same_group, retire_first)
        self.ratio = {op.name: ratio[FA_STEPS[op.name.rstrip("0123456789")]] for op in problem.ops
                      if ratio and op.name.rstrip("0123456789") in FA_STEPS and not op.is_async}
        self.prior = busy

    def _busy(self, now: int) -> list[tuple[int, int]]:
        spans = sorted([(a, b) for a, b in self.prior if b > now]
                       + [(r.start, r.end) for r in self.units.get("tc", []) if r.end > now])
        merged: list[tuple[int, int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        return merged

    def _stretched(self, v: str, now: int) -> int:
        """Cycles from ``now`` until one step's work is done at the rate each stretch of time allows."""
        beside = self.hold[v]
        alone = beside * self.ratio[v]
        t, left = float(now), 1.0
        for a, b in self._busy(now):
            for end, cost in ((a, alone), (b, beside)):
                if end > t:
                    if (end - t) / cost >= left:
                        return math.ceil(t + left * cost - now)
                    left -= (end - t) / cost
                    t = end
        return math.ceil(t + left * alone - now)

    def _issue(self, s: gpu._Stream, op: Op, k: int, now: int) -> None:
        if op.name not in self.ratio:
            return super()._issue(s, op, k, now)
        nominal = self.hold[op.name]
        self.hold[op.name] = self._stretched(op.name, now)
        super()._issue(s, op, k, now)
        self.hold[op.name] = nominal


def replay_by_overlap(problem: Problem, sched: Schedule, iterations: int, ratio: dict[str, float],
                      war: str | None = None, same_group: bool = False, retire_first: bool = False,
                      passes: int = 8) -> float:
    """The interval under `_ByOverlap` with the other hypotheses chosen, each pass on the tensor core's busy spans of
    the one before, until the interval repeats (at most ``passes``; one pass with no ``ratio``)."""
    busy: list[tuple[int, int]] = []
    last = None
    for _ in range(passes):
        machine = _ByOverlap(problem, sched, iterations, ratio, busy, war, same_group, retire_first)
        machine.run()
        achieved = machine.result().achieved_ii
        busy = [(sp.start, sp.end) for sp in machine.spans if sp.unit == "tc"]
        if achieved == last or not ratio:  # without rates by overlap a second pass would repeat the first
            break
        last = achieved
    return achieved


def replay(arch_name: str, path: str, iterations: int = 32, retire_first: bool = False,
           operand_war: str | None = None, by_overlap: str | None = None, same_group: bool = False) -> tuple[int, float]:
    """(the schedule's II, the interval the simulator achieves on ``arch_name``'s costs)."""
    arch = get_arch(arch_name)
    sched = Schedule.read(path)
    problem = build_problem(load_program(sched.program, arch, dict(sched.body.params)), arch)
    if by_overlap or retire_first or operand_war:
        ratio = alone_ratios(by_overlap) if by_overlap else {}
        return sched.ii, replay_by_overlap(problem, sched, iterations, ratio, operand_war, same_group, retire_first)
    return sched.ii, simulate(problem, sched, iterations=iterations).achieved_ii


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arch")
    ap.add_argument("schedules", nargs="+")
    ap.add_argument("--iterations", type=int, default=32)
    ap.add_argument("--retire-before-register-work", action="store_true",
                    help="register work waits for its group's in-flight wgmmas (a hypothesis about ptxas)")
    ap.add_argument("--rs-operand-war", nargs="?", const="operand", choices=("operand", "chain"),
                    help="the producer of an RS wgmma's register operand waits for the previous read (a hypothesis)")
    ap.add_argument("--same-group", action="store_true",
                    help="with --rs-operand-war: only where the wgmma is in the writer's group")
    ap.add_argument("--rates-by-overlap", metavar="FA_CONSUMER_JSON",
                    help="register steps at their rate alone while the tensor core is idle (a hypothesis)")
    args = ap.parse_args()
    print("| schedule | II when solved | replayed cycles/iteration |\n|---|---|---|")
    for path in args.schedules:
        ii, achieved = replay(args.arch, path, args.iterations, args.retire_before_register_work, args.rs_operand_war,
                              args.rates_by_overlap, args.same_group)
        print(f"| {path} | {ii} | {achieved:.0f} |")


if __name__ == "__main__":
    main()
