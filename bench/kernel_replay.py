"""Replay a generated kernel's own statements with costs measured in its own situations (issue 21).

    python bench/kernel_replay.py bench/codegen/fa_opt.json bench/codegen/fa_mio.json \\
        --costs bench/codegen/h200_warpgroup_mio.toml --rates bench/results/h100/mio/fa_consumer_full_partner.json \\
        --tc-queue 7 --sync

`twill.codegen.replay` runs what `twill codegen` writes, statement by statement, each op at the model's hold and unit
segments (``--costs``, default the schedule's arch: a built-in name or a TOML file; the program is rebuilt with the
schedule's parameters on it). This script extends it with the hypotheses of issue 21, each a measurement:

* ``--rates FA_CONSUMER_JSON``: FlashAttention's register steps (row max, exp, row sum, rescale, cast) as measured by
  ``bench/gpu/fa_consumer.cu``, each as work that progresses at the rate of its situation, recomputed whenever the
  situation changes: alone, beside a running wgmma (the tensor core busy: ``beside_wgmma``; a step is as slow beside
  its own group's wgmma, ``own_wgmma_*``), with another warpgroup on the same step (``pair``), or both
  (``pair_beside_wgmma``). A group of 8 warps is two warpgroups on its step (a pair). A hand-off's copy in the op's
  hold is added after the step. ``--cross FA_CONSUMER_CROSS_JSON`` adds the rate of a step while another warpgroup
  runs a different step (``cross_kernel``, session 70); without it such a step runs at its rate alone.
* ``--tc-queue N``: a wgmma as its k-step instructions (m64nNk16), issued one after another (SS: 22 cycles the first,
  20 each more; RS: 67, then 12; ``bench/gpu/wgmma_queue.cu`` on the H100, ``bench/results/h100/queue/``), each
  entering the tensor core only when fewer than N instructions wait or run there (first in, first out), so a group
  whose partner has filled the queue waits at its issue; the op completes with its last instruction plus the tail
  the arch's latency keeps beyond the unit's work. The same record puts N at 6.5: alone, the issue of C > 8
  instructions grows by 64 cycles (one instruction's work) per instruction, 630 cycles for 16 SS = 64 (16 - 6.5) + 22.
* ``--sync``: an ``mbarrier.wait`` costs the arch's ``[sync] wait_issue`` (a try_wait that finds its phase done, and
  its branch: 64.5 cycles on the H200) once its phase is done, a ``bar.sync`` the arch's ``named_barrier`` (42) once
  the barrier completes; arrivals cost nothing (no fact of their own).
* ``--step NAME=CYCLES``: an op (its name without the sub-tile digit) at a fixed number of cycles.
* ``--statement-cost C``: every statement that is not an op (barrier traffic, moves, fences) C cycles.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_on_arch import FA_STEPS, step_cycles  # noqa: E402

from twill.arch.registry import get_arch  # noqa: E402
from twill.codegen.plan import Plan  # noqa: E402
from twill.codegen.replay import Group, KernelReplay, Machine, emitted  # noqa: E402
from twill.frontend.programs import load_program  # noqa: E402
from twill.problem import Problem, build_problem  # noqa: E402
from twill.schedule import Schedule  # noqa: E402

_MODES = {(False, False): "alone", (True, False): "beside_wgmma", (False, True): "pair", (True, True): "pair_beside_wgmma"}
_K_STEP = 16  # a wgmma instruction's K for 16-bit inputs (PTX ISA: wgmma.mma_async m64nNk16)


def _base(op: str) -> str:
    return op.rstrip("0123456789")


def step_rates(path: str | Path) -> dict[str, dict[str, float]]:
    """Cycles per 64 x 128 round of each FA step (by the program's op name) in each situation of a fa_consumer
    record; a missing ``pair_beside_wgmma`` (records before session 69) is the pair's cost scaled as one
    warpgroup's is beside a wgmma."""
    cycles = step_cycles(path)
    out = {}
    for op, step in FA_STEPS.items():
        row = {mode: cycles[step, mode] for mode in _MODES.values() if (step, mode) in cycles}
        row.setdefault("pair_beside_wgmma", row["pair"] * row["beside_wgmma"] / row["alone"])
        out[op] = row
    return out


def cross_rates(path: str | Path) -> dict[tuple[str, str, bool], float]:
    """Cycles per round of each FA step while another warpgroup runs another step (``bench/gpu/fa_consumer.cu``'s
    cross_kernel record, session 70), by (step, other step, tensor core busy); both orders from each record."""
    names = {step: op for op, step in FA_STEPS.items()}
    out = {}
    for r in json.loads(Path(path).read_text())["records"]:
        if r.get("kind") == "cross" and r.get("ok"):
            a, b, busy = names[r["step"]], names[r["other"]], r["mode"] == "cross_beside_wgmma"
            out[a, b, busy], out[b, a, busy] = r["cycles"], r["other_cycles"]
    return out


@dataclass(frozen=True, slots=True)
class Model:
    """How the replay charges time (see the module docstring)."""

    rates: dict[str, dict[str, float]] | None = None
    cross: dict[tuple[str, str, bool], float] = field(default_factory=dict)  # (step, other step, tc busy) -> cycles
    queue: int = 0
    issue: tuple[tuple[float, float], tuple[float, float]] = ((22.0, 20.0), (67.0, 12.0))  # SS, RS: (first, each more)
    steps: dict[str, int] = field(default_factory=dict)
    statement_cost: int = 0
    sync: bool = False


@dataclass
class _Run:
    """A register step in progress under ``--rates``: the fraction of its work left and the rate it goes at."""

    group: Group
    kind: str
    extra: float  # the hand-off copy its hold adds, charged after the step
    left: float = 1.0
    since: float = 0.0
    rate: float = 0.0
    token: int = 0


class _Situated(Machine):
    """`twill.codegen.replay.Machine` with ops timed by the situation they run in (``Model``)."""

    def __init__(self, source: str, plan: Plan, costs: Problem, n_iter: int, model: Model, flops: float,
                 sync: tuple[float, float]) -> None:
        super().__init__(source, plan, costs, n_iter, sync, model.statement_cost)
        self.model = model
        self.extra = {op.name: self.hold[op.name] - costs.hold(op.name) for op in costs.ops}
        for op in costs.ops:  # a step given in cycles
            if (cycles := model.steps.get(_base(op.name))) is not None:
                self.hold[op.name] = cycles + self.extra[op.name]
        self.instr = {name: max(1, round(self._tc_use(name).length * flops / (2 * spec.acc_shape[0] *
                                                                               spec.acc_shape[1] * _K_STEP)))
                      for name, spec in plan.mmas.items()}
        self.rs = {name for name, spec in plan.mmas.items() if spec.a_from == "regs"}
        self.running: dict[int, _Run] = {}

    def _tc_use(self, name: str):
        return next(u for u in self.costs.op(name).uses if u.unit == "tc")

    def op(self, g: Group, name: str, code: str, env: dict[str, int], now: float) -> None:
        op = self.costs.op(name)
        if op.is_async and self.model.queue and name in self.instr:
            self.at(self._queued_mma(g, name, now), g.gid)
        elif not op.is_async and self.model.rates and _base(name) in self.model.rates \
                and _base(name) not in self.model.steps:
            self.running[g.gid] = _Run(g, _base(name), self.extra[name], since=now)
            self._reflow(now)
        else:
            super().op(g, name, code, env, now)

    def _queued_mma(self, g: Group, name: str, now: float) -> float:
        """A wgmma op as its k-step instructions, issued one after another (``Model.issue``: the first's and each
        further one's cycles, SS or RS), each entering the tensor core only once fewer than ``queue`` instructions
        wait or run there; completes with its last instruction plus the tail the arch's latency keeps beyond the
        unit's work."""
        n, tc = self.instr[name], self._tc_use(name)
        first, more = self.model.issue[name in self.rs]
        each, t = tc.length / n, now
        for i in range(n):
            if len(self.tc) >= self.model.queue:
                t = max(t, self.tc[-self.model.queue][1])
            begin = max(t, self.unit_free.get("tc", 0.0))
            self.unit_free["tc"] = begin + each
            self.tc_reserve(begin, begin + each)
            t += first if i == 0 else more
        g.inflight.append(self.tc[-1][1] + self.costs.op(name).latency - tc.length)
        self.waits[g.gid]["unit"] += t - now - first - (n - 1) * more
        return t

    def tc_reserve(self, begin: float, end: float) -> None:
        super().tc_reserve(begin, end)
        if self.running:  # the tensor core's coming work changes the running steps' situation
            self._reflow(self.last)

    # -- register steps at the rate of their situation (--rates) -------------------------------------------------
    def _tc_busy(self, now: float) -> tuple[bool, float]:
        """(the tensor core is busy at ``now``, the next cycle that changes)."""
        i = bisect.bisect_right(self.tc, (now, math.inf)) - 1
        if i >= 0 and self.tc[i][1] > now:
            end = self.tc[i][1]
            for b, e in self.tc[i + 1:]:  # back-to-back work keeps it busy
                if b > end:
                    break
                end = max(end, e)
            return True, end
        nxt = self.tc[i + 1][0] if i + 1 < len(self.tc) else math.inf
        return False, nxt

    def _reflow(self, now: float) -> None:
        """Bring every running step's work up to ``now`` and set its rate for the situation from ``now`` on."""
        now = max(now, max((r.since for r in self.running.values()), default=now))
        busy, change = self._tc_busy(now)
        for r in self.running.values():
            r.left -= (now - r.since) * r.rate
            r.since = now
        for r in self.running.values():
            r.rate = 1.0 / self._cycles(r, busy)
            r.token += 1
            done = now + max(r.left, 0.0) / r.rate
            if done <= change:
                self.at(done, self._finisher(r, r.token))
        if change < math.inf and any(now + max(r.left, 0.0) / r.rate > change for r in self.running.values()):
            self.at(change, self._reflow)

    def _cycles(self, r: _Run, busy: bool) -> float:
        """A step's cycles per round in its situation: the tensor core busy or not, and what the other warpgroups run
        (its own step: the pair's rate; another step: the cross record's, where given; the slowest of them)."""
        rates = self.model.rates[r.kind]
        others = [o.kind for o in self.running.values() if o is not r]
        if r.group.warps >= 8:  # two warpgroups on one step
            others.append(r.kind)
        return max([rates[_MODES[busy, False]]]
                   + [rates[_MODES[busy, True]] if o == r.kind else self.model.cross.get((r.kind, o, busy), 0.0)
                      for o in others])

    def _finisher(self, r: _Run, token: int):
        def finish(now: float) -> None:
            if r.token != token or self.running.get(r.group.gid) is not r:
                return
            self._reflow(now)
            del self.running[r.group.gid]
            if self.running:
                self._reflow(now)
            self.at(now + r.extra, r.group.gid)
        return finish


def replay_kernel(schedule: str | Path, costs: str | None = None, model: Model | None = None, n_iter: int = 32,
                  turns: bool = True) -> KernelReplay:
    """The kernel `twill codegen` writes for ``schedule``, replayed statement by statement."""
    sched = Schedule.read(schedule)
    source, plan = emitted(sched, turns)
    arch = get_arch(costs or sched.arch_path or sched.arch)
    problem = build_problem(load_program(sched.program, arch, dict(sched.body.params)), arch)
    model = model or Model()
    sync = (arch.sync_cost("wait_issue"), arch.sync_cost("named_barrier")) if model.sync else (0.0, 0.0)
    machine = _Situated(source, plan, problem, n_iter, model, arch.rate("tensor_flops_per_clk_fp16"), sync)
    machine.run()
    return machine.result()


def _print_lines(r: KernelReplay) -> None:
    """Each group's statements that take time, in program order, with cycles per iteration."""
    for g, lines in r.per_line.items():
        print(f"  group {g}: {sum(lines.values()):.0f} cycles per iteration")
        for code, c in lines.items():
            if c >= 1:
                print(f"    {c:7.0f}  {code[:100]}")


# The FA kernels measured on the GPU, as (name, schedule, Nsight report prefix): Nsight Compute's SM active cycles over
# 16 waves x 64 KV steps at 1x32x8192 (`bench/gpu/ncu_summary.py`). The replay's configurations were compared on the
# first eight (docs/benchmarks.md, "The kernel's own statements replayed"); the main job's kernel was measured after.
MEASURED = (
    ("fa_opt", "bench/codegen/fa_opt.json", "bench/results/h100/mio/ncu_fa_opt"),
    ("fa_mio", "bench/codegen/fa_mio.json", "bench/results/h100/mio/ncu_fa_mio"),
    ("fa_war", "bench/codegen/fa_war.json", "bench/results/h100/war/ncu_fa_war"),
    ("fa_handoff_copy", "bench/codegen/fa_handoff_copy.json", "bench/results/h100/mio/ncu_fa_handoff_copy"),
    ("fa_handoff (SS)", "bench/results/h200/handoff/fa_handoff.json", "bench/results/h200/handoff/ncu/ncu_fa_handoff_ss"),
    ("fa_cap", "bench/results/h200/fa_variants/fa_cap.json", "bench/results/h200/fa_variants/ncu_fa_cap"),
    ("fa_opt2 (240 registers)", "bench/results/h200/fa_variants/fa_opt2.json",
     "bench/results/h200/regs_sweep/ncu/ncu_fa_opt2_r240"),
    ("one-tile h100 optimum (session 63)", "bench/results/h200/handoff/fa_onetile_h100.json",
     "bench/results/h100/lines/ncu_fa_onetile_h100"),
    ("the main job's kernel (measured after)", "bench/codegen/fa_onetile_h100.json",
     "bench/results/h100/onetile/ncu_fa_onetile_h100"),
)
_STEPS = 16 * 64


def _table(costs: str | None, model: Model, n_iter: int) -> None:
    """The replay of every measured kernel against its Nsight cycles per KV step."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
    from ncu_summary import active_cycles

    print("| kernel | measured | replay | error |\n|---|---|---|---|")
    errors = []
    for name, schedule, prefix in MEASURED:
        measured = active_cycles(prefix) / _STEPS
        replayed = replay_kernel(schedule, costs, model, n_iter).cycles_per_iteration
        errors.append((replayed - measured) / measured)
        print(f"| {name} | {measured:.0f} | {replayed:.0f} | {100 * errors[-1]:+.1f}% |")
    compared = errors[:-1]
    print(f"within 10%: {sum(abs(e) <= 0.1 for e in compared)} of {len(compared)} compared, the largest "
          f"{100 * max(abs(e) for e in compared):.1f}%; the kernel measured after: {100 * errors[-1]:+.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schedules", nargs="*")
    ap.add_argument("--table", action="store_true", help="replay every kernel measured on the GPU (MEASURED) against "
                    "its Nsight cycles per KV step")
    ap.add_argument("--costs", help="arch whose costs time the statements (default: the schedule's)")
    ap.add_argument("--rates", metavar="FA_CONSUMER_JSON", help="FA's register steps at their measured rates by situation")
    ap.add_argument("--cross", metavar="FA_CONSUMER_CROSS_JSON",
                    help="with --rates: a step beside another warpgroup's other step at its measured rate")
    ap.add_argument("--tc-queue", type=int, default=0, metavar="N",
                    help="wgmmas as k-step instructions, at most N waiting or running in the tensor core")
    ap.add_argument("--sync", action="store_true",
                    help="mbarrier waits and bar.sync at the arch's measured costs ([sync] wait_issue, named_barrier)")
    ap.add_argument("--step", action="append", default=[], metavar="NAME=CYCLES",
                    help="an op (its name without the sub-tile digit, e.g. exp) at this many cycles; repeatable")
    ap.add_argument("--statement-cost", type=int, default=0, help="cycles per statement that is not an op")
    ap.add_argument("--iterations", type=int, default=32)
    ap.add_argument("--no-turns", action="store_true", help="the kernel lowered without the turn token")
    ap.add_argument("--lines", action="store_true", help="also each statement's cycles per iteration, per group")
    args = ap.parse_args()
    model = Model(rates=step_rates(args.rates) if args.rates else None,
                  cross=cross_rates(args.cross) if args.cross else {}, queue=args.tc_queue,
                  steps={k: int(v) for k, v in (x.split("=", 1) for x in args.step)},
                  statement_cost=args.statement_cost, sync=args.sync)
    if args.table:
        _table(args.costs, model, args.iterations)
        return
    print("| schedule | II | kernel replay cycles/iteration | waits per iteration, per group (turn / retire / "
          "mbarrier / unit) |\n|---|---|---|---|")
    for path in args.schedules:
        r = replay_kernel(path, args.costs, model, args.iterations, not args.no_turns)
        waits = "; ".join(f"g{g}: " + " / ".join(f"{v / r.iterations:.0f}" for v in w.values())
                          for g, w in r.waits.items())
        print(f"| {path} | {Schedule.read(path).ii} | {r.cycles_per_iteration:.0f} | {waits} |")
        if args.lines:
            _print_lines(r)


if __name__ == "__main__":
    main()
