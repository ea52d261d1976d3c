"""A generated kernel's own statements, replayed on the model's costs: what `twill codegen` writes, run as written.

The simulator (`twill.sim`) replays a schedule: every op at its planned cycle or later. A generated kernel runs
something else: each warp group's statements in order, nothing held back to a planned cycle, waiting only where the
source waits: ``mbarrier.wait`` on a ring or hand-off slot (its phase completes with the arrivals the barrier was
initialised for and, for a TMA fill, the bytes landing), ``bar.sync`` of the tensor-core turn token (a named barrier
completes when its thread count has arrived), ``warpgroup_mma_wait(n)`` (every wgmma of the group but the last n
retired). `replay` runs those statements for a trip count (`twill.codegen.protocol.executed` walks the emitted
control flow) with each op at its hold on its group and its unit segments, each unit first come, first served in
time order, and reports the slope of the ops' issue cycles over the second half of the trips.

At the schedule's own costs a kernel that does what its schedule says replays at the II or faster (it waits only
where it must); slower means the emitted synchronisation costs what the model did not plan (issue 21: gemm_ws2's ring
slot, which the deferred retire releases later than the model frees it). ``sync`` adds the arch's measured cost of an
``mbarrier.wait`` that finds its phase done (``[sync] wait_issue``) and of a ``bar.sync`` that completes
(``named_barrier``). `bench/kernel_replay.py` extends `Machine` with costs measured in the kernel's own situations.
"""

from __future__ import annotations

import heapq
import itertools
import re
from dataclasses import dataclass, field

from twill.codegen.emit import emit_source
from twill.codegen.plan import Plan, make_plan
from twill.codegen.protocol import executed
from twill.problem import Problem
from twill.schedule import Schedule

__all__ = ["KernelReplay", "Machine", "emitted", "replay", "replay_schedule"]

_OP = re.compile(r"^(\w+?)(?: of iteration [^:]+)?: group \d+")
_NAMED = re.compile(r'"bar\.(sync|arrive) (\d+), (\d+);')
_MB = r"(\w+)\.index\((.+?)\)"
_MB_WAIT = re.compile(rf"^mbarrier\.wait\({_MB}, (.+)\)$")
_MB_ARRIVE = re.compile(rf"^mbarrier\.arrive\({_MB}(?:, pred=(.+))?\)$")
_MB_EXPECT = re.compile(rf"^mbarrier\.expect\({_MB}, (\d+)(?:, pred=(.+))?\)$")
_TMA_LOAD = re.compile(rf"^tma\.async_copy_global_to_shared\(\w+, \[.*\], {_MB}, \w+\.index\(.+?\)(?:, (.+))?\)$")
_MMA_WAIT = re.compile(r"warpgroup_mma_wait\((\d+)")
_INIT = re.compile(rf"mbarrier\.init\({_MB}, count=(\d+)\)")
WAIT_KINDS = ("turn", "retire", "mbarrier", "unit")


def _value(expr: str, env: dict[str, int]) -> int:
    return int(eval(expr, {"__builtins__": {}}, dict(env)))  # noqa: S307 - the emitter's own index arithmetic


@dataclass
class _Barrier:
    """One mbarrier slot: its arrival count per phase, the arrivals and bytes its open phase still waits for."""

    count: int
    arrived: int = 0
    tx: int = 0
    phases: int = 0  # completed phases
    waiters: list[int] = field(default_factory=list)


@dataclass
class Group:
    """One warp group's statements as executed, and where it is in them."""

    gid: int
    warps: int
    lines: list[tuple[str, str, dict[str, int]]]
    pc: int = 0
    inflight: list[float] = field(default_factory=list)  # completion cycles of the wgmmas not yet retired
    at: tuple[int, float] = (0, 0.0)  # (statement, cycle it was reached): its time runs until the next is reached
    lines_time: dict[str, float] = field(default_factory=dict)  # second-half cycles per statement's code


@dataclass(frozen=True, slots=True)
class KernelReplay:
    """The replay's result: cycles per iteration (the largest slope over ops), waits by kind, time per statement."""

    cycles_per_iteration: float
    iterations: int
    waits: dict[int, dict[str, float]]
    per_line: dict[int, dict[str, float]]  # per group: each statement's cycles per iteration in the second half
    total_cycles: float = 0.0  # the partitions' first statement to their last, prologue and epilogue included

    def slowest(self) -> tuple[int, str, float]:
        """(group, statement, cycles per iteration) of the wait statement that costs the most."""
        waits = [(c, g, code) for g, lines in self.per_line.items() for code, c in lines.items()
                 if code.startswith(("mbarrier.wait", "gl.inline_asm_elementwise(\"bar.sync")) or "_mma_wait(" in code]
        c, g, code = max(waits, default=(0.0, -1, ""))
        return g, code, c


