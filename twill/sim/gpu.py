"""The GPU model of the simulator: warp groups as in-order issue streams sharing units and rings.

A static schedule is a promise about the steady state; this model replays it as the hardware
would run it, for a finite number of iterations including prologue and epilogue, and measures
the interval it achieves. Each warp group issues its ops, iteration after iteration, in the
order of their scheduled cycles (start + k·II). An op issues at its scheduled cycle at the
earliest (the schedule is a lower bound), and only once

* its producers' results are visible (edge latency, plus the hand-off cost across groups),
* its group is free (the previous op's hold is over; ops that hold nothing need only be issued
  after the previous one),
* a slot of its ring buffer is free (a variable-latency op with an SMEM buffer of depth D waits
  until the readers of its iteration k - D are done with it), and
* every segment of its reservation table finds room on its unit.

Variable-latency ops (TMA) may take longer than nominal (``jitter``), which is where a schedule's
slack, or lack of it, shows. A valid schedule without jitter replays exactly: every op issues at
its scheduled cycle, so the achieved interval is II.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from twill.errors import SimulationError, UsageError
from twill.ir import Edge, Op
from twill.problem import Problem
from twill.schedule import Schedule
from twill.sim.engine import Engine
from twill.sim.trace import Span, Trace
from twill.validate import lifetime, read_time, ring_depth

__all__ = ["SimResult", "simulate", "STALL_CAUSES"]

STALL_CAUSES = ("dependence", "unit", "ring", "handoff")
WARN_EXCESS = 0.005  # an achieved interval this far above II is reported; below it is jitter noise


@dataclass(frozen=True, slots=True)
class SimResult:
    """What a run achieved: its trace, the steady-state interval, utilisation and stalls.

    ``stalls[g][cause]`` counts the cycles group ``g`` sat with an op at its head, free to issue
    it by the schedule and by its own previous op, but waiting on ``cause``.
    """

    trace: Trace
    achieved_ii: float
    total_cycles: int
    unit_utilization: Mapping[str, float]
    stalls: Mapping[int, Mapping[str, int]]
    warnings: list[str]
    ii: int
    iterations: int


@dataclass
class _Stream:
    """One in-order issue stream: a warp group (or, without groups, one op's iterations)."""

    group: int
    items: list[tuple[int, str, int]]  # (scheduled cycle, op, iteration), in issue order
    pos: int = 0
    free_at: int = 0  # end of the last hold
    last_issue: int = 0
    pending: bool = False
    blocked: str = ""
    why: dict[str, tuple[int, str]] = field(default_factory=dict)  # cause -> (ready cycle, culprit)
    base: int = 0  # when the head could issue but for its waits: stalls are counted from here
    unit_culprit: str = ""

    @property
    def done(self) -> bool:
        return self.pos >= len(self.items)


@dataclass(frozen=True, slots=True)
class _Reservation:
    start: int
    end: int
    amount: int


class _Gpu:
    """The state of one run; ``run()`` drives the engine and returns the result."""

    def __init__(self, problem: Problem, schedule: Schedule, iterations: int, jitter: float, seed: int) -> None:
        self.p, self.s, self.n = problem, schedule, iterations
        self.ii = schedule.ii
        self.joint = not schedule.swp_only
        self.starts = {o.id: o.start for o in schedule.ops}
        self.group = {o.id: o.group for o in schedule.ops}
        # a hand-off's SMEM store and load occupy the producer's and the reader's groups (§2.7)
        self.hold = {op.name: (problem.hold_in(op.name, self.group) if self.joint else 0) for op in problem.ops}
        self.latency = self._latencies(jitter, seed)
        self.rings = self._ring_depths()
        self.engine = Engine()
        self.issued: dict[tuple[str, int], int] = {}
        self.units: dict[str, list[_Reservation]] = {}
        self.work: dict[str, int] = {}
        self.spans: list[Span] = []
        self.stalls = {g: dict.fromkeys(STALL_CAUSES, 0) for g in sorted({g.id for g in schedule.groups} | {
            o.group for o in schedule.ops})}
        self.culprits: dict[tuple[int, str], int] = {}
        self.finish = 0
        self.streams = self._streams()

    # -- set-up ------------------------------------------------------------------------------
    def _latencies(self, jitter: float, seed: int) -> dict[tuple[str, int], int]:
        """Actual latency of every (op, iteration): nominal, or latency x (1 + U[0, jitter)) for
        variable-latency ops; drawn in a fixed order so a seed gives one run."""
        rng = random.Random(seed)
        out = {}
        for k in range(self.n):
            for op in self.p.ops:
                lat = op.latency
                if jitter > 0 and op.variable_latency:
                    lat = round(lat * (1 + rng.uniform(0, jitter)))
                out[op.name, k] = lat
        return out

    def _ring_depths(self) -> dict[str, int]:
        """Ring depth of each variable-latency SMEM buffer: the schedule's declared copies (1 when
        it declares none); without memory rules (swp_only) as deep as the lifetime needs."""
        declared = {b.value: b.copies for b in self.s.buffers if b.memory == "smem"}
        out = {}
        for op in self.p.ops:
            if op.variable_latency and op.smem_bytes:
                if self.joint:
                    out[op.name] = max(1, declared.get(op.name, 1))
                else:
                    out[op.name] = max(1, ring_depth(lifetime(self.p, self.starts, self.ii, op.name), self.ii))
        return out

    def _tie_rank(self) -> dict[str, int]:
        """Order of ops scheduled at the same cycle: producers of zero-latency edges first, then
        body order; ops of one group at one cycle are legal only when they hold nothing."""
        order = [op.name for op in self.p.ops]
        preds = {n: {e.src for e in self.p.edges if e.dst == n and e.latency == 0 and e.src != n} for n in order}
        ranked: list[str] = []
        while len(ranked) < len(order):
            ready = [n for n in order if n not in ranked and preds[n] <= set(ranked)]
            ranked.append(ready[0] if ready else next(n for n in order if n not in ranked))
        return {n: i for i, n in enumerate(ranked)}

    def _streams(self) -> list[_Stream]:
        rank = self._tie_rank()
        keys = sorted(self.group) if not self.joint else sorted({o.group for o in self.s.ops})
        out = []
        for key in keys:
            names = [key] if not self.joint else [o.id for o in self.s.ops if o.group == key]
            items = [(self.starts[v] + k * self.ii, v, k) for v in names for k in range(self.n)]
            items.sort(key=lambda x: (x[0], rank[x[1]], x[2]))
            out.append(_Stream(group=self.group[names[0]] if names else key, items=items))
        return out

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> None:
        self._wake()
        self.engine.run()
        stuck = [s for s in self.streams if not s.done]
        if stuck:
            waiting = tuple(f"group {s.group} waits for op {s.items[s.pos][1]} iteration {s.items[s.pos][2]} on "
                            f"{s.blocked}" for s in stuck)
            raise SimulationError(f"deadlock at cycle {self.engine.now}: " + "; ".join(waiting), waiting=waiting)

    def _wake(self) -> None:
        """Re-examine every stream that is not already waiting on a timed event."""
        for s in self.streams:
            if not s.done and not s.pending:
                self._evaluate(s)

    def _evaluate(self, s: _Stream) -> None:
        """Work out when the head of ``s`` may issue, or record what it waits for."""
        sched, v, k = s.items[s.pos]
        base = max(sched, s.last_issue if s.pos else 0)
        if self.hold[v] > 0:
            base = max(base, s.free_at)
        why: dict[str, tuple[int, str]] = {}
        for e in self.p.body.in_edges(v):
            j = k - e.distance
            if j < 0:
                continue
            t = self.issued.get((e.src, j))
            if t is None:
                s.blocked = f"dependence: producer {e.src} iteration {j} has not issued"
                return
            ready = t + self._edge_latency(e, j)
            cost = self.p.cross_group_cost(e) if self.joint and self.group[e.src] != self.group[v] else 0
            if ready > why.get("dependence", (-1, ""))[0]:
                why["dependence"] = (ready, e.src)
            if cost and ready + cost > why.get("handoff", (-1, ""))[0]:
                why["handoff"] = (ready + cost, f"{e.src} -> {v}")
        if v in self.rings and k - self.rings[v] >= 0:
            freed = self._release(v, k - self.rings[v])
            if isinstance(freed, str):
                s.blocked = f"ring buffer {v} (depth {self.rings[v]}): {freed}"
                return
            why["ring"] = (freed, v)
        when = max([base] + [t for t, _ in why.values()])
        if s.pos:  # a stream that runs late owes no stall for keeping its planned spacing
            base = max(base, s.last_issue + sched - s.items[s.pos - 1][0])
        s.base, s.why, s.blocked, s.pending = base, why, "", True
        self.engine.at(max(when, self.engine.now), lambda: self._try_issue(s), priority=sched)

    def _edge_latency(self, e: Edge, j: int) -> int:
        """An edge that waits for its producer's completion also waits out the producer's jitter."""
        src = self.p.op(e.src)
        extra = self.latency[e.src, j] - src.latency
        return e.latency + extra if e.latency >= src.latency else e.latency

    def _release(self, v: str, j: int) -> int | str:
        """When iteration ``j`` of ``v``'s buffer is free again (its readers are done), or why it
        is not known yet."""
        outs = [e for e in self.p.body.out_edges(v) if j + e.distance < self.n]
        if not outs:
            return self.issued[v, j] + self.latency[v, j]
        done = 0
        for e in outs:
            t = self.issued.get((e.dst, j + e.distance))
            if t is None:
                return f"reader {e.dst} iteration {j + e.distance} of slot iteration {j} has not issued"
            dst = self.p.op(e.dst)
            read = self.latency[e.dst, j + e.distance] if dst.is_async and not e.in_place else read_time(e, dst)
            done = max(done, t + read)
        return done

    def _try_issue(self, s: _Stream) -> None:
        """Issue the head of ``s`` now if its unit segments fit, else retry when they may."""
        _, v, k = s.items[s.pos]
        now, op = self.engine.now, self.p.op(v)
        retry = None
        for use in op.uses:
            t = self._conflict(use.unit, now + use.offset, now + use.offset + use.length, use.amount)
            if t is not None:
                retry = t - use.offset if retry is None else min(retry, t - use.offset)
                s.unit_culprit = use.unit
        if retry is not None:
            self.engine.at(retry, lambda: self._try_issue(s), priority=s.items[s.pos][0])
            return
        self._issue(s, op, k, now)
        s.pending = False
        s.pos += 1
        self._wake()

    def _conflict(self, unit: str, a: int, b: int, amount: int) -> int | None:
        """None if ``amount`` more instances of ``unit`` fit over [a, b); else the first cycle at
        which the earliest over-full point frees an instance."""
        live = self.units.setdefault(unit, [])
        live[:] = [r for r in live if r.end > self.engine.now]
        overlap = [r for r in live if r.start < b and r.end > a]
        cap = self.p.capacity[unit]
        for point in sorted({a} | {r.start for r in overlap if r.start > a}):
            here = [r for r in overlap if r.start <= point < r.end]
            if sum(r.amount for r in here) + amount > cap:
                return min(r.end for r in here)
        return None

    def _issue(self, s: _Stream, op: Op, k: int, now: int) -> None:
        v = op.name
        self.issued[v, k] = now
        for use in op.uses:
            begin = now + use.offset
            self.units.setdefault(use.unit, []).append(_Reservation(begin, begin + use.length, use.amount))
            self.work[use.unit] = self.work.get(use.unit, 0) + use.amount * use.length
            self.spans.append(Span(v, k, s.group, use.unit, begin, begin + use.length, "busy"))
        if self.hold[v] > 0:
            s.free_at = now + self.hold[v]
            self.spans.append(Span(v, k, s.group, None, now, s.free_at, "issue" if op.is_async else "hold"))
        if now > s.base:
            self.spans.append(Span(v, k, s.group, None, s.base, now, "wait"))
        self._account(s, now)
        s.last_issue = now
        self.finish = max(self.finish, now + max(self.latency[v, k], self.hold[v], op.busy_cycles))

    def _account(self, s: _Stream, now: int) -> None:
        """Split the wait of the op just issued over its causes, in the order they bind."""
        floor = s.base
        for cause in ("dependence", "handoff", "ring"):
            if cause in s.why:
                ready, culprit = s.why[cause]
                self._stall(s.group, cause, culprit, min(ready, now) - floor)
                floor = max(floor, min(ready, now))
        self._stall(s.group, "unit", s.unit_culprit, now - floor)
        s.unit_culprit = ""

    def _stall(self, group: int, cause: str, culprit: str, cycles: int) -> None:
        if cycles <= 0:
            return
        self.stalls[group][cause] += cycles
        key = (group, f"{_CAUSE_WORDS[cause]} {culprit}")
        self.culprits[key] = self.culprits.get(key, 0) + cycles

    # -- results -------------------------------------------------------------------------------
    def result(self) -> SimResult:
        achieved = self._achieved_ii()
        total = self.finish
        util = {u: self.work.get(u, 0) / (self.p.capacity[u] * total) if total else 0.0
                for u in self.p.body.units()}
        return SimResult(trace=Trace(tuple(self.spans), self.issued), achieved_ii=achieved, total_cycles=total,
                         unit_utilization=util, stalls=self.stalls, warnings=self._warnings(achieved), ii=self.ii,
                         iterations=self.n)

    def _achieved_ii(self) -> float:
        """Steady-state cycles per iteration: the least-squares slope of issue cycle against
        iteration over the last half of the run (the prologue is over by then), for the slowest
        op. A slope, not single differences, so latency jitter averages out instead of biasing
        the figure; the slowest op, not the first, because a stream without back-pressure can
        fall behind while the loads keep time."""
        ks = range(self.n // 2, self.n) if self.n - self.n // 2 >= 2 else range(self.n)
        return max(_slope(list(ks), [self.issued[op.name, k] for k in ks]) for op in self.p.ops)

    def _warnings(self, achieved: float) -> list[str]:
        out = []
        stages = self.s.stages
        if self.n <= stages:
            out.append(f"{self.n} iterations do not reach the steady state of a {stages}-stage schedule; "
                       f"the achieved interval is measured on prologue and epilogue")
        if achieved > self.ii * (1 + WARN_EXCESS):
            pct = 100.0 * (achieved - self.ii) / self.ii
            msg = f"achieved interval {achieved:g} exceeds II {self.ii} by {pct:.1f}%"
            if self.culprits:
                (g, what), cycles = max(self.culprits.items(), key=lambda kv: (kv[1], -kv[0][0]))
                msg += f": group {g} stalled {cycles / self.n:.0f} cycles per iteration on {what}"
            out.append(msg)
        return out


def _slope(xs: list[int], ys: list[int]) -> float:
    """Least-squares slope of ys against xs, exact in integers until the final division."""
    n = len(xs)
    sx, sy = sum(xs), sum(ys)
    num = n * sum(x * y for x, y in zip(xs, ys, strict=True)) - sx * sy
    den = n * sum(x * x for x in xs) - sx * sx
    return num / den


_CAUSE_WORDS = {"dependence": "dependence on", "handoff": "hand-off", "ring": "ring buffer", "unit": "unit"}


def simulate(problem: Problem, schedule: Schedule, iterations: int = 16, jitter: float = 0.0,
             seed: int = 0) -> SimResult:
    """Replay ``schedule`` for ``iterations`` iterations and measure what it achieves.

    Raises ``SimulationError`` on a deadlock (its ``waiting`` names every stuck group and what it
    waits on). ``jitter`` stretches each variable-latency op's latency by a factor in
    [1, 1 + jitter), drawn from ``random.Random(seed)``.

    Examples
    --------
    >>> from twill.arch.registry import get_arch
    >>> from twill.frontend.programs import load_program
    >>> from twill.problem import build_problem
    >>> from twill.solver import solve, SolveOptions
    >>> arch = get_arch("h100")
    >>> p = build_problem(load_program("toy", arch), arch)
    >>> r = simulate(p, solve(p, SolveOptions(workers=1)), iterations=8)
    >>> r.achieved_ii, r.trace.iteration(1)
    (2.0, {'S': 2, 'P': 4, 'O': 5})
    """
    if iterations < 2:
        raise UsageError(f"iterations {iterations}: at least 2 are needed to measure an interval")
    if jitter < 0:
        raise UsageError(f"jitter {jitter}: must be >= 0")
    gpu = _Gpu(problem, schedule, iterations, jitter, seed)
    gpu.run()
    return gpu.result()
