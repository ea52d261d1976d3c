"""A scheduling problem: a loop body bound to an architecture, cross-checked (stage 3).

``build_problem`` resolves the unit names an imported graph uses (``TC``, ``SFU``) to the arch's
units, refuses ops the arch cannot run (unknown unit, more instances than exist, a warp count
the CTA cannot hold), and precomputes per-op facts the solver and the validator both read: the
cross-group hand-off cost of each result and the cost of a blocking wait. ``impossibilities``
lists reasons no schedule can exist at any II (memory that can never fit), so the solver can say
"infeasible" at once instead of searching.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from twill.arch.model import Arch
from twill.errors import InfeasibleError, ProblemError
from twill.ir import MAX_CYCLES, Carrier, Edge, LoopBody, Op, Use

__all__ = ["Problem", "build_problem", "read_time", "per_problem"]


def read_time(edge: Edge, dst: Op) -> int:
    """How long after the consumer issues the value's storage must stay intact.

    An in-place consumer (an accumulator chain) takes the storage over when it starts. An
    asynchronous consumer (wgmma, tcgen05, TMA) reads its operands until it completes. A
    synchronous consumer reads registers in place as it overwrites them, and reads shared or
    tensor memory for its whole busy span. (The validator restates this rule independently.)
    """
    if edge.in_place:
        return 0
    if dst.is_async:
        return dst.latency
    return 0 if edge.carrier is Carrier.REGISTERS else dst.busy_cycles


@dataclass(frozen=True, slots=True)
class Problem:
    """A loop body whose unit names are the arch's, plus the costs that depend on both."""

    body: LoopBody
    arch: Arch
    capacity: Mapping[str, int] = field(default_factory=dict)
    handoff: Mapping[str, int] = field(default_factory=dict)  # per producer op: register hand-off cycles
    signal_cycles: int = 0  # cross-group mbarrier signal when no register data moves
    wait_cycles: int = 0  # extra hold of a consumer that waits on an async completion
    copy: Mapping[str, int] = field(default_factory=dict)  # per producer op: cycles to copy its result to/from SMEM

    @property
    def ops(self) -> tuple[Op, ...]:
        return self.body.ops

    @property
    def edges(self) -> tuple[Edge, ...]:
        return self.body.edges

    def op(self, name: str) -> Op:
        return self.body.op(name)

    def is_blocking_consumer(self, name: str) -> bool:
        return any(e.blocking for e in self.body.in_edges(name))

    def hold(self, name: str) -> int:
        """Cycles op ``name`` keeps its group busy, including the wait it performs when blocking."""
        op = self.body.op(name)
        base = op.hold_cycles
        if base and self.is_blocking_consumer(name):
            base += self.wait_cycles
        return base

    def handoff_holds(self, edge: Edge) -> tuple[int, int]:
        """(cycles the producer's group, cycles the reader's group) spend on ``edge``'s hand-off when
        it crosses groups: the store of the value into SMEM and the reader's load back into
        registers, at the arch's SMEM rate (``CostModel.handoff_copy``; 0 where the arch has none).
        An asynchronous reader (wgmma, tcgen05.mma, a TMA store) reads the staged copy in place and
        loads nothing (P read from its slot by an SS wgmma, docs/codegen.md rule 13)."""
        if not self.handoff_bytes(edge) or edge.src == edge.dst:
            return 0, 0
        cycles = self.copy.get(edge.src, 0)
        return cycles, 0 if self.body.op(edge.dst).is_async else cycles

    def hold_in(self, name: str, groups: Mapping[str, int]) -> int:
        """``hold(name)`` where ``groups`` places the ops: plus the store of every hand-off it
        produces and the load of every hand-off it reads across groups, contiguous from its issue
        (so that a longer II never breaks a schedule, §3.1e). A relaxation may read ``hold`` alone."""
        g, extra = groups[name], 0
        for e in self.body.out_edges(name):
            if groups[e.dst] != g:
                extra += self.handoff_holds(e)[0]
        for e in self.body.in_edges(name):
            if groups[e.src] != g:
                extra += self.handoff_holds(e)[1]
        return self.hold(name) + extra

    def most_hold(self, name: str) -> int:
        """``hold_in`` where every hand-off of op ``name`` crosses groups: its hold at most."""
        return (self.hold(name) + sum(self.handoff_holds(e)[0] for e in self.body.out_edges(name))
                + sum(self.handoff_holds(e)[1] for e in self.body.in_edges(name)))

    def most_span(self, name: str) -> int:
        """``span`` under the grouping that charges op ``name`` the most (``most_hold``): what an
        upper bound (a stage bound, a sequential II) must allow."""
        op = self.body.op(name)
        return max(op.latency, self.most_hold(name), op.busy_cycles)

    def span(self, name: str, groups: Mapping[str, int] | None = None) -> int:
        """Cycles from op ``name``'s issue until it is done with everything: its result (latency),
        its warp group (hold, under ``groups`` where given) and its units (busy); one iteration run
        alone spans their sum."""
        op = self.body.op(name)
        hold = self.hold(name) if groups is None else self.hold_in(name, groups)
        return max(op.latency, hold, op.busy_cycles)

    def length(self, starts: Mapping[str, int], groups: Mapping[str, int] | None = None) -> int:
        """A schedule's length: from cycle 0 until the last op of its iteration is done (``span`` under ``groups``),
        for ``starts`` of every op. One formula for every place a schedule is assembled."""
        return max(t + self.span(n, groups) for n, t in starts.items())

    def cross_group_cost(self, edge: Edge) -> int:
        """Extra cycles when ``edge`` joins ops of different warp groups.

        Register values go through shared memory (store, fence, mbarrier, load); values already in
        SMEM/TMEM, and pure orderings, need only the mbarrier signal, which an async producer's
        hardware completion already provides.
        """
        src = self.body.op(edge.src)
        # issue order stands in for completion only within one group (tcgen05.mma's pipe order)
        order = 0 if edge.cross_latency is None else edge.cross_latency - edge.latency
        if edge.carrier is Carrier.REGISTERS and src.regs > 0:
            return order + self.handoff[edge.src]
        if src.is_async:
            return order
        return order + self.signal_cycles

    def same_group_latency(self, edge: Edge) -> int:
        """Least cycles from ``edge``'s source to its consumer's issue when one warp group issues both.

        In-order issue (§2.7): the group issues nothing while the source holds it, so a consumer in
        the same group waits out the source's hold even where the result is ready sooner (an ALU op
        whose unit busy span, 136 cycles, exceeds its latency, 132). Only where both ops issue
        (hold > 0) and the edge's latency is not negative, so that the consumer cannot come first.
        """
        if edge.src == edge.dst or edge.latency < 0 or self.hold(edge.dst) == 0:
            return edge.latency
        return max(edge.latency, self.hold(edge.src))

    def handoff_bytes(self, edge: Edge) -> int:
        """SMEM bytes a cross-group hand-off of ``edge`` stages (0 when nothing is copied)."""
        src = self.body.op(edge.src)
        return 4 * src.regs if edge.carrier is Carrier.REGISTERS and src.regs > 0 else 0

    def impossibilities(self) -> list[str]:
        """Reasons no schedule exists at any II, independent of the search."""
        a, out = self.arch, []
        smem, tmem = a.limit("smem_bytes_per_cta"), a.limit("tmem_cols")
        for op in self.ops:
            if op.smem_bytes > smem:
                out.append(f"op {op.name!r}: its shared-memory buffer needs {op.smem_bytes} B; "
                           f"arch {a.name!r} has {smem} B per CTA")
            if op.tmem_cols > tmem:
                out.append(f"op {op.name!r}: its result needs {op.tmem_cols} TMEM columns; arch {a.name!r} has {tmem}")
        # SMEM rings are allocated side by side (design.md §2.9), so their slots add up; TMEM tiles
        # with disjoint lifetimes share columns, so TMEM is checked per op only
        rings = [op for op in self.ops if op.smem_bytes and self.min_lifetime(op.name) > 0]
        static = self.body.static_smem
        need = static + sum(op.smem_bytes for op in rings)
        if need > smem and not any(op.smem_bytes > smem for op in rings):
            parts = ", ".join([f"outside the loop {static} B"] * bool(static) + [f"{op.name} {op.smem_bytes} B"
                                                                             for op in rings])
            out.append(f"shared-memory rings need at least {need} B with one slot each ({parts}); "
                       f"arch {a.name!r} has {smem} B per CTA")
        for op in self.ops:
            room, shape = self.largest_register_room(op.max_warps)
            if op.regs > room:
                out.append(f"op {op.name!r}: its result needs {op.regs} registers, more than any warp group can "
                           f"hold ({shape})")
        return out

    def require_possible(self) -> None:
        """Raise ``InfeasibleError`` naming the first reason no schedule can exist at any II."""
        reasons = self.impossibilities()
        if reasons:
            raise InfeasibleError(f"{self.body.name!r} on {self.arch.name!r}: infeasible: {reasons[0]}",
                                  reason=reasons[0])

    def lifetime(self, starts: Mapping[str, int], ii: int, name: str) -> int:
        """Cycles ``name``'s result storage is held in a schedule: from its issue to the end of
        its last read (``read_time``), or its latency when nothing reads it."""
        outs = self.body.out_edges(name)
        if not outs:
            return self.body.op(name).latency
        return max(0, max(starts[e.dst] + e.distance * ii + read_time(e, self.body.op(e.dst)) for e in outs)
                   - starts[name])

    def min_lifetime(self, name: str) -> int:
        """Cycles ``name``'s result is held in every schedule: each reader issues at least its
        edge's latency after the producer (later by a whole II per iteration of distance) and
        then reads for ``read_time``; with no reader, the result lives for its latency."""
        outs = self.body.out_edges(name)
        if not outs:
            return self.body.op(name).latency
        return max(e.latency + read_time(e, self.body.op(e.dst)) for e in outs)

    def group_sizes(self, names: Iterable[str], cta: int | None = None) -> list[int]:
        """The legal sizes of a warp group that issues ``names``, ascending: at least as wide as its
        widest op needs (``Op.min_warps``), no wider than any op allows (``Op.warp_cap``: a wgmma's
        accumulator rows) or the CTA (``cta``, default the arch's ``warps_per_cta``)."""
        cta = self.arch.limit("warps_per_cta") if cta is None else cta
        ops = [self.op(n) for n in names]
        need = max((op.min_warps for op in ops), default=1)
        cap = min((op.warp_cap(cta) for op in ops), default=cta)
        return [s for s in sorted(self.arch.warp_group_sizes()) if need <= s <= cap]

    def largest_register_room(self, cap: int = 0) -> tuple[int, str]:
        """The most result registers one warp group (of at most ``cap`` warps, when given) can hold,
        and the group that holds them: a legal size and setmaxnreg budget above the reserved
        registers, within the register file."""
        a = self.arch
        reserved = a.limit("regs_reserved_per_thread")
        widest = min(cap, a.limit("warps_per_cta")) if cap else a.limit("warps_per_cta")
        best, shape = 0, "no legal warp group fits the register file"
        for warps in a.warp_group_sizes():
            for budget in a.register_budgets():
                room = 32 * warps * (budget - reserved)
                if warps <= widest and 32 * warps * budget <= a.limit("regs_per_sm") and room > best:
                    best, shape = room, f"{warps} warps x ({budget} - {reserved} reserved) x 32 lanes = {room}"
        return best, shape