class Machine:
    """The kernel's warp groups on one SM, advanced in time order (a heap of (cycle, sequence, what)).

    ``sync``: (cycles of an mbarrier wait that finds its phase done, cycles of a bar.sync that completes)."""

    def __init__(self, source: str, plan: Plan, costs: Problem, n_iter: int, sync: tuple[float, float] = (0.0, 0.0),
                 statement_cost: float = 0.0) -> None:
        self.costs, self.n_iter, self.statement_cost = costs, n_iter, statement_cost
        self.wait_cost, self.bar_cost = sync
        groups = {o.id: o.group for o in plan.schedule.ops}
        self.hold = {op.name: float(costs.hold_in(op.name, groups)) for op in costs.ops}
        self.groups = {p.group: Group(p.group, p.warps, executed(source, p.group, plan.frame.trip_count, n_iter))
                       for p in plan.partitions}
        self.init = {name: int(count) for name, _, count in _INIT.findall(source)}
        self.mbar: dict[tuple[str, int], _Barrier] = {}
        self.named: dict[int, tuple[int, list[int]]] = {}  # barrier -> (threads arrived, groups waiting)
        self.unit_free: dict[str, float] = {}
        self.tc: list[tuple[float, float]] = []  # the tensor core's work, in order (first in, first out)
        self.heap: list[tuple[float, int, object]] = []
        self.seq = itertools.count()
        self.issues: dict[str, list[float]] = {}
        self.waits = {g: dict.fromkeys(WAIT_KINDS, 0.0) for g in self.groups}
        self.parked_at: dict[int, tuple[float, str]] = {}
        self.last = 0.0

    # -- the event loop ------------------------------------------------------------------------------------------
    def at(self, t: float, what: object) -> None:
        """Run ``what`` (a group id: its next statements; or a callable of the cycle) at cycle ``t``."""
        heapq.heappush(self.heap, (t, next(self.seq), what))

    def run(self) -> None:
        for g in self.groups:
            self.at(0.0, g)
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

    def _park(self, g: Group, now: float, kind: str) -> None:
        self.parked_at[g.gid] = (now, kind)

    def _wake(self, gid: int, now: float, cost: float = 0.0) -> None:
        since, kind = self.parked_at.pop(gid)
        self.waits[gid][kind] += now - since
        self.at(now + cost, gid)

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
    def _step(self, g: Group, now: float) -> None:
        """Run statements of ``g`` from ``now`` until one takes time, waits, or the group ends."""
        while g.pc < len(g.lines):
            self._reach(g, now)
            code, comment, env = g.lines[g.pc]
            if self._waits(g, code, env, now):
                return
            g.pc += 1
            op = _OP.match(comment)
            if op is not None and op.group(1) in self.hold:
                self.issues.setdefault(op.group(1), []).append(now)
                self.op(g, op.group(1), code, env, now)
                return
            if self.statement_cost:
                self.at(now + self.statement_cost, g.gid)
                return

    def _waits(self, g: Group, code: str, env: dict[str, int], now: float) -> bool:
        """Run one synchronisation statement, if ``code`` is one; True when the group waits."""
        if (m := _MB_WAIT.match(code)) is not None:
            b = self._bar(m.group(1), _value(m.group(2), env))
            if (b.phases & 1) == _value(m.group(3), env):
                b.waiters.append(g.gid)
                self._park(g, now, "turn" if m.group(1) == "turn" else "mbarrier")
                return True
            if self.wait_cost:  # the try_wait that finds the phase done, and its branch
                g.pc += 1
                self.at(now + self.wait_cost, g.gid)
                return True
        elif (m := _NAMED.search(code)) is not None:
            return self._named(g, now, m.group(1), int(m.group(2)), int(m.group(3)))
        elif (m := _MMA_WAIT.search(code)) is not None:
            keep = len(g.inflight) - int(m.group(1))
            done, g.inflight = g.inflight[:keep], g.inflight[keep:]
            if done and max(done) > now:
                g.pc += 1
                self.waits[g.gid]["retire"] += max(done) - now
                self.at(max(done), g.gid)
                return True
        elif (m := _MB_ARRIVE.match(code)) is not None:
            if m.group(3) is None or _value(m.group(3), env):
                self._arrive(self._bar(m.group(1), _value(m.group(2), env)), now)
        elif (m := _MB_EXPECT.match(code)) is not None:
            if m.group(4) is None or _value(m.group(4), env):
                self._arrive(self._bar(m.group(1), _value(m.group(2), env)), now, int(m.group(3)))
        elif (m := _TMA_LOAD.match(code)) is not None and m.group(3) is not None and not _value(m.group(3), env):
            g.pc += 1  # a predicated-off fill past the last trip: skipped, no op issued
            self.at(now, g.gid)
            return True
        return False

    def _reach(self, g: Group, now: float) -> None:
        """Charge the time since the group reached its last statement to that statement (a wait's to the
        statement that waits, as a profiler's samples do), counting the second half of the loop only."""
        last, since = g.at
        if last == g.pc and g.pc:
            return
        code, _, env = g.lines[last]
        if env.get("t", -1) >= self.n_iter // 2:
            g.lines_time[code] = g.lines_time.get(code, 0.0) + now - since
        g.at = (g.pc, now)

    def _named(self, g: Group, now: float, kind: str, bar: int, threads: int) -> bool:
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
    def op(self, g: Group, name: str, code: str, env: dict[str, int], now: float) -> None:
        """Issue op ``name`` of group ``g`` and schedule the group's next statement (a subclass may time it
        otherwise)."""
        self.at(self.issue(g, name, code, env, now), g.gid)

    def issue(self, g: Group, name: str, code: str, env: dict[str, int], now: float) -> float:
        """Issue op ``name`` at ``now`` or once its units take it; the cycle the group's next statement may run."""
        op = self.costs.op(name)
        shift = max([0.0] + [self.unit_free.get(u.unit, 0.0) - (now + u.offset) for u in op.uses])
        start = now + shift
        for u in op.uses:
            self.unit_free[u.unit] = start + u.offset + u.length
            if u.unit == "tc":
                self.tc_reserve(start + u.offset, start + u.offset + u.length)
        self.waits[g.gid]["unit"] += shift
        if not op.is_async:
            return start + self.hold[name]
        if (m := _TMA_LOAD.match(code)) is not None:
            b = self._bar(m.group(1), _value(m.group(2), env))
            self.at(start + op.latency, self._land(b, op.smem_bytes or max(b.tx, 0)))  # its tile's bytes
        else:
            g.inflight.append(start + op.latency)
        return now + self.hold[name]  # the unit queues it; the group goes on

    def tc_reserve(self, begin: float, end: float) -> None:
        """Record tensor-core work (a subclass may react to the tensor core's coming work)."""
        self.tc.append((begin, end))

    def result(self) -> KernelReplay:
        n = min(len(v) for v in self.issues.values())
        lo = n // 2
        slope = max(_slope(list(range(lo, n)), v[lo:n]) for v in self.issues.values())
        steady = self.n_iter - self.n_iter // 2
        per_line = {g.gid: {code: c / steady for code, c in g.lines_time.items()} for g in self.groups.values()}
        return KernelReplay(slope, n, self.waits, per_line, self.last)


def _slope(xs: list[int], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def replay(source: str, plan: Plan, costs: Problem, n_iter: int = 32, sync: tuple[float, float] = (0.0, 0.0)) \
        -> KernelReplay:
    """Emitted ``source`` of ``plan`` run statement by statement on ``costs`` for ``n_iter`` trips."""
    machine = Machine(source, plan, costs, n_iter, sync)
    machine.run()
    return machine.result()


def emitted(sched: Schedule, turns: bool | str = True) -> tuple[str, Plan]:
    """The source and plan `twill codegen` writes for ``sched``, without its validation: a kernel kept as measured
    (an older model's schedule) replays as it ran."""
    from twill.validate import problem_for

    plan = make_plan(sched, problem_for(sched), turns=turns)
    return emit_source(plan), plan


def replay_schedule(sched: Schedule, costs: Problem | None = None, n_iter: int = 32, turns: bool | str = True,
                    sync: tuple[float, float] = (0.0, 0.0)) -> KernelReplay:
    """The kernel `twill codegen` writes for ``sched`` (`emitted`), on ``costs`` (default: the schedule's own)."""
    source, plan = emitted(sched, turns)
    return replay(source, plan, costs or plan.problem, n_iter, sync)
