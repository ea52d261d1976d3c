"""Replay a generated kernel's own statements on an arch's costs (issue 21): cycles per iteration of the kernel.

    python bench/kernel_replay.py bench/codegen/fa_opt.json bench/codegen/fa_mio.json \\
        --costs bench/codegen/h200_warpgroup_mio.toml --rates bench/results/h100/mio/fa_consumer_full_partner.json \\
        --tc-queue 7

The simulator (`twill.sim`) replays a schedule: every op at its planned cycle or later, waiting only on the
model's dependences and units. A kernel does not run the schedule; it runs what `twill codegen` writes: each
warp group's statements in order, nothing held back to a planned cycle, and waits only where the source waits:
``mbarrier.wait`` on a ring or hand-off slot (its phase completes with the arrivals the barrier was initialised
for and, for a TMA fill, the bytes landing), ``bar.sync`` of the tensor-core turn token (a named barrier
completes when its thread count has arrived), ``warpgroup_mma_wait(n)`` (every wgmma of the group but the last
n retired). This script runs those statements for a trip count (`twill.codegen.protocol.executed` walks the
emitted control flow) and reports the slope of the ops' issue cycles over the second half of the iterations.
Deterministic, no GPU.

What an op statement costs:

* by default, ``COSTS``'s model (``--costs``, default the schedule's arch; a built-in name or a TOML file): its
  hold on the group and its unit segments, each unit first come, first served in time order (the tensor core
  takes wgmmas in issue order; two groups' exps share the MUFU). At the schedule's own arch a kernel that does
  what its schedule says replays at the II.
* ``--rates FA_CONSUMER_JSON``: FlashAttention's register steps (row max, exp, row sum, rescale, cast) as
  measured by ``bench/gpu/fa_consumer.cu``, each as work that progresses at the rate of its situation, recomputed
  whenever the situation changes: alone, beside a running wgmma (the tensor core busy: ``beside_wgmma``; a step
  is as slow beside its own group's wgmma, ``own_wgmma_*``), with another warpgroup on the same step (``pair``),
  or both (``pair_beside_wgmma``). A group of 8 warps is two warpgroups on its step (a pair). A hand-off's copy
  in the op's hold is added after the step.
* ``--tc-queue N``: a wgmma as its k-step instructions (m64nNk16), issued one after another (SS: 22 cycles the
  first, 20 each more; RS: 67, then 12; ``bench/gpu/wgmma_queue.cu`` on the H100,
  ``bench/results/h100/queue/``), each entering the tensor core only when fewer than N instructions wait or run
  there (first in, first out), so a group whose partner has filled the queue waits at its issue; the op
  completes with its last instruction plus the tail the arch's latency keeps beyond the unit's work. The same
  record puts N at 6.5: alone, the issue of C > 8 instructions grows by 64 cycles (one instruction's work)
  per instruction, 630 cycles for 16 SS = 64 (16 - 6.5) + 22.
* ``--step NAME=CYCLES``: an op (its name without the sub-tile digit) at a fixed number of cycles.
* ``--sync``: an ``mbarrier.wait`` costs the arch's ``[sync] wait_issue`` (a try_wait that finds its phase done, and
  its branch: 64.5 cycles on the H200) once its phase is done, a ``bar.sync`` the arch's ``named_barrier`` (42) once
  the barrier completes; arrivals cost nothing (no fact of their own).
* ``--statement-cost C``: every statement that is not an op (barrier traffic, moves, fences) C cycles.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import itertools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_on_arch import FA_STEPS  # noqa: E402

from twill.arch.registry import get_arch  # noqa: E402
from twill.codegen.emit import emit_source  # noqa: E402
from twill.codegen.plan import Plan, make_plan  # noqa: E402
from twill.codegen.protocol import executed  # noqa: E402
from twill.frontend.programs import load_program  # noqa: E402
from twill.problem import Problem, build_problem  # noqa: E402
from twill.schedule import Schedule  # noqa: E402
from twill.validate import problem_for  # noqa: E402

_OP = re.compile(r"^(\w+?)(?: of iteration [^:]+)?: group \d+")
_NAMED = re.compile(r'"bar\.(sync|arrive) (\d+), (\d+);')
_MB = r"(\w+)\.index\((.+?)\)"
_MB_WAIT = re.compile(rf"^mbarrier\.wait\({_MB}, (.+)\)$")
_MB_ARRIVE = re.compile(rf"^mbarrier\.arrive\({_MB}(?:, pred=(.+))?\)$")
_MB_EXPECT = re.compile(rf"^mbarrier\.expect\({_MB}, (\d+)(?:, pred=(.+))?\)$")
_TMA_LOAD = re.compile(rf"^tma\.async_copy_global_to_shared\(\w+, \[.*\], {_MB}, \w+\.index\(.+?\)(?:, (.+))?\)$")
_MMA_WAIT = re.compile(r"warpgroup_mma_wait\((\d+)")
_INIT = re.compile(rf"mbarrier\.init\({_MB}, count=(\d+)\)")
_MODES = {(False, False): "alone", (True, False): "beside_wgmma", (False, True): "pair", (True, True): "pair_beside_wgmma"}
_K_STEP = 16  # a wgmma instruction's K for 16-bit inputs (PTX ISA: wgmma.mma_async m64nNk16)


def _value(expr: str, env: dict[str, int]) -> int:
    return int(eval(expr, {"__builtins__": {}}, dict(env)))  # noqa: S307 - the emitter's own index arithmetic


def _base(op: str) -> str:
    return op.rstrip("0123456789")


def step_rates(path: str | Path) -> dict[str, dict[str, float]]:
    """Cycles per 64 x 128 round of each FA step (by the program's op name) in each situation of a fa_consumer
    record; a missing ``pair_beside_wgmma`` (records before session 69) is the pair's cost scaled as one
    warpgroup's is beside a wgmma."""
    records = json.loads(Path(path).read_text())["records"]
    cycles = {(r["step"], r["mode"]): r["cycles"] for r in records if r.get("kind") == "step"}
    out = {}
    for op, step in FA_STEPS.items():
        row = {mode: cycles[step, mode] for mode in _MODES.values() if (step, mode) in cycles}
        row.setdefault("pair_beside_wgmma", row["pair"] * row["beside_wgmma"] / row["alone"])
        out[op] = row
    return out


@dataclass(frozen=True, slots=True)
class Model:
    """How the replay charges time (see the module docstring)."""

    rates: dict[str, dict[str, float]] | None = None
    queue: int = 0
    issue: tuple[tuple[float, float], tuple[float, float]] = ((22.0, 20.0), (67.0, 12.0))  # SS, RS: (first, each more)
    steps: dict[str, int] = field(default_factory=dict)
    statement_cost: int = 0
    sync: bool = False


@dataclass
class _Barrier:
    """One mbarrier slot: its arrival count per phase, the arrivals and bytes its open phase still waits for."""

    count: int
    arrived: int = 0
    tx: int = 0
    phases: int = 0  # completed phases
    waiters: list[int] = field(default_factory=list)


@dataclass
class _Group:
    gid: int
    warps: int
    lines: list[tuple[str, str, dict[str, int]]]
    pc: int = 0
    inflight: list[float] = field(default_factory=list)  # completion cycles of the wgmmas not yet retired
    at: tuple[int, float] = (0, 0.0)  # (statement, cycle it was reached): its time runs until the next is reached
    lines_time: dict[str, float] = field(default_factory=dict)  # second-half cycles per statement's code


@dataclass
class _Run:
    """A register step in progress under ``--rates``: the fraction of its work left and the rate it goes at."""

    group: _Group
    kind: str
    extra: float  # the hand-off copy its hold adds, charged after the step
    left: float = 1.0
    since: float = 0.0
    rate: float = 0.0
    token: int = 0


@dataclass(frozen=True, slots=True)
class KernelReplay:
    """The replay's result: cycles per iteration (the largest slope over ops), waits by kind, time per statement."""

    cycles_per_iteration: float
    iterations: int
    waits: dict[int, dict[str, float]]
    per_line: dict[int, dict[str, float]]  # per group: each statement's cycles per iteration in the second half


class _Machine:
    """The kernel's warp groups on one SM, advanced in time order (a heap of (cycle, sequence, what))."""

    def __init__(self, source: str, plan: Plan, costs: Problem, n_iter: int, model: Model, flops: float,
                 sync: tuple[float, float] = (0.0, 0.0)) -> None:
        self.costs, self.model, self.n_iter = costs, model, n_iter
        self.wait_cost, self.bar_cost = sync  # an mbarrier wait that finds its phase done; a bar.sync that completes
        groups = {o.id: o.group for o in plan.schedule.ops}
        self.hold = {op.name: float(costs.hold_in(op.name, groups)) for op in costs.ops}
        self.extra = {op.name: self.hold[op.name] - costs.hold(op.name) for op in costs.ops}
        for op in costs.ops:  # a step given in cycles
            if (cycles := model.steps.get(_base(op.name))) is not None:
                self.hold[op.name] = cycles + self.extra[op.name]
        self.instr = {name: max(1, round(self._tc_use(name).length * flops / (2 * spec.acc_shape[0] *
                                                                               spec.acc_shape[1] * _K_STEP)))
                      for name, spec in plan.mmas.items()}
        self.rs = {name for name, spec in plan.mmas.items() if spec.a_from == "regs"}
        self.groups = {p.group: _Group(p.group, p.warps, executed(source, p.group, plan.frame.trip_count, n_iter))
                       for p in plan.partitions}
        self.init = {name: int(count) for name, _, count in _INIT.findall(source)}
        self.mbar: dict[tuple[str, int], _Barrier] = {}
        self.named: dict[int, tuple[int, list[int]]] = {}  # barrier -> (threads arrived, groups waiting)
        self.unit_free: dict[str, float] = {}
        self.tc: list[tuple[float, float]] = []  # the tensor core's work, in order (first in, first out)
        self.running: dict[int, _Run] = {}
        self.heap: list[tuple[float, int, object]] = []
        self.seq = itertools.count()
        self.issues: dict[str, list[float]] = {}
        self.waits = {g: dict.fromkeys(("turn", "retire", "mbarrier", "unit"), 0.0) for g in self.groups}
        self.parked_at: dict[int, tuple[float, str]] = {}
        self.last = 0.0

    def _tc_use(self, name: str):
        return next(u for u in self.costs.op(name).uses if u.unit == "tc")

    # -- the event loop ------------------------------------------------------------------------------------------
    def _at(self, t: float, what: object) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), what))

    def run(self) -> None:
        for g in self.groups:
            self._at(0.0, g)
        while self.heap:
            now, _, what = heapq.heappop(self.heap)
            self.last = max(self.last, now)
            if callable(what):
                what(now)
            else:
                self._step(self.groups[what], now)
        for g in self.groups.values():
            self._reach(g, self.last)
        stuck = [g for g in self.groups.values() if g.pc < len(g.lines)]
        if stuck:
            where = "; ".join(f"group {g.gid} at {g.lines[g.pc][0][:60]}" for g in stuck)
            raise RuntimeError(f"kernel replay: deadlock: {where}")

    def _park(self, g: _Group, now: float, kind: str) -> None:
        self.parked_at[g.gid] = (now, kind)

    def _wake(self, gid: int, now: float, cost: float = 0.0) -> None:
        since, kind = self.parked_at.pop(gid)
        self.waits[gid][kind] += now - since
        self._at(now + cost, gid)

    # -- mbarriers -----------------------------------------------------------------------------------------------
    def _bar(self, name: str, slot: int) -> _Barrier:
        return self.mbar.setdefault((name, slot), _Barrier(self.init.get(name, 1)))

    def _arrive(self, b: _Barrier, now: float, tx: int = 0) -> None:
        b.arrived += 1
        b.tx += tx
        self._complete(b, now)

    def _complete(self, b: _Barrier, now: float) -> None:
        if b.arrived >= b.count and b.tx <= 0:
            b.phases, b.arrived, b.tx = b.phases + 1, 0, 0
            waiters, b.waiters = b.waiters, []
            for gid in waiters:
                self._wake(gid, now)

    def _land(self, b: _Barrier, nbytes: int):
        def land(now: float) -> None:
            b.tx -= nbytes
            self._complete(b, now)
        return land

    # -- statements ----------------------------------------------------------------------------------------------
    def _step(self, g: _Group, now: float) -> None:
        """Run statements of ``g`` from ``now`` until one takes time, waits, or the group ends."""
        while g.pc < len(g.lines):
            self._reach(g, now)
            code, comment, env = g.lines[g.pc]
            if self._waits(g, code, env, now):
                return
            g.pc += 1
            op = _OP.match(comment)
            if op is not None and op.group(1) in self.hold:
                self._op(g, op.group(1), code, env, now)
                return
            if self.model.statement_cost:
                self._at(now + self.model.statement_cost, g.gid)
                return

    def _waits(self, g: _Group, code: str, env: dict[str, int], now: float) -> bool:
        """Run one synchronisation statement, if ``code`` is one; True when the group waits."""
        if (m := _MB_WAIT.match(code)) is not None:
            b = self._bar(m.group(1), _value(m.group(2), env))
            if (b.phases & 1) == _value(m.group(3), env):
                b.waiters.append(g.gid)
                self._park(g, now, "turn" if m.group(1) == "turn" else "mbarrier")
                return True
            if self.wait_cost:  # the try_wait that finds the phase done, and its branch
                g.pc += 1
                self._at(now + self.wait_cost, g.gid)
                return True
        elif (m := _NAMED.search(code)) is not None:
            return self._named(g, now, m.group(1), int(m.group(2)), int(m.group(3)))
        elif (m := _MMA_WAIT.search(code)) is not None:
            keep = len(g.inflight) - int(m.group(1))
            done, g.inflight = g.inflight[:keep], g.inflight[keep:]
            if done and max(done) > now:
                g.pc += 1
                self.waits[g.gid]["retire"] += max(done) - now
                self._at(max(done), g.gid)
                return True
        elif (m := _MB_ARRIVE.match(code)) is not None:
            if m.group(3) is None or _value(m.group(3), env):
                self._arrive(self._bar(m.group(1), _value(m.group(2), env)), now)
        elif (m := _MB_EXPECT.match(code)) is not None:
            if m.group(4) is None or _value(m.group(4), env):
                self._arrive(self._bar(m.group(1), _value(m.group(2), env)), now, int(m.group(3)))
        elif (m := _TMA_LOAD.match(code)) is not None and m.group(3) is not None and not _value(m.group(3), env):
            g.pc += 1  # a predicated-off fill past the last trip: skipped, no op issued
            self._at(now, g.gid)
            return True
        return False

    def _reach(self, g: _Group, now: float) -> None:
        """Charge the time since the group reached its last statement to that statement (a wait's to the
        statement that waits, as a profiler's samples do), counting the second half of the loop only."""
        last, since = g.at
        if last == g.pc and g.pc:
            return
        code, _, env = g.lines[last]
        if env.get("t", -1) >= self.n_iter // 2:
            g.lines_time[code] = g.lines_time.get(code, 0.0) + now - since
        g.at = (g.pc, now)

    def _named(self, g: _Group, now: float, kind: str, bar: int, threads: int) -> bool:
        """A named barrier's arrival; True when the group waits (a ``bar.sync`` of an incomplete generation)."""
        arrived, waiting = self.named.get(bar, (0, []))
        arrived += 32 * g.warps
        if kind == "sync":
            waiting = [*waiting, g.gid]
            g.pc += 1
            self._park(g, now, "turn")
        if arrived >= threads:
            self.named[bar] = (0, [])
            for gid in waiting:
                self._wake(gid, now, self.bar_cost)
        else:
            self.named[bar] = (arrived, waiting)
        return kind == "sync"

    # -- ops -----------------------------------------------------------------------------------------------------
    def _op(self, g: _Group, name: str, code: str, env: dict[str, int], now: float) -> None:
        op = self.costs.op(name)
        self.issues.setdefault(name, []).append(now)
        if op.is_async and self.model.queue and name in self.instr:
            self._at(self._queued_mma(g, name, now), g.gid)
        elif not op.is_async and self.model.rates and _base(name) in self.model.rates \
                and _base(name) not in self.model.steps:
            self._begin(g, name, now)
        else:
            self._at(self._issue(g, name, code, env, now), g.gid)

    def _issue(self, g: _Group, name: str, code: str, env: dict[str, int], now: float) -> float:
        """Issue op ``name`` at ``now`` or once its units take it; the cycle the group's next statement may run."""
        op = self.costs.op(name)
        shift = max([0.0] + [self.unit_free.get(u.unit, 0.0) - (now + u.offset) for u in op.uses])
        start = now + shift
        for u in op.uses:
            self.unit_free[u.unit] = start + u.offset + u.length
            if u.unit == "tc":
                self._tc_reserve(start + u.offset, start + u.offset + u.length)
        self.waits[g.gid]["unit"] += shift
        if not op.is_async:
            return start + self.hold[name]
        if (m := _TMA_LOAD.match(code)) is not None:
            b = self._bar(m.group(1), _value(m.group(2), env))
            self._at(start + op.latency, self._land(b, op.smem_bytes or max(b.tx, 0)))  # its tile's bytes
        else:
            g.inflight.append(start + op.latency)
        return now + self.hold[name]  # the unit queues it; the group goes on

    def _queued_mma(self, g: _Group, name: str, now: float) -> float:
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
            self._tc_reserve(begin, begin + each)
            t += first if i == 0 else more
        g.inflight.append(self.tc[-1][1] + self.costs.op(name).latency - tc.length)
        self.waits[g.gid]["unit"] += t - now - first - (n - 1) * more
        return t

    def _tc_reserve(self, begin: float, end: float) -> None:
        self.tc.append((begin, end))
        if self.running:  # the tensor core's coming work changes the running steps' situation
            self._reflow(self.last)

    # -- register steps at the rate of their situation (--rates) -------------------------------------------------
    def _begin(self, g: _Group, name: str, now: float) -> None:
        self.running[g.gid] = _Run(g, _base(name), self.extra[name], since=now)
        self._reflow(now)

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
            pair = r.group.warps >= 8 or any(o.kind == r.kind for o in self.running.values() if o is not r)
            r.rate = 1.0 / self.model.rates[r.kind][_MODES[busy, pair]]
            r.token += 1
            done = now + max(r.left, 0.0) / r.rate
            if done <= change:
                self._at(done, self._finisher(r, r.token))
        if change < math.inf and any(now + max(r.left, 0.0) / r.rate > change for r in self.running.values()):
            self._at(change, self._reflow)

    def _finisher(self, r: _Run, token: int):
        def finish(now: float) -> None:
            if r.token != token or self.running.get(r.group.gid) is not r:
                return
            self._reflow(now)
            del self.running[r.group.gid]
            if self.running:
                self._reflow(now)
            self._at(now + r.extra, r.group.gid)
        return finish

    def result(self) -> KernelReplay:
        n = min(len(v) for v in self.issues.values())
        lo = n // 2
        slope = max(_slope(list(range(lo, n)), v[lo:n]) for v in self.issues.values())
        steady = self.n_iter - self.n_iter // 2
        per_line = {g.gid: {code: c / steady for code, c in g.lines_time.items()} for g in self.groups.values()}
        return KernelReplay(slope, n, self.waits, per_line)