T = TypeVar("T")
_PER_PROBLEM: dict[tuple, tuple[Problem, object]] = {}  # (function, id(problem), args) -> (problem, result)


def per_problem(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn(problem, *args)`` computed once per problem object and arguments: the search builds many
    models of one problem, and facts of the graph alone (its cycles, its automorphisms, which values
    live together) do not change between them. Keyed by identity (a problem holds lists, so it has
    no hash), with the problem kept to tell a recycled id apart; at most 64 entries."""
    @functools.wraps(fn)
    def cached(problem: Problem, *args: object) -> T:
        key = (fn.__qualname__, id(problem), args)
        hit = _PER_PROBLEM.get(key)
        if hit is not None and hit[0] is problem:
            return hit[1]  # type: ignore[return-value]
        if len(_PER_PROBLEM) >= 64:
            _PER_PROBLEM.clear()
        out = fn(problem, *args)
        _PER_PROBLEM[key] = (problem, out)
        return out
    return cached


def _resolve_unit(arch: Arch, op: Op, use: Use) -> Use:
    unit = arch.unit_for_pipeline(use.unit) if not arch.has_unit(use.unit) else arch.unit(use.unit)
    if unit is None:
        raise ProblemError(
            f"op {op.name!r}: uses unit {use.unit!r}, which arch {arch.name!r} lacks "
            f"(units: {', '.join(arch.unit_names())})"
        )
    if use.amount > unit.cap:  # no II helps: the op alone overloads the unit in its own cycles
        reason = (f"op {op.name!r}: needs {use.amount} instances of unit {unit.name!r} at once; "
                  f"arch {arch.name!r} has {unit.cap}")
        raise InfeasibleError(f"infeasible at every II: {reason}", reason=reason)
    return use if unit.name == use.unit else replace(use, unit=unit.name)


def _resolve_op(arch: Arch, op: Op) -> Op:
    uses = tuple(_resolve_unit(arch, op, u) for u in op.uses)
    warps = arch.limit("warps_per_cta")
    cap = op.warp_cap(warps)
    reason = ""
    if op.min_warps > warps:
        reason = f"op {op.name!r}: needs {op.min_warps} warps; arch {arch.name!r} allows {warps} per CTA"
    elif not any(op.min_warps <= s <= cap for s in arch.warp_group_sizes()):
        reason = (f"op {op.name!r}: needs {op.min_warps} warps; no warp-group size of arch {arch.name!r} "
                  f"({', '.join(map(str, arch.warp_group_sizes()))}) fits within {cap} warps")
    if reason:
        raise InfeasibleError(f"infeasible at every II: {reason}", reason=reason)
    return op if uses == op.uses else replace(op, uses=uses)


def _check_handoff_costs(problem: Problem) -> None:
    """A cross-group hand-off costs cycles the solver adds to dependences, so it obeys the same
    bound as an op's cycles. Results too big for any group never cross one (they are infeasible,
    said by ``impossibilities``), so only the others are checked."""
    room, _ = problem.largest_register_room()
    for op in problem.ops:
        cost = problem.handoff[op.name]
        if op.regs <= room and cost > MAX_CYCLES:
            raise ProblemError(f"op {op.name!r}: handing its {4 * op.regs} B result to another warp group costs "
                               f"{cost} cycles (arch {problem.arch.name!r} [sync] costs), above the limit "
                               f"{MAX_CYCLES} of a tile-level loop body")
    for name in ("signal_cycles", "wait_cycles"):
        if getattr(problem, name) > MAX_CYCLES:
            raise ProblemError(f"arch {problem.arch.name!r}: a {name.split('_')[0]} costs {getattr(problem, name)} "
                               f"cycles, above the limit {MAX_CYCLES}")


def build_problem(body: LoopBody, arch: Arch) -> Problem:
    """Bind ``body`` to ``arch``, checking that the arch can run every op.

    Examples
    --------
    >>> from twill.frontend.programs import load_program
    >>> from twill.arch.registry import get_arch
    >>> p = build_problem(load_program("toy", get_arch("h100")), get_arch("h100"))
    >>> p.capacity["tc"], p.op("S").units()
    (1, ('tc',))
    """
    ops = tuple(_resolve_op(arch, op) for op in body.ops)
    resolved = LoopBody(body.name, ops, body.edges, body.params, body.trip_count, body.static_smem)
    cost = arch.cost
    handoff = {
        op.name: op.handoff_cycles if op.handoff_cycles is not None else cost.handoff(4 * op.regs) for op in ops
    }
    problem = Problem(
        body=resolved,
        arch=arch,
        capacity=MappingProxyType({u.name: u.cap for u in arch.units}),
        handoff=MappingProxyType(handoff),
        signal_cycles=cost.signal(),
        wait_cycles=cost.wait(),
        copy=MappingProxyType({op.name: cost.handoff_copy(4 * op.regs) for op in ops}),
    )
    _check_handoff_costs(problem)
    return problem
