"""Loop-body IR: the dependence graph of tile-level ops that twill schedules (stage 1 of the pipeline).

A ``LoopBody`` is one iteration of a singly nested loop with no control flow. Each ``Op`` is a
tile-level operation (a GEMM on a tile, an exp over a tile, a TMA copy) with a reservation table
on functional units; each ``Edge`` says when a consumer may issue after its producer and from how
many iterations back. Everything is frozen and checked on construction, so an invalid body cannot
exist: field checks sit in ``__post_init__``, whole-graph checks (dangling edges, cycles whose
total distance is 0) in ``LoopBody``. Unit names are free strings here; ``Problem`` checks them
against an architecture. See docs/design.md §1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

import networkx as nx

from twill.errors import GraphError

__all__ = ["Carrier", "Issuer", "Use", "Op", "Edge", "LoopBody", "LoopBuilder", "MAX_CYCLES", "MAX_DISTANCE",
           "MAX_SIZE"]

# A tile-level op takes at most ~10^4 cycles. The exact-cycle model multiplies cycle counts (stage
# x II) and keeps its variables within 64-bit integers, so a count above these is an input error,
# refused here with its field's name instead of overflowing deep inside the solver.
MAX_CYCLES = 1 << 20
MAX_DISTANCE = 1 << 10  # iterations a dependence may reach back; real loop-carried distances are 1-4
MAX_SIZE = 1 << 40  # registers, bytes or columns of one result: hand-off costs per KiB stay finite floats


class Carrier(Enum):
    """What carries a value along an edge; decides what a cross-group hand-off costs."""

    REGISTERS = "registers"  # must go through SMEM when producer and consumer sit in different groups
    SMEM = "smem"  # already in shared memory: another group needs only an mbarrier signal
    TMEM = "tmem"  # Blackwell tensor memory: visible to every warp, needs a signal
    ORDER = "order"  # no data, only an ordering (a buffer freed, a barrier)


class Issuer(Enum):
    """How many warps issue the op together (its smallest legal group)."""

    THREAD = "thread"  # one elected thread: TMA copies, Blackwell tcgen05.mma
    WARP = "warp"
    WARPGROUP = "warpgroup"  # 4 consecutive warps: Hopper wgmma and work on its accumulator rows

    @property
    def min_warps(self) -> int:
        return 4 if self is Issuer.WARPGROUP else 1


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise GraphError(f"{what} {_short(name)}: a name must be a non-empty string without spaces")
    _check_text(what, "name", name)


def _check_text(where: str, field_name: str, value: str) -> None:
    """Text is printed and saved as UTF-8: a lone surrogate (from a JSON "\\ud800" escape) would
    only fail later, when a table is written to the terminal."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise GraphError(f"{where}: {field_name} {_short(value)} is not valid Unicode text (a lone surrogate)") from None