def _slope(xs: list[int], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def replay_kernel(schedule: str | Path, costs: str | None = None, model: Model | None = None, n_iter: int = 32,
                  turns: bool = True) -> KernelReplay:
    """The kernel `twill codegen` writes for ``schedule``, replayed statement by statement."""
    sched = Schedule.read(schedule)
    # planned and emitted as `twill codegen` does, without its validation: a kernel kept as measured (an older
    # model's schedule) replays as it ran
    source = emit_source(plan := make_plan(sched, problem_for(sched), turns=turns))
    arch = get_arch(costs or sched.arch_path or sched.arch)
    problem = build_problem(load_program(sched.program, arch, dict(sched.body.params)), arch)
    model = model or Model()
    sync = (arch.sync_cost("wait_issue"), arch.sync_cost("named_barrier")) if model.sync else (0.0, 0.0)
    machine = _Machine(source, plan, problem, n_iter, model, arch.rate("tensor_flops_per_clk_fp16"), sync)
    machine.run()
    return machine.result()


def _print_lines(r: KernelReplay) -> None:
    """Each group's statements that take time, in program order, with cycles per iteration."""
    for g, lines in r.per_line.items():
        print(f"  group {g}: {sum(lines.values()):.0f} cycles per iteration")
        for code, c in lines.items():
            if c >= 1:
                print(f"    {c:7.0f}  {code[:100]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schedules", nargs="+")
    ap.add_argument("--costs", help="arch whose costs time the statements (default: the schedule's)")
    ap.add_argument("--rates", metavar="FA_CONSUMER_JSON", help="FA's register steps at their measured rates by situation")
    ap.add_argument("--tc-queue", type=int, default=0, metavar="N",
                    help="wgmmas as k-step instructions, at most N waiting or running in the tensor core")
    ap.add_argument("--step", action="append", default=[], metavar="NAME=CYCLES",
                    help="an op (its name without the sub-tile digit, e.g. exp) at this many cycles; repeatable")
    ap.add_argument("--sync", action="store_true",
                    help="mbarrier waits and bar.sync at the arch's measured costs ([sync] wait_issue, named_barrier)")
    ap.add_argument("--statement-cost", type=int, default=0, help="cycles per statement that is not an op")
    ap.add_argument("--iterations", type=int, default=32)
    ap.add_argument("--no-turns", action="store_true", help="the kernel lowered without the turn token")
    ap.add_argument("--lines", action="store_true", help="also each statement's cycles per iteration, per group")
    args = ap.parse_args()
    model = Model(rates=step_rates(args.rates) if args.rates else None, queue=args.tc_queue,
                  steps={k: int(v) for k, v in (x.split("=", 1) for x in args.step)},
                  statement_cost=args.statement_cost, sync=args.sync)
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
