"""Retiming: the least II at which a schedule's orders still hold, every op moved at once.

Why: the improvement phase lowers II with CP-SAT's neighbourhood workers, and a neighbourhood
frees a part of the schedule while the rest stays where it is; but II drops only when a whole
schedule compresses at once (design.md §3, the improvement phase), so on bodies of 40 ops and
more the descent is slow and bound by its budget (random-handoff-16526: 9033 at 30 units, 5934 at
120). Retiming makes that whole-schedule move exactly, for the orders a schedule already has.

What it keeps, and why the result stays valid: the groups, their warps and register budgets,
each op's stage, every buffer's depth, and for every rule that counts intervals on the II circle
(a unit's segments, a group's holds, a group's live registers, the live TMEM tiles) the cyclic
order of those intervals' ends (their begins, and their partial ends: a value living
f·II + rest cycles is f copies everywhere and one more for rest cycles). With the order and the
whole copies f fixed, the count at every point of the circle is a count the schedule passed in
already had, so no peak rises; dependences and ring depths are kept as linear constraints. Each
event is t_v + c + k·II (t_v an op's start, k from iteration distances), its residue that minus
q·II with q its old turn; everything is linear in (t, II), so one small CP-SAT model, II and the
starts its variables, gives the least II and, at that II, the shortest schedule. The result is
validated; the schedule passed in stands if anything fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from twill.problem import Problem, read_time
from twill.schedule import Schedule
from twill.solver.run import Work, solver
from twill.validate import validate

__all__ = ["RETIME_UNITS", "register_rooms", "reinsert", "reinserted", "retime", "retimed"]


@dataclass(frozen=True, slots=True)
class _Event:
    """A point t[op] + c + k·II on the time line; its residue is that minus ``turn``·II."""

    op: str
    c: int
    k: int
    turn: int


@dataclass(frozen=True, slots=True)
class _Interval:
    """[begin, begin + length) of a circle-count rule, length = t[last] + c_last + k_last·II − t[op] − c
    (``last`` None: the constant ``c_last``) and ``full`` whole turns of it fixed."""

    op: str
    c: int
    last: tuple[str, int, int] | None  # (op, c, k) of the end on the line, or None for a constant length
    length: int  # the length in the schedule passed in
    full: int


class _Retimer:
    """The linear model of the module docstring for one schedule; with ``free`` ops, the reinsertion's model
    (``reinserted``): their events leave the fixed orders, each rule they touch gets its capacity as a cumulative
    over the circle, and their turns may move by one."""

    def __init__(self, problem: Problem, ii: int, starts: Mapping[str, int], groups: Mapping[str, int],
                 free: Iterable[str] = (), rooms: Mapping[int, int] | None = None) -> None:
        self.p, self.ii, self.starts, self.group = problem, ii, dict(starts), dict(groups)
        self.free, self.rooms = frozenset(free), dict(rooms or {})
        self.m = cp_model.CpModel()
        horizon = max(self.starts.values()) + 3 * self.ii
        self.II = self.m.new_int_var(1, self.ii, "ii")
        self.t = {n: self.m.new_int_var(0, horizon, n) for n in self.starts}
        self.turned = {n: self._turn_shift(n) for n in sorted(self.free)}

    def _turn_shift(self, op: str) -> cp_model.IntVar:
        """shift·II for a free op's turn moved by shift in {-1, 0, 1} (a product of II and a small integer, so one
        literal per value)."""
        z = self.m.new_int_var(-self.ii, self.ii, f"turned[{op}]")
        picks = []
        for shift in (-1, 0, 1):
            b = self.m.new_bool_var(f"turn[{op}]={shift}")
            self.m.add(z == shift * self.II).only_enforce_if(b)
            self.m.add_hint(b, shift == 0)
            picks.append(b)
        self.m.add_exactly_one(picks)
        return z

    def pos(self, op: str, c: int, k: int) -> cp_model.LinearExpr:
        return self.t[op] + c + k * self.II

    def old(self, op: str, c: int, k: int) -> int:
        return self.starts[op] + c + k * self.ii

    def residue(self, e: _Event) -> cp_model.LinearExpr:
        at = self.pos(e.op, e.c, e.k - e.turn)
        return at - self.turned[e.op] if e.op in self.turned else at

    def event(self, op: str, c: int, k: int) -> _Event:
        e = _Event(op, c, k, self.old(op, c, k) // self.ii)
        self.m.add(self.residue(e) >= 0)
        self.m.add(self.residue(e) <= self.II - 1)
        return e

    # -- rules --------------------------------------------------------------------------------
    def dependences(self) -> None:
        for e in self.p.edges:
            cost = self.p.cross_group_cost(e) if self.group[e.src] != self.group[e.dst] else 0
            self.m.add(self.pos(e.dst, 0, e.distance) >= self.t[e.src] + e.latency + cost)

    def stages(self) -> None:
        for name in self.t:
            self.event(name, 0, 0)

    def lifetime(self, name: str) -> _Interval | None:
        """The value's storage interval with its last read pinned as the last (None: it holds nothing)."""
        outs = self.p.body.out_edges(name)
        if not outs:
            life = self.p.op(name).latency
            return _Interval(name, 0, None, life, life // self.ii) if life > 0 else None
        ends = [(e.dst, read_time(e, self.p.op(e.dst)), e.distance) for e in outs]
        last = max(ends, key=lambda x: self.old(*x))
        for other in ends:
            self.m.add(self.pos(*last) >= self.pos(*other))
        life = self.old(*last) - self.starts[name]
        if life <= 0:
            self.m.add(self.pos(*last) <= self.t[name])
            return None
        return _Interval(name, 0, last, life, life // self.ii)

    def length_of(self, iv: _Interval) -> cp_model.LinearExpr:
        end = iv.last if iv.last is not None else (iv.op, iv.c + iv.length, 0)
        return self.pos(*end) - self.t[iv.op] - iv.c

    def circle(self, intervals: Iterable[_Interval], capacity: int = 0,
               demand: Callable[[_Interval], int] = lambda iv: 1) -> None:
        """Keep the cyclic order of the intervals' begins and partial ends, and their whole turns; where a free
        op's event is among them, that order only for the others, and every interval under ``capacity`` (the
        rule's capacity, each interval counting ``demand``) on the circle."""
        intervals = list(intervals)
        fixed = [iv for iv in intervals if not self._moves(iv)]
        self._ordered(fixed)
        if len(fixed) < len(intervals):
            self._capacity(intervals, capacity, demand)

    def _moves(self, iv: _Interval) -> bool:
        return iv.op in self.free or (iv.last is not None and iv.last[0] in self.free)

    def _capacity(self, intervals: list[_Interval], capacity: int, demand: Callable[[_Interval], int]) -> None:
        """Each interval's partial on the circle twice, at its begin's residue b and at b − II (docs/design.md §2.3),
        under ``capacity`` less the whole turns; a free interval keeps its whole turns (its length within them)."""
        copies, demands, whole = [], [], 0
        for iv in intervals:
            length = self.length_of(iv)
            if self._moves(iv):
                self.m.add(length >= iv.full * self.II)
                self.m.add(length <= (iv.full + 1) * self.II - 1)
            begin = self._var(self.residue(self.event(iv.op, iv.c, 0)), 0, self.ii)
            rest = self._var(length - iv.full * self.II, 0, self.ii)
            early = self._var(begin - self.II, -self.ii, self.ii)
            copies.append(self.m.new_interval_var(begin, rest, self._var(begin + rest, 0, 2 * self.ii), ""))
            copies.append(self.m.new_interval_var(early, rest, self._var(early + rest, -self.ii, self.ii), ""))
            demands += [demand(iv)] * 2
            whole += iv.full * demand(iv)
        self.m.add_cumulative(copies, demands, capacity - whole)

    def _var(self, expr: cp_model.LinearExprT, lo: int, hi: int) -> cp_model.IntVar:
        """``expr`` as a variable (an interval's start, size and end must be affine)."""
        x = self.m.new_int_var(lo, hi, "")
        self.m.add(x == expr)
        return x

    def _ordered(self, intervals: list[_Interval]) -> None:
        events: list[tuple[int, bool, _Event]] = []
        for iv in intervals:
            length = self.length_of(iv)
            self.m.add(length >= iv.full * self.II)
            self.m.add(length <= (iv.full + 1) * self.II - 1)
            begin = self.event(iv.op, iv.c, 0)
            events.append((self.old(iv.op, iv.c, 0) % self.ii, True, begin))
            end_op, end_c, end_k = iv.last if iv.last is not None else (iv.op, iv.c + iv.length, 0)
            end = self.event(end_op, end_c, end_k - iv.full)
            events.append(((self.old(iv.op, iv.c, 0) + iv.length) % self.ii, False, end))
        events.sort(key=lambda x: (x[0], x[1]))  # at one residue, ends (False) before begins: [b, e) is half-open
        for (_, _, a), (_, _, b) in zip(events, events[1:], strict=False):
            self.m.add(self.residue(b) >= self.residue(a))

    def units(self) -> None:
        by_unit: dict[str, list[_Interval]] = {}
        amount: dict[_Interval, int] = {}
        for op in self.p.ops:
            for use in op.uses:
                if use.length > 0:
                    iv = _Interval(op.name, use.offset, None, use.length, use.length // self.ii)
                    if iv not in amount:  # two equal uses of one op are one interval of both amounts
                        by_unit.setdefault(use.unit, []).append(iv)
                    amount[iv] = amount.get(iv, 0) + use.amount
        for unit, ivs in by_unit.items():
            self.circle(ivs, self.p.capacity[unit], amount.__getitem__)

    def groups(self) -> None:
        for g in sorted(set(self.group.values())):
            members = [n for n in self.starts if self.group[n] == g]
            held = [(n, self.p.hold_in(n, self.group)) for n in members]
            self.m.add(max((h for _, h in held), default=0) <= self.II)  # a hold fits in II
            self.circle((_Interval(n, 0, None, h, h // self.ii) for n, h in held if h > 0), 1)
            lives = [self.lifetime(n) for n in members if self.p.op(n).regs > 0]
            self.circle((iv for iv in lives if iv is not None), self.rooms.get(g, 0), self._regs)

    def memories(self) -> None:
        """The live TMEM tiles on the circle; every stored value's ring depth ceil(life / II) as it is."""
        lives = {op.name: self.lifetime(op.name) for op in self.p.ops if op.regs or op.smem_bytes or op.tmem_cols}
        self.circle((lives[op.name] for op in self.p.ops if op.tmem_cols and lives[op.name] is not None),
                    self.p.arch.limit("tmem_cols"), self._tmem)
        for iv in lives.values():
            if iv is not None:
                depth = -(-iv.length // self.ii)
                self.m.add(self.length_of(iv) >= (depth - 1) * self.II + 1)
                self.m.add(self.length_of(iv) <= depth * self.II)

    def build(self) -> None:
        """Every rule of the module docstring."""
        self.dependences()
        self.stages()
        self.units()
        self.groups()
        self.memories()

    def _regs(self, iv: _Interval) -> int:
        return self.p.op(iv.op).regs

    def _tmem(self, iv: _Interval) -> int:
        return self.p.op(iv.op).tmem_cols

    def solve(self, solver: cp_model.CpSolver) -> tuple[int, dict[str, int]] | None:
        """The least II and its starts, shortest first; None where ``solver`` has nothing in its budget."""
        spans = {n: self.p.span(n, self.group) for n in self.t}
        most = max(self.starts.values()) + 2 * self.ii + max(spans.values())
        length = self.m.new_int_var(0, most, "length")
        for n, v in self.t.items():
            self.m.add(length >= v + spans[n])
            self.m.add_hint(v, self.starts[n])
        self.m.add_hint(self.II, self.ii)
        self.m.minimize(self.II * (most + 1) + length)
        if solver.solve(self.m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        return solver.value(self.II), {n: solver.value(v) for n, v in self.t.items()}


def retimed(problem: Problem, ii: int, starts: Mapping[str, int], groups: Mapping[str, int],
            solver: cp_model.CpSolver | None = None) -> tuple[int, dict[str, int]] | None:
    """The least II, and its starts, at which the schedule (``ii``, ``starts``, ``groups``) keeps its orders (module
    docstring); None where that is no lower. ``solver``: one worker on a deterministic budget (``RETIME_UNITS`` by
    default), so the answer is the same on any machine. The caller checks the result (the validator, or the joint
    model pinned to it)."""
    r = _Retimer(problem, ii, starts, groups)
    r.build()
    found = r.solve(solver if solver is not None else _solver())
    return found if found is not None and found[0] < ii else None


def reinserted(problem: Problem, ii: int, starts: Mapping[str, int], groups: Mapping[str, int],
               rooms: Mapping[int, int], work: Work, until: float, floor: int = 0) -> tuple[int, dict[str, int]] | None:
    """A local search over the schedule's orders, each step a retiming with a few ops set free: one op, then each
    group's ops together, re-placed anywhere on the circle (their turns within one of their own) while every other
    event keeps its order, and the whole schedule moved at once to the least II, then length, that allows
    (``_Retimer`` with ``free``). A step that lowers (II, length) is kept; passes repeat while one lowers II, until
    the work mark ``until``. Why: the retiming keeps every order, and the improvement's neighbourhoods free a part
    of the schedule but keep the rest in place; a free op under a global retiming is both at once, and CP-SAT
    decides each step in a fraction of a unit (random-handoff-16526's 30-unit schedule, 41 ops: 7188 -> 6810 in
    one unit, 6415 in two; docs/design.md §3.1h). ``rooms``: each group's register words for values
    (``register_rooms``); it stops at ``floor``, a proven bound. None where nothing is lower; the caller checks the result (the joint model pinned to it)."""
    current = (ii, dict(starts))
    best_key = (ii, problem.length(starts, groups))
    moves = [[op.name] for op in problem.ops]
    moves += [[n for n in starts if groups[n] == g] for g in sorted(set(groups.values()))]
    lowered = True
    while lowered:
        lowered = False
        for free in moves:
            if current[0] <= floor or work.left() <= 0 or work.spent >= until or work.check_wall():
                return current if current[0] < ii else None
            r = _Retimer(problem, current[0], current[1], groups, free, rooms)
            r.build()
            work.spent += CONSTRAINT_CHARGE * len(r.m.proto.constraints)
            found = r.solve(solver(work, min(MOVE_UNITS, max(0.0, until - work.spent)), 1))
            if found is None:
                continue
            key = (found[0], problem.length(found[1], groups))
            if key < best_key:
                lowered = lowered or key[0] < best_key[0]
                best_key, current = key, found
    return current if current[0] < ii else None


def register_rooms(problem: Problem, warps: Mapping[int, int], regs: Mapping[int, int | None]) -> dict[int, int]:
    """Each group's register words for values at its warps and budget: the budget above the reserved registers
    (as ``ScheduleModel.register_room`` states it in the joint model)."""
    reserved = problem.arch.limit("regs_reserved_per_thread")
    return {g: 32 * w * ((regs.get(g) or 0) - reserved) for g, w in warps.items()}


MOVE_UNITS = 0.1  # units at most for one step of ``reinserted`` (most decide in under 0.05)
# units charged per constraint of a step's model beyond CP-SAT's own count: on these small linear models CP-SAT's
# deterministic time misses most of the wall time (random-tmem-16507, 71 ops, ~2200 constraints: 0.2-0.4 s a step
# at 0.001-0.05 units), so a step is charged for its size and the work stays a measure of the time spent
CONSTRAINT_CHARGE = 1.5e-5
RETIME_UNITS = 1.0  # deterministic units at most; 0.01-0.08 s on the schedules timed (docs/design.md §3.1h)


def _solver() -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.max_deterministic_time = RETIME_UNITS
    return s


def retime(problem: Problem, sched: Schedule) -> Schedule:
    """``sched`` at the least II (then the shortest length) its orders allow (module docstring); ``sched`` itself
    where that is no lower or the result would fail the validator."""
    if sched.swp_only or not sched.groups:
        return sched
    found = retimed(problem, sched.ii, {o.id: o.start for o in sched.ops}, {o.id: o.group for o in sched.ops})
    return sched if found is None else _moved(problem, sched, *found)


def reinsert(problem: Problem, sched: Schedule, units: float = 1.0) -> Schedule:
    """``sched`` lowered by ``reinserted`` on ``units`` of work (one worker: the same answer on any machine);
    ``sched`` itself where nothing is lower or the result would fail the validator."""
    if sched.swp_only or not sched.groups:
        return sched
    rooms = register_rooms(problem, {g.id: g.warps for g in sched.groups}, {g.id: g.regs_per_thread for g in sched.groups})
    work = Work.starting_now(3600.0, units)  # the work decides; the hour is only a cap
    found = reinserted(problem, sched.ii, {o.id: o.start for o in sched.ops}, {o.id: o.group for o in sched.ops},
                       rooms, work, units)
    return sched if found is None else _moved(problem, sched, *found)


def _moved(problem: Problem, sched: Schedule, ii: int, starts: Mapping[str, int]) -> Schedule:
    """``sched`` with its ops at ``starts`` and II ``ii`` (groups, warps, budgets and ring depths as they were);
    ``sched`` itself where that fails the validator."""
    groups = {o.id: o.group for o in sched.ops}
    ops = tuple(replace(o, start=starts[o.id], stage=starts[o.id] // ii, offset=starts[o.id] % ii) for o in sched.ops)
    length = problem.length(starts, groups)
    values = dict(sched.objective_values)
    if "length" in values:
        values["length"] = length
    out = replace(sched, ii=ii, ops=ops, length=length, objective_values=values)
    return sched if validate(problem, out) else out