def _check_count(where: str, field_name: str, value: Any, limit: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GraphError(f"{where}: {field_name} must be an integer, got {_short(value)}")
    if value < 0:
        raise GraphError(f"{where}: {field_name} {value} is negative; cycles and sizes are >= 0")
    if limit is not None and value > limit:
        raise GraphError(f"{where}: {field_name} {value} is above the limit {limit} of a tile-level loop body")


def _check_flag(where: str, field_name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise GraphError(f"{where}: {field_name} must be true or false, got {_short(value)}")


def _short(value: Any) -> str:
    """``repr`` cut to one readable line: error messages quote what they found, not megabytes."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True, slots=True, kw_only=True)
class Use:
    """One segment of a reservation table: ``amount`` instances of ``unit`` busy for ``length``
    cycles, starting ``offset`` cycles after the op issues. An op may have several segments,
    on several units and with gaps between them (non-contiguous reservation tables)."""

    unit: str
    offset: int = 0
    length: int
    amount: int = 1

    def __post_init__(self) -> None:
        _check_name("unit", self.unit)
        for name in ("offset", "length"):
            _check_count(f"use of unit {self.unit!r}", name, getattr(self, name), MAX_CYCLES)
        _check_count(f"use of unit {self.unit!r}", "amount", self.amount)
        if self.length == 0 or self.amount == 0:
            raise GraphError(f"use of unit {self.unit!r}: length and amount must be positive")

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """A tile-level operation of the loop body.

    ``latency`` is the time from issue until the result can be read. ``hold`` is how long the op
    keeps its issuing warp group busy: a synchronous op (FP32 work, exp) issues instructions for
    its whole busy span, or for ``sync_hold`` cycles where its group issues slower than its units
    serve (one warpgroup's register work: the SM's pipes stay free for another group's share), an
    asynchronous op (TMA, wgmma, tcgen05.mma) only for its issue slots.
    Footprints (``regs`` in 32-bit words over the whole tile, ``smem_bytes``, ``tmem_cols``) are
    held while the result is live.
    """

    name: str
    kind: str = "op"
    uses: tuple[Use, ...] = ()
    latency: int = 0
    is_async: bool = False
    issue_cycles: int = 1  # cycles an async op holds its group (ignored for sync ops)
    sync_hold: int = 0  # cycles a sync op holds its group when its group issues slower than its units serve (0: busy)
    issuer: Issuer = Issuer.WARP
    warps: int = 0  # minimum warps of the issuing group; 0 means issuer.min_warps
    max_warps: int = 0  # most warps of the issuing group; 0 means no cap (a wgmma's register accumulator)
    regs: int = 0
    smem_bytes: int = 0
    tmem_cols: int = 0
    variable_latency: bool = False
    streaming: bool = False
    waits: bool = False  # the issuing warps wait for the result (tcgen05.ld + tcgen05.wait::ld): hold = latency
    handoff_cycles: int | None = None  # explicit cross-group hand-off cost (curated graphs' spill_cost)
    ref: str = ""  # provenance: the source op (e.g. a TTGIR op) this node came from

    def __post_init__(self) -> None:
        _check_name("op", self.name)
        where = f"op {self.name!r}"
        for name in ("latency", "issue_cycles", "sync_hold"):
            _check_count(where, name, getattr(self, name), MAX_CYCLES)
        if self.sync_hold and self.is_async:
            raise GraphError(f"{where}: sync_hold is the issue span of a synchronous op; an asynchronous op's is "
                             "issue_cycles")
        if self.sync_hold > self.latency:
            raise GraphError(f"{where}: it holds its group for {self.sync_hold} cycles but its latency is "
                             f"{self.latency}; a result cannot be ready before its last instruction issues")
        _check_count(where, "warps", self.warps)
        _check_count(where, "max_warps", self.max_warps)
        if self.max_warps and self.max_warps < self.min_warps:
            raise GraphError(f"{where}: max_warps {self.max_warps} is below the {self.min_warps} warps it needs")
        for name in ("regs", "smem_bytes", "tmem_cols"):
            _check_count(where, name, getattr(self, name), MAX_SIZE)
        if self.handoff_cycles is not None:
            _check_count(where, "handoff_cycles", self.handoff_cycles, MAX_CYCLES)
        for name in ("is_async", "variable_latency", "streaming", "waits"):
            _check_flag(where, name, getattr(self, name))
        if self.waits and self.is_async:
            raise GraphError(f"{where}: an asynchronous op frees its group after issue, so it cannot also wait "
                             "for its result (waits)")
        for name in ("kind", "ref"):
            if not isinstance(getattr(self, name), str):
                raise GraphError(f"{where}: {name} must be a string, got {_short(getattr(self, name))}")
            _check_text(where, name, getattr(self, name))
        if not isinstance(self.issuer, Issuer):
            raise GraphError(f"{where}: issuer must be one of {[i.value for i in Issuer]}")
        if isinstance(self.uses, (str, bytes)) or not isinstance(self.uses, Iterable):
            raise GraphError(f"{where}: uses must be a sequence of Use segments, got {_short(self.uses)}")
        object.__setattr__(self, "uses", tuple(self.uses))
        for use in self.uses:
            if not isinstance(use, Use):
                raise GraphError(f"{where}: uses must hold Use segments, got {_short(use)}")
        if self.streaming and not self.variable_latency:
            raise GraphError(f"{where}: a streaming op must also be variable-latency")
        busy = self.busy_cycles
        if busy > self.latency and self.uses:
            raise GraphError(
                f"{where}: its units are busy for {busy} cycles but its latency is {self.latency}; "
                "a result cannot be ready before the op has finished with its units"
            )

    @property
    def min_warps(self) -> int:
        return self.warps or self.issuer.min_warps

    def warp_cap(self, cta: int) -> int:
        """The most warps the op's issuing group may have in a CTA of ``cta`` warps: a Hopper wgmma
        keeps its accumulator in the registers of the warpgroups that issue it, 64 rows each, so a
        wider group would hold warps with no share of it (``max_warps``, set by ``ops.mma``)."""
        return min(self.max_warps, cta) if self.max_warps else cta

    @property
    def busy_cycles(self) -> int:
        """Cycles from issue until the last unit segment ends (0 for an op with no unit)."""
        return max((u.end for u in self.uses), default=0)

    @property
    def hold_cycles(self) -> int:
        """Cycles the op keeps its issuing group from issuing anything else (in-order issue)."""
        if not self.uses and self.latency == 0:
            return 0  # a pure bookkeeping op emits no instructions
        if self.waits:  # tcgen05.wait::ld stalls the warps until the data has landed, not only the port time
            return max(self.latency, 1)
        return self.issue_cycles if self.is_async else max(self.busy_cycles, self.sync_hold, 1)

    def units(self) -> tuple[str, ...]:
        return tuple(sorted({u.unit for u in self.uses}))

    def work(self, unit: str) -> int:
        """Unit-cycles this op reserves on ``unit`` (amount x length, summed)."""
        return sum(u.amount * u.length for u in self.uses if u.unit == unit)


@dataclass(frozen=True, slots=True, kw_only=True)
class Edge:
    """``dst`` of iteration i may issue ``latency`` cycles after ``src`` of iteration
    i - ``distance`` issued. ``blocking`` means the consumer waits on an asynchronous completion
    (an mbarrier or wgmma wait) before it can read the value."""

    src: str
    dst: str
    latency: int
    distance: int = 0
    blocking: bool = False
    carrier: Carrier = Carrier.REGISTERS
    in_place: bool = False  # dst writes its result into this value's storage (an accumulator chain)
    # latency when src and dst sit in different warp groups, if longer than ``latency``: tcgen05.mma
    # ops of one issuing thread run in issue order on the tensor pipe (``latency`` = the producer's
    # busy cycles), while another issuer must wait for the producer's completion (its full latency)
    cross_latency: int | None = None

    def __post_init__(self) -> None:
        _check_name("edge end", self.src)
        _check_name("edge end", self.dst)
        where = f"edge {self.src!r} -> {self.dst!r}"
        _check_count(where, "latency", self.latency, MAX_CYCLES)
        _check_count(where, "distance", self.distance, MAX_DISTANCE)
        if self.cross_latency is not None:
            _check_count(where, "cross_latency", self.cross_latency, MAX_CYCLES)
            if self.cross_latency < self.latency:
                raise GraphError(f"{where}: cross_latency {self.cross_latency} is below latency {self.latency}; "
                                 "another warp group cannot see the result sooner than the issuing one")
        for name in ("blocking", "in_place"):
            _check_flag(where, name, getattr(self, name))
        if not isinstance(self.carrier, Carrier):
            raise GraphError(f"{where}: carrier must be one of {[c.value for c in Carrier]}")


@dataclass(frozen=True, slots=True)
class LoopBody:
    """One iteration of the loop: ops and edges, checked as a whole.

    Parallel edges between the same pair are legal and all kept (curated graphs have them).
    """

    name: str
    ops: tuple[Op, ...]
    edges: tuple[Edge, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    trip_count: int | None = None
    # shared memory the kernel allocates outside the loop (FA's Q tiles, the O staging buffer):
    # held for the whole loop, so the loop's rings get what is left
    static_smem: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise GraphError(f"loop body {_short(self.name)}: its name must be a non-empty string")
        _check_text("loop body", "name", self.name)
        where = f"loop body {self.name!r}"
        for name, kind in (("ops", Op), ("edges", Edge)):
            items = getattr(self, name)
            if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
                raise GraphError(f"{where}: {name} must be a sequence of {kind.__name__}, got {_short(items)}")
            object.__setattr__(self, name, tuple(items))
            for item in getattr(self, name):
                if not isinstance(item, kind):
                    raise GraphError(f"{where}: {name} must hold {kind.__name__} values, got {_short(item)}")
        self._check_params()
        if self.trip_count is not None:
            _check_count(where, "trip_count", self.trip_count)
        _check_count(where, "static_smem", self.static_smem, MAX_SIZE)
        if not self.ops:
            raise GraphError(f"loop body {self.name!r}: it has no ops")
        seen: set[str] = set()
        for op in self.ops:
            if op.name in seen:
                raise GraphError(f"loop body {self.name!r}: op name {op.name!r} is used twice")
            seen.add(op.name)
        for e in self.edges:
            for end in (e.src, e.dst):
                if end not in seen:
                    raise GraphError(f"edge {e.src!r} -> {e.dst!r}: op {end!r} is not in the loop body")
        self._check_zero_distance_cycles()

    def _check_params(self) -> None:
        """Parameters are saved with the schedule as JSON: string keys, plain scalar values."""
        if not isinstance(self.params, Mapping):
            raise GraphError(f"loop body {self.name!r}: params must be a mapping, got {_short(self.params)}")
        for key, value in self.params.items():
            if not isinstance(key, str) or not isinstance(value, (str, int, float, bool, type(None))):
                raise GraphError(f"loop body {self.name!r}: parameter {_short(key)} = {_short(value)}; parameters "
                                 "are named by strings and hold numbers, strings, booleans or null")
            for text in (key, value) if isinstance(value, str) else (key,):
                _check_text(f"loop body {self.name!r}", "parameter", text)
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    def _check_zero_distance_cycles(self) -> None:
        """A cycle of distance-0 edges asks an op to wait for itself in the same iteration."""
        g = nx.DiGraph()
        g.add_nodes_from(op.name for op in self.ops)
        g.add_edges_from((e.src, e.dst) for e in self.edges if e.distance == 0)
        try:
            cycle = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return
        names = tuple(u for u, _ in cycle)
        path = " -> ".join((*names, names[0]))
        raise GraphError(
            f"loop body {self.name!r}: dependence cycle {path} has total distance 0; "
            "a loop-carried edge needs distance >= 1",
            cycle=names,
        )

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise GraphError(f"loop body {self.name!r}: no op named {name!r}")

    def in_edges(self, name: str) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.dst == name)

    def out_edges(self, name: str) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.src == name)

    def units(self) -> tuple[str, ...]:
        return tuple(sorted({u for op in self.ops for u in op.units()}))


class LoopBuilder:
    """A small mutable helper that programs use to assemble a ``LoopBody``.

    Examples
    --------
    >>> b = LoopBuilder("toy")
    >>> b.op("S", uses=[Use(unit="tc", length=1)], latency=1)
    >>> b.op("P", uses=[Use(unit="exp", length=1)], latency=1)
    >>> b.edge("S", "P")
    >>> body = b.build()
    >>> [e.latency for e in body.edges]
    [1]
    """

    def __init__(self, name: str, **params: Any) -> None:
        self.name = name
        self.params: dict[str, Any] = dict(params)
        self.static_smem = 0  # bytes of SMEM allocated outside the loop (LoopBody.static_smem)
        self._ops: list[Op] = []
        self._edges: list[Edge] = []

    def op(self, name: str, **fields: Any) -> None:
        self._ops.append(Op(name=name, **fields))

    def add(self, op: Op) -> None:
        self._ops.append(op)

    def edge(self, src: str, dst: str, latency: int | None = None, **fields: Any) -> None:
        """Add an edge; by default its latency is the producer's result latency."""
        if latency is None:
            producer = next((o for o in self._ops if o.name == src), None)
            if producer is None:
                raise GraphError(f"edge {src!r} -> {dst!r}: op {src!r} is not in the loop body")
            latency = producer.latency
        self._edges.append(Edge(src=src, dst=dst, latency=latency, **fields))

    def build(self, trip_count: int | None = None) -> LoopBody:
        return LoopBody(self.name, tuple(self._ops), tuple(self._edges), self.params, trip_count, self.static_smem)


def op_names(ops: Iterable[Op]) -> tuple[str, ...]:
    return tuple(op.name for op in ops)
