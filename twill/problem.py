"""A scheduling problem: a loop body bound to an architecture, cross-checked (stage 3).

``build_problem`` resolves the unit names an imported graph uses (``TC``, ``SFU``) to the arch's
units, refuses ops the arch cannot run (unknown unit, more instances than exist, a warp count
the CTA cannot hold), and precomputes per-op facts the solver and the validator both read: the
cross-group hand-off cost of each result and the cost of a blocking wait. ``impossibilities``
lists reasons no schedule can exist at any II (memory that can never fit), so the solver can say
"infeasible" at once instead of searching.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from .arch import Arch
from .errors import ProblemError
from .ir import Carrier, Edge, LoopBody, Op, Use

__all__ = ["Problem", "build_problem", "read_time"]


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

    def cross_group_cost(self, edge: Edge) -> int:
        """Extra cycles when ``edge`` joins ops of different warp groups.

        Register values go through shared memory (store, fence, mbarrier, load); values already in
        SMEM/TMEM, and pure orderings, need only the mbarrier signal, which an async producer's
        hardware completion already provides.
        """
        src = self.body.op(edge.src)
        if edge.carrier is Carrier.REGISTERS and src.regs > 0:
            return self.handoff[edge.src]
        if src.is_async:
            return 0
        return self.signal_cycles

    def handoff_bytes(self, edge: Edge) -> int:
        """SMEM bytes a cross-group hand-off of ``edge`` stages (0 when nothing is copied)."""
        src = self.body.op(edge.src)
        return 4 * src.regs if edge.carrier is Carrier.REGISTERS and src.regs > 0 else 0

    def impossibilities(self) -> list[str]:
        """Reasons no schedule exists at any II, independent of the search."""
        a, out = self.arch, []
        smem, tmem = a.limit("smem_bytes_per_cta"), a.limit("tmem_cols")
        # per-op checks only: buffers with disjoint lifetimes may share memory, so sums prove nothing
        reg_room = (a.limit("regs_per_thread_max") - a.limit("regs_reserved_per_thread")) * 32
        widest = max(a.warp_group_sizes()) if a.warp_group_sizes() else 1
        for op in self.ops:
            if op.smem_bytes > smem:
                out.append(f"op {op.name!r}: its shared-memory buffer needs {op.smem_bytes} B; "
                           f"arch {a.name!r} has {smem} B per CTA")
            if op.tmem_cols > tmem:
                out.append(f"op {op.name!r}: its result needs {op.tmem_cols} TMEM columns; arch {a.name!r} has {tmem}")
        for op in self.ops:
            if op.regs > reg_room * widest:
                out.append(f"op {op.name!r}: its result needs {op.regs} registers, more than a "
                           f"{widest}-warp group can hold ({reg_room * widest})")
        return out


def _resolve_unit(arch: Arch, op: Op, use: Use) -> Use:
    unit = arch.unit_for_pipeline(use.unit) if not arch.has_unit(use.unit) else arch.unit(use.unit)
    if unit is None:
        raise ProblemError(
            f"op {op.name!r}: uses unit {use.unit!r}, which arch {arch.name!r} lacks "
            f"(units: {', '.join(arch.unit_names())})"
        )
    if use.amount > unit.cap:
        raise ProblemError(
            f"op {op.name!r}: needs {use.amount} instances of unit {unit.name!r} at once; "
            f"arch {arch.name!r} has {unit.cap}"
        )
    return use if unit.name == use.unit else replace(use, unit=unit.name)


def _resolve_op(arch: Arch, op: Op) -> Op:
    uses = tuple(_resolve_unit(arch, op, u) for u in op.uses)
    warps = arch.limit("warps_per_cta")
    if op.min_warps > warps:
        raise ProblemError(f"op {op.name!r}: needs {op.min_warps} warps; arch {arch.name!r} allows {warps} per CTA")
    if not any(s >= op.min_warps for s in arch.warp_group_sizes()):
        raise ProblemError(f"op {op.name!r}: needs {op.min_warps} warps; no warp-group size of arch {arch.name!r} fits")
    return op if uses == op.uses else replace(op, uses=uses)


def build_problem(body: LoopBody, arch: Arch) -> Problem:
    """Bind ``body`` to ``arch``, checking that the arch can run every op.

    Examples
    --------
    >>> from twill.programs import load_program
    >>> from twill.registry import get_arch
    >>> p = build_problem(load_program("toy", get_arch("h100")), get_arch("h100"))
    >>> p.capacity["tc"], p.op("S").units()
    (1, ('tc',))
    """
    ops = tuple(_resolve_op(arch, op) for op in body.ops)
    resolved = LoopBody(body.name, ops, body.edges, body.params, body.trip_count)
    cost = arch.cost
    handoff = {
        op.name: op.handoff_cycles if op.handoff_cycles is not None else cost.handoff(4 * op.regs) for op in ops
    }
    return Problem(
        body=resolved,
        arch=arch,
        capacity=MappingProxyType({u.name: u.cap for u in arch.units}),
        handoff=MappingProxyType(handoff),
        signal_cycles=cost.signal(),
        wait_cycles=cost.wait(),
    )
